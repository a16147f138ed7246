"""``ratings evaluate``: replay one ladder's history under several rating policies and score them.

A *history* is a ladder's matches in apply order: the ledger in PostgreSQL, the international
football CSV, or a JSON Lines file of MatchFinished messages. Each policy replays the whole history
from its own initial ratings (:func:`engine.replay.replay_changes`), one match at a time and all
policies in step, so the history is read once and never held in memory.

For each policy the report gives:

* **prediction quality** of side A's expected score E (the prediction made *before* the match)
  against side A's result s (1 win, 0.5 draw, 0 loss): mean log loss, mean Brier score and the
  accuracy on decisive matches (:func:`log_loss_term`, :func:`brier_term`, :func:`accuracy`);
  the first ``skip_first`` matches (the burn-in, while every rating is still its initial value)
  can be left out of these three;
* **inflation**: the mean rating of every player rated so far, its drift from the initial rating at
  the end, and a drift series over time (per calendar year or per N matches);
* how often the policy's **rating floor** and the **400-point cap** of the expected score were hit
  (share of matches);
* the final **rating distribution** (:func:`rating_distribution`);
* optionally one player's rating after each of their matches.

The metric functions are pure and take plain numbers; :class:`PolicyEvaluation` accumulates them
over a replay; :func:`evaluate` runs the replays; the sources and the charts are at the end.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from engine import BandedK, ConstantK, Match, Outcome, RatingChange, RatingPolicy
from engine.k_factor import FideK, ProvisionalK
from engine.replay import Standing, replay_changes
from worker.mapping import to_engine_match

PROBABILITY_CLIP = 1e-15
"""Expected scores are clipped to [1e-15, 1 − 1e-15] before the log loss (scikit-learn's default)."""

FLAT_DRIFT = 0.01
"""A drift smaller than this (rating points) everywhere is drawn as flat, on a ±1 point axis."""

MAX_DRIFT_POINTS = 500
"""Upper bound on the points of a per-matches drift series chosen by :func:`drift_period`."""

DEFAULT_DRIFT_EVERY = 1000
"""Matches per point of the drift series when it is not per year."""

MIN_YEARS_FOR_YEARLY_DRIFT = 3
"""``drift_by="auto"`` draws the drift per calendar year when the history spans at least this many."""

SIDE_A_SCORE = {Outcome.SIDE_A_WON: 1.0, Outcome.DRAW: 0.5, Outcome.SIDE_B_WON: 0.0}
"""Side A's result as a score: win 1, draw 0.5, loss 0 (before any performance adjustment)."""


# ------------------------------------------------------------------------------------------------
# Metrics: pure functions on numbers
# ------------------------------------------------------------------------------------------------


def clip_probability(p: float, eps: float = PROBABILITY_CLIP) -> float:
    """``p`` clipped to ``[eps, 1 − eps]``, so that ``ln p`` and ``ln(1 − p)`` are finite."""
    return min(max(p, eps), 1.0 - eps)


def log_loss_term(expected: float, actual: float, eps: float = PROBABILITY_CLIP) -> float:
    """Log loss (natural log, nats) of one prediction: ``−[s·ln E + (1 − s)·ln(1 − E)]``.

    ``expected`` E is the predicted probability in [0, 1] that side A wins (its expected score),
    clipped to ``[eps, 1 − eps]``; ``actual`` s is side A's result, 1, 0.5 or 0. For a decisive
    match this is the binary cross-entropy (Good, "Rational decisions", J. R. Stat. Soc. B 14, 1952;
    the log loss of scikit-learn's ``log_loss``). A draw is a *soft label* s = 0.5, whose term is
    ``−½·ln(E·(1 − E))``: smallest (ln 2 ≈ 0.693) at E = ½. A coin flip (E = ½ always) scores ln 2
    whatever the results.
    """
    e = clip_probability(expected, eps)
    return -(actual * math.log(e) + (1.0 - actual) * math.log(1.0 - e))


def brier_term(expected: float, actual: float) -> float:
    """Brier score of one prediction: ``(E − s)²``, in [0, 1].

    G. W. Brier, "Verification of forecasts expressed in terms of probability", Monthly Weather
    Review 78 (1950): the mean squared difference between forecast probability and outcome. This is
    the one-probability (binary) form; Brier's two-category form is exactly twice it. A draw counts
    as s = 0.5. A coin flip (E = ½ always) scores 0.25 on decisive matches.
    """
    return (expected - actual) ** 2


def mean_log_loss(predictions: Iterable[tuple[float, float]]) -> float | None:
    """Mean of :func:`log_loss_term` over ``(expected, actual)`` pairs; ``None`` when there is none."""
    terms = [log_loss_term(e, s) for e, s in predictions]
    return math.fsum(terms) / len(terms) if terms else None


def mean_brier_score(predictions: Iterable[tuple[float, float]]) -> float | None:
    """Mean of :func:`brier_term` over ``(expected, actual)`` pairs; ``None`` when there is none."""
    terms = [brier_term(e, s) for e, s in predictions]
    return math.fsum(terms) / len(terms) if terms else None


def prediction_credit(expected: float, actual: float) -> float | None:
    """Whether the favourite won one match: 1 (yes), 0 (no), 0.5 (no favourite), ``None`` (a draw).

    The favourite is side A when E > ½ and side B when E < ½. A draw (s = ½) is not a decisive
    match and gets ``None``: draws are left out of the accuracy. With E exactly ½ (e.g. two new
    players) there is no favourite and the match counts half, the expected credit of a coin toss.
    """
    if actual == 0.5:
        return None
    if expected == 0.5:
        return 0.5
    return 1.0 if (expected > 0.5) == (actual == 1.0) else 0.0


def accuracy(predictions: Iterable[tuple[float, float]]) -> float | None:
    """Share of decisive matches won by the favourite (:func:`prediction_credit`), in [0, 1].

    Draws are left out; a match with no favourite counts half. ``None`` when no match is decisive.
    """
    credits = [c for e, s in predictions if (c := prediction_credit(e, s)) is not None]
    return sum(credits) / len(credits) if credits else None


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0 ≤ q ≤ 1) of ``sorted_values`` (ascending, not empty), linearly interpolated.

    Hyndman & Fan (1996), definition 7 (the default of R and NumPy): with h = (n − 1)·q, the value
    ``x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋ + 1] − x[⌊h⌋])``. Raises ``ValueError`` for an empty sequence or
    ``q`` outside [0, 1].
    """
    if not sorted_values:
        raise ValueError("the quantile of no values is undefined")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must lie in [0, 1], got {q}")
    h = (len(sorted_values) - 1) * q
    lo = math.floor(h)
    if lo + 1 >= len(sorted_values):
        return float(sorted_values[-1])
    return sorted_values[lo] + (h - lo) * (sorted_values[lo + 1] - sorted_values[lo])


def mean_and_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean Σx / n and population standard deviation √(Σ(x − mean)² / n) of ``values`` (not empty).

    Two passes, each summed with :func:`math.fsum` (correctly rounded), so that a mean that stays
    put in exact arithmetic (a zero-sum policy) is not blurred by rounding noise. Raises
    ``ZeroDivisionError`` for an empty sequence.
    """
    n = len(values)
    mean = math.fsum(values) / n
    return mean, math.sqrt(math.fsum((x - mean) ** 2 for x in values) / n)


