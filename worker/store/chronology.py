"""Store: chronological placement of late matches (issue 18), for the one rating transaction.

A chronological ladder's replay order is the order key ``(order_at, match_id)`` (``match_id``
compared by code point, as ``COLLATE "C"``), where ``order_at`` is the earlier of the match's
``finished_at`` and the moment the service first applied it (``ledger.order_at``). A match whose
key is below the last key of one of its players is *late*: :func:`sweep` places it in its position
and re-rates, with the engine, the later matches it affects (those sharing a player with it, and
those sharing a player with a re-rated one, from that time on). Each player enters the sweep from
the history row at that point (rating before, games before, peak and season before, wins, draws
and losses undone from the current row), never by replaying the player's whole history, so a
correction costs the later matches' players it reads (:func:`later_match_players`, from the ledger,
at most the bound) and the rows of the matches it touches (:func:`read_rows`) and re-rates.
Rebuilds and annulments read every later match with its rows (:func:`later_matches`).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from engine import FreeForAll, Match, RatingChange, RatingPolicy
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
    late match: the player's ``sequence`` (n-th match), ``rating_before``, ``result`` and the
    ``peak_before``/``season_before`` the row kept."""

    row_id: int
    player_id: str
    sequence: int
    rating_before: float
    result: str
    peak_before: float | None
    season_before: str | None


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


def later_matches(cur: psycopg.Cursor, ladder: str, after: OrderKey, generation: int,
                  limit: int, inclusive: bool = False) -> list[LaterMatch]:
    """The ladder's stored matches (not annulled) with an order key above ``after`` (or equal,
    ``inclusive``), in key order, with their current history rows of ``generation`` and their
    payloads as JSON text (parsed only for a re-rated match): at most ``limit`` matches (one
    statement; the index ``ledger_ladder_order`` finds them). Rebuilds and annulments read this
    way; a rating transaction's correction reads :func:`later_match_players` and :func:`read_rows`."""
    rows = cur.execute(
        f"""
        SELECT l.seq, l.match_id, l.order_at, l.payload::text, rc.id, rc.player_id, rc.sequence, rc.rating_before,
               rc.result, rc.peak_before, rc.season_before
          FROM (SELECT seq, match_id, order_at, payload FROM ledger
                 WHERE ladder = %(ladder)s AND NOT annulled
                   AND (order_at, match_id COLLATE "C") {'>=' if inclusive else '>'} (%(at)s, %(mid)s COLLATE "C")
                 ORDER BY order_at, match_id COLLATE "C" LIMIT %(limit)s) AS l
          -- LATERAL ... OFFSET 0: one index lookup per match, whatever the statistics say (a fresh
          -- ladder has none, and the planner then scanned a whole generation: seconds, not milliseconds)
          CROSS JOIN LATERAL (SELECT * FROM rating_changes x WHERE x.match_id = l.match_id
                                 AND x.generation = %(generation)s AND x.superseded_by IS NULL OFFSET 0) AS rc
         ORDER BY l.order_at, l.match_id COLLATE "C", rc.player_id COLLATE "C"
        """,
        {"ladder": ladder, "at": after[0], "mid": after[1], "limit": limit, "generation": generation},
        # Never prepared: planned at each execution for the tables as they are (still a generic plan
        # on a connection that prepares: the transaction's plan_cache_mode applies to the unnamed
        # statement too, but it is not kept). A plan kept from a
        # small history (a fresh ladder, tables emptied, statistics never taken again) looked the rows
        # up in rating_changes_player_sequence, a partial index of the same predicate as the match's
        # own, by generation alone or by nothing (on a few rows the two cost the same), and read the
        # whole history once per later match: 2,001 later matches x 11,117 rows, 5.9 s of one
        # backend's CPU in a bench run at 8 worker processes, while the transactions sharing a new
        # player with it waited (tests/integration/test_round_trips.py). A correction is rare; its
        # planning costs less than a millisecond.
        prepare=False,
    ).fetchall()
    out: list[LaterMatch] = []
    for seq, match_id, at, payload, *row in rows:
        if not out or out[-1].match_id != match_id:
            out.append(LaterMatch(seq, match_id, (at, match_id), payload))
        out[-1].rows.append(LaterRow(*row))
    for m in out:
        m.players = tuple(r.player_id for r in m.rows)
    return out


