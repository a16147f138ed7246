"""Two rating transactions that wait for each other's player rows, against a real PostgreSQL
(``worker.store.locking.lock_players``). Rows locked outside the one global order (a correction's
rows beyond those it locked, ``queue=False``) can close a cycle. PostgreSQL looks for one only in
a lock wait that reaches ``deadlock_timeout`` (1 s): with each attempt's ``lock_timeout`` at
``RATINGS_PLAYER_LOCK_WAIT_MS`` (1 s too), the check never ran, and the two waited for each other
attempt after attempt until their whole budget (``lock_timeout_ms``) ran out, in bench runs at 8
worker processes a stall of every worker. Attempts that outlast
``deadlock_timeout`` let the server find the cycle and break it: one transaction gets
``DeadlockDetected``, gives the row up (``blocked``) and ends; the other then gets its row."""

from __future__ import annotations

import threading

import psycopg
import pytest

from worker.store import locking
from worker.store.locking import RATING_APPLICATION, forget_blocked, lock_players

pytestmark = pytest.mark.integration

BUDGET_MS = 20_000
"""Each transaction's whole lock budget: far past the deadlock check, so only the check ends the cycle early."""


def deadlocks(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return conn.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").fetchone()[0]


def test_two_transactions_waiting_for_each_others_rows_out_of_order_are_told_a_deadlock(clean):
    url = clean.direct_database_url
    a, b = ("elo", "cycle-a"), ("elo", "cycle-b")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO players (ladder, player_id, rating, peak_rating) VALUES "
                     "('elo', 'cycle-a', 1200, 1200), ('elo', 'cycle-b', 1200, 1200)")
    before = deadlocks(url)
    both_hold = threading.Barrier(2, timeout=30)
    results: dict[str, object] = {}

    def transaction(name: str, first: tuple[str, str], second: tuple[str, str]) -> None:
        forget_blocked()
        with psycopg.connect(url, autocommit=True, application_name=RATING_APPLICATION) as conn:
            try:
                with conn.transaction(), conn.cursor() as cur:
                    assert lock_players(cur, [first], 1000, BUDGET_MS).rows  # in order: no wait
                    both_hold.wait()
                    # the row the other holds, out of the global order (as a correction's extra rows)
                    results[name] = lock_players(cur, [second], 1000, BUDGET_MS, queue=False)
            except Exception as exc:  # noqa: BLE001 - reported below
                results[name] = exc

    threads = [threading.Thread(target=transaction, args=("one", a, b)),
               threading.Thread(target=transaction, args=("two", b, a))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BUDGET_MS / 1000 + 30)
    assert not any(isinstance(r, Exception) for r in results.values()), results
    blocked = sorted(sorted(r.blocked) for r in results.values())  # type: ignore[attr-defined]
    # one gave its wait up on the server's word and ended; the other got the row it waited for
    assert blocked in ([[], [a]], [[], [b]]), blocked
    got = [r for r in results.values() if not r.blocked]  # type: ignore[attr-defined]
    assert len(got) == 1 and len(got[0].rows) == 1  # type: ignore[attr-defined]
    # a cycle among rating transactions: the row given up is free at once, not remembered as held
    # for long (later batches would wait for it 50 ms once, then defer their matches)
    assert a not in locking._blocked_until and b not in locking._blocked_until
    # told by the deadlock check, not by the budget running out (the counter is the server's own)
    for _ in range(50):
        if deadlocks(url) > before:
            break
        threading.Event().wait(0.1)
    assert deadlocks(url) > before
