"""The worker's connection pool hands out a connection returned just now without the empty-query
check, and checks one that has been idle (``worker.store.pool.RatingsPool._check``): either way a
connection whose server session ended is never a lost or doubled match."""

from __future__ import annotations

import logging
import time

import psycopg
import pytest

import worker.store.pool as pool_module

from .test_batches import call, rating_service
from .test_worker import match

pytestmark = pytest.mark.integration


@pytest.fixture
def service(clean):
    """A rating service of this test process whose pool holds one connection."""
    svc = rating_service(clean, pool_max_size=1)
    yield svc
    svc.pool.close()


def _end_backend_of_pooled_connection(svc, database_url: str) -> None:
    with svc.pool.connection() as conn:
        pid = conn.info.backend_pid
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 10
        while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]:
            assert time.monotonic() < deadline, "the terminated backend did not exit"
            time.sleep(0.02)


@pytest.mark.parametrize(("recent_seconds", "retried"), [(60.0, True), (0.0, False)])
def test_a_pooled_connection_whose_session_ended_costs_at_most_a_retry(service, clean, caplog, monkeypatch,
                                                                       recent_seconds, retried):
    """A match is applied; the server ends the pooled connection's session; the next match is
    applied exactly once. Returned within ``RECENTLY_RETURNED_SECONDS`` (60 s here), the connection
    is handed out unchecked: the transaction finds the session gone and is retried on a new
    connection (the service logs a transient error). With the window at 0 the pool's empty query
    finds it and hands out a new connection: no retry."""
    monkeypatch.setattr(pool_module, "RECENTLY_RETURNED_SECONDS", recent_seconds)
    first = [None]
    service.rate([call(match("pool-1", "ann", "bob"), "t-pool-1")], first)
    assert first[0].outcome == "applied"
    _end_backend_of_pooled_connection(service, clean.database_url)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="worker.service.rating_service"):
        second = [None]
        service.rate([call(match("pool-2", "ann", "cat"), "t-pool-2")], second)
    assert second[0].outcome == "applied"
    assert ("transient error" in caplog.text) is retried, caplog.text
    with psycopg.connect(clean.database_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM ledger WHERE match_id LIKE 'pool-%'").fetchone()[0] == 2


def test_a_connection_returned_inside_a_transaction_is_checked_when_next_handed_out(service):
    """Returned idle, a connection is noted as recently returned; returned with a transaction open
    (the pool rolls it back), the note is dropped, so the next hand-out runs the empty-query check."""
    pool = service.pool
    with pool.connection() as conn:
        conn.execute("SELECT 1")
    assert conn in pool._returned
    conn = pool.getconn()
    conn.execute("BEGIN")
    pool.putconn(conn)
    assert conn not in pool._returned