def later_match_players(cur: psycopg.Cursor, ladder: str, after: OrderKey, generation: int,
                        limit: int) -> list[LaterMatch]:
    """The ladder's stored matches (not annulled) with an order key above ``after``, in key order,
    at most ``limit``: each with its ``players`` and without rows or payload (:func:`read_rows`
    reads those of the few a correction touches). One statement, from ``ledger`` alone (the index
    ``ledger_ladder_order`` and ``ledger.player_ids``); a row written before that column (NULL)
    takes the players of its current history rows of ``generation``.

    A rating transaction's correction at 8 worker processes has 400 to 700 later matches on
    average, up to 2,000 (the other workers' batches committed meanwhile), and re-rates 4 or so; reading each one's
    history rows too (:func:`later_matches`) cost a lookup in ``rating_changes`` per match and ten
    columns per row (issue 16)."""
    rows = cur.execute(
        """
        SELECT l.seq, l.match_id, l.order_at,
               coalesce(l.player_ids, ARRAY(SELECT x.player_id FROM rating_changes x WHERE x.match_id = l.match_id
                                             AND x.generation = %(generation)s AND x.superseded_by IS NULL
                                           ORDER BY x.player_id COLLATE "C"))
          FROM ledger l
         WHERE l.ladder = %(ladder)s AND NOT l.annulled
           AND (l.order_at, l.match_id COLLATE "C") > (%(at)s, %(mid)s COLLATE "C")
         ORDER BY l.order_at, l.match_id COLLATE "C" LIMIT %(limit)s
        """,
        {"ladder": ladder, "at": after[0], "mid": after[1], "limit": limit, "generation": generation},
        prepare=False,  # as later_matches: planned for the tables as they are
    ).fetchall()
    return [LaterMatch(seq, match_id, (at, match_id), None, players=tuple(players))
            for seq, match_id, at, players in rows]


def read_rows(cur: psycopg.Cursor, later: Sequence[LaterMatch], generation: int,
              payloads: bool = True) -> list[LaterMatch]:
    """Fill in the current history rows of ``generation`` (by player id, ``COLLATE "C"``) and, with
    ``payloads``, the ledger payload (JSON text) of each match of ``later`` (those a correction
    touches), in one statement (one index lookup per match). Returns ``later`` in its order, less
    any match without such rows."""
    if not later:
        return []
    by_seq = {m.seq: m for m in later}
    for m in later:
        m.rows = []
    payload = "(SELECT payload::text FROM ledger WHERE seq = u.seq)" if payloads else "NULL::text"
    for seq, text, *row in cur.execute(
        f"""
        SELECT u.seq, {payload}, rc.id, rc.player_id, rc.sequence, rc.rating_before, rc.result,
               rc.peak_before, rc.season_before
          FROM unnest(%b::bigint[], %b::text[]) AS u(seq, match_id)
          CROSS JOIN LATERAL (SELECT * FROM rating_changes x WHERE x.match_id = u.match_id
                                 AND x.generation = %b AND x.superseded_by IS NULL OFFSET 0) AS rc
         ORDER BY u.seq, rc.player_id COLLATE "C"
        """,
        ([m.seq for m in later], [m.match_id for m in later], generation),
        prepare=False,  # as later_matches: a generic plan kept from a small history read it whole per match
    ):
        match = by_seq[seq]
        match.payload = text
        match.rows.append(LaterRow(*row))
    return [m for m in later if m.rows]


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


@dataclass(slots=True)
class Rated:
    """One match the sweep rated: ``changes``, and per change the player's games after it (the
    history ``sequence``), peak rating and season before it."""

    changes: tuple[RatingChange, ...]
    games: list[int]
    peaks_before: list[float | None]
    seasons_before: list[str | None]


@dataclass(slots=True)
class Sweep:
    """What :func:`sweep` computed: ``batch`` (the batch's matches, by index), ``rerated`` (stored
    matches re-rated, key order, with their :class:`Rated`) and the final ``standings`` of every
    player it touched."""

    batch: dict[int, Rated]
    rerated: list[tuple[LaterMatch, Rated]]
    standings: dict[str, Standing]


