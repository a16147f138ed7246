"""The consumer gate's dead-letter writer on a real PostgreSQL: a write lands once per task id, and a
database that stays unreachable is reported, not raised, so the gate leaves the message queued."""

from __future__ import annotations

import socket

import pytest

from worker.store.dead_letter_writer import DeadLetterWriter

pytestmark = pytest.mark.integration


def test_a_dead_letter_is_written_once_per_task_id(clean):
    """Two writes with one task id (a redelivery) leave one row, with the raw body and reason kept."""
    writer = DeadLetterWriter(clean.database_url)
    for _ in range(2):
        assert writer.write("unknown_task", "task 'x' is not known", b'{"raw": 1}', "writer-task-1",
                            "application/json", {"task": "x"}) is None
    with clean.connect() as conn:
        rows = conn.execute("SELECT reason_code, raw_body FROM dead_letters WHERE task_id = 'writer-task-1'").fetchall()
    assert rows == [("unknown_task", '{"raw": 1}')]


def test_an_unreachable_database_is_reported_after_the_bounded_retries():
    """Nothing listens on the URL's port: write returns the driver's reason after its attempts."""
    with socket.socket() as probe:  # a port nothing listens on: bound, never listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        writer = DeadLetterWriter(f"postgresql://postgres@127.0.0.1:{port}/none?connect_timeout=2",
                                  attempts=2, timeout=5.0)
        failure = writer.write("unknown_task", "detail", b"body", "writer-task-2", None, None)
    assert failure is not None and str(port) in failure, failure
