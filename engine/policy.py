"""A ladder's rating policy: everything :func:`engine.rating.rate` needs besides the match."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from engine.k_factor import BandedK, ConstantK
from engine.sedma import SedmaAdjustment


class Rounding(str, Enum):
    """How a new rating is rounded after each update."""

    NONE = "none"
    """Stored exactly (a double)."""
    HALF_EVEN = "half_even"
    """To an integer, half to even (C# ``Math.Round``, the Sedma seed)."""


@dataclass(frozen=True, slots=True)
class RatingPolicy:
    """Parameters of an Elo-family rating policy.

    ``k_factor``: a K-factor policy (:mod:`engine.k_factor`); ``initial_rating``: rating of a
    player's first match, in rating points; ``scale``: logistic scale in rating points (400);
    ``rounding``: applied to each new rating; ``performance``: the Sedma adjustment of the actual
    score, or ``None`` for classic Elo (win 1 / draw 0.5 / loss 0).
    """

    k_factor: ConstantK | BandedK
    initial_rating: float = 1200.0
    scale: float = 400.0
    rounding: Rounding = Rounding.NONE
    performance: SedmaAdjustment | None = None
    version: str = ""
    """Content hash of the configuration the policy was read from (empty when built in code)."""

    def round(self, rating: float) -> float:
        """``rating`` rounded as this policy says (still a ``float``)."""
        if self.rounding is Rounding.HALF_EVEN:
            return float(round(rating))
        return rating
