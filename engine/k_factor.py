"""K-factor policies: how many rating points one unit of surprise is worth.

A K-factor policy is a callable ``(rating_before, games_played=0, peak_rating=None) -> K`` (rating
points per unit of score); the constant and banded ones look at the rating only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConstantK:
    """The same K for every rating (classic Elo; the community tutorial uses K = 30)."""

    k: float

    def __call__(self, rating: float, games_played: int = 0, peak_rating: float | None = None) -> float:
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

    def __call__(self, rating: float, games_played: int = 0, peak_rating: float | None = None) -> float:
        for upper, k in self.bands:
            if rating < upper:
                return k
        return self.top_k


SEDMA_K = BandedK(bands=((1200, 40), (1800, 32), (2200, 24)), top_k=16)
"""The Sedma seed's ``GetKFactor``: < 1200 → 40, < 1800 → 32, < 2200 → 24, else 16."""


@dataclass(frozen=True, slots=True)
class ProvisionalK:
    """A provisional period: ``k`` while the player has fewer than ``games`` rated matches, then
    ``then`` (any K-factor policy). USCF and most online ladders rate newcomers this way.
    """

    games: int
    k: float
    then: KFactor

    def __call__(self, rating: float, games_played: int = 0, peak_rating: float | None = None) -> float:
        if games_played < self.games:
            return self.k
        return self.then(rating, games_played, peak_rating)


@dataclass(frozen=True, slots=True)
class FideK:
    """FIDE's K-factor (FIDE Rating Regulations, art. 8.3.3, 2014 onwards):

    ``provisional_k`` (40) until ``provisional_games`` (30) rated games, then ``k`` (20) while the
    rating is below ``threshold`` (2400), and ``top_k`` (10) once the player's rating has reached
    ``threshold`` — for good: the peak rating decides, so a player who falls back below 2400 keeps 10.
    """

    provisional_games: int = 30
    provisional_k: float = 40.0
    k: float = 20.0
    threshold: float = 2400.0
    top_k: float = 10.0

    def __call__(self, rating: float, games_played: int = 0, peak_rating: float | None = None) -> float:
        if games_played < self.provisional_games:
            return self.provisional_k
        peak = rating if peak_rating is None else max(rating, peak_rating)
        if peak >= self.threshold:
            return self.top_k
        return self.k


KFactor = ConstantK | BandedK | ProvisionalK | FideK
"""Any K-factor policy: called as ``k(rating, games_played=0, peak_rating=None)``."""
