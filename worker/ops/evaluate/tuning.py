"""``ratings evaluate --models``: replaying a data set under one policy, scoring it, tuning parameters.

Every match is predicted before it is rated (the prediction is side A's expected score E from the
players' states as they stood before the match), then rated, as a ladder would rate it: the
scores are those of forecasts a service could have published. Tuning is a coordinate search over
a small grid of values per parameter, scored on the earlier half of a data set only
(:func:`coordinate_search`); it is deterministic, as the replays are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine import Match, RatingPolicy, UnratableMatch
from engine.policy import AnyPolicy
from engine.replay import Standing, replay_changes
from worker.ops.evaluate.datasets import DataSet
from worker.ops.evaluate.home import HomeAdvantage
from worker.ops.evaluate.scoring import Scorecard

Parameters = Mapping[str, Any]
"""A model's parameters by name (the keyword arguments of its policy class)."""


def side_a_expected(policy: AnyPolicy, match: Match, standings: Mapping[str, Standing]) -> float:
    """Side A's expected score in [0, 1] before ``match`` under a model with uncertainty, from
    ``standings`` (player id to state; absent players start from the policy's initial state), as
    of ``match.played_at`` (the policy's ``predict``: deviations grown to the match's time).

    When the prediction's win probabilities and draw probability make one distribution (they sum
    to 1), E = P(side A wins) + ½ P(draw); when the win probabilities sum to 1 alone (Weng-Lin, as
    openskill's ``predict_win``: the draw figure is a separate estimate), E = P(side A wins). Under
    :class:`HomeAdvantage` the home side's states are raised first. (An Elo policy's expected score
    is the one its update uses, home advantage and 400-point rule included: :func:`replay_scores`
    reads it from the rating change instead.)
    """
    new = policy.initial_state  # type: ignore[union-attr]
    home = policy.home_players(match) if isinstance(policy, HomeAdvantage) else frozenset()
    sides = []
    for side in (match.side_a, match.side_b):
        states = []
        for p in side:
            state = standings[p.player_id].state() if p.player_id in standings else new(p.player_id)
            states.append(policy.raised(state) if p.player_id in home else state)  # type: ignore[union-attr]
        sides.append(states)
    prediction = policy.predict(sides, match.played_at)  # type: ignore[union-attr]
    wins, draw = prediction.win_probabilities, prediction.draw_probability
    expected = wins[0]
    if draw is not None and abs(math.fsum(wins) + draw - 1.0) < 1e-9:
        expected += draw / 2
    return expected


@dataclass
class HalfScores:
    """The scorecards of one replay: ``earlier`` over ``matches[:split]``, ``later`` over
    ``matches[split:]`` (``None`` when the replay stopped at the split); ``unrated`` counts the
    matches the policy refused (:class:`engine.UnratableMatch`), left out of both."""

    earlier: Scorecard = field(default_factory=Scorecard)
    later: Scorecard | None = None
    unrated: int = 0


def replay_scores(policy: AnyPolicy, data: DataSet, *, whole: bool = True,
                  progress: Callable[[int], None] | None = None) -> HalfScores:
    """Replay ``data`` under ``policy`` from every player's initial state, predicting each match
    before rating it, and score the predictions per half.

    ``whole=False`` stops at the split (tuning needs the earlier half only). ``progress`` is
    called with the number of matches replayed since its last call (every 1,000 and at the end).
    A match the policy refuses (:class:`engine.UnratableMatch`, e.g. Glicko-2 ratings so far apart
    that the expected score is exactly 0 or 1) is left out of the scores and the ratings, as a
    ladder would leave it to the dead letters, and counted in :attr:`HalfScores.unrated`.
    """
    elo = isinstance(policy, RatingPolicy)
    standings: dict[str, Standing] = {}
    halves = HalfScores(later=Scorecard() if whole else None)
    matches = data.matches
    stop = len(matches) if whole else data.split
    split = data.split
    card = halves.earlier
    for i in range(stop):
        match = matches[i]
        if i == split:
            assert halves.later is not None
            card = halves.later
        expected = 0.0 if elo else side_a_expected(policy, match, standings)
        try:
            _, changes = next(replay_changes((match,), policy, standings))
        except UnratableMatch:
            halves.unrated += 1
        else:
            card.add(changes[0].expected_score if elo else expected, data.actual(i))
        if progress is not None and (i + 1) % 1000 == 0:
            progress(1000)
    if progress is not None and stop % 1000:
        progress(stop % 1000)
    return halves


@dataclass(frozen=True)
class Trial:
    """One point of a search: ``parameters`` and the mean log10 deviance they scored."""

    parameters: Parameters
    deviance: float


def coordinate_search(start: Parameters, grid: Mapping[str, Sequence[Any]],
                      objective: Callable[[Parameters], float], rounds: int = 2) -> tuple[Trial, list[Trial]]:
    """Minimise ``objective`` over ``grid`` one parameter at a time, from ``start``.

    In each round, each parameter of ``grid`` in turn takes every value listed for it (the others
    held at the best point so far); a value is kept when it lowers the objective strictly. Stops
    after ``rounds`` rounds or a round without improvement. Parameters of ``start`` absent from
    ``grid`` are held fixed. Deterministic: the same objective gives the same trials in the same
    order, and ties keep the earlier point. Returns the best :class:`Trial` and every trial made
    (each point evaluated once). Raises ``ValueError`` for a grid parameter absent from ``start``.
    """
    unknown = set(grid) - set(start)
    if unknown:
        raise ValueError(f"grid parameters without a starting value: {sorted(unknown)}")
    seen: dict[tuple[Any, ...], float] = {}
    trials: list[Trial] = []
    names = list(start)

    def score(point: Parameters) -> float:
        key = tuple(point[name] for name in names)
        if key not in seen:
            seen[key] = objective(point)
            trials.append(Trial(dict(point), seen[key]))
        return seen[key]

    best = dict(start)
    best_score = score(best)
    for _ in range(rounds):
        improved = False
        for name, values in grid.items():
            for value in values:
                trial = {**best, name: value}
                trial_score = score(trial)
                if trial_score < best_score:
                    best, best_score, improved = trial, trial_score, True
        if not improved:
            break
    return Trial(best, best_score), trials
