"""Store: read models (counts, leaderboards, histories, the ledger in apply order, standings)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import psycopg
from psycopg.rows import dict_row

from worker.store.connection import scalar
from worker.store.ladders import DEFAULT_ORDER, ladder_record

LEDGER_ORDER = {
    "applied": "ORDER BY seq",
    "finished-at": 'ORDER BY order_at, match_id COLLATE "C"',
    "finished-at-restored": 'ORDER BY least(finished_at, applied_at), match_id COLLATE "C"',
}
"""SQL of each replay order: ``applied`` is the ledger's ``seq`` (the order workers committed, a
ladder's explicit choice); ``finished-at`` is chronological, the default: by ``order_at`` (the
earlier of ``finished_at`` and when the service first applied the match), ties by ``match_id``
(code point order). A late match placed at the end past the correction bound (``placed_at_end``)
has its ``order_at`` at the end of its players' histories; ``finished-at-restored`` is the order a
``ratings rebuild --order finished-at`` replays, with such matches back in their place."""

@dataclass(frozen=True, slots=True)
class Counts:
    """Message outcomes and events (each a count)."""

    applied: int
    duplicates: int
    dead_letters: int
    events: int
    unpublished_events: int

    @property
    def received(self) -> int:
        """Every message that ended somewhere: applied + duplicates + dead letters."""
        return self.applied + self.duplicates + self.dead_letters


def counts(conn: psycopg.Connection) -> Counts:
    """Current totals of the ledger, duplicate deliveries, dead letters and the outbox."""
    row = conn.execute(
        """
        SELECT (SELECT count(*) FROM ledger), (SELECT count(*) FROM duplicate_deliveries),
               (SELECT count(*) FROM dead_letters), (SELECT count(*) FROM outbox),
               (SELECT count(*) FROM outbox_pending)
        """
    ).fetchone()
    assert row is not None  # scalar subqueries: always one row
    return Counts(*row)


def leaderboard(conn: psycopg.Connection, ladder: str, top: int | None = None) -> list[dict[str, Any]]:
    """Players of ``ladder`` by rating (highest first, ties share a rank): rank, player_id,
    rating, games, wins, draws, losses, win_pct ((wins + draws / 2) / games × 100, one decimal: a
    draw counts as half a win), peak_rating. ``top``: only the first N rows (all when ``None``)."""
    rows = conn.cursor(row_factory=dict_row).execute(
        """
        SELECT rank() OVER (ORDER BY rating DESC) AS rank, player_id, rating,
               games_played AS games, wins, draws, losses,
               round(100.0 * (wins + 0.5 * draws) / nullif(games_played, 0), 1) AS win_pct, peak_rating
          FROM players WHERE ladder = %s
         ORDER BY rating DESC, player_id COLLATE "C" LIMIT %s
        """,
        (ladder, top),
    ).fetchall()
    return rows


def history(conn: psycopg.Connection, ladder: str, player_id: str) -> list[dict[str, Any]]:
    """Rating history of one player on one ladder, oldest first: the rows of the ladder's current
    generation (a rebuild's history once it switched over); ``sequence`` is the player's n-th match."""
    return conn.cursor(row_factory=dict_row).execute(
        """
        SELECT rc.sequence, rc.match_id, l.finished_at, rc.result, rc.rating_before,
               rc.rating_after, rc.rating_after - rc.rating_before AS delta,
               rc.expected_score, rc.actual_score, rc.k_factor
          FROM rating_changes rc JOIN ledger l ON l.seq = rc.ledger_seq
         WHERE rc.ladder = %(ladder)s AND rc.player_id = %(player)s
           AND rc.generation = coalesce((SELECT generation FROM ladders WHERE ladder = %(ladder)s), 0)
           AND rc.superseded_by IS NULL
         ORDER BY rc.sequence
        """,
        {"ladder": ladder, "player": player_id},
    ).fetchall()


def history_corrections(conn: psycopg.Connection, ladder: str, player_id: str) -> list[dict[str, Any]]:
    """The corrections that rewrote one player's history on a ladder (current generation), oldest
    first: ``id``, ``kind`` (``late``: a late match placed in its position; ``annulment``), the
    ``match_id`` that caused it (for an annulment: the earliest annulled match), ``at``, the
    player's history ``rows`` it superseded, and for an annulment the ``annulled`` match ids (sorted),
    ``reason``, ``annulled_by`` and whether this player's own match was annulled (``own_match``);
    those are ``None``, ``None``, ``None`` and ``False`` for a late match. One row per correction,
    whether or not the player played an annulled match."""
    return conn.cursor(row_factory=dict_row).execute(
        """
        SELECT c.id, c.kind, c.match_id, c.at, count(*) AS rows, a.annulled, a.reason, a.annulled_by,
               coalesce(bool_or(rc.match_id = ANY(a.annulled)), false) AS own_match
          FROM rating_changes rc JOIN corrections c ON c.id = rc.superseded_by
          LEFT JOIN LATERAL (  -- one annulment call: one reason, one annulled_by
                SELECT array_agg(match_id ORDER BY match_id) AS annulled, min(reason) AS reason,
                       min(annulled_by) AS annulled_by
                  FROM annulments WHERE correction_id = c.id) a ON true
         WHERE rc.ladder = %(ladder)s AND rc.player_id = %(player)s
           AND rc.generation = coalesce((SELECT generation FROM ladders WHERE ladder = %(ladder)s), 0)
         GROUP BY c.id, c.kind, c.match_id, c.at, a.annulled, a.reason, a.annulled_by
         ORDER BY c.id
        """,
        {"ladder": ladder, "player": player_id},
    ).fetchall()


def iter_ledger_rows(
    conn: psycopg.Connection, ladder: str, order: str, boundary: int | None = None,
    where: str = "", params: dict[str, Any] | None = None, batch_size: int = 5000,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Stream ``(seq, payload)`` of the ladder's ledger (annulled matches left out) in ``order`` (a
    key of :data:`LEDGER_ORDER`) through a server-side cursor; ``where`` adds a condition (SQL with named ``params``).

    Raises ``KeyError`` for an unknown order.
    """
    sql = f"SELECT seq, payload FROM ledger WHERE ladder = %(ladder)s AND NOT annulled {where} {LEDGER_ORDER[order]}"
    with conn.transaction(), conn.cursor(name="ledger_replay") as cur:
        cur.itersize = batch_size
        cur.execute(sql, {"ladder": ladder, "boundary": boundary, **(params or {})})
        yield from cur


def iter_ledger(conn: psycopg.Connection, ladder: str, batch_size: int = 5000) -> Iterator[dict[str, Any]]:
    """Stream the ladder's ledger payloads in its replay order, through a server-side cursor.

    The replay order is the one recorded in ``ladders``: chronological (``finished-at``, the default,
    also for a ladder with no record yet) or arrival order (``applied``, chosen by a rebuild);
    ``verify`` and rebuilds replay in this order.
    """
    with conn.transaction():
        record = ladder_record(conn, ladder)
        order, boundary = (record.apply_order, record.order_boundary) if record else (DEFAULT_ORDER, None)
        for _, payload in iter_ledger_rows(conn, ladder, order, boundary, batch_size=batch_size):
            yield payload


def ledger_size(conn: psycopg.Connection, ladder: str) -> int:
    """Number of matches in the ladder's ledger (in the caller's snapshot)."""
    return scalar(conn.execute("SELECT count(*) FROM ledger WHERE ladder = %s", (ladder,)))


def stored_standings(conn: psycopg.Connection, ladder: str) -> dict[str, tuple[float, int]]:
    """Mapping of player id to (stored rating, games played) for ``ladder``."""
    rows = conn.execute(
        "SELECT player_id, rating, games_played FROM players WHERE ladder = %s", (ladder,)
    ).fetchall()
    return {pid: (rating, games) for pid, rating, games in rows}


class StoredState(NamedTuple):
    """A player's stored state on a ladder of a model with uncertainty: ``rating`` and
    ``deviation`` in rating points, ``games_played``, ``volatility`` (Glicko-2, else ``None``) and
    ``last_played`` (seconds since the epoch of the last match, ``None`` before the first)."""

    rating: float
    games_played: int
    deviation: float | None
    volatility: float | None
    last_played: float | None


def player_states(conn: psycopg.Connection, ladder: str, player_ids: list[str] | None = None) -> dict[str, StoredState]:
    """As :func:`stored_states`, for ``player_ids`` only (all when ``None``): the states a
    leaderboard or a prediction reads (one statement)."""
    if player_ids is None:
        return stored_states(conn, ladder)
    rows = conn.execute(
        "SELECT player_id, rating, games_played, deviation, volatility, last_played FROM players "
        "WHERE ladder = %s AND player_id = ANY(%s)", (ladder, player_ids)).fetchall()
    return {pid: StoredState(*rest) for pid, *rest in rows}


def stored_states(conn: psycopg.Connection, ladder: str) -> dict[str, StoredState]:
    """Mapping of player id to its :class:`StoredState` for ``ladder`` (one statement)."""
    rows = conn.execute(
        "SELECT player_id, rating, games_played, deviation, volatility, last_played FROM players WHERE ladder = %s",
        (ladder,),
    ).fetchall()
    return {pid: StoredState(*rest) for pid, *rest in rows}


def ladders_in_use(conn: psycopg.Connection) -> list[str]:
    """Ladders that have at least one player row."""
    return [r[0] for r in conn.execute("SELECT DISTINCT ladder FROM players ORDER BY 1").fetchall()]


def ledger_matches_with_prefix(conn: psycopg.Connection, prefix: str) -> int:
    """Number of ledger rows (any ladder) whose ``match_id`` starts with ``prefix`` (e.g. ``football:``)."""
    pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    row = conn.execute("SELECT count(*) FROM ledger WHERE match_id LIKE %s", (pattern,)).fetchone()
    return row[0] if row else 0


def rating_sums(conn: psycopg.Connection) -> list[tuple[str, float, int]]:
    """``(ladder, sum of ratings, players)`` per ladder (the pool-drift gauge's input)."""
    return [(ladder, float(total), players) for ladder, total, players in
            conn.execute("SELECT ladder, sum(rating), count(*) FROM players GROUP BY ladder")]


def placed_at_end_counts(conn: psycopg.Connection) -> dict[str, int]:
    """Per ladder, matches placed at the end past the correction bound (``ledger.placed_at_end``)."""
    return dict(conn.execute("SELECT ladder, count(*) FROM ledger WHERE placed_at_end GROUP BY ladder").fetchall())


def correction_totals(conn: psycopg.Connection) -> tuple[int, int]:
    """(corrections made, matches they re-rated) over all ladders."""
    row = conn.execute("SELECT count(*), coalesce(sum(matches_rerated), 0) FROM corrections").fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)