def sweep(policy: RatingPolicy, batch: Sequence[tuple[int, OrderKey | None, Match | FreeForAll]],  # noqa: C901  (restructured by the rating transaction work)
          later: Sequence[LaterMatch], current: dict[str, Standing],
          to_engine: Callable[[dict[str, Any]], Match | FreeForAll], dropped: Iterable[str] = ()) -> Sweep:
    """Rate a ladder's ``batch`` (``(index, key, match)``, in the order to apply: key order on a
    chronological ladder, queue order on an arrival-order one, where keys are ``None`` and
    ``later`` is empty) merged with the stored ``later`` matches, re-rating each stored match that
    shares a player with one already rated in this sweep.

    ``current`` holds each batch player's current :class:`engine.replay.Standing` (the locked row,
    wins/draws/losses included) and may hold others'. A player enters the sweep from its state just
    before the first match it takes part in: its current standing when none of its stored matches
    follows, else the history row of the first that follows (rating and games before it, peak and
    season the row kept, wins/draws/losses of the current row minus those of the following rows).
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

    def enter(pid: str, key: OrderKey | None) -> None:
        rows = rows_of.get(pid)
        now = current.get(pid)
        i = 0 if rows is None or key is None else bisect.bisect_left([k for k, _ in rows], key)
        if rows is None or key is None or i == len(rows):
            if now is not None:
                active[pid] = Standing(now.rating, now.games_played, now.peak_rating, now.season,
                                       now.wins, now.draws, now.losses)
            return
        assert now is not None, f"player {pid} has stored matches but no current standing"
        after = [r for _, r in rows[i:]]
        first = after[0]
        results = [r.result for r in after]
        if first.sequence == 1:  # the player's first match: the state of a fresh row
            active[pid] = Standing(first.rating_before, 0, first.rating_before, None, 0, 0, 0)
            return
        active[pid] = Standing(first.rating_before, first.sequence - 1,
                               first.peak_before if first.peak_before is not None else first.rating_before,
                               first.season_before, now.wins - results.count("win"),
                               now.draws - results.count("draw"), now.losses - results.count("loss"))

    out = Sweep({}, [], active)
    for key, kind, i in merged:
        pids: Sequence[str]
        if kind == 0:
            em = batch[i][2]
            pids = em.player_ids()
        else:
            stored = later[i]
            pids = [r.player_id for r in stored.rows]
            if stored.match_id in gone:
                for pid in pids:
                    if pid not in active:
                        enter(pid, key)
                continue
            if not any(pid in active for pid in pids):
                continue
            assert stored.payload is not None, "later_matches read without payloads"
            em = to_engine(json.loads(stored.payload))
        for pid in pids:
            if pid not in active:
                enter(pid, key)
        peaks = [active[pid].peak_rating if pid in active else None for pid in pids]
        seasons = [active[pid].season if pid in active else None for pid in pids]
        before = dict(zip(pids, zip(peaks, seasons)))
        _, changes = next(replay_changes([em], policy, active))
        rated = Rated(changes, [active[c.player_id].games_played for c in changes],
                      [before[c.player_id][0] for c in changes], [before[c.player_id][1] for c in changes])
        if kind == 0:
            out.batch[i] = rated
        else:
            out.rerated.append((later[i], rated))
    return out


def ledger_keys(conn: psycopg.Connection, seqs: Sequence[int]) -> dict[int, OrderKey]:
    """The order key of each ledger row ``seq`` in ``seqs``."""
    return {seq: (at, mid) for seq, at, mid in conn.execute(
        "SELECT seq, order_at, match_id FROM ledger WHERE seq = ANY(%b)", (list(seqs),))}


def drop_history_rows(conn: psycopg.Connection, row_ids: Sequence[int]) -> None:
    """Delete ``rating_changes`` rows by id: a rebuild's own rows, not yet committed, that its
    chronological catch-up replaces (they were never visible to anyone)."""
    if row_ids:
        conn.execute("DELETE FROM rating_changes WHERE id = ANY(%b)", (list(row_ids),))


def restore_placed_at_end(conn: psycopg.Connection, ladder: str, up_to_seq: int) -> int:
    """Put the ladder's matches placed at the end (past the correction bound) with ``seq <=
    up_to_seq`` back in their chronological place: ``order_at`` = the earlier of ``finished_at`` and
    when they were applied, flag cleared. Run by a chronological rebuild inside its uncommitted
    switch-over transaction, which replays them there. Returns the rows changed."""
    return conn.execute(
        "UPDATE ledger SET order_at = least(finished_at, applied_at), placed_at_end = false "
        "WHERE ladder = %s AND placed_at_end AND seq <= %s", (ladder, up_to_seq)).rowcount
