"""A player row held by another transaction, against a real PostgreSQL: the rating
transaction (``apply_batch``, called directly) applies the matches it can and defers the blocked
ones with every later match of their players; a frozen transaction loses its locks to
``idle_in_transaction_session_timeout``. Ratings are hand-computed Elo (K = 30, 1200 start)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from datetime import datetime

import psycopg
import pytest

from worker.policy.ladders import load_ladders
from worker.settings import DEFAULT_LADDERS_FILE
from worker.store.connection import TRANSIENT_DATABASE_ERRORS
from worker.store.ladders import LadderPolicy
from worker.store.locking import forget_blocked
from worker.store.rating import BatchMatch, TransactionTimeouts, apply_batch

from .test_worker import match, ratings

pytestmark = pytest.mark.integration

LADDERS = {name: LadderPolicy(name, policy) for name, policy in load_ladders(DEFAULT_LADDERS_FILE).items()}


def entry(message: dict, task_id: str) -> BatchMatch:
    canonical = json.dumps(message, sort_keys=True, separators=(",", ":"))
    return BatchMatch(message, hashlib.sha256(canonical.encode()).hexdigest(),
                      datetime.fromisoformat(message["finished_at"]), LADDERS[message["ladder"]], task_id)


def limits(wait_ms: int = 200, idle_ms: int = 0) -> TransactionTimeouts:
    return TransactionTimeouts(lock_timeout_ms=5000, statement_timeout_ms=30000, player_lock_wait_ms=wait_ms,
                               idle_in_transaction_ms=idle_ms)


@pytest.fixture(autouse=True)
def fresh_memory():
    """Each test starts with no row remembered as blocked by this process."""
    forget_blocked()
    yield
    forget_blocked()


class Holder:
    """Another session holding player rows ``FOR UPDATE`` until :meth:`release` (an operator's open
    transaction)."""

    def __init__(self, url: str, players: list[str]):
        self.held, self.done = threading.Event(), threading.Event()
        self.pid = 0
        """The holding session's server backend (read inside its transaction: through PgBouncer too)."""
        self.thread = threading.Thread(target=self._run, args=(url, players))
        self.thread.start()
        assert self.held.wait(10)

    def _run(self, url: str, players: list[str]) -> None:
        with psycopg.connect(url) as conn:
            conn.execute("SELECT 1 FROM players WHERE ladder = 'elo' AND player_id = ANY(%s) FOR UPDATE", (players,))
            self.pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            self.held.set()
            self.done.wait(30)

    def release(self) -> None:
        self.done.set()
        self.thread.join()


def seed(conn, *players: str) -> None:
    """The players exist (a first match each against a throwaway opponent would change ratings)."""
    conn.execute("INSERT INTO players (ladder, player_id, rating, peak_rating) "
                 "SELECT 'elo', p, 1200, 1200 FROM unnest(%s::text[]) AS p", (list(players),))


