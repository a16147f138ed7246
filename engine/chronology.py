"""Chronological placement of late matches and annulments: the pure half of a correction.

A chronological ladder's replay order is the order key ``(order_at, match_id)`` (``match_id``
compared by code point, as PostgreSQL's ``COLLATE "C"``), where ``order_at`` is the earlier of the
match's ``finished_at`` and the moment the service first applied it. A match whose key is below the
last key of one of its players is *late*: :func:`sweep` places it in its position and re-rates,
with the engine, the later matches it affects (those sharing a player with it, and those sharing a
player with a re-rated one, from that time on). Each player enters the sweep from its stored history
row at that point (rating before, games before, peak and season before, a model's deviation,
volatility and time of last match before, wins, draws and losses undone from the current state),
never by replaying the player's whole history. An annulment is the same correction with the
annulled matches left out (``dropped``).

The store reads the stored matches (:class:`LaterMatch`, :class:`LaterRow`) and writes what the
sweep computed; this module holds no I/O. :func:`deferred_matches` is the rule that picks the
matches of a batch to defer when some player rows stay held by another transaction.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from engine.model import FreeForAll, Match, RatingChange
from engine.policy import AnyPolicy
from engine.replay import Standing, replay_changes

OrderKey = tuple[datetime, str]
"""A match's place in a chronological ladder: ``(order_at, match_id)``."""


def order_key(finished_at: datetime, received_at: datetime, match_id: str) -> OrderKey:
    """The order key of a match first applied at ``received_at`` (the database's ``now()``): a
    clock that runs ahead cannot stamp a match later than when the service received it."""
    return (min(finished_at, received_at), match_id)


@dataclass(slots=True)
class LaterRow:
    """A current history row (``rating_changes`` id ``row_id``) of a stored match that follows the
    late match: the player's ``sequence`` (n-th match), ``rating_before``, ``result``, the
    ``peak_before``/``season_before`` the row kept and, for a model with uncertainty, the player's
    stored state before the match (:class:`Prior`; all ``None`` under Elo)."""

    row_id: int
    player_id: str
    sequence: int
    rating_before: float
    result: str
    peak_before: float | None
    season_before: str | None
    prior_deviation: float | None = None
    volatility_before: float | None = None
    prior_last_played: float | None = None


@dataclass(slots=True)
class LaterMatch:
    """A stored match of the ladder after the late one: ledger ``seq``, ``key``, ``payload``, and
    its current history ``rows`` (one per player)."""

    seq: int
    match_id: str
    key: OrderKey
    payload: str | None
    """The ledger payload as JSON text (parsed only if the match is re-rated); None when not read."""
    rows: list[LaterRow] = field(default_factory=list)
    """Empty when read by :func:`later_match_players` and not yet by :func:`read_rows`."""
    players: tuple[str, ...] = ()
    """The match's player ids (``ledger.player_ids``, else those of its ``rows``)."""


def affected_players(batch: Sequence[tuple[OrderKey, Iterable[str]]], later: Sequence[LaterMatch],
                     since: OrderKey, dropped: Iterable[str] = ()) -> set[str]:
    """The players a correction touches: those of the batch's matches from ``since`` on and of the
    ``dropped`` (annulled) stored matches, and those of every stored match (``later``, key order)
    that shares a player with them at its time."""
    affected = {pid for key, pids in batch if key >= since for pid in pids}
    gone = set(dropped)
    affected |= {pid for m in later if m.match_id in gone for pid in m.players}
    for match in later:
        if not affected.isdisjoint(match.players):
            affected.update(match.players)
    return affected


