"""The Elo expected score and update.

Source: A. E. Elo, *The Rating of Chessplayers, Past and Present* (1978); the logistic form used by
FIDE and by the product's seed documents: E = 1 / (1 + 10^((R_opp - R) / scale)), scale = 400.

Edge (so that every valid policy rates every valid match safely; the decision record
``docs/decisions/0003-every-valid-policy-rates-every-valid-match.md``): the expected score
**saturates** at 0 and 1. For a gap beyond
:data:`SATURATION_EXPONENT` scales (about 123,000 rating points at scale 400) ``10 ** x`` exceeds
the largest double: Python raises ``OverflowError`` there, where the seed's C# ``Math.Pow`` returns
``+Infinity`` and ``1 / (1 + Infinity)`` is 0. We follow the C# double arithmetic: the underdog's
expected score is 0.0 and the favourite's ``1 / (1 + 0.0)`` = 1.0. Below that gap every result is
the same double as before. The inline copies of this expression (the flat paths of
:mod:`engine.rating` and :mod:`engine.fast_replay`) saturate in the same way;
``tests/unit/test_expected_score_edges.py`` holds them equal to :func:`expected_score` at the edges.
"""

from __future__ import annotations

import math

SATURATION_EXPONENT = 1024 * math.log10(2.0)
"""``(R_opp - R) / scale`` above which ``10 ** x`` overflows a double (about 308.25)."""

WIN = 1.0
DRAW = 0.5
LOSS = 0.0


def expected_score(rating: float, opponent_rating: float, scale: float = 400.0) -> float:
    """Expected score in [0, 1] of a player rated ``rating`` against ``opponent_rating``.

    Both ratings in rating points; ``scale`` in rating points (400: a 400-point gap means 10:1
    odds). Computed in double precision as ``1 / (1 + 10 ** ((opponent - rating) / scale))``,
    the exact expression of the seed's C# code, saturating at 0 (and so the opponent's at 1) where
    ``10 ** x`` overflows, as C# does (see the module docstring). Raises ``ZeroDivisionError`` for
    ``scale == 0``.
    """
    try:
        return 1.0 / (1.0 + 10.0 ** ((opponent_rating - rating) / scale))
    except OverflowError:  # 10 ** x > the largest double: C# gives +Infinity, and 1 / (1 + Infinity) = 0
        return 0.0


def update(rating: float, k_factor: float, actual_score: float, expected: float) -> float:
    """New rating ``R + K * (S - E)``, unrounded, in rating points."""
    return rating + k_factor * (actual_score - expected)
