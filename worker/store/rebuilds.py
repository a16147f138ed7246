"""Store: rebuilds (exclusive ladder lock, staging tables, switch-over, the rebuilds audit)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import psycopg
from psycopg.rows import dict_row

from worker.store.connection import scalar
from worker.store.events import OUTBOX_CHANNEL, rating_changed_json
from worker.store.ladders import LADDER_LOCK_CLASS, LadderRecord

REBUILD_LOCK_CLASS = 7_402
"""First key of the session advisory lock a rebuild holds on its ladder from start to end
(``pg_try_advisory_lock(REBUILD_LOCK_CLASS, hashtext(ladder))``): one rebuild per ladder."""

REBUILD_HISTORY_COPY = (
    "COPY rating_changes (ledger_seq, match_id, ladder, player_id, sequence, rating_before, rating_after, "
    "expected_score, actual_score, k_factor, result, event_id, occurred_at, generation, policy_version, "
    "peak_before, season_before, deviation_before, deviation_after, volatility_before, volatility_after, "
    "prior_deviation, prior_last_played) FROM STDIN"
)
"""COPY statement for a rebuild's history rows (the column order of ``worker.ops.rebuild.history_row``)."""



def try_rebuild_lock(conn: psycopg.Connection, ladder: str) -> bool:
    """Take the ladder's rebuild lock for this session; False when another session holds it."""
    return scalar(conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (REBUILD_LOCK_CLASS, ladder)))


def lock_ladder_exclusively(conn: psycopg.Connection, ladder: str) -> None:
    """Take the ladder's advisory lock in exclusive mode until the end of the transaction: wait for
    every rating transaction of the ladder in flight, and hold new ones off. Raises
    ``psycopg.errors.LockNotAvailable`` past the session's ``lock_timeout``."""
    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LADDER_LOCK_CLASS, ladder))


def start_rebuild(conn: psycopg.Connection, ladder: str, requested_by: str, order: str, policy_version: str,
                  previous: LadderRecord | None) -> int:
    """Close the ladder's rebuilds whose process ended (``running``: failed, nothing changed;
    ``switched``: done, ledger stamping unfinished), insert a ``running`` row; return its id.
    Call it holding the ladder's rebuild lock."""
    conn.execute(
        """UPDATE rebuilds SET status = CASE status WHEN 'running' THEN 'failed' ELSE 'done' END,
                  finished_at = now(),
                  error = coalesce(error, CASE status
                      WHEN 'running' THEN 'abandoned: its process ended before the switch-over; nothing was changed'
                      ELSE 'its process ended after the switch-over, before stamping every ledger row' END)
            WHERE ladder = %s AND status IN ('running', 'switched')""",
        (ladder,),
    )
    return scalar(conn.execute(
        """INSERT INTO rebuilds (ladder, requested_by, apply_order, policy_version, previous_policy_version,
                                 previous_generation)
           VALUES (%s, %s, %s, %s, %s, %s) RETURNING id""",
        (ladder, requested_by, order, policy_version, previous.policy_version if previous else None,
         previous.generation if previous else 0),
    ))


def fail_rebuild(conn: psycopg.Connection, rebuild_id: int, error: str) -> None:
    """Record ``error`` on a rebuild; a ``running`` one becomes ``failed`` (a switched one stays)."""
    conn.execute(
        """UPDATE rebuilds SET status = CASE status WHEN 'running' THEN 'failed' ELSE status END,
                  finished_at = now(), error = %s WHERE id = %s""",
        (error[:2000], rebuild_id),
    )


def ledger_last_seq(conn: psycopg.Connection, ladder: str) -> int:
    """The highest ``seq`` of the ladder's ledger (0 when empty): one index probe."""
    return scalar(conn.execute("SELECT coalesce(max(seq), 0) FROM ledger WHERE ladder = %s", (ladder,)))


def ledger_count(conn: psycopg.Connection, ladder: str, up_to_seq: int) -> int:
    """How many rows of the ladder's ledger have ``seq <= up_to_seq``."""
    return scalar(conn.execute("SELECT count(*) FROM ledger WHERE ladder = %s AND seq <= %s AND NOT annulled",
                               (ladder, up_to_seq)))


def ledger_rows_after(conn: psycopg.Connection, ladder: str, after_seq: int,
                      up_to_seq: int | None = None) -> list[tuple[int, dict[str, Any]]]:
    """``(seq, payload)`` of the ladder's ledger rows with ``after_seq < seq <= up_to_seq`` (no upper
    bound when ``None``), by ``seq``."""
    return conn.execute(
        """SELECT seq, payload FROM ledger
            WHERE ladder = %s AND seq > %s AND (%s::bigint IS NULL OR seq <= %s) AND NOT annulled ORDER BY seq""",
        (ladder, after_seq, up_to_seq, up_to_seq),
    ).fetchall()


