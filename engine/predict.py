"""Win probabilities and match quality for a proposed match, for every rating model.

:func:`predict` takes the sides of a proposed match as their players' states and dispatches: a
policy with a ``predict`` method (Glicko-2, Weng-Lin) answers itself; an Elo-family
:class:`engine.policy.RatingPolicy` is answered here (:func:`elo_prediction`).

Sides of more than two: the models here give a probability for each *pairing* of sides; a side's
win probability is then its share of the expected pairwise wins, ``2 / n × mean_j P(i beats j)``,
which sums to 1 over the sides and is the two-sided probability when n = 2. It is not the
probability of placing first under any model (none of these models defines one without
simulation), and the documentation says so. The quality of a match of n sides is the mean of its
pairings' qualities.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.elo import expected_score
from engine.model import PlayerState
from engine.policy import AnyPolicy, RatingPolicy, TeamRating


@dataclass(frozen=True, slots=True)
class Prediction:
    """The forecast of a proposed match.

    ``win_probabilities[i]`` is side i's probability of winning, in [0, 1], summing to 1 over the
    sides (for more than two sides, its share of expected pairwise wins: see the module docstring);
    ``draw_probability`` the probability of a draw, or ``None`` when the model has none (Elo and
    Glicko-2 predict an expected score, not a draw); ``quality`` in [0, 1], higher for a closer
    and better-known match (each model's definition in its prediction function).
    """

    win_probabilities: tuple[float, ...]
    draw_probability: float | None
    quality: float


def predict(sides: Sequence[Sequence[PlayerState]], policy: AnyPolicy, at: float | None = None) -> Prediction:
    """The :class:`Prediction` for sides of players (each a sequence of :class:`PlayerState`) under
    ``policy``, as of ``at`` (seconds since the epoch; models whose deviation grows with time grow
    it to ``at``; ``None``: the states as they are).

    Dispatches to ``policy.predict(sides, at)`` when the policy has one, else to
    :func:`elo_prediction` for a :class:`RatingPolicy`. Raises ``ValueError`` for fewer than two
    sides or an empty side, ``TypeError`` for a policy that cannot predict.
    """
    own: Callable[..., Prediction] | None = getattr(policy, "predict", None)
    if own is not None:
        return own(sides, at)
    if isinstance(policy, RatingPolicy):
        return elo_prediction(sides, policy)
    raise TypeError(f"{type(policy).__name__} has no prediction")


def check_sides(sides: Sequence[Sequence[Any]]) -> None:
    """Raise ``ValueError`` unless there are at least two sides, none of them empty."""
    if len(sides) < 2:
        raise ValueError(f"a prediction needs at least two sides, got {len(sides)}")
    if any(len(side) == 0 for side in sides):
        raise ValueError("a side needs at least one player")


def from_pairwise(probability: Callable[[int, int], float], quality: Callable[[int, int], float],
                  n: int) -> Prediction:
    """A :class:`Prediction` without draws from a model's pairwise win probability ``P(i beats j)``
    and pairwise quality, for ``n`` sides (see the module docstring for n > 2)."""
    if n == 2:
        p = probability(0, 1)
        return Prediction((p, 1.0 - p), None, quality(0, 1))
    shares = []
    for i in range(n):
        shares.append(2.0 / n * sum(probability(i, j) for j in range(n) if j != i) / (n - 1))
    pairs = [quality(i, j) for i in range(n) for j in range(i + 1, n)]
    return Prediction(tuple(shares), None, sum(pairs) / len(pairs))


def elo_prediction(sides: Sequence[Sequence[PlayerState]], policy: RatingPolicy) -> Prediction:
    """Elo: side i beats side j with the expected score ``1 / (1 + 10^((R_j - R_i) / scale))``
    (:func:`engine.elo.expected_score`), a side's rating the mean or sum of its players' as the
    policy says; the home advantage, cap and margin are ignored (a proposed match has no venue).

    Elo has no draw probability (``None``) and no deviation, so its quality is closeness only:
    ``1 - |2 P - 1|`` for two sides (1 for an even match, 0 for a certain one). Raises
    ``ValueError`` for fewer than two sides or an empty side.
    """
    check_sides(sides)
    total = policy.team_rating is TeamRating.SUM
    ratings = [sum(s.rating for s in side) if total else sum(s.rating for s in side) / len(side) for side in sides]
    scale = policy.scale

    def probability(i: int, j: int) -> float:
        return expected_score(ratings[i], ratings[j], scale)

    def quality(i: int, j: int) -> float:
        return 1.0 - abs(2.0 * probability(i, j) - 1.0)

    return from_pairwise(probability, quality, len(sides))