def test_a_held_player_defers_its_matches_and_later_matches_of_their_players_and_the_rest_applies(clean):
    """Batch [hot-ann, bob-cat, ann-dan, eve-fay] with hot's row held: the first match waits 200 ms,
    is deferred, so is ann-dan (ann's later match); bob-cat and eve-fay apply (1215 / 1185). A
    second batch with hot, the row still held, is deferred after a short wait only. After
    the release the two deferred ones apply in order: ann beats hot (1215), then ann (1215) beats
    dan (1200): E = 1/(1+10^(-15/400)) = 0.52158, ann 1229.35, dan 1185.65."""
    with clean.connect() as conn:
        seed(conn, "hot")
        conn.commit()
    holder = Holder(clean.database_url, ["hot"])
    batch = [entry(match("d-1", "ann", "hot"), "t1"), entry(match("d-2", "bob", "cat"), "t2"),
             entry(match("d-3", "ann", "dan"), "t3"), entry(match("d-4", "eve", "fay"), "t4")]
    try:
        with psycopg.connect(clean.database_url, autocommit=True) as conn:
            results, _ = apply_batch(conn, batch, timeouts=limits(wait_ms=200))
        assert [r.outcome.value for r in results] == ["deferred", "applied", "deferred", "applied"]
        assert results[0].blocked_players == ("elo/hot",) and results[2].blocked_players == ()
        assert results[0].reason_code == "player_locked"
        with clean.connect() as conn:
            waits = conn.execute("SELECT ladder, player_id, deferred_matches, waited_ms FROM player_lock_waits").fetchall()
            ledger = [m for (m,) in conn.execute("SELECT match_id FROM ledger ORDER BY seq")]
        assert [(lad, pid, n) for lad, pid, n, _ in waits] == [("elo", "hot", 1)]
        assert waits[0][3] >= 150  # it did wait (most of) the 200 ms allowed before deferring
        assert ledger == ["d-2", "d-4"]
        # Still held: this process remembers the row, so the next batch waits only briefly (not 5 s again).
        with psycopg.connect(clean.database_url, autocommit=True) as conn:
            again, _ = apply_batch(conn, [entry(match("d-5", "hot", "gil"), "t5")], timeouts=limits(wait_ms=5000))
            second = conn.execute("SELECT waited_ms, deferred_matches FROM player_lock_waits ORDER BY id").fetchall()[1:]
        assert [r.outcome.value for r in again] == ["deferred"] and [d for _, d in second] == [1]
        assert second[0][0] < 2500  # it waited the short wait of a remembered row (50 ms), not the 5 s allowed
    finally:
        holder.release()
    with psycopg.connect(clean.database_url, autocommit=True) as conn:
        results, _ = apply_batch(conn, [batch[0], batch[2]], timeouts=limits())
    assert [r.outcome.value for r in results] == ["applied", "applied"]
    got = {k: (round(r, 2), g) for k, (r, g) in ratings(clean).items()}
    assert got == {("elo", "hot"): (1185.0, 1), ("elo", "ann"): (1229.35, 2), ("elo", "dan"): (1185.65, 1),
                   ("elo", "bob"): (1215.0, 1), ("elo", "cat"): (1185.0, 1),
                   ("elo", "eve"): (1215.0, 1), ("elo", "fay"): (1185.0, 1),
                   ("elo", "gil"): (1200.0, 0)}  # created by the deferred batch, not rated yet


def test_a_row_released_within_the_wait_is_locked_and_nothing_is_deferred(clean):
    """The holder lets go 100 ms after the batch starts; the batch may wait 5 s: it applies both
    matches (none deferred) and notes the wait for the player."""
    with clean.connect() as conn:
        seed(conn, "hot")
        conn.commit()
    holder = Holder(clean.database_url, ["hot"])
    threading.Timer(0.1, holder.release).start()
    with psycopg.connect(clean.database_url, autocommit=True) as conn:
        results, _ = apply_batch(conn, [entry(match("r-1", "hot", "ann"), "t1"), entry(match("r-2", "bob", "cat"), "t2")],
                                 timeouts=limits(wait_ms=5000))
    holder.thread.join()
    assert [r.outcome.value for r in results] == ["applied", "applied"]
    with clean.connect() as conn:
        assert conn.execute("SELECT player_id, deferred_matches FROM player_lock_waits").fetchall() == [("hot", 0)]
    assert ratings(clean)[("elo", "hot")] == (1215.0, 1)


