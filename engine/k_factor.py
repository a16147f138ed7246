"""K-factor policies: how many rating points one unit of surprise is worth.

A K-factor policy is a callable ``(rating_before) -> K`` (rating points per unit of score).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConstantK:
    """The same K for every rating (classic Elo; the community tutorial uses K = 30)."""

    k: float

    def __call__(self, rating: float) -> float:
        return self.k


@dataclass(frozen=True, slots=True)
class BandedK:
    """K by rating band, chosen from the rating before the match.

    ``bands`` is a tuple of ``(upper_bound, k)`` in increasing order of ``upper_bound``: the first
    band whose upper bound is strictly greater than the rating gives K; ratings at or above the
    last bound get ``top_k``. Raises ``ValueError`` if the bounds are not strictly increasing.
    """

    bands: tuple[tuple[float, float], ...]
    top_k: float

    def __post_init__(self) -> None:
        bounds = [b for b, _ in self.bands]
        if any(b2 <= b1 for b1, b2 in zip(bounds, bounds[1:])):
            raise ValueError(f"K-factor band bounds must be strictly increasing, got {bounds}")

    def __call__(self, rating: float) -> float:
        for upper, k in self.bands:
            if rating < upper:
                return k
        return self.top_k


SEDMA_K = BandedK(bands=((1200, 40), (1800, 32), (2200, 24)), top_k=16)
"""The Sedma seed's ``GetKFactor``: < 1200 → 40, < 1800 → 32, < 2200 → 24, else 16."""
