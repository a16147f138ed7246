"""Development tools: the SQL of the benchmark (``ratings bench``): scratch databases, table resets, a synthetic
ledger, vacuum, the observer's queries and the locked run's held rows.

SQL lives in the store and, for the benchmark only, here: the production wheel does not ship this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
from psycopg import sql

from worker.store.connection import scalar

SERVICE_TABLES = ("ledger", "players", "rating_changes", "outbox", "outbox_pending", "duplicate_deliveries",
                  "dead_letters", "player_lock_waits", "corrections")
"""The tables a benchmark run empties between runs."""

_SYNTHETIC_LEDGER = """
INSERT INTO ledger (match_id, ladder, payload_hash, payload, finished_at, order_at)
SELECT id, 'elo', md5(id), jsonb_build_object(
           'schema_version', 1, 'match_id', id, 'ladder', 'elo',
           'finished_at', to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
           'side_a', jsonb_build_object('players', jsonb_build_array(
               jsonb_build_object('player_id', 'pl' || lpad(a::text, 6, '0'), 'stats', NULL))),
           'side_b', jsonb_build_object('players', jsonb_build_array(
               jsonb_build_object('player_id', 'pl' || lpad(((a + 1 + d) %% %(players)s::int)::text, 6, '0'),
                                  'stats', NULL))),
           'outcome', CASE WHEN o < 0.45 THEN 'side_a_won' WHEN o < 0.9 THEN 'side_b_won' ELSE 'draw' END),
       ts, ts
  FROM (SELECT 'bench-ledger-' || g AS id,
               floor(random() * %(players)s::int)::int AS a,
               floor(random() * (%(players)s::int - 1))::int AS d,
               random() AS o,
               timestamptz '2020-01-01 00:00:00+00' + g * interval '1 minute' AS ts
          FROM generate_series(%(first)s::int, %(last)s::int) AS g) AS s
 ORDER BY ts
"""


def create_database(conn: psycopg.Connection, name: str) -> str:
    """``CREATE DATABASE name`` (``conn`` in autocommit); return the server's version string."""
    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    row = conn.execute("SHOW server_version").fetchone()
    return row[0] if row else ""


def drop_database(conn: psycopg.Connection, name: str) -> None:
    """``DROP DATABASE IF EXISTS name WITH (FORCE)`` (``conn`` in autocommit)."""
    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def ping(conn: psycopg.Connection) -> None:
    """``SELECT 1``: opens the session's backend (a memory baseline before measuring)."""
    conn.execute("SELECT 1")


def truncate_service_tables(conn: psycopg.Connection) -> None:
    """Empty :data:`SERVICE_TABLES` and restart their sequences."""
    conn.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
        sql.SQL(", ").join(sql.Identifier(t) for t in SERVICE_TABLES)))


def vacuum_analyze_rating_tables(conn: psycopg.Connection) -> None:
    """``VACUUM (ANALYZE)`` of the tables the rating transaction writes (``conn`` in autocommit)."""
    conn.execute("VACUUM (ANALYZE) players, ledger, outbox, rating_changes")


def autovacuum_on(conn: psycopg.Connection) -> bool:
    """Is the server's autovacuum on?"""
    row = conn.execute("SHOW autovacuum").fetchone()
    return bool(row and row[0] == "on")


def commit_times(conn: psycopg.Connection) -> dict[str, float]:
    """Mapping of match id to the time its rating changes were committed (Unix seconds, the latest
    ``occurred_at`` of its rows)."""
    return dict(conn.execute(
        "SELECT match_id, extract(epoch FROM max(occurred_at))::float8 FROM rating_changes GROUP BY match_id"
    ).fetchall())


def seed_random(conn: psycopg.Connection, seed: float) -> None:
    """``setseed(seed)`` for the session's ``random()`` (``seed`` in [-1, 1])."""
    conn.execute("SELECT setseed(%s)", (seed,))


def write_synthetic_ledger(conn: psycopg.Connection, players: int, first: int, last: int) -> None:
    """Insert 1v1 ``elo`` matches ``bench-ledger-<first>`` .. ``bench-ledger-<last>`` between ``players``
    random players (45 % side A wins, 45 % side B, 10 % draws; one minute apart from 2020-01-01),
    then ``VACUUM ANALYZE ledger``."""
    conn.execute(_SYNTHETIC_LEDGER, {"players": players, "first": first, "last": last})
    conn.execute("VACUUM ANALYZE ledger")


def ledger_last_seq(conn: psycopg.Connection) -> int:
    """The highest ``seq`` of the ledger (0 when empty)."""
    row = conn.execute("SELECT coalesce(max(seq), 0) FROM ledger").fetchone()
    return row[0] if row else 0


def iter_payloads_between(conn: psycopg.Connection, ladder: str, after_seq: int, last_seq: int,
                          batch_size: int = 5000) -> Iterator[dict[str, Any]]:
    """Stream the ladder's ledger payloads with ``after_seq < seq <= last_seq`` in ``seq`` order
    (server-side cursor, in a transaction of its own)."""
    with conn.transaction(), conn.cursor(name="bench_new_rows") as cur:
        cur.itersize = batch_size
        cur.execute("SELECT payload FROM ledger WHERE ladder = %s AND seq > %s AND seq <= %s ORDER BY seq",
                    (ladder, after_seq, last_seq))
        for (payload,) in cur:
            yield payload