def test_a_frozen_transaction_loses_its_locks_and_its_commit_fails_harmlessly(clean):
    """A rating transaction that stops sending after its writes (``before_commit`` sleeps 1.5 s;
    ``idle_in_transaction_session_timeout`` 300 ms) has its session ended by the server: another
    transaction then locks the same players and applies; the frozen one's COMMIT fails with a
    connection error and writes nothing."""
    with clean.connect() as conn:
        seed(conn, "ann", "bob")
        conn.commit()
    frozen_error: list[BaseException] = []
    holding = threading.Event()

    def freeze() -> None:
        holding.set()
        time.sleep(1.5)

    def frozen():
        with psycopg.connect(clean.database_url, autocommit=True) as conn:
            try:
                apply_batch(conn, [entry(match("f-1", "ann", "bob"), "t1")], before_commit=freeze,
                            timeouts=limits(idle_ms=300))
            except TRANSIENT_DATABASE_ERRORS as exc:  # what the service retries on a fresh connection
                frozen_error.append(exc)

    thread = threading.Thread(target=frozen)
    thread.start()
    assert holding.wait(10)  # the frozen transaction holds ann and bob, its writes done, no COMMIT
    with psycopg.connect(clean.database_url, autocommit=True) as conn:
        results, _ = apply_batch(conn, [entry(match("f-2", "ann", "bob"), "t2")], timeouts=limits(wait_ms=5000))
    thread.join()
    assert [r.outcome.value for r in results] == ["applied"]
    assert len(frozen_error) == 1, "the frozen transaction's commit must fail"
    with clean.connect() as conn:
        assert [m for (m,) in conn.execute("SELECT match_id FROM ledger")] == ["f-2"]
    assert ratings(clean) == {("elo", "ann"): (1215.0, 1), ("elo", "bob"): (1185.0, 1)}


def test_the_hottest_waits_show_in_the_metrics_and_doctor_names_a_player_whose_matches_keep_being_deferred(clean):
    """Waits recorded for two players (hot: 12 matches deferred over 3 waits; warm: waited, none
    deferred): the scrape-time gauges list both, hottest first; `ratings doctor` fails naming
    elo/hot with a threshold of 10 and passes naming the hottest with a threshold of 20."""
    from worker.ops.doctor import lock_wait_finding
    from worker.service.lock_metrics import lock_wait_gauges
    from worker.settings import Settings

    with psycopg.connect(clean.database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO player_lock_waits (ladder, player_id, waited_ms, deferred_matches) VALUES "
                     "('elo', 'hot', 1000, 5), ('elo', 'hot', 50, 4), ('elo', 'hot', 50, 3), ('elo', 'warm', 120, 0)")
        gauges = {g.name: {tuple(s.labels.values()): s.value for s in g.samples} for g in lock_wait_gauges(conn)}
        failing = lock_wait_finding(conn, Settings(lock_deferrals_threshold=10))
        passing = lock_wait_finding(conn, Settings(lock_deferrals_threshold=20))
    assert gauges["ratings_player_deferred_matches"] == {("elo", "hot"): 12.0, ("elo", "warm"): 0.0}
    assert gauges["ratings_player_lock_waits"] == {("elo", "hot"): 3.0, ("elo", "warm"): 1.0}
    assert gauges["ratings_player_lock_wait_seconds"] == {("elo", "hot"): 1.1, ("elo", "warm"): 0.12}
    assert not failing.ok and "elo/hot: 12 match(es) deferred" in failing.detail and "warm" not in failing.detail
    assert passing.ok and "hottest elo/hot" in passing.detail


