"""The bench sampler's heads of lock waits (``worker.devtools.bench.sql.lock_chain_heads``) on a real
PostgreSQL: a session idle in its transaction, holding a row two others wait for, is the head."""

from __future__ import annotations

import threading
import time

import psycopg

from worker.devtools.bench import sql as bench_sql


def test_the_head_of_a_lock_wait_is_the_session_idle_in_its_transaction(clean):
    url = clean.direct_database_url
    with psycopg.connect(url, autocommit=True) as setup:
        setup.execute("CREATE TABLE IF NOT EXISTS bench_heads (id int PRIMARY KEY)")
        setup.execute("INSERT INTO bench_heads VALUES (1) ON CONFLICT DO NOTHING")
    holder = psycopg.connect(url)
    holder.execute("SELECT id FROM bench_heads WHERE id = 1 FOR UPDATE")  # then idle in transaction

    def wait() -> None:
        with psycopg.connect(url) as conn:
            conn.execute("SET lock_timeout = '20s'")
            conn.execute("SELECT id FROM bench_heads WHERE id = 1 FOR UPDATE")

    waiters = [threading.Thread(target=wait) for _ in range(2)]
    for t in waiters:
        t.start()
    try:
        with psycopg.connect(url, autocommit=True) as observer:
            deadline = time.monotonic() + 10
            while sum(w.startswith("Lock:") for w, _ in bench_sql.active_backends(observer)) < 2:
                assert time.monotonic() < deadline, "the two sessions never waited"
                time.sleep(0.02)
            heads = bench_sql.lock_chain_heads(observer)
    finally:
        holder.rollback()
        holder.close()
        for t in waiters:
            t.join(30)
    # one head (once, however many wait for it): the holder, between two statements, with its last one
    assert heads == [("idle in transaction", "SELECT id FROM bench_heads WHERE id = 1 FOR UPDATE")], heads
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE bench_heads")
