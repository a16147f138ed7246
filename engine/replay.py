"""Fold the engine over a ladder's matches: the replay behind ``ratings verify``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.model import Match
from engine.policy import RatingPolicy
from engine.rating import rate


@dataclass(slots=True)
class Standing:
    """Replayed state of one player: rating (rating points) and games played."""

    rating: float
    games_played: int = 0


def replay(matches: Iterable[Match], policy: RatingPolicy) -> dict[str, Standing]:
    """Apply ``matches`` in the order given, from every player's initial rating.

    Returns a mapping of player id to :class:`Standing`. Deterministic: the same matches in the
    same order give bit-identical ratings, which is what lets ``verify`` compare with ``==``.
    """
    ratings: dict[str, float] = {}
    games: dict[str, int] = {}
    for match in matches:
        for change in rate(match, ratings, policy):
            ratings[change.player_id] = change.rating_after
            games[change.player_id] = games.get(change.player_id, 0) + 1
    return {pid: Standing(r, games[pid]) for pid, r in ratings.items()}
