"""Fold the engine over a ladder's matches: the replay behind ``ratings verify`` and rebuilds."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from engine.model import FreeForAll, Match, PlayerState, RatingChange
from engine.policy import AnyPolicy
from engine.rating import rate


@dataclass(slots=True)
class Standing:
    """Replayed state of one player.

    ``rating`` and ``peak_rating`` in rating points (the peak includes the initial rating);
    ``games_played``, ``wins``, ``draws``, ``losses`` are counts; ``season`` is the season of the
    player's last match, or ``None``; ``deviation``, ``volatility`` and ``last_played`` as in
    :class:`engine.model.PlayerState` (``None`` under Elo).
    """

    rating: float
    games_played: int = 0
    peak_rating: float | None = None
    season: str | None = None
    wins: int = 0
    draws: int = 0
    losses: int = 0
    deviation: float | None = None
    volatility: float | None = None
    last_played: float | None = None

    def state(self) -> PlayerState:
        """The :class:`engine.model.PlayerState` the next match of this player is rated from."""
        return PlayerState(self.rating, self.games_played, self.peak_rating, self.season, self.deviation,
                           self.volatility, self.last_played)


def replay_changes(
    matches: Iterable[Match | FreeForAll], policy: AnyPolicy, standings: dict[str, Standing] | None = None
) -> Iterator[tuple[Match | FreeForAll, tuple[RatingChange, ...]]]:
    """Apply ``matches`` in the order given and yield ``(match, changes)`` for each.

    ``standings`` (player id to :class:`Standing`) is the starting state and is updated in place
    as the matches are applied (pass an empty dict to read the final state afterwards); a player
    absent from it starts from the policy's initial rating. Deterministic: the same matches in the
    same order give bit-identical ratings.
    """
    if standings is None:
        standings = {}
    for match in matches:
        states = {pid: standings[pid].state() for pid in match.player_ids() if pid in standings}
        changes = rate(match, states, policy)
        for change in changes:
            standing = standings.get(change.player_id)
            if standing is None:
                standing = standings[change.player_id] = Standing(change.rating_before, 0, change.rating_before)
            standing.rating = change.rating_after
            standing.games_played += 1
            standing.peak_rating = (
                change.rating_after if standing.peak_rating is None else max(standing.peak_rating, change.rating_after)
            )
            if match.season is not None:
                standing.season = match.season
            if change.deviation_after is not None:
                standing.deviation = change.deviation_after
                standing.volatility = change.volatility_after
                standing.last_played = match.played_at
            if change.result == "win":
                standing.wins += 1
            elif change.result == "draw":
                standing.draws += 1
            else:
                standing.losses += 1
        yield match, changes


def replay(matches: Iterable[Match | FreeForAll], policy: AnyPolicy) -> dict[str, Standing]:
    """Apply ``matches`` in the order given, from every player's initial rating.

    Returns a mapping of player id to :class:`Standing`. Deterministic: the same matches in the
    same order give bit-identical ratings, which is what lets ``verify`` compare with ``==``.
    """
    standings: dict[str, Standing] = {}
    for _ in replay_changes(matches, policy, standings):
        pass
    return standings
