"""The Sedma performance-adjusted Elo, ported from the seed's C# ``CalculateNewRatings``.

Source: the Sedma game client's ``Elo.CalculateNewRatings`` (``tests/data/golden/Reference.cs``).
What the port keeps from the C# code, so that it gives the same integers:

* bonus, malus and the adjusted score are 32-bit IEEE floats (C# ``float``): every operation on
  them is rounded to binary32 here with :func:`f32` (a double holds the exact result of a float
  ``+``, ``-`` or ``*`` before that rounding, so one rounding gives the float result);
* the expected score is a 64-bit double, and ``R + K * (S_adj - E)`` is computed in double;
* ``Math.Round`` rounds half to even (Python's :func:`round` does the same), then ``(int)``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from engine.elo import expected_score, update
from engine.k_factor import SEDMA_K
from engine.model import Performance

_F32 = struct.Struct("f")
MEMO_LIMIT = 65_536
"""Entries of a :class:`SedmaAdjustment`'s memo of adjusted scores before it is cleared."""


def f32(x: float) -> float:
    """``x`` rounded to the nearest IEEE binary32 value (as C# does when storing a ``float``)."""
    rounded: float = _F32.unpack(_F32.pack(x))[0]
    return rounded


@dataclass(frozen=True, slots=True)
class SedmaAdjustment:
    """Weights of the Sedma performance adjustment of the actual score (defaults: the seed's).

    Bonuses per round (score units), each capped: won by 16 (+0.05, at most +0.15), won by 24
    (+0.1, at most +0.2), won with the 4 and the last trick (+0.03, at most +0.09). Malus per bad
    move −0.02, at most −0.3. A losing side's bonus counts at ``loser_bonus_share`` (10 %); in a
    draw at ``draw_bonus_share`` (not in the seed, which has no draws: 50 %, our decision). The
    adjusted score is clamped to [0, 1]. All arithmetic in binary32, as the seed.
    """

    bonus_per_16: float = 0.05
    max_bonus_16: float = 0.15
    bonus_per_24: float = 0.1
    max_bonus_24: float = 0.2
    bonus_per_4_and_last: float = 0.03
    max_bonus_4_and_last: float = 0.09
    malus_per_bad_move: float = 0.02
    max_malus: float = 0.3
    loser_bonus_share: float = 0.1
    draw_bonus_share: float = 0.5
    _memo: dict[tuple[float, int, int, int, int], float] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def adjusted_score(self, base_score: float, performance: Performance) -> float:
        """Actual score in [0, 1] after the performance adjustment, as a binary32 value.

        ``base_score`` is 1 (win), 0.5 (draw) or 0 (loss). Returns
        ``clamp(base + share * bonus - malus, 0, 1)`` with the seed's order of operations.
        The function is pure, so results are memoised per (base score, the four counts), at most
        :data:`MEMO_LIMIT` entries (then the memo is cleared): a cached value is the value.
        """
        p = performance
        key = (base_score, p.bad_moves, p.won_by_16, p.won_by_24, p.won_by_4_and_last)
        score = self._memo.get(key)
        if score is None:
            memo = self._memo
            if len(memo) >= MEMO_LIMIT:
                memo.clear()
            score = memo[key] = self._adjusted_score(base_score, performance)
        return score

    def _adjusted_score(self, base_score: float, performance: Performance) -> float:
        bonus = f32(
            f32(
                min(f32(performance.won_by_16 * f32(self.bonus_per_16)), f32(self.max_bonus_16))
                + min(f32(performance.won_by_24 * f32(self.bonus_per_24)), f32(self.max_bonus_24))
            )
            + min(
                f32(performance.won_by_4_and_last * f32(self.bonus_per_4_and_last)),
                f32(self.max_bonus_4_and_last),
            )
        )
        if base_score == 1.0:
            share = 1.0
        elif base_score == 0.0:
            share = f32(self.loser_bonus_share)
        else:
            share = f32(self.draw_bonus_share)
        bonus = f32(bonus * share)
        malus = min(f32(performance.bad_moves * f32(self.malus_per_bad_move)), f32(self.max_malus))
        score = f32(f32(f32(base_score) + bonus) - malus)
        if score < 0.0:
            return 0.0
        if score > 1.0:
            return 1.0
        return score


SEED_ADJUSTMENT = SedmaAdjustment()


def calculate_new_ratings(
    rating_a: int,
    rating_b: int,
    a_won: bool,
    bad_moves_a: int,
    bad_moves_b: int,
    won_by_16_a: int,
    won_by_16_b: int,
    won_by_24_a: int,
    won_by_24_b: int,
    won_by_4_and_last_a: int,
    won_by_4_and_last_b: int,
) -> tuple[int, int]:
    """The seed's ``CalculateNewRatings`` with the same signature: new ``(rating_a, rating_b)``.

    Ratings are integer rating points; counts are per-match Sedma statistics (see
    :class:`engine.model.Performance`). K comes from each player's rating before the match
    (:data:`engine.k_factor.SEDMA_K`). Reproduces ``tests/data/golden/sedma_reference.csv``
    exactly. Raises ``OverflowError`` only for counts or ratings far beyond any real match
    (above about 10^38, where C# would give infinities).
    """
    k_a = SEDMA_K(rating_a)
    k_b = SEDMA_K(rating_b)
    base_a = 1.0 if a_won else 0.0
    score_a = SEED_ADJUSTMENT.adjusted_score(
        base_a, Performance(bad_moves_a, won_by_16_a, won_by_24_a, won_by_4_and_last_a)
    )
    score_b = SEED_ADJUSTMENT.adjusted_score(
        1.0 - base_a, Performance(bad_moves_b, won_by_16_b, won_by_24_b, won_by_4_and_last_b)
    )
    expected_a = expected_score(rating_a, rating_b)
    expected_b = expected_score(rating_b, rating_a)
    return (
        int(round(update(rating_a, k_a, score_a, expected_a))),
        int(round(update(rating_b, k_b, score_b, expected_b))),
    )
