"""Frozen value types shared by every rating policy.

The engine works on these dataclasses only: the worker maps its wire schemas to them at its
boundary, so the engine never sees pydantic, SQL or Celery.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple


class Outcome(str, Enum):
    """Result of a two-sided match, from the point of view of side A."""

    SIDE_A_WON = "side_a_won"
    SIDE_B_WON = "side_b_won"
    DRAW = "draw"


@dataclass(frozen=True, slots=True)
class Performance:
    """Per-match Sedma statistics of one player (all counts, each >= 0).

    ``won_by_16``/``won_by_24``: rounds this player's side won by 16 / 24 card points;
    ``won_by_4_and_last``: rounds won with the 4 and the last trick; ``bad_moves``: moves the
    game client judged bad. Source: the Sedma seed document (``CalculateNewRatings``).
    """

    bad_moves: int = 0
    won_by_16: int = 0
    won_by_24: int = 0
    won_by_4_and_last: int = 0


NO_PERFORMANCE = Performance()


@dataclass(frozen=True, slots=True)
class Participant:
    """One player of a side: an opaque ``player_id``, optional Sedma ``performance`` and a ``weight``
    in (0, 1], the share of the match the player took part in (partial play; models with uncertainty
    scale the player's update by it, Elo policies ignore it)."""

    player_id: str
    performance: Performance = NO_PERFORMANCE
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Match:
    """A finished two-sided match: ``side_a`` and ``side_b`` each hold one or more participants.

    Optional context used by some policies: ``home`` is ``"side_a"``/``"side_b"`` when one side
    plays at home (the policy's home advantage, in rating points, is added to it) or ``None`` on
    neutral ground; ``scores`` is ``(side A points, side B points)`` for a margin-of-victory
    multiplier; ``season`` names the season the match belongs to (season regression);
    ``played_at`` is the time of the match's order key in seconds since the Unix epoch (models whose
    deviation grows with the time between a player's matches read it; never a worker's clock).
    """

    match_id: str
    side_a: tuple[Participant, ...]
    side_b: tuple[Participant, ...]
    outcome: Outcome
    home: str | None = None
    scores: tuple[float, float] | None = None
    season: str | None = None
    played_at: float | None = None

    def player_ids(self) -> tuple[str, ...]:
        """Every player id of the match, side A first, in the order given."""
        return tuple(p.player_id for p in self.side_a) + tuple(p.player_id for p in self.side_b)


@dataclass(frozen=True, slots=True)
class FreeForAll:
    """A finished match of three or more sides ranked by placement, rated pairwise.

    ``sides`` holds each side's participants; ``placements[i]`` is side i's rank (1 = best;
    equal placements are a draw between those sides); ``season`` and ``played_at`` as for :class:`Match`.
    """

    match_id: str
    sides: tuple[tuple[Participant, ...], ...]
    placements: tuple[int, ...]
    season: str | None = None
    played_at: float | None = None
    home = None
    scores = None

    def player_ids(self) -> tuple[str, ...]:
        """Every player id of the match, side by side, in the order given."""
        return tuple(p.player_id for side in self.sides for p in side)


@dataclass(frozen=True, slots=True)
class PlayerState:
    """What a policy may need to know about a player before a match.

    ``rating`` in rating points; ``games_played`` rated matches so far (provisional K-factors);
    ``peak_rating`` the highest rating reached so far, or ``None`` (FIDE's K = 10 once 2400 is
    reached); ``season`` the season of the player's last match, or ``None`` (season regression).

    Models with uncertainty also read ``deviation`` (rating points: Glicko-2's RD, or Weng-Lin's
    sigma with ``rating`` its mu), ``volatility`` (Glicko-2's sigma) and ``last_played`` (the
    ``played_at`` of the player's last match, seconds since the epoch); ``None`` for Elo.
    """

    rating: float
    games_played: int = 0
    peak_rating: float | None = None
    season: str | None = None
    deviation: float | None = None
    volatility: float | None = None
    last_played: float | None = None


class RatingChange(NamedTuple):
    """The effect of one match on one player (an immutable named tuple: cheap to build, which the
    engine's speed target needs).

    Ratings are in rating points; ``expected_score`` and ``actual_score`` are in [0, 1]
    (``actual_score`` after any performance adjustment; in a match of more than two sides, the
    means over the pairings); ``k_factor`` in rating points per unit of score (after any
    margin-of-victory multiplier or free-for-all division), so that
    ``rating_after = round(rating_before + k_factor * (actual_score - expected_score))`` up to the
    floor; ``result`` is ``"win"``, ``"draw"`` or ``"loss"`` for this player's side (in a
    free-for-all: by the mean pairwise score, above, at or below one half). ``rating_before`` is
    the rating the match was rated from (after any season regression).
    """

    player_id: str
    rating_before: float
    rating_after: float
    expected_score: float
    actual_score: float
    k_factor: float
    result: str = "win"
    floor_points: float = 0.0
    """Rating points the policy's rating floor added (0 when the floor was not hit)."""
    capped: bool = False
    """True when the rating difference used for the expected score was capped (400-point rule)."""
    deviation_before: float | None = None
    """Models with uncertainty: the deviation the match was rated from (after any growth since the
    player's last match), in rating points; ``None`` for Elo."""
    deviation_after: float | None = None
    """Models with uncertainty: the deviation after the match; ``None`` for Elo."""
    volatility_before: float | None = None
    """Glicko-2: the volatility before the match; ``None`` for other models."""
    volatility_after: float | None = None
    """Glicko-2: the volatility after the match; ``None`` for other models."""

    @property
    def delta(self) -> float:
        """``rating_after - rating_before`` in rating points."""
        return self.rating_after - self.rating_before