def histories_in_order(later: Sequence[LaterMatch], affected: set[str], games: dict[str, int]) -> bool:
    """True when each affected player's rows among ``later`` are its last ones, numbered without a
    gap up to its ``games`` played: its history is in replay order from the late match on, so the
    row at that point holds its state then. False where a match was placed at the end past the
    bound (its row is last by sequence, not by order key): the correction cannot start there.
    Players absent from ``games`` (rows not locked) are skipped: the caller retries with them."""
    seqs: dict[str, list[int]] = {}
    for m in later:
        for r in m.rows:
            if r.player_id in affected:
                seqs.setdefault(r.player_id, []).append(r.sequence)
    for pid, numbers in seqs.items():
        if pid not in games:  # not locked: the caller runs the batch again with its row
            continue
        numbers.sort()
        if numbers != list(range(numbers[0], numbers[0] + len(numbers))) or numbers[-1] != games.get(pid):
            return False
    return True


class Prior(NamedTuple):
    """A player's stored state of a model with uncertainty just before a match, before any growth
    for the time since its last match: ``deviation`` (rating points), ``volatility`` and
    ``last_played`` (seconds since the epoch); all ``None`` under Elo or for a player's first match
    where the model keeps no such value."""

    deviation: float | None = None
    volatility: float | None = None
    last_played: float | None = None


NO_PRIOR = Prior()


@dataclass(slots=True)
class Rated:
    """One match the sweep rated: ``changes``, and per change the player's games after it (the
    history ``sequence``), peak rating, season and :class:`Prior` state before it."""

    changes: tuple[RatingChange, ...]
    games: list[int]
    peaks_before: list[float | None]
    seasons_before: list[str | None]
    priors: list[Prior]


@dataclass(slots=True)
class Sweep:
    """What :func:`sweep` computed: ``batch`` (the batch's matches, by index), ``rerated`` (stored
    matches re-rated, key order, with their :class:`Rated`) and the final ``standings`` of every
    player it touched."""

    batch: dict[int, Rated]
    rerated: list[tuple[LaterMatch, Rated]]
    standings: dict[str, Standing]


def sweep(policy: AnyPolicy, batch: Sequence[tuple[int, OrderKey | None, Match | FreeForAll]],
          later: Sequence[LaterMatch], current: dict[str, Standing],
          to_engine: Callable[[dict[str, Any]], Match | FreeForAll], dropped: Iterable[str] = ()) -> Sweep:
    """Rate a ladder's ``batch`` (``(index, key, match)``, in the order to apply: key order on a
    chronological ladder, queue order on an arrival-order one, where keys are ``None`` and
    ``later`` is empty) merged with the stored ``later`` matches, re-rating each stored match that
    shares a player with one already rated in this sweep.

    ``current`` holds each batch player's current :class:`engine.replay.Standing` (the locked row,
    wins/draws/losses included) and may hold others'. A player enters the sweep from its state just
    before the first match it takes part in: its current standing when none of its stored matches
    follows, else the history row of the first that follows (rating and games before it, peak,
    season and a model's prior deviation, volatility and last match time the row kept,
    wins/draws/losses of the current row minus those of the following rows).
    A stored match named in ``dropped`` (annulled) is left out: its players enter the sweep from
    their state just before it, and what follows is re-rated without it.
    Ratings in rating points. Raises what the engine raises.
    """
    gone = set(dropped)
    merged: list[tuple[Any, int, int]] = [(key, 0, n) for n, (_, key, _) in enumerate(batch)]
    if later:
        merged += [(m.key, 1, i) for i, m in enumerate(later)]
        merged.sort(key=lambda t: t[0])
    rows_of: dict[str, list[tuple[OrderKey, LaterRow]]] = {}
    for m in later:
        for r in m.rows:
            rows_of.setdefault(r.player_id, []).append((m.key, r))
    active: dict[str, Standing] = {}

    def enter(pids: Iterable[str], key: OrderKey | None) -> None:
        for pid in pids:
            if pid not in active:
                state = _state_before(pid, key, rows_of.get(pid), current.get(pid))
                if state is not None:
                    active[pid] = state

    out = Sweep({}, [], active)
    for key, kind, i in merged:
        if kind == 0:
            em = batch[i][2]
            enter(em.player_ids(), key)
            out.batch[i] = _rate_one(em, policy, active)
            continue
        stored = later[i]
        pids = [r.player_id for r in stored.rows]
        if stored.match_id in gone:  # annulled: its players enter from their state before it
            enter(pids, key)
            continue
        if not any(pid in active for pid in pids):
            continue
        assert stored.payload is not None, "later_matches read without payloads"
        em = to_engine(json.loads(stored.payload))
        enter(pids, key)
        out.rerated.append((stored, _rate_one(em, policy, active)))
    return out