def replace_players(conn: psycopg.Connection, ladder: str, standings: Mapping[str, tuple[float, int]]) -> None:
    """Replace the ladder's ``players`` rows by ``standings`` (player id to (rating, games played);
    the peak rating is set to the rating), in one transaction (``COPY``)."""
    with conn.transaction():
        conn.execute("DELETE FROM players WHERE ladder = %s", (ladder,))
        with conn.cursor().copy(
            "COPY players (ladder, player_id, rating, peak_rating, games_played) FROM STDIN"
        ) as copy:
            for pid, (rating, games) in standings.items():
                copy.write_row((ladder, pid, rating, rating, games))


def ledger_table_mib(conn: psycopg.Connection) -> float:
    """Size of the ``ledger`` table with its indexes and TOAST, in MiB."""
    row = conn.execute("SELECT pg_total_relation_size('ledger')").fetchone()
    return (row[0] if row else 0) / 2**20


BENCH_VACUUM_APPLICATION = "ratings-bench-vacuum"
"""``application_name`` of the bench's own ``VACUUM (ANALYZE)`` session (left out of the service's CPU)."""

BENCH_OBSERVER_APPLICATION = "ratings-bench-observer"
"""``application_name`` of the bench's backend-activity sampler (left out of the service's CPU and
of the samples)."""


_STATEMENT_LABELS = (
    (re.compile(r"outbox_pending"), "take unpublished events (relay)"),  # before FOR UPDATE: it has one too
    (re.compile(r"INSERT INTO players\b"), "create new player rows (rating transaction)"),
    (re.compile(r"FOR UPDATE"), "lock player rows (rating transaction)"),
    (re.compile(r"INSERT INTO ledger\b"), "write ledger, history, outbox, players (rating transaction)"),
    (re.compile(r"coalesce\(l\.player_ids"), "read later matches' players (correction)"),
    (re.compile(r"CROSS JOIN LATERAL \(SELECT \* FROM rating_changes"), "read later matches' rows (correction)"),
    (re.compile(r"pg_advisory_xact_lock_shared"), "ladder lock (rating transaction)"),
    (re.compile(r"set_config\(n, v, true\)"), "settings and ledger lookup (rating transaction)"),
    (re.compile(r"^\s*COMMIT\b", re.IGNORECASE), "COMMIT"),
)


def statement_label(query: str) -> str:
    """A short name for a statement of the service (the rating transaction's steps, the relay's
    batch, COMMIT), else its first 40 characters with whitespace collapsed."""
    for pattern, label in _STATEMENT_LABELS:
        if pattern.search(query):
            return label
    return " ".join(query.split())[:40]


def active_backends(conn: psycopg.Connection) -> list[tuple[str, str]]:
    """What each client backend of this connection's database is doing now, for the bench's sampler:
    ``(wait, query)`` per backend running a statement (``state = 'active'``), ``wait`` as
    ``wait_event_type:wait_event`` or ``"running"`` (on a CPU or runnable), ``query`` the statement's
    text (``pg_stat_activity``; this session, the bench's vacuum and observer sessions left out)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return conn.execute(
        "SELECT coalesce(wait_event_type || ':' || wait_event, 'running'), query FROM pg_stat_activity "
        "WHERE datname = current_database() AND backend_type = 'client backend' AND state = 'active' "
        "AND pid <> pg_backend_pid() AND application_name NOT IN (%s, %s)",
        (BENCH_VACUUM_APPLICATION, BENCH_OBSERVER_APPLICATION)).fetchall()


def lock_chain_heads(conn: psycopg.Connection) -> list[tuple[str, str]]:
    """The heads of this database's lock waits now, for the bench's sampler: ``(state, query)`` of
    each backend that holds a lock another backend waits for (``pg_blocking_pids``) and waits for
    no lock itself, once each; ``state`` as ``pg_stat_activity.state``, an active one's wait event
    after it (``"idle in transaction"``: its client is working, or waiting, between two statements), ``query``
    its current or last statement. An empty list while backends wait means each one they wait for
    waits too: a cycle, or a chain caught mid-hand-over. ``pg_blocking_pids`` takes the lock
    manager's partition locks: call it only when backends wait."""
    return conn.execute(
        "SELECT b.state || CASE WHEN b.state = 'active' THEN coalesce(' ' || b.wait_event_type || ':' "
        "|| b.wait_event, '') ELSE '' END, b.query "
        "FROM pg_stat_activity b WHERE b.pid IN (SELECT unnest(pg_blocking_pids(a.pid)) FROM pg_stat_activity a "
        "WHERE a.datname = current_database() AND a.wait_event_type = 'Lock') "
        "AND b.wait_event_type IS DISTINCT FROM 'Lock'").fetchall()


