"""``ratings evaluate``: the report's data and the metrics accumulated over one policy's replay."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from engine import BandedK, ConstantK, FreeForAll, Match, RatingChange, RatingPolicy
from engine.k_factor import FideK, ProvisionalK
from engine.replay import Standing, replay_changes
from worker.ops.evaluate.metrics import (
    SIDE_A_SCORE,
    RatingDistribution,
    brier_term,
    log_loss_term,
    mean_and_std,
    prediction_credit,
    rating_distribution,
)

# ------------------------------------------------------------------------------------------------
# Accumulating the metrics over one policy's replay
# ------------------------------------------------------------------------------------------------


class HistoryItem(NamedTuple):
    """One match of a history (two sides, or a free-for-all) and when it finished (timezone-aware,
    or ``None`` when unknown)."""

    match: Match | FreeForAll
    finished_at: datetime | None


@dataclass(frozen=True)
class LabelledPolicy:
    """A policy to evaluate and how the report names it (a policy file's stem, or the ladder's name)."""

    label: str
    policy: RatingPolicy
    source: str = ""
    """Where the policy was read from (a file path, or ``ladder elo (configured)``)."""


@dataclass(frozen=True)
class DriftPoint:
    """The players' ratings at the end of one period of the history.

    ``period`` is a calendar year (``"1990"``) or a match count (``"3000"``); ``matches`` the matches
    replayed so far; ``finished_at`` that of the last of them (ISO 8601, or ``None``); ``mean`` the
    mean rating of every player rated so far and ``drift`` = mean − initial rating; ``std`` their
    population standard deviation (all in rating points).
    """

    period: str
    matches: int
    finished_at: str | None
    players: int
    mean: float
    drift: float
    std: float


@dataclass(frozen=True)
class PlayerPoint:
    """One player's rating after one of their matches: ``match_number`` counts from 1 in the history."""

    match_number: int
    match_id: str
    finished_at: str | None
    rating_after: float


@dataclass
class PolicyReport:
    """Every figure of one policy over one history (see the module docstring; ratings in rating points).

    Prediction figures cover the ``scored`` matches after the burn-in (two-sided ones: a
    free-for-all moves the ratings but has no side A to score): ``log_loss`` in nats,
    ``brier`` in [0, 1], ``accuracy`` over the ``decisive`` ones among them (``no_favourite`` of which
    had E = ½ and counted half). ``floor_hits``/``cap_hits`` count matches (of all ``matches``) in
    which at least one player's rating hit the floor / had the expected score capped.
    """

    label: str
    source: str
    version: str
    description: str
    initial_rating: float
    matches: int = 0
    scored: int = 0
    draws_scored: int = 0
    decisive: int = 0
    no_favourite: int = 0
    log_loss: float | None = None
    brier: float | None = None
    accuracy: float | None = None
    mean_rating: float | None = None
    drift: float | None = None
    max_abs_drift: float | None = None
    floor_hits: int = 0
    cap_hits: int = 0
    floor_points: float = 0.0
    distribution: RatingDistribution | None = None
    drift_series: list[DriftPoint] = field(default_factory=list)
    player: str | None = None
    player_rating: float | None = None
    player_games: int = 0
    player_series: list[PlayerPoint] = field(default_factory=list)

    @property
    def floor_share(self) -> float | None:
        """Share of matches in which the rating floor was hit, in [0, 1]."""
        return self.floor_hits / self.matches if self.matches else None

    @property
    def cap_share(self) -> float | None:
        """Share of matches in which the expected score's rating difference was capped, in [0, 1]."""
        return self.cap_hits / self.matches if self.matches else None


def describe_policy(policy: RatingPolicy) -> str:
    """A short human description: K-factor, initial rating, rounding (``"K 30 · start 1200"``)."""
    def k_text(k) -> str:
        if isinstance(k, ConstantK):
            return f"K {k.k:g}"
        if isinstance(k, BandedK):
            return "K " + "/".join(f"{v:g}" for _, v in k.bands) + f"/{k.top_k:g} by band"
        if isinstance(k, FideK):
            return f"K FIDE {k.provisional_k:g}/{k.k:g}/{k.top_k:g}"
        if isinstance(k, ProvisionalK):
            return f"K {k.k:g} for {k.games} games, then " + k_text(k.then).removeprefix("K ")
        return f"K {type(k).__name__}"

    parts = [k_text(policy.k_factor), f"start {policy.initial_rating:g}"]
    if policy.home_advantage:
        parts.append(f"home +{policy.home_advantage:g}")
    if policy.difference_cap is not None:
        parts.append(f"cap {policy.difference_cap:g}")
    if policy.floor is not None:
        parts.append(f"floor {policy.floor:g}")
    if policy.margin_of_victory is not None:
        parts.append("margin of victory")
    if policy.season is not None:
        parts.append("season regression")
    if policy.rounding.value != "none":
        parts.append(f"rounding {policy.rounding.value}")
    if policy.performance is not None:
        parts.append("performance")
    return " · ".join(parts)