def test_a_transaction_waiting_for_a_busy_row_does_not_hold_up_the_ladders_other_transactions(clean, monkeypatch):
    """ann's row is held; batch B (ann-bob) waits for it. Meanwhile batch C (cat-dan, no shared
    player) applies on the fast path: B waits with the ladder's queue lock shared, not exclusive,
    so C neither waits nor records a wait. After the release B applies, one wait recorded (ann).
    (The first wait's bound is raised to 30 s so the test does not race it.)"""
    from worker.store import locking

    monkeypatch.setattr(locking, "UNQUEUED_WAIT_MS", 30_000)
    with clean.connect() as conn:
        seed(conn, "ann", "bob", "cat", "dan")
        conn.commit()
    holder = Holder(clean.database_url, ["ann"])
    b_results: list = []

    def batch_b() -> None:
        with psycopg.connect(clean.database_url, autocommit=True) as conn:
            b_results.extend(apply_batch(conn, [entry(match("q-1", "ann", "bob"), "t1")],
                                         timeouts=limits(wait_ms=30_000))[0])

    thread = threading.Thread(target=batch_b)
    thread.start()
    try:
        # B's server backend (through PgBouncer the client's backend pid is not the server's): the
        # rating transaction of this database waiting on a lock the holder has
        with psycopg.connect(clean.direct_database_url, autocommit=True) as watch:
            deadline = time.monotonic() + 10
            while (b_pid := watch.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s "
                    "AND wait_event_type = 'Lock' AND %s = ANY(pg_blocking_pids(pid))",
                    (locking.RATING_APPLICATION, holder.pid)).fetchone()) is None:
                assert time.monotonic() < deadline, "batch B never waited for ann's row"
                time.sleep(0.01)
            modes = watch.execute(
                "SELECT mode FROM pg_locks WHERE pid = %s AND locktype = 'advisory' AND classid = %s AND granted",
                (b_pid[0], locking.QUEUE_LOCK_CLASS)).fetchall()
            assert modes == [("ShareLock",)]
            with psycopg.connect(clean.database_url, autocommit=True) as conn:
                c_results, _ = apply_batch(conn, [entry(match("q-2", "cat", "dan"), "t2")], timeouts=limits(wait_ms=10_000))
            assert [r.outcome.value for r in c_results] == ["applied"]
            assert watch.execute("SELECT player_id FROM player_lock_waits").fetchall() == []
            assert thread.is_alive()  # B still waits for ann
    finally:
        holder.release()
        thread.join(15)
    assert [r.outcome.value for r in b_results] == ["applied"]
    with clean.connect() as conn:
        assert conn.execute("SELECT player_id, deferred_matches FROM player_lock_waits").fetchall() == [("ann", 0)]
    assert ratings(clean)[("elo", "ann")] == (1215.0, 1) and ratings(clean)[("elo", "cat")] == (1215.0, 1)


@pytest.mark.parametrize("wait_ms", [60, 0])
def test_a_short_player_lock_wait_is_not_spent_in_a_spin_of_one_millisecond_retries(clean, monkeypatch, wait_ms):
    """wait_ms = 60: the first wait (60 ms) uses it all. What is left for the queued wait is still
    a remembered row's 50 ms per retry, not 1 ms: behind a session holding the row (idle in its
    transaction, seen as stuck after 0.5 s) the batch checks for stuck sessions about once per
    50 ms until it defers, not hundreds of times. wait_ms = 0 (``RATINGS_PLAYER_LOCK_WAIT_MS=0``,
    which the settings allow): the same, where each retry's lock_timeout was 1 ms (66 checks in
    a run before the fix)."""
    from worker.store import locking

    checks: list[bool] = []
    real = locking._stuck_session

    def counted(cur):
        checks.append(real(cur))
        return checks[-1]

    monkeypatch.setattr(locking, "_stuck_session", counted)
    forget_blocked()  # a row remembered from the other parameter's run would take the one 50 ms wait
    with clean.connect() as conn:
        seed(conn, "hot")
        conn.commit()
    holder = Holder(clean.database_url, ["hot"])
    # past MAYBE_STUCK_AFTER_MS: an outside session's transaction keeps each retry short (a younger
    # one gets one retry longer than deadlock_timeout, for the deadlock check, before it is seen as stuck)
    time.sleep(locking.MAYBE_STUCK_AFTER_MS / 1000 + 0.02)
    try:
        with psycopg.connect(clean.database_url, autocommit=True) as conn:
            results, _ = apply_batch(conn, [entry(match("s-1", "hot", "ann"), "t1")], timeouts=limits(wait_ms=wait_ms))
    finally:
        holder.release()
    assert [r.outcome.value for r in results] == ["deferred"]
    assert checks and checks[-1] is True  # it deferred because the holder was seen as stuck
    assert len(checks) <= 20, f"{len(checks)} stuck-session checks: the wait spun"
