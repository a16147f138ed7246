"""Store: a locked player as one typed value, from its row to the engine and back to the write.

The rating transaction and an annulment read each locked ``players`` row
(:class:`worker.store.locking.PlayerRow`) into a :class:`Player`: the rating model's state
(:class:`engine.replay.Standing`, what the engine rates from and gives back) and what the store
keeps beside it. The transaction's steps pass players around and hand their ``standing`` to the
engine without looking inside it; a model with more numbers per player extends ``Standing``, the
engine, :meth:`Player.from_row` and the write (:func:`worker.store.corrections.write_rating_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from engine import PlayerState, RatingPolicy
from engine.chronology import OrderKey
from engine.policy import AnyPolicy
from engine.replay import Standing
from worker.store.locking import Key, PlayerRow


@dataclass(slots=True)
class Player:
    """One locked player of a ladder: ``standing`` (the rating model's state), the ``last_finished_at``
    of its matches, its ``last_key`` (the order key of its last match on a chronological ladder, or
    None) and ``extra_events``, the events it was sent that no match of its own caused (rebuilds,
    corrections): its event ``sequence`` is games played + ``extra_events``."""

    ladder: str
    player_id: str
    standing: Standing
    last_finished_at: datetime | None
    last_key: OrderKey | None
    extra_events: int

    @classmethod
    def from_row(cls, row: PlayerRow) -> Player:
        """The player of a locked ``players`` row."""
        standing = Standing(row.rating, row.games_played, row.peak_rating, row.season, row.wins, row.draws,
                            row.losses, row.deviation, row.volatility, row.last_played)
        # the order key is there when its time is (the match id column of older rows may be NULL)
        last_key = (row.last_order_at, row.last_order_match or "") if row.last_order_at is not None else None
        return cls(row.ladder, row.player_id, standing, row.last_finished_at, last_key, row.rebuild_events)

    def announced(self) -> Announced:
        """What the player's last event told consumers: its rating, games and event sequence now."""
        return Announced(self.standing.rating, self.standing.games_played,
                         self.standing.games_played + self.extra_events)


class Announced(NamedTuple):
    """What a player's last event announced: ``rating`` (rating points), ``games`` played and the
    event ``sequence``; the next event of the player carries ``sequence`` + 1."""

    rating: float
    games: int
    sequence: int


Players = dict[Key, Player]
"""The locked players of a transaction by (ladder, player_id)."""


def last_keys(players: Players) -> dict[Key, OrderKey]:
    """The last order key of each player that has one."""
    return {key: p.last_key for key, p in players.items() if p.last_key is not None}


def initial_state(policy: AnyPolicy, player_id: str) -> PlayerState:
    """The state ``player_id`` starts from on a ladder of ``policy``: an Elo policy's initial rating
    (no deviation), or a model with uncertainty's :meth:`initial_state`."""
    if isinstance(policy, RatingPolicy):
        return PlayerState(policy.initial_for(player_id))
    return policy.initial_state(player_id)


def optional_float(value: float | None) -> float | None:
    """``value`` as a ``float`` (a database driver binds ``float8``), or ``None``."""
    return None if value is None else float(value)
