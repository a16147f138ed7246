"""Redis and PostgreSQL restarted, and database connections cut, while matches are in flight."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]


def test_workers_resume_consuming_after_redis_restarts_and_everything_drains(cluster_factory):
    """The scenario's own Redis (append-only, fsync always) is stopped for 2 s while 500 matches are
    queued and in flight: workers and relay reconnect and everything drains once (Celery issue
    'worker stops consuming after Redis restarts' does not happen)."""
    cluster = cluster_factory("restart-redis", own_redis=True).start()
    cluster.publish(cluster.matches(500))
    cluster.figures["received_before_restart"] = cluster.wait_received(50)
    cluster.own.stop_redis()
    time.sleep(2.0)
    cluster.own.start_redis()
    back_at = time.monotonic()
    cluster.wait_drained(timeout=180)
    cluster.figures["recovery_seconds"] = round(time.monotonic() - back_at, 1)
    figures = cluster.check_invariants()
    assert (figures["applied"], figures["duplicates"], figures["dead_letters"]) == (500, 0, 0)
    # Both workers survived the restart (no "Unrecoverable error") and still consume.
    assert cluster.log_count("Unrecoverable error") == 0
    assert all(cluster.procs.procs[w].poll() is None for w in ("w1", "w2"))
    cluster.publish(cluster.matches(50, prefix="after-restart"))
    cluster.wait_drained(timeout=60)
    assert cluster.check_invariants()["applied"] == 550


def test_postgresql_restarted_mid_stream_loses_nothing(cluster_factory):
    """The scenario's own PostgreSQL is stopped (fast shutdown) for 2 s mid-stream: tasks retry
    with backoff or are requeued, the relay reconnects, every match is applied once."""
    cluster = cluster_factory("restart-postgresql", own_postgres=True).start()
    cluster.publish(cluster.matches(500))
    cluster.figures["received_before_restart"] = cluster.wait_received(50)
    cluster.own.restart_postgres(mode="fast", down_seconds=2.0)
    back_at = time.monotonic()
    cluster.wait_drained(timeout=180)
    cluster.figures["recovery_seconds"] = round(time.monotonic() - back_at, 1)
    figures = cluster.check_invariants()
    assert (figures["applied"], figures["duplicates"], figures["dead_letters"]) == (500, 0, 0)


def test_worker_backends_terminated_mid_stream_lose_nothing(cluster_factory):
    """pg_terminate_backend on every worker and relay connection, five times during 500 matches
    published at a steady rate (so the workers are busy at every round, batched or not):
    the lost connections are retried, nothing is lost or applied twice."""
    cluster = cluster_factory("pg-terminate-backend").start()
    messages = cluster.matches(500)
    cluster.publish(messages[:20])
    cluster.wait_received(10)

    def steady():  # a stream that lasts through the five rounds, however fast the workers drain
        for i in range(20, len(messages), 20):
            cluster.publish(messages[i:i + 20])
            time.sleep(0.1)

    publisher = threading.Thread(target=steady)
    publisher.start()
    terminated = 0
    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        for _ in range(5):
            time.sleep(0.4)
            terminated += conn.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()[0]
    publisher.join()
    cluster.figures["backends_terminated"] = terminated
    cluster.figures["recovery_seconds"] = round(cluster.wait_drained(timeout=180), 1)
    figures = cluster.check_invariants()
    assert terminated >= 5
    assert (figures["applied"], figures["duplicates"], figures["dead_letters"]) == (500, 0, 0)


def test_relay_killed_between_xadd_and_marking_published_republishes_the_same_event_ids(cluster_factory):
    """The relay SIGKILLs itself after XADD and before marking rows published (every 3rd batch) and
    is restarted each time: events may appear twice on the stream, always with the same event id."""
    cluster = cluster_factory("kill-relay-after-xadd", {"RATINGS_FAULT_INJECTION": "relay_after_xadd:every=3",
                                                        "RATINGS_RELAY_BATCH_SIZE": "50"}).start()
    cluster.publish(cluster.matches(400))
    deadline = time.monotonic() + 120
    relay_restarts = 0
    while time.monotonic() < deadline:
        if cluster.procs.procs["relay"].poll() is not None:
            cluster.procs.procs.pop("relay")
            cluster.procs.start_relay()
            relay_restarts += 1
        c = cluster.counts()
        if c.received >= 400 and c.unpublished_events == 0:
            break
        time.sleep(0.2)
    cluster.wait_drained(timeout=30)
    cluster.figures["relay_kills"] = relay_restarts
    figures = cluster.check_invariants()
    assert relay_restarts >= 1 and figures["stream_duplicate_entries"] > 0
    assert (figures["applied"], figures["duplicates"], figures["dead_letters"]) == (400, 0, 0)