def server_process_ids(conn: psycopg.Connection) -> tuple[list[int], list[int], list[int]]:
    """(backends connected to this connection's database other than this session's own, the bench's
    vacuum session and its activity sampler, the server's background processes: WAL writer, checkpointer,
    autovacuum..., the bench's vacuum session) as process ids (``pg_stat_activity``), for the bench's
    CPU accounting."""
    rows = conn.execute(
        "SELECT pid, backend_type, datname = current_database(), application_name FROM pg_stat_activity "
        "WHERE pid <> pg_backend_pid()").fetchall()
    backends = [pid for pid, kind, ours, app in rows if kind == "client backend" and ours
                and app not in (BENCH_VACUUM_APPLICATION, BENCH_OBSERVER_APPLICATION)]
    background = [pid for pid, kind, _, _ in rows if kind not in ("client backend", "walsender")]
    vacuums = [pid for pid, kind, ours, app in rows if kind == "client backend" and ours
               and app == BENCH_VACUUM_APPLICATION]
    return backends, background, vacuums


def rating_transactions(conn: psycopg.Connection) -> int:
    """The committed transactions that wrote the ledger's rows: distinct ``xmin`` (the id of the
    transaction that inserted a row, outside any savepoint; a redelivery's ``UPDATE`` of the
    ``redeliveries`` count gives a row a new one), so ledger rows / this = matches applied per
    rating transaction (the batches' mean size)."""
    row = conn.execute("SELECT count(DISTINCT xmin::text) FROM ledger").fetchone()
    return int(row[0]) if row else 0


def lock_wait_figures(conn: psycopg.Connection) -> dict[str, float]:
    """What waiting for player rows another transaction held cost the run (``player_lock_waits``:
    one row per player row a rating transaction could not lock at once, every row of the ladder's
    batch when the ladder's queue lock was held or awaited exclusively, all written by that
    transaction, outside any savepoint, with the wait it recorded): ``busy_rows``,
    ``waiting_transactions`` (distinct ``xmin``), ``waited_seconds`` (the transactions' recorded
    waits summed, each counted once), ``deferred_matches`` (summed over the rows: a match deferred
    for two players counts twice)."""
    row = conn.execute(
        """SELECT coalesce(sum(n), 0), count(*), coalesce(sum(w), 0) / 1000, coalesce(sum(d), 0)
             FROM (SELECT count(*) AS n, max(waited_ms) AS w, sum(deferred_matches) AS d
                     FROM player_lock_waits GROUP BY xmin::text) AS t""").fetchone()
    rows, transactions, seconds, deferred = row if row else (0, 0, 0.0, 0)
    return {"busy_rows": int(rows), "waiting_transactions": int(transactions),
            "waited_seconds": round(float(seconds), 3), "deferred_matches": int(deferred)}


def correction_figures(conn: psycopg.Connection) -> dict[str, int]:
    """What the late matches of a run cost: ``late_matches`` (``ledger.out_of_order``),
    ``placed_at_end``, ``corrections``, ``matches_rerated`` in all and the ``largest_correction``."""
    row = conn.execute("SELECT count(*) FILTER (WHERE out_of_order), count(*) FILTER (WHERE placed_at_end) "
                       "FROM ledger").fetchone()
    late, at_end = row if row else (0, 0)
    row = conn.execute("SELECT count(*), coalesce(sum(matches_rerated), 0), coalesce(max(matches_rerated), 0) "
                       "FROM corrections").fetchone()
    made, rerated, largest = row if row else (0, 0, 0)
    return {"late_matches": int(late), "placed_at_end": int(at_end), "corrections": int(made),
            "matches_rerated": int(rerated), "largest_correction": int(largest)}


# -- the locked run (worker/devtools/bench/hot_lock.py)

def hold_player_rows(conn: psycopg.Connection, player_id: str) -> int:
    """Lock every ladder's row of ``player_id`` ``FOR UPDATE`` in ``conn``'s open transaction (not
    autocommit), as a stuck session would; returns how many rows. Released when it ends."""
    return int(scalar(conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM players WHERE player_id = %s FOR UPDATE) AS l", (player_id,))))


def applied_with_prefix(conn: psycopg.Connection, prefix: str) -> int:
    """Matches in the ledger whose id starts with ``prefix``."""
    return int(scalar(conn.execute("SELECT count(*) FROM ledger WHERE match_id LIKE %s", (prefix + "%",))))


def lock_waits_of(conn: psycopg.Connection, player_id: str) -> tuple[int, int]:
    """(matches deferred, waits) recorded in ``player_lock_waits`` for ``player_id``, every ladder."""
    row = conn.execute("SELECT coalesce(sum(deferred_matches), 0), count(*) FROM player_lock_waits "
                       "WHERE player_id = %s", (player_id,)).fetchone()
    return (int(row[0]), int(row[1])) if row is not None else (0, 0)


def applied_on_ladder(conn: psycopg.Connection, ladder: str) -> int:
    """Matches in the ledger on ``ladder``."""
    return int(scalar(conn.execute("SELECT count(*) FROM ledger WHERE ladder = %s", (ladder,))))
