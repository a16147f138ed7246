"""The Elo expected score and update.

Source: A. E. Elo, *The Rating of Chessplayers, Past and Present* (1978); the logistic form used by
FIDE and by the product's seed documents: E = 1 / (1 + 10^((R_opp - R) / scale)), scale = 400.
"""

from __future__ import annotations

WIN = 1.0
DRAW = 0.5
LOSS = 0.0


def expected_score(rating: float, opponent_rating: float, scale: float = 400.0) -> float:
    """Expected score in [0, 1] of a player rated ``rating`` against ``opponent_rating``.

    Both ratings in rating points; ``scale`` in rating points (400: a 400-point gap means 10:1
    odds). Computed in double precision as ``1 / (1 + 10 ** ((opponent - rating) / scale))``,
    the exact expression of the seed's C# code. Raises ``ZeroDivisionError`` for ``scale == 0``.
    """
    return 1.0 / (1.0 + 10.0 ** ((opponent_rating - rating) / scale))


def update(rating: float, k_factor: float, actual_score: float, expected: float) -> float:
    """New rating ``R + K * (S - E)``, unrounded, in rating points."""
    return rating + k_factor * (actual_score - expected)
