"""The client-side deadline of the relay's database calls (worker/store/deadline.py), against a real
PostgreSQL: a statement the server takes longer over (``pg_sleep``) stands for a server that stopped
answering; the frozen server itself is tests/faults/test_frozen_peers.py."""

from __future__ import annotations

import logging
import time

import pytest

from worker.store.connection import DatabaseUnreachable, connect
from worker.store.deadline import CallDeadline, database_label

pytestmark = pytest.mark.integration

DEADLINE = 1.0
"""Seconds of the deadline under test; the slow statement sleeps 5 s on the server."""


@pytest.fixture
def admin_url(servers) -> str:
    return servers[0]


def _said(caplog, level: int, text: str) -> int:
    return sum(1 for r in caplog.records if r.name == "worker.store.deadline" and r.levelno == level
               and text in r.getMessage())


def test_a_call_past_the_deadline_fails_as_a_lost_connection_said_once_per_outage(admin_url, caplog):
    """Two calls past the deadline in a row (one outage) each raise ``DatabaseUnreachable`` with their
    connection broken, and one WARNING names the database and the bound; the next call that ends in
    time logs one INFO that the database answers again."""
    caplog.set_level(logging.DEBUG, logger="worker.store.deadline")
    label = database_label(admin_url)
    deadline = CallDeadline(DEADLINE, label)
    for _ in range(2):
        with connect(admin_url, autocommit=True) as conn:
            with pytest.raises(DatabaseUnreachable), deadline.watching(conn):
                conn.execute("SELECT pg_sleep(5)")
            assert conn.broken
    assert deadline.silent
    assert _said(caplog, logging.WARNING, f"the database {label} did not answer the relay within 1.0 s") == 1
    assert _said(caplog, logging.DEBUG, "did not answer the relay") == 1
    with connect(admin_url, autocommit=True) as conn, deadline.watching(conn):
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert not deadline.silent
    assert _said(caplog, logging.INFO, f"the database {label} answers the relay again") == 1


def test_a_suspended_block_is_not_timed_and_the_next_call_gets_a_fresh_deadline(admin_url, caplog):
    """Work of another kind inside ``suspended`` may outlast the deadline (the relay's XADDs, timed
    by the Redis client), and the call after it still has the whole deadline: nothing is given up,
    nothing logged."""
    caplog.set_level(logging.DEBUG, logger="worker.store.deadline")
    deadline = CallDeadline(DEADLINE, database_label(admin_url))
    with connect(admin_url, autocommit=True) as conn:
        with deadline.watching(conn), conn.transaction():
            conn.execute("SELECT 1")
            with deadline.suspended():
                time.sleep(DEADLINE * 1.5)
            conn.execute("SELECT 2")
        assert not conn.broken
        assert conn.execute("SELECT 3").fetchone() == (3,)
    assert not deadline.silent
    assert not [r for r in caplog.records if r.name == "worker.store.deadline"]


def test_database_label_names_database_host_and_port_never_the_password():
    """The label the log lines carry: database, host and port of the URL; user and password left out."""
    label = database_label("postgresql://ratings:s3cret@db.example:6432/ratings_prod?sslmode=require")
    assert label == "ratings_prod at db.example:6432"
    assert "s3cret" not in label
    assert database_label("postgresql:///test") == "test at localhost:5432"


def test_a_deadline_must_be_positive():
    """A zero deadline is refused with the value in the message."""
    with pytest.raises(ValueError, match="positive, got 0"):
        CallDeadline(0, "test at localhost:5432")