def _state_before(pid: str, key: OrderKey | None, rows: list[tuple[OrderKey, LaterRow]] | None,
                  now: Standing | None) -> Standing | None:
    """A player's state just before ``key``: a copy of its current standing ``now`` when none of its
    stored ``rows`` (key order) follows ``key``, else rebuilt from the history row of the first that
    follows (see :func:`sweep`); None for a player with neither (the engine starts it fresh)."""
    i = 0 if rows is None or key is None else bisect.bisect_left([k for k, _ in rows], key)
    if rows is None or key is None or i == len(rows):
        if now is None:
            return None
        return Standing(now.rating, now.games_played, now.peak_rating, now.season, now.wins, now.draws, now.losses,
                        now.deviation, now.volatility, now.last_played)
    assert now is not None, f"player {pid} has stored matches but no current standing"
    after = [r for _, r in rows[i:]]
    first = after[0]
    results = [r.result for r in after]
    if first.sequence == 1:  # the player's first match: the state of a fresh row
        return Standing(first.rating_before, 0, first.rating_before, None, 0, 0, 0, first.prior_deviation,
                        first.volatility_before, first.prior_last_played)
    return Standing(first.rating_before, first.sequence - 1,
                    first.peak_before if first.peak_before is not None else first.rating_before,
                    first.season_before, now.wins - results.count("win"),
                    now.draws - results.count("draw"), now.losses - results.count("loss"),
                    first.prior_deviation, first.volatility_before, first.prior_last_played)


def _rate_one(em: Match | FreeForAll, policy: AnyPolicy, active: dict[str, Standing]) -> Rated:
    """Rate one match from the players' states in ``active`` (updated in place): its changes, and
    per change the player's games after it and its peak, season and :class:`Prior` before it."""
    pids = em.player_ids()
    before = {pid: (active[pid].peak_rating, active[pid].season) if pid in active else (None, None) for pid in pids}
    priors = {pid: prior_of(active[pid]) for pid in pids if pid in active}
    _, changes = next(replay_changes([em], policy, active))
    return Rated(changes, [active[c.player_id].games_played for c in changes],
                 [before[c.player_id][0] for c in changes], [before[c.player_id][1] for c in changes],
                 [priors.get(c.player_id) or first_prior(c) for c in changes])


def prior_of(standing: Standing) -> Prior:
    """The :class:`Prior` of a player's ``standing`` before a match."""
    if standing.deviation is None and standing.volatility is None and standing.last_played is None:
        return NO_PRIOR
    return Prior(standing.deviation, standing.volatility, standing.last_played)


def first_prior(change: RatingChange) -> Prior:
    """The :class:`Prior` of a player the engine started fresh for ``change`` (its first match): the
    deviation and volatility it was rated from (no growth without an earlier match), no last match."""
    if change.deviation_before is None and change.volatility_before is None:
        return NO_PRIOR
    return Prior(change.deviation_before, change.volatility_before, None)


def deferred_matches(players_of: Sequence[Iterable[Hashable]], blocked: set[Any]) -> list[int]:
    """Indices (queue order) of the matches to defer, given each match's player keys (any hashable
    key, the store's ``(ladder, player_id)``) and the ``blocked`` keys (rows another transaction
    holds): a match with a blocked player, and every later match sharing a player with a deferred
    match, so each player's matches of the batch are applied in queue order."""
    tainted = set(blocked)
    deferred: list[int] = []
    for n, keys in enumerate(players_of):
        mine = set(keys)
        if mine & tainted:
            tainted |= mine
            deferred.append(n)
    return deferred
