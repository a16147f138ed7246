"""Store: the reads and writes of chronological placement (late matches, annulments, rebuilds).

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
Rebuilds read every later match with its rows (:func:`later_matches`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

import psycopg

# The pure half (the types, the sweep, the rules) lives beside the engine, in engine.chronology.
from engine.chronology import LaterMatch, LaterRow, OrderKey


class _LaterRead(NamedTuple):
    """A row of :func:`later_matches`: the ledger row's ``seq``, ``match_id``, ``order_at`` and
    ``payload`` (JSON text), then the columns of one history row of the match."""

    seq: int
    match_id: str
    order_at: datetime
    payload: str
    row_id: int
    player_id: str
    sequence: int
    rating_before: float
    result: str
    peak_before: float | None
    season_before: str | None
    prior_deviation: float | None
    volatility_before: float | None
    prior_last_played: float | None

    def later_row(self) -> LaterRow:
        return LaterRow(self.row_id, self.player_id, self.sequence, self.rating_before, self.result,
                        self.peak_before, self.season_before, self.prior_deviation, self.volatility_before,
                        self.prior_last_played)


class _RowsRead(NamedTuple):
    """A row of :func:`read_rows`: the ledger ``seq``, its ``payload`` (JSON text or None), then the
    columns of one history row of the match."""

    seq: int
    payload: str | None
    row_id: int
    player_id: str
    sequence: int
    rating_before: float
    result: str
    peak_before: float | None
    season_before: str | None
    prior_deviation: float | None
    volatility_before: float | None
    prior_last_played: float | None

    def later_row(self) -> LaterRow:
        return LaterRow(self.row_id, self.player_id, self.sequence, self.rating_before, self.result,
                        self.peak_before, self.season_before, self.prior_deviation, self.volatility_before,
                        self.prior_last_played)


class _PlayersRead(NamedTuple):
    """A row of :func:`later_match_players`."""

    seq: int
    match_id: str
    order_at: datetime
    players: list[str]


def later_matches(cur: psycopg.Cursor, ladder: str, after: OrderKey, generation: int,
                  limit: int, inclusive: bool = False) -> list[LaterMatch]:
    """The ladder's stored matches (not annulled) with an order key above ``after`` (or equal,
    ``inclusive``), in key order, with their current history rows of ``generation`` and their
    payloads as JSON text (parsed only for a re-rated match): at most ``limit`` matches (one
    statement; the index ``ledger_ladder_order`` finds them). Rebuilds read this way; a
    correction (a late match's, an annulment's) reads :func:`later_match_players` and :func:`read_rows`."""
    rows = cur.execute(
        f"""
        SELECT l.seq, l.match_id, l.order_at, l.payload::text, rc.id, rc.player_id, rc.sequence, rc.rating_before,
               rc.result, rc.peak_before, rc.season_before, rc.prior_deviation, rc.volatility_before,
               rc.prior_last_played
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
    for read in map(_LaterRead._make, rows):
        if not out or out[-1].match_id != read.match_id:
            out.append(LaterMatch(read.seq, read.match_id, (read.order_at, read.match_id), read.payload))
        out[-1].rows.append(read.later_row())
    for m in out:
        m.players = tuple(r.player_id for r in m.rows)
    return out


def later_match_players(cur: psycopg.Cursor, ladder: str, after: OrderKey, generation: int,
                        limit: int, inclusive: bool = False) -> list[LaterMatch]:
    """The ladder's stored matches (not annulled) with an order key above ``after`` (or equal,
    ``inclusive``: an annulment's earliest annulled match is the first), in key order,
    at most ``limit``: each with its ``players`` and without rows or payload (:func:`read_rows`
    reads those of the few a correction touches). One statement, from ``ledger`` alone (the index
    ``ledger_ladder_order`` and ``ledger.player_ids``); a row written before that column (NULL)
    takes the players of its current history rows of ``generation``.

    A rating transaction's correction at 8 worker processes has 400 to 700 later matches on
    average, up to 2,000 (the other workers' batches committed meanwhile), and re-rates 4 or so; reading each one's
    history rows too (:func:`later_matches`) cost a lookup in ``rating_changes`` per match and ten
    columns per row."""
    rows = cur.execute(
        f"""
        SELECT l.seq, l.match_id, l.order_at,
               coalesce(l.player_ids, ARRAY(SELECT x.player_id FROM rating_changes x WHERE x.match_id = l.match_id
                                             AND x.generation = %(generation)s AND x.superseded_by IS NULL
                                           ORDER BY x.player_id COLLATE "C"))
          FROM ledger l
         WHERE l.ladder = %(ladder)s AND NOT l.annulled
           AND (l.order_at, l.match_id COLLATE "C") {'>=' if inclusive else '>'} (%(at)s, %(mid)s COLLATE "C")
         ORDER BY l.order_at, l.match_id COLLATE "C" LIMIT %(limit)s
        """,
        {"ladder": ladder, "at": after[0], "mid": after[1], "limit": limit, "generation": generation},
        prepare=False,  # as later_matches: planned for the tables as they are
    ).fetchall()
    return [LaterMatch(r.seq, r.match_id, (r.order_at, r.match_id), None, players=tuple(r.players))
            for r in map(_PlayersRead._make, rows)]


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
    for r in map(_RowsRead._make, cur.execute(
        f"""
        SELECT u.seq, {payload}, rc.id, rc.player_id, rc.sequence, rc.rating_before, rc.result,
               rc.peak_before, rc.season_before, rc.prior_deviation, rc.volatility_before, rc.prior_last_played
          FROM unnest(%b::bigint[], %b::text[]) AS u(seq, match_id)
          CROSS JOIN LATERAL (SELECT * FROM rating_changes x WHERE x.match_id = u.match_id
                                 AND x.generation = %b AND x.superseded_by IS NULL OFFSET 0) AS rc
         ORDER BY u.seq, rc.player_id COLLATE "C"
        """,
        ([m.seq for m in later], [m.match_id for m in later], generation),
        prepare=False,  # as later_matches: a generic plan kept from a small history read it whole per match
    )):
        match = by_seq[r.seq]
        match.payload = r.payload
        match.rows.append(r.later_row())
    return [m for m in later if m.rows]


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