class RunningSum:
    """A sum of floats without rounding error, added one at a time in constant memory.

    Shewchuk's non-overlapping partials ("Adaptive precision floating-point arithmetic", 1997; the
    ``msum`` recipe that :func:`math.fsum` implements): :attr:`value` is the correctly rounded sum,
    the same as ``math.fsum`` of every value added, whatever the length of the history.
    """

    __slots__ = ("partials", "count")

    def __init__(self) -> None:
        self.partials: list[float] = []
        self.count = 0

    def add(self, x: float) -> None:
        """Add ``x``."""
        i = 0
        partials = self.partials
        for y in partials:
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo:
                partials[i] = lo
                i += 1
            x = hi
        partials[i:] = [x]
        self.count += 1

    @property
    def value(self) -> float:
        """The sum so far, correctly rounded."""
        return math.fsum(self.partials)

    def mean(self) -> float | None:
        """The mean of the values added, or ``None`` when none was."""
        return self.value / self.count if self.count else None


class PolicyEvaluation:
    """Accumulates one policy's figures while its replay goes on: :meth:`observe` each match in
    order, take a :meth:`snapshot` at the end of each drift period, then :meth:`report`.

    A snapshot computes the mean and spread from every current rating (:func:`mean_and_std`), so it
    costs one pass over the players: the caller keeps snapshots to a few hundred per run.
    """

    def __init__(self, labelled: LabelledPolicy, skip_first: int = 0, player: str | None = None) -> None:
        policy = labelled.policy
        self.policy = policy
        self.skip_first = skip_first
        self.player = player
        self.standings: dict[str, Standing] = {}
        self._report = PolicyReport(
            label=labelled.label, source=labelled.source, version=policy.version,
            description=describe_policy(policy), initial_rating=policy.initial_rating, player=player,
        )
        self._log_loss = RunningSum()
        self._brier = RunningSum()
        self._credit = 0.0
        self._ratings: dict[str, float] = {}
        self._last_finished: datetime | None = None

    def observe(self, item: HistoryItem) -> None:
        """Rate ``item``'s match under the policy (updating :attr:`standings`) and count its figures
        (the prediction figures of a two-sided match only)."""
        report = self._report
        match = item.match
        _, changes = next(replay_changes((match,), self.policy, self.standings))
        report.matches += 1
        self._last_finished = item.finished_at
        if report.matches > self.skip_first and isinstance(match, Match):
            self._score(match, changes)
        floor_hit = capped = False
        ratings = self._ratings
        for change in changes:
            if change.floor_points > 0:
                floor_hit = True
                report.floor_points += change.floor_points
            if change.capped:
                capped = True
            ratings[change.player_id] = change.rating_after
            if change.player_id == self.player:
                report.player_series.append(PlayerPoint(
                    report.matches, match.match_id,
                    item.finished_at.isoformat() if item.finished_at else None, change.rating_after,
                ))
        report.floor_hits += floor_hit
        report.cap_hits += capped

    def _score(self, match: Match, changes: tuple[RatingChange, ...]) -> None:
        report = self._report
        expected = changes[0].expected_score  # side A's players come first and share E
        actual = SIDE_A_SCORE[match.outcome]
        report.scored += 1
        self._log_loss.add(log_loss_term(expected, actual))
        self._brier.add(brier_term(expected, actual))
        credit = prediction_credit(expected, actual)
        if credit is None:
            report.draws_scored += 1
        else:
            report.decisive += 1
            self._credit += credit
            report.no_favourite += expected == 0.5

    def snapshot(self, period: str) -> DriftPoint | None:
        """A :class:`DriftPoint` for ``period`` from the ratings as they stand now (``None`` before
        the first match)."""
        if not self._ratings:
            return None
        mean, std = mean_and_std(list(self._ratings.values()))
        return DriftPoint(
            period=period, matches=self._report.matches,
            finished_at=self._last_finished.isoformat() if self._last_finished else None,
            players=len(self._ratings), mean=mean, drift=mean - self.policy.initial_rating, std=std,
        )

    def report(self, drift_series: list[DriftPoint]) -> PolicyReport:
        """The finished :class:`PolicyReport` with ``drift_series`` (call once, after the last match)."""
        report = self._report
        report.drift_series = drift_series
        report.log_loss = self._log_loss.mean()
        report.brier = self._brier.mean()
        if report.decisive:
            report.accuracy = self._credit / report.decisive
        report.distribution = rating_distribution(self._ratings.values())
        if report.distribution is not None:
            report.mean_rating = report.distribution.mean
            report.drift = report.distribution.mean - self.policy.initial_rating
        if report.drift_series:
            report.max_abs_drift = max(abs(p.drift) for p in report.drift_series)
        if self.player is not None and self.player in self.standings:
            report.player_rating = self.standings[self.player].rating
            report.player_games = self.standings[self.player].games_played
        return report


