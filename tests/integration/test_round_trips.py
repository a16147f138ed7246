"""The rating transaction's round trips (``docs/decisions/0007-throughput-by-batching-one-transaction.md``): a fixed number per transaction, whatever the
batch size, and the one write statement's race with a concurrent delivery of the same match id.

Round trips are counted from libpq's own trace of the frontend messages: each ``Query`` (simple
protocol: BEGIN, SAVEPOINT, COMMIT) and each ``Sync`` (the end of an extended-protocol statement)
is one exchange with the server."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import pq

from worker import store as repository
from worker.bootstrap import load_ladder_policies
from worker.outcome import Outcome
from worker.settings import get_settings

from .test_chronological import elo_entry, elo_message

LIMITS = repository.TransactionTimeouts(5000, 30000, tcp_keepalives_idle_s=30, tcp_keepalives_interval_s=5,
                                        tcp_keepalives_count=3)


def entry(mid: str, a: str, b: str, hour: int, ladders) -> repository.BatchMatch:
    """Elo 1v1, ``a`` beats ``b`` at ``hour``:00, validated as the worker does (test_chronological's builders)."""
    return elo_entry(elo_message(mid, a, b, hour), ladders)


def round_trips(conn: psycopg.Connection, trace: Path, batch: list[repository.BatchMatch]) -> int:
    """Apply ``batch`` on ``conn`` with libpq tracing to ``trace``; the frontend's Query and Sync
    messages sent meanwhile."""
    with trace.open("w") as out:
        conn.pgconn.trace(out.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            results, _ = repository.apply_batch(conn, batch, timeouts=LIMITS)
        finally:
            conn.pgconn.untrace()
    assert [r.outcome for r in results] == [Outcome.APPLIED] * len(batch)
    messages = [line.split("\t")[2] for line in trace.read_text().splitlines() if line.startswith("F\t")]
    return sum(1 for m in messages if m in ("Query", "Sync"))


def test_a_rating_transaction_takes_ten_round_trips_whatever_its_batch_size(clean, tmp_path):
    """A batch applied without waiting for a lock: BEGIN, the SET LOCALs with the ledger lookup,
    the ladder's shared lock, the ladder rows, the player rows, the player locks in a savepoint
    (SAVEPOINT, one statement, RELEASE), the one write statement, COMMIT: 10, for 1 match as for
    50 (it was 16 for one match, and a statement per ladder more), once the ladder has its row (the
    first transaction of a ladder records its policy: 3 more)."""
    ladders = load_ladder_policies(get_settings())
    with psycopg.connect(clean.database_url, autocommit=True) as conn:
        assert round_trips(conn, tmp_path / "first.trace", [entry("rt-0", "cid", "dan", 0, ladders)]) == 13
        one = round_trips(conn, tmp_path / "one.trace", [entry("rt-1", "ann", "ben", 0, ladders)])
        many = round_trips(conn, tmp_path / "many.trace",
                           [entry(f"rt-{n}", f"p{n}", f"q{n}", n % 24, ladders) for n in range(2, 52)])
        assert conn.execute("SELECT count(*) FROM rating_changes").fetchone()[0] == 2 * 52
        assert conn.execute("SELECT count(*) FROM outbox").fetchone()[0] == 2 * 52
    assert (one, many) == (10, 10)


@pytest.mark.parametrize("players", [("cid", "dan"), ("ann", "ben")], ids=["another-payload", "same-payload"])
def test_a_match_id_committed_meanwhile_rolls_the_whole_batch_back_as_a_ledger_race(clean, players):
    """Transaction A applies ``race-1`` (ann beats ben) and pauses before its commit; transaction
    B, which looked the ledger up before A committed, applies ``race-1`` (another payload with
    other players, or the same payload) and ``race-2``, and waits for A's transaction (its ledger
    row, or the player rows it created). Once A commits, B's one write statement skips ``race-1``
    and, with it, its history and outbox rows (the same payload's event ids are A's): B raises
    :class:`LedgerRace` and writes nothing (no ``race-2``, no player row of B's), so the batch can
    be classified again."""
    ladders = load_ladder_policies(get_settings())
    paused, release = threading.Event(), threading.Event()

    def before_commit() -> None:
        paused.set()
        assert release.wait(30)

    def a() -> None:
        with psycopg.connect(clean.database_url, autocommit=True) as conn:
            repository.apply_batch(conn, [entry("race-1", "ann", "ben", 1, ladders)], before_commit, LIMITS)

    first = threading.Thread(target=a)
    first.start()
    assert paused.wait(30)
    raised: list[BaseException] = []

    def b() -> None:
        try:
            with psycopg.connect(clean.database_url, autocommit=True) as conn:
                repository.apply_batch(conn, [entry("race-1", *players, 1, ladders),
                                              entry("race-2", "eve", "fay", 2, ladders)], timeouts=LIMITS)
        except BaseException as exc:  # noqa: BLE001 - the assertion below names what was expected
            raised.append(exc)

    second = threading.Thread(target=b)
    second.start()
    with psycopg.connect(clean.direct_database_url, autocommit=True) as watch:
        for _ in range(300):  # B waits for A's transaction (its ledger row, or its new player rows)
            if watch.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                             "AND wait_event_type = 'Lock' AND wait_event = 'transactionid'").fetchone()[0]:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("transaction B never waited for A's transaction")
    release.set()
    first.join(30)
    second.join(30)
    assert len(raised) == 1 and isinstance(raised[0], repository.LedgerRace), raised
    with psycopg.connect(clean.database_url, autocommit=True) as conn:
        assert conn.execute("SELECT match_id FROM ledger ORDER BY match_id").fetchall() == [("race-1",)]
        assert conn.execute("SELECT DISTINCT match_id FROM rating_changes").fetchall() == [("race-1",)]
        assert conn.execute("SELECT count(*) FROM outbox").fetchone()[0] == 2
        assert conn.execute("SELECT player_id FROM players ORDER BY player_id").fetchall() == [("ann",), ("ben",)]


@pytest.mark.parametrize("stored_players", [5_000, 40_000])
def test_the_rating_transaction_finds_its_rows_by_index_whatever_the_planners_statistics(clean, stored_players):
    """A batch of 100 matches among stored players (and 20 new ones; a few late, so corrections run
    too) reads none of the ``players`` table sequentially, with fresh statistics or none (a server's
    autovacuum may analyze the table first: then both passes have statistics). Left to its
    estimates, the planner hashed the whole ``players`` table (its ``UPDATE ... FROM unnest`` and
    the creation of new player rows) while the table was small against a batch: in a bench run,
    510 scans reading 7 million rows for 20,000 matches (``worker.store.transaction.KEYED_PLANS``)."""
    ladders = load_ladder_policies(get_settings())
    with psycopg.connect(clean.database_url, autocommit=True) as conn:
        repository.apply_batch(conn, [entry("plan-0", "s0", "s1", 0, ladders)], timeouts=LIMITS)
        conn.execute("INSERT INTO players (ladder, player_id, rating, peak_rating) "
                     "SELECT 'elo', 's' || n, 1500, 1500 FROM generate_series(2, %s) AS n", (stored_players - 1,))
        for analyzed in (False, True):
            if analyzed:
                conn.execute("ANALYZE players, ledger, rating_changes, outbox, outbox_pending")
            batch = [entry(f"plan-{analyzed}-{n}", f"s{n * 37 % stored_players}", f"new-{analyzed}-{n}"
                           if n % 5 == 0 else f"s{(n * 91 + 7) % stored_players}", n % 24, ladders)
                     for n in range(100)]
            scans: list[int] = []

            def before_commit(scans: list[int] = scans) -> None:  # inside the transaction: its own counts
                scans.append(conn.execute("SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_xact_user_tables "
                                          "WHERE relname = 'players'").fetchone()[0])

            results, _ = repository.apply_batch(conn, batch, before_commit, timeouts=LIMITS)
            assert [r.outcome for r in results] == [Outcome.APPLIED] * 100  # late ones among them
            assert scans == [0], f"analyzed={analyzed}"


def test_prepared_statements_planned_on_small_tables_keep_finding_rows_by_index_as_they_grow(clean):
    """A worker whose connections prepare their statements (``prepare_threshold=0``) runs the rating
    transaction's statements with generic plans, made at a statement's first execution and kept until
    the tables' statistics change. Planned here while ``players`` and ``ledger`` held a few rows,
    analyzed at that size and never after (a server whose autovacuum is off), the plans must still
    look rows up by index once 40,000 players are stored: a batch of 100 reads none of ``players``
    sequentially.
    Without ``enable_seqscan`` off (``worker.store.transaction.KEYED_PLANS``) the kept plans read
    it whole. (The first statement, the ledger lookup, is never prepared: it is planned under the
    session's settings, for the ledger as it is.)"""
    ladders = load_ladder_policies(get_settings())
    with psycopg.connect(clean.direct_database_url, autocommit=True, prepare_threshold=0) as conn:
        repository.apply_batch(conn, [entry("gen-0", "g0", "g1", 0, ladders)], timeouts=LIMITS)
        conn.execute("ANALYZE players, ledger")  # statistics of a small ladder, never updated after
        for n in range(1, 3):
            repository.apply_batch(conn, [entry(f"gen-{n}", f"g{n}", f"g{n + 1}", n, ladders)], timeouts=LIMITS)
        prepared = conn.execute("SELECT count(*) FROM pg_prepared_statements WHERE generic_plans > 0").fetchone()[0]
        assert prepared >= 5  # the transaction's statements, planned generically once
        conn.execute("INSERT INTO players (ladder, player_id, rating, peak_rating) "
                     "SELECT 'elo', 's' || n, 1500, 1500 FROM generate_series(1, 40000) AS n")
        batch = [entry(f"gen-b{n}", f"s{n * 37 % 40000 + 1}", f"new{n}" if n % 5 == 0 else f"s{n * 91 % 40000 + 1}",
                       n % 24, ladders) for n in range(100)]
        scans: list[tuple] = []

        def before_commit() -> None:  # inside the transaction: its own counts
            scans.append(conn.execute("SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_xact_user_tables "
                                      "WHERE relname = 'players'").fetchone())

        results, _ = repository.apply_batch(conn, batch, before_commit, timeouts=LIMITS)
        assert [r.outcome for r in results] == [Outcome.APPLIED] * 100
        assert scans == [(0,)]
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements WHERE generic_plans > 1").fetchone()[0] >= 5


def rescanned_relations(plan: dict) -> list[str]:
    """Nodes of an ``EXPLAIN (FORMAT JSON)`` plan that a nested loop rescans once per outer row
    without an index: the inner side of a ``Nested Loop`` whose outer side brings more than one row,
    holding no index scan and itself more than one row (a CTE, an ``unnest``, a table read whole)."""
    found: list[str] = []
    children = plan.get("Plans", [])
    if plan["Node Type"] == "Nested Loop":
        outer = next(c for c in children if c["Parent Relationship"] == "Outer")
        inner = next(c for c in children if c["Parent Relationship"] == "Inner")

        def nodes(p: dict) -> list[dict]:
            return [p] + [n for c in p.get("Plans", []) for n in nodes(c)]

        if outer["Plan Rows"] > 1 and inner["Plan Rows"] > 1 and not any(
                "Index" in n["Node Type"] for n in nodes(inner)):
            found.append(" / ".join(f"{n['Node Type']} {n.get('Relation Name') or n.get('CTE Name') or ''}".strip()
                                    for n in nodes(inner)))
    for child in children:
        found += rescanned_relations(child)
    return found


def test_no_statement_of_the_rating_transaction_rescans_a_relation_per_row(clean):
    """Every statement a rating transaction runs (a batch of 100 with new players and late matches,
    so the corrections' statements run too; 20,000 players stored, analyzed), planned again with
    the transaction's settings and the same parameters: no nested loop rescans a relation without
    an index once per row. With hash joins off (``KEYED_PLANS``) a join to the write statement's
    ``INSERT ... RETURNING`` became such a loop over the batch's ledger rows, per history row (340
    to 360 ms of PostgreSQL's CPU per transaction of 1,000 matches, against 155 to 180 ms with the
    ``jsonb`` map that replaced it); and the new-player statement read ``players`` whole."""
    ladders = load_ladder_policies(get_settings())
    with psycopg.connect(clean.database_url, autocommit=True) as conn:
        repository.apply_batch(conn, [entry(f"scan-{n}", f"s{n}", f"t{n}", 12, ladders) for n in range(50)],
                               timeouts=LIMITS)
        # a ladder of some size, with statistics: a table of a few rows may well be read whole
        conn.execute("INSERT INTO players (ladder, player_id, rating, peak_rating) "
                     "SELECT 'elo', 'x' || n, 1500, 1500 FROM generate_series(1, 20000) AS n")
        conn.execute("ANALYZE players, ledger, rating_changes, outbox, outbox_pending")
        batch = [entry(f"scan-b{n}", f"s{n * 7 % 50}", f"new{n}" if n % 3 else f"t{n * 11 % 50}", n % 24, ladders)
                 for n in range(100)]
        statements: list[tuple[str, object]] = []
        execute = psycopg.Cursor.execute

        def recording(self, query, params=None, **kwargs):
            if self.connection is conn and params is not None:
                statements.append((query if isinstance(query, str) else query.as_string(conn), params))
            return execute(self, query, params, **kwargs)

        psycopg.Cursor.execute = recording  # type: ignore[method-assign]
        try:
            results, _ = repository.apply_batch(conn, batch, timeouts=LIMITS)
        finally:
            psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        assert [r.outcome for r in results] == [Outcome.APPLIED] * 100
        assert any("INSERT INTO rating_changes" in q for q, _ in statements)
        # a correction's statements: the later matches' players, the rows of those it touches
        assert any("ORDER BY l.order_at" in q for q, _ in statements)
        assert any("AS u(seq, match_id)" in q for q, _ in statements)
        rescans = {}
        with conn.transaction(force_rollback=True), conn.cursor() as cur:
            repository.set_local_timeouts(cur, LIMITS)
            for query, params in statements:
                plan = cur.execute("EXPLAIN (FORMAT JSON) " + query, params).fetchone()[0][0]["Plan"]
                if found := rescanned_relations(plan):
                    rescans[" ".join(query.split())[:100]] = found
    assert rescans == {}


def test_a_correction_planned_while_the_history_was_small_reads_the_history_by_match(clean):
    """A late match's correction reads the ladder's later matches' players from the ledger
    (``worker.store.chronology.later_match_players``) and the current history rows of the few it
    touches (``read_rows``: one index lookup per match in ``rating_changes``). Prepared and planned
    generically while the history held a few rows (a fresh ladder, or a bench run's first correction
    after its tables were emptied), the earlier read of every later match's rows looked them up in
    ``rating_changes_player_sequence`` by ``generation`` alone, reading the whole generation once per
    later match: in a bench run at 8 worker processes, 2,001 later matches × 11,117 rows, 5.9 s of
    one backend's CPU while every transaction sharing a new player with it waited (a 5 s stall, one
    run in five); ``read_rows``, prepared, did the same here (3,442 fetches). Planned on small tables
    and kept, the plans must still read about the rows they return as the history grows.

    The whole transaction's fetches from ``rating_changes``: 364,830 with the kept plan, 1,632 when
    every later match's rows were read (302 matches), 432 now (the rows of the matches re-rated, and
    what the rest of the transaction reads)."""
    ladders = load_ladder_policies(get_settings())
    with psycopg.connect(clean.direct_database_url, autocommit=True, prepare_threshold=0) as conn:
        repository.apply_batch(conn, [entry("small-1", "a0", "a1", 10, ladders)], timeouts=LIMITS)
        conn.execute("ANALYZE ledger, rating_changes")  # statistics of a small ladder, never updated after
        late = repository.apply_batch(conn, [entry("small-0", "a0", "a2", 9, ladders)], timeouts=LIMITS)[0]
        assert late[0].rerated  # the correction's statements ran, planned on a history of 2 rows
        for day in range(2, 5):  # 300 matches on later days: 600 history rows
            repository.apply_batch(conn, [elo_entry(elo_message(f"grow-{day}-{n}", f"g{n}", f"h{n}", n % 24, day),
                                                    ladders) for n in range(100)], timeouts=LIMITS)
        fetched: list[int] = []

        def before_commit() -> None:  # inside the transaction: its own counts
            fetched.append(conn.execute("SELECT idx_tup_fetch FROM pg_stat_xact_user_tables "
                                        "WHERE relname = 'rating_changes'").fetchone()[0])

        results, _ = repository.apply_batch(conn, [entry("late-1", "g1", "a1", 8, ladders)], before_commit,
                                            timeouts=LIMITS)
        assert results[0].outcome == Outcome.APPLIED and results[0].rerated
        # not 302 x 600, nor the 600 rows of all 302 later matches
        assert fetched[0] < 1000, fetched