@dataclass(frozen=True)
class RatingDistribution:
    """Ratings of the players at one moment, in rating points.

    ``players`` is a count; ``std`` is the population standard deviation (divided by n, not n − 1);
    the percentiles are :func:`quantile` definition 7.
    """

    players: int
    mean: float
    std: float
    min: float
    p10: float
    p50: float
    p90: float
    max: float


def rating_distribution(ratings: Iterable[float]) -> RatingDistribution | None:
    """Count, mean, population standard deviation, min, p10, median, p90 and max of ``ratings``.

    Mean = Σr / n and std = √(Σ(r − mean)² / n), both summed with :func:`math.fsum`. ``None`` when
    ``ratings`` is empty.
    """
    values = sorted(ratings)
    n = len(values)
    if n == 0:
        return None
    mean, std = mean_and_std(values)
    return RatingDistribution(
        players=n, mean=mean, std=std, min=values[0], p10=quantile(values, 0.1), p50=quantile(values, 0.5),
        p90=quantile(values, 0.9), max=values[-1],
    )


# ------------------------------------------------------------------------------------------------
# Accumulating the metrics over one policy's replay
# ------------------------------------------------------------------------------------------------


class HistoryItem(NamedTuple):
    """One match of a history and when it finished (timezone-aware, or ``None`` when unknown)."""

    match: Match
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

    Prediction figures cover the ``scored`` matches after the burn-in: ``log_loss`` in nats,
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
        """Rate ``item``'s match under the policy (updating :attr:`standings`) and count its figures."""
        report = self._report
        match = item.match
        _, changes = next(replay_changes((match,), self.policy, self.standings))
        report.matches += 1
        self._last_finished = item.finished_at
        if report.matches > self.skip_first:
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