REBUILD_STAGING_COLUMNS = ("player_id", "rating", "games_played", "wins", "draws", "losses", "peak_rating", "season",
                           "event_id", "last_match_id", "expected_score", "actual_score", "k_factor", "deviation",
                           "volatility", "last_played")


"""Columns of the temporary ``rebuild_players`` table: a player's replayed standing, the id of the
``rebuild`` event that would announce a change, and the player's last match in the new history."""
def create_rebuild_staging(conn: psycopg.Connection) -> None:
    """The temporary table ``rebuild_players`` (dropped at commit) for a rebuild's new standings."""
    conn.execute(
        """CREATE TEMP TABLE rebuild_players (
               player_id text PRIMARY KEY, rating double precision NOT NULL, games_played integer NOT NULL,
               wins integer NOT NULL, draws integer NOT NULL, losses integer NOT NULL,
               peak_rating double precision NOT NULL, season text,
               event_id uuid NOT NULL, last_match_id text NOT NULL, expected_score double precision NOT NULL,
               actual_score double precision NOT NULL, k_factor double precision NOT NULL,
               deviation double precision, volatility double precision, last_played double precision) ON COMMIT DROP"""
    )


def stage_players(conn: psycopg.Connection, rows: Sequence[tuple], upsert: bool = False) -> None:
    """Write rows of :data:`REBUILD_STAGING_COLUMNS` into ``rebuild_players``: COPY, or ``upsert``
    over rows already staged."""
    columns = ", ".join(REBUILD_STAGING_COLUMNS)
    if not upsert:
        with conn.cursor().copy(f"COPY rebuild_players ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        return
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in REBUILD_STAGING_COLUMNS[1:])
    conn.cursor().executemany(
        f"""INSERT INTO rebuild_players ({columns}) VALUES ({", ".join(["%s"] * len(REBUILD_STAGING_COLUMNS))})
            ON CONFLICT (player_id) DO UPDATE SET {updates}""",
        rows,
    )


def switch_players(conn: psycopg.Connection, ladder: str, occurred_at: datetime) -> tuple[int, int]:
    """The swap: write the staged standings over the ladder's ``players`` rows that differ (one
    statement), and put one ``rebuild`` rating-changed event in the outbox for each player whose
    rating changed, built as :class:`schemas.RatingChanged` and validated
    (:func:`worker.store.events.rating_changed_json`): ``rating_before`` the stored rating, the
    player's next event sequence, ``match_id``/``expected_score``/``actual_score``/``k_factor`` of
    the player's last match in the new history; wake the relay. Returns ``(rows written, events)``.
    Call it holding the ladder's exclusive lock (the old values are read in the same statement).
    Raises :class:`pydantic.ValidationError` if an event breaks the contract (the caller's
    transaction then rolls back).
    """
    rows = conn.execute(
        """
        WITH written AS (
            UPDATE players p
               SET rating = n.rating, games_played = n.games_played, wins = n.wins, draws = n.draws,
                   losses = n.losses, peak_rating = n.peak_rating, season = n.season,
                   rebuild_events = p.rebuild_events + (n.rating <> o.rating)::int, updated_at = now(),
                   last_order_at = lo.order_at, last_order_match = n.last_match_id,
                   deviation = n.deviation, volatility = n.volatility, last_played = n.last_played
              FROM rebuild_players n JOIN ledger lo ON lo.match_id = n.last_match_id, players o
             WHERE p.ladder = %(ladder)s AND p.player_id = n.player_id
               AND o.ladder = p.ladder AND o.player_id = p.player_id
               AND (o.rating, o.games_played, o.wins, o.draws, o.losses, o.peak_rating, o.season,
                    o.last_order_match, o.deviation, o.volatility, o.last_played)
                   IS DISTINCT FROM (n.rating, n.games_played, n.wins, n.draws, n.losses, n.peak_rating, n.season,
                                     n.last_match_id, n.deviation, n.volatility, n.last_played)
            RETURNING p.player_id, o.rating AS rating_before, p.rating AS rating_after, p.games_played,
                      p.games_played + p.rebuild_events AS sequence
        )
        SELECT w.player_id, w.rating_before, w.rating_after, w.games_played, w.sequence,
               n.event_id, n.last_match_id, n.expected_score, n.actual_score, n.k_factor, n.deviation, n.volatility
          FROM written w JOIN rebuild_players n USING (player_id)
         ORDER BY w.player_id COLLATE "C"
        """,
        {"ladder": ladder},
    ).fetchall()
    occurred = occurred_at.isoformat()
    events = [
        {"schema_version": 1, "event_id": str(r.event_id), "reason": "rebuild", "match_id": r.last_match_id,
         "ladder": ladder, "player_id": r.player_id, "rating_before": r.rating_before, "rating_after": r.rating_after,
         "delta": r.rating_after - r.rating_before, "expected_score": r.expected_score,
         "actual_score": r.actual_score, "k_factor": r.k_factor, "sequence": r.sequence,
         "games_played": r.games_played, "out_of_order": False, "occurred_at": occurred,
         # a model with uncertainty's stored state after the rebuild (absent on Elo ladders)
         **({} if r.deviation is None else {"deviation_after": r.deviation}),
         **({} if r.volatility is None else {"volatility_after": r.volatility})}
        for r in map(_WrittenRow._make, rows) if r.rating_before != r.rating_after
    ]
    if events:
        payloads = rating_changed_json(events)
        with conn.cursor().copy("COPY outbox (event_id, payload) FROM STDIN") as copy:
            for event, payload in zip(events, payloads):
                copy.write_row((event["event_id"], payload))
        conn.execute("SELECT pg_notify(%s, '')", (OUTBOX_CHANNEL,))
    return len(rows), len(events)