# ------------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------------


@dataclass
class EvaluationReport:
    """The result of :func:`evaluate`: one :class:`PolicyReport` per policy, in the order given.

    ``drift_by`` is ``"year"`` or ``"matches"`` (the series kept in each policy report);
    ``first``/``last`` the earliest and latest ``finished_at`` seen; ``seconds`` the wall time.
    """

    source: str
    matches: int
    skip_first: int
    drift_by: str
    drift_every: int
    policies: list[PolicyReport]
    first: datetime | None = None
    last: datetime | None = None
    seconds: float = 0.0
    skipped: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: every field, the per-policy shares added, datetimes as ISO 8601."""
        policies = []
        for p in self.policies:
            d = asdict(p)
            d["floor_share"] = p.floor_share
            d["cap_share"] = p.cap_share
            policies.append(d)
        return {
            "source": self.source,
            "matches": self.matches,
            "skip_first": self.skip_first,
            "drift_by": self.drift_by,
            "drift_every": self.drift_every if self.drift_by == "matches" else None,
            "first_finished_at": self.first.isoformat() if self.first else None,
            "last_finished_at": self.last.isoformat() if self.last else None,
            "seconds": self.seconds,
            "skipped": self.skipped,
            "definitions": DEFINITIONS,
            "policies": policies,
        }


DEFINITIONS = {
    "expected": "E: side A's expected score before the match (the engine's prediction that side A wins)",
    "actual": "s: side A's result, 1 win / 0.5 draw / 0 loss (before any performance adjustment)",
    "log_loss": "mean of -[s ln E + (1-s) ln(1-E)], E clipped to [1e-15, 1-1e-15]; a draw is the soft label s = 0.5; natural log",
    "brier": "mean of (E - s)^2 (Brier 1950, binary form); a draw is s = 0.5",
    "accuracy": "share of decisive matches (draws left out) won by the side with E > 0.5; E = 0.5 counts half",
    "skip_first": "the first N matches are replayed but left out of log loss, Brier and accuracy (burn-in)",
    "mean_rating": "mean rating of every player rated so far; drift = mean - the policy's initial rating",
    "floor_share": "share of matches in which at least one player's rating hit the policy's floor",
    "cap_share": "share of matches whose expected score used a capped rating difference (400-point rule)",
    "distribution": "ratings of every player at the end: population std, percentiles by linear interpolation (Hyndman-Fan 7)",
}


def drift_period(total_matches: int | None, every: int = DEFAULT_DRIFT_EVERY) -> int:
    """Matches per drift point: ``every``, made larger for a long history so that the series has at
    most :data:`MAX_DRIFT_POINTS` points (each point costs a pass over every player)."""
    if total_matches is None:
        return every
    return max(every, math.ceil(total_matches / MAX_DRIFT_POINTS))


def evaluate(
    history: Iterable[HistoryItem],
    policies: Sequence[LabelledPolicy],
    *,
    source: str = "",
    skip_first: int = 0,
    drift_by: str = "auto",
    drift_every: int = DEFAULT_DRIFT_EVERY,
    player: str | None = None,
    progress: Callable[[int], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> EvaluationReport:
    """Replay ``history`` (matches in apply order) under every policy of ``policies`` and report.

    All policies are fed the same match before the next is read, so ``history`` may be a stream
    (a server-side cursor) read once. ``skip_first`` (a count of matches, ≥ 0) leaves the first
    matches out of the prediction figures; ``drift_by`` is ``"year"``, ``"matches"`` (every
    ``drift_every`` matches) or ``"auto"`` (per year when the matches' ``finished_at`` span at
    least :data:`MIN_YEARS_FOR_YEARLY_DRIFT` calendar years, else per matches); ``player`` is a
    player id whose rating is followed. ``progress`` is called with the number of matches read
    since its last call (every 1,000 matches and at the end). ``clock`` (seconds, e.g.
    :func:`time.perf_counter`) times the run. Raises ``ValueError`` for a bad argument, and passes
    on what the history or the engine raises.
    """
    if drift_by not in ("auto", "year", "matches"):
        raise ValueError(f"drift_by must be auto, year or matches, got {drift_by!r}")
    if drift_every < 1 or skip_first < 0:
        raise ValueError("drift_every must be ≥ 1 and skip_first ≥ 0")
    if not policies:
        raise ValueError("no policy to evaluate")
    started = clock() if clock else 0.0
    evaluations = [PolicyEvaluation(lp, skip_first, player) for lp in policies]
    # Both drift series are kept during the run (they are small); one is chosen at the end.
    yearly: list[list[DriftPoint]] = [[] for _ in policies]
    every_n: list[list[DriftPoint]] = [[] for _ in policies]

    def snapshot(into: list[list[DriftPoint]], period: str) -> None:
        for ev, series in zip(evaluations, into):
            point = ev.snapshot(period)
            if point is not None:
                series.append(point)

    year: int | None = None  # running maximum: an out-of-order match counts in the current year
    first = last = None
    n = pending = 0
    for item in history:
        at = item.finished_at
        if at is not None:
            if year is not None and at.year > year:
                snapshot(yearly, str(year))
            if year is None or at.year > year:
                year = at.year
            first = at if first is None or at < first else first
            last = at if last is None or at > last else last
        for ev in evaluations:
            ev.observe(item)
        n += 1
        if n % drift_every == 0:
            snapshot(every_n, str(n))
        pending += 1
        if progress is not None and pending == 1000:
            progress(pending)
            pending = 0
    if progress is not None and pending:
        progress(pending)
    if year is not None:
        snapshot(yearly, str(year))
    if n % drift_every:
        snapshot(every_n, str(n))
    if drift_by == "auto":
        span = (last.year - first.year + 1) if first and last else 0
        drift_by = "year" if span >= MIN_YEARS_FOR_YEARLY_DRIFT else "matches"
    if drift_by == "year" and year is None:
        raise ValueError("drift per year needs matches with a finished_at")
    chosen = yearly if drift_by == "year" else every_n
    reports = [ev.report(series) for ev, series in zip(evaluations, chosen)]
    seconds = (clock() - started) if clock else 0.0
    return EvaluationReport(
        source=source, matches=n, skip_first=skip_first, drift_by=drift_by, drift_every=drift_every,
        policies=reports, first=first, last=last, seconds=seconds,
    )


# ------------------------------------------------------------------------------------------------
# History sources
# ------------------------------------------------------------------------------------------------


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        return datetime.fromisoformat(value)
    return None


def ledger_history(conn, ladder: str) -> Iterator[HistoryItem]:
    """The ladder's ledger in apply order, streamed (:func:`worker.store.iter_ledger`) and mapped
    with :func:`worker.mapping.to_engine_match`. Run it inside the caller's transaction (one snapshot).
    """
    from worker import store as repository

    for payload in repository.iter_ledger(conn, ladder):
        yield HistoryItem(to_engine_match(payload), _parse_time(payload.get("finished_at")))


@dataclass
class SkippedLines:
    """What a file source left out: bad lines by reason code (and the first few in full), messages of
    another ladder, and repeated match ids (the worker would not apply a match id twice)."""

    bad: Counter = field(default_factory=Counter)
    examples: list[tuple[int, str, str]] = field(default_factory=list)
    other_ladder: int = 0
    duplicate_ids: int = 0
    max_examples: int = 10

    def bad_line(self, line_number: int, reason: str, detail: str) -> None:
        """Count one bad line (1-based ``line_number``) with its reason code and message."""
        self.bad[reason] += 1
        if len(self.examples) < self.max_examples:
            self.examples.append((line_number, reason, detail))

    @property
    def total(self) -> int:
        """Every line or row left out."""
        return sum(self.bad.values()) + self.other_ladder + self.duplicate_ids

    def to_json(self) -> dict[str, Any]:
        """Counts as a JSON-ready dict."""
        return {
            "bad_lines": dict(self.bad), "other_ladder": self.other_ladder, "duplicate_match_ids": self.duplicate_ids,
            "examples": [{"line": n, "reason": r, "detail": d} for n, r, d in self.examples],
        }


def count_lines(path: Path) -> int:
    """Number of non-empty lines in ``path`` (for a progress bar's total)."""
    n = 0
    with open(path, "rb") as f:
        for line in f:
            n += bool(line.strip())
    return n


def is_football_csv(path: Path) -> bool:
    """True when ``path`` is a CSV whose header holds the international football columns."""
    if path.suffix.lower() != ".csv":
        return False
    with open(path, encoding="utf-8") as f:
        header = f.readline()
    return {"date", "home_team", "away_team", "home_score", "away_score"} <= set(header.strip().split(","))


def football_history(path: Path, ladder: str = "elo") -> Iterator[HistoryItem]:
    """The international football results as a history: :func:`worker.ops.football.football_matches`
    (home team = side A, date at 00:00 UTC), each message mapped with :func:`to_engine_match`.
    Raises ``ValueError`` on a malformed row."""
    from worker.ops.football import football_matches

    for message in football_matches(path, ladder):
        yield HistoryItem(to_engine_match(message.model_dump(mode="json")), message.finished_at)


def first_ladder(path: Path) -> str | None:
    """The ladder of the first valid MatchFinished line of a JSON Lines file, or ``None``."""
    from schemas import InvalidMessage, parse_match_finished

    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                return parse_match_finished(line).ladder
            except InvalidMessage:
                continue
    return None


def jsonl_history(path: Path, ladder: str, skipped: SkippedLines) -> Iterator[HistoryItem]:
    """Valid MatchFinished messages of ``ladder`` from a JSON Lines file, in file order.

    Each line is validated by :func:`schemas.parse_match_finished`; a bad line is counted in
    ``skipped`` with its reason code and left out, as is a message of another ladder and a repeated
    match id (the worker applies a match id once). Empty lines are ignored.
    """
    from schemas import InvalidMessage, parse_match_finished

    seen: set[str] = set()
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                message = parse_match_finished(raw.rstrip(b"\r\n"))
            except InvalidMessage as exc:
                skipped.bad_line(number, exc.reason_code, exc.detail)
                continue
            if message.ladder != ladder:
                skipped.other_ladder += 1
                continue
            if message.match_id in seen:
                skipped.duplicate_ids += 1
                continue
            seen.add(message.match_id)
            yield HistoryItem(to_engine_match(json.loads(message.canonical_json())), message.finished_at)


# ------------------------------------------------------------------------------------------------
# Charts (matplotlib, Agg: no display needed)
# ------------------------------------------------------------------------------------------------


def _x_of(point: DriftPoint, drift_by: str):
    return int(point.period) if drift_by == "year" else point.matches


def draw_drift_chart(report: EvaluationReport, path: Path, with_player: bool = True) -> None:
    """PNG at ``path``: each policy's mean-rating drift (mean − initial) over time, the spread
    (population std) of the ratings below it, and, when a player was followed and ``with_player``,
    that player's rating in a third panel. Raises ``OSError`` if the file cannot be written."""
    from matplotlib.figure import Figure

    show_player = with_player and any(p.player_series for p in report.policies)
    rows = 3 if show_player else 2
    fig = Figure(figsize=(10, 3.4 * rows), layout="constrained")
    axes = fig.subplots(rows, 1, squeeze=False)[:, 0]
    x_label = "year" if report.drift_by == "year" else "matches replayed"
    for p in report.policies:
        xs = [_x_of(pt, report.drift_by) for pt in p.drift_series]
        axes[0].plot(xs, [pt.drift for pt in p.drift_series], label=_legend(p), linewidth=1.4)
        axes[1].plot(xs, [pt.std for pt in p.drift_series], label=_legend(p), linewidth=1.4)
    axes[0].axhline(0.0, color="grey", linewidth=0.8, linestyle="--")
    largest = max((abs(pt.drift) for p in report.policies for pt in p.drift_series), default=0.0)
    if largest < FLAT_DRIFT:
        # Rounding noise (1e-13 points) would fill the axis: show the honest scale and say so.
        axes[0].set_ylim(-1.0, 1.0)
        axes[0].text(0.5, 0.85, f"no drift: |mean − initial| < {FLAT_DRIFT:g} rating points throughout",
                     transform=axes[0].transAxes, ha="center", fontsize="small")
    axes[0].set_title(f"Mean-rating drift (mean of rated players − initial rating) — {report.source}")
    axes[0].set_ylabel("drift (rating points)")
    axes[1].set_title("Spread of the ratings (population standard deviation)")
    axes[1].set_ylabel("std (rating points)")
    for ax in axes[:2]:
        ax.set_xlabel(x_label)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    if show_player:
        _player_axes(axes[2], report)
    fig.savefig(path, dpi=110)


def draw_player_chart(report: EvaluationReport, path: Path) -> None:
    """PNG at ``path``: the followed player's rating after each of their matches, one line per policy.
    Raises ``ValueError`` when no player was followed or they have no match in the history."""
    from matplotlib.figure import Figure

    if not any(p.player_series for p in report.policies):
        raise ValueError("the player has no match in the history: nothing to draw")
    fig = Figure(figsize=(10, 4.5), layout="constrained")
    _player_axes(fig.subplots(), report)
    fig.savefig(path, dpi=110)


def _player_axes(ax, report: EvaluationReport) -> None:
    dated = all(pt.finished_at for p in report.policies for pt in p.player_series)
    player = report.policies[0].player
    for p in report.policies:
        xs = [datetime.fromisoformat(pt.finished_at) if dated else pt.match_number for pt in p.player_series]
        ax.plot(xs, [pt.rating_after for pt in p.player_series], label=_legend(p), linewidth=1.0)
    initials = {p.initial_rating for p in report.policies}
    if len(initials) == 1:
        ax.axhline(initials.pop(), color="grey", linewidth=0.8, linestyle="--")
    ax.set_title(f"Rating of {player} after each of their matches")
    ax.set_xlabel("date of the match" if dated else "match number in the history")
    ax.set_ylabel("rating (rating points)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")


def _legend(p: PolicyReport) -> str:
    return f"{p.label} ({p.description})"


# ------------------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------------------


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _share(count: int, total: int) -> str:
    return "–" if not total else f"{100.0 * count / total:.2f} % ({count:,})"


def report_table(report: EvaluationReport):
    """A rich :class:`rich.table.Table`: one row per figure, one column per policy."""
    from rich.table import Table

    title = f"ratings evaluate: {report.source}, {report.matches:,} matches"
    if report.first and report.last:
        title += f" ({report.first.date().isoformat()} to {report.last.date().isoformat()})"
    table = Table(title=title)
    table.add_column("", justify="left")
    for p in report.policies:
        table.add_column(p.label, justify="right")
    pols = report.policies

    def row(name: str, cells) -> None:
        table.add_row(name, *cells)

    row("policy", [p.description for p in pols])
    row("version", [p.version or "–" for p in pols])
    row("matches", [f"{p.matches:,}" for p in pols])
    row(f"scored (burn-in: first {report.skip_first:,} left out)", [f"{p.scored:,}" for p in pols])
    row("  of which draws (s = 0.5)", [_share(p.draws_scored, p.scored) for p in pols])
    row("log loss (nats)", [_num(p.log_loss, ".4f") for p in pols])
    row("Brier score", [_num(p.brier, ".4f") for p in pols])
    row("accuracy (decisive matches)", [f"{100 * p.accuracy:.2f} %" if p.accuracy is not None else "–" for p in pols])
    row("  decisive / no favourite (E = 0.5)", [f"{p.decisive:,} / {p.no_favourite:,}" for p in pols])
    row("mean rating at the end", [_num(p.mean_rating, ".2f") for p in pols])
    row("drift (mean − initial)", [_num(p.drift, "+.2f") for p in pols])
    per = "year" if report.drift_by == "year" else f"{report.drift_every:,} matches"
    row(f"largest |drift| (per {per})", [_num(p.max_abs_drift, ".2f") for p in pols])
    row("rating floor hit (matches)", [_share(p.floor_hits, p.matches) for p in pols])
    row("expected score capped (matches)", [_share(p.cap_hits, p.matches) for p in pols])
    row("players", [f"{p.distribution.players:,}" if p.distribution else "–" for p in pols])
    for name, attr in (("rating min", "min"), ("rating p10", "p10"), ("rating median", "p50"),
                       ("rating p90", "p90"), ("rating max", "max"), ("rating std", "std")):
        row(name, [_num(getattr(p.distribution, attr), ".1f") if p.distribution else "–" for p in pols])
    if pols[0].player is not None:
        row(f"{pols[0].player}: rating (games)",
            [f"{p.player_rating:.1f} ({p.player_games:,})" if p.player_games else "no match" for p in pols])
    return table


NOTES = (
    "E = side A's expected score before the match, s = side A's result (1 / 0.5 / 0). "
    "Log loss = mean of −[s·ln E + (1−s)·ln(1−E)], E clipped to [1e-15, 1−1e-15]: a draw is the soft label "
    "s = 0.5 (a constant E = 0.5 scores ln 2 = 0.6931). Brier = mean of (E − s)². Accuracy: decisive "
    "matches only (draws left out), won by the side with E > 0.5; E = 0.5 counts half. Drift: mean rating "
    "of every player rated so far minus the policy's initial rating. Distribution: every rated player at "
    "the end (population std)."
)
"""Printed under the table: how each figure is defined."""