class _WrittenRow(NamedTuple):
    """A player row a rebuild's switch-over changed, with its rebuild event's fields."""

    player_id: str
    rating_before: float
    rating_after: float
    games_played: int
    sequence: int
    event_id: Any
    last_match_id: str
    expected_score: float
    actual_score: float
    k_factor: float
    deviation: float | None
    volatility: float | None


def stamp_ledger(conn: psycopg.Connection, ladder: str, version: str, after_seq: int,
                 up_to_seq: int | None = None) -> int:
    """Set ``policy_version`` on the ladder's ledger rows with ``after_seq < seq <= up_to_seq``
    (no upper bound when ``None``) that name another version; return how many."""
    return conn.execute(
        """UPDATE ledger SET policy_version = %(version)s
            WHERE ladder = %(ladder)s AND seq > %(low)s AND (%(high)s::bigint IS NULL OR seq <= %(high)s)
              AND policy_version IS DISTINCT FROM %(version)s""",
        {"version": version, "ladder": ladder, "low": after_seq, "high": up_to_seq},
    ).rowcount


def set_ladder_record(conn: psycopg.Connection, ladder: str, version: str, generation: int, order: str,
                      boundary: int | None) -> None:
    """Make ``version``, ``generation`` and the replay order current for ``ladder`` (the switch)."""
    conn.execute(
        """
        INSERT INTO ladders (ladder, policy_version, generation, apply_order, order_boundary)
        VALUES (%(ladder)s, %(version)s, %(generation)s, %(order)s, %(boundary)s)
        ON CONFLICT (ladder) DO UPDATE SET policy_version = EXCLUDED.policy_version,
            generation = EXCLUDED.generation, apply_order = EXCLUDED.apply_order,
            order_boundary = EXCLUDED.order_boundary, updated_at = now()
        """,
        {"ladder": ladder, "version": version, "generation": generation, "order": order, "boundary": boundary},
    )


def update_rebuild(conn: psycopg.Connection, rebuild_id: int, **fields: Any) -> None:
    """Set columns of a ``rebuilds`` row; ``status='switched'`` or ``'done'`` also stamps its time."""
    allowed = {"status", "snapshot_seq", "matches_replayed", "catch_up_matches", "players", "players_changed",
               "events_emitted", "ledger_rows_stamped", "lock_wait_seconds", "lock_held_seconds", "duration_seconds"}
    unknown = set(fields) - allowed
    if unknown:
        raise ValueError(f"not a rebuilds column: {sorted(unknown)}")
    sets = [f"{name} = %({name})s" for name in fields]
    if fields.get("status") == "switched":
        sets.append("switched_at = now()")
    if fields.get("status") == "done":
        sets.append("finished_at = now()")
    conn.execute(f"UPDATE rebuilds SET {', '.join(sets)} WHERE id = %(id)s", {**fields, "id": rebuild_id})


def rebuilds(conn: psycopg.Connection, ladder: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
    """The latest rows of ``rebuilds`` (newest first), of ``ladder`` or of every ladder."""
    return conn.cursor(row_factory=dict_row).execute(
        """SELECT * FROM rebuilds WHERE (%(ladder)s::text IS NULL OR ladder = %(ladder)s)
            ORDER BY id DESC LIMIT %(limit)s""",
        {"ladder": ladder, "limit": limit},
    ).fetchall()
