"""How RatingService routes the exceptions of the rating transaction (no server: the repository
calls are replaced by functions that raise, so only the routing is under test)."""

from __future__ import annotations

import contextlib

import psycopg
import pytest
from celery.exceptions import SoftTimeLimitExceeded

from worker import store as repository
from worker.service import rating_service as service
from worker.policy.ladders import load_ladders
from worker.settings import DEFAULT_LADDERS_FILE, Settings

MESSAGE = {
    "schema_version": 1, "match_id": "m-1", "ladder": "elo", "finished_at": "2026-01-01T00:00:00Z",
    "side_a": {"players": [{"player_id": "a"}]}, "side_b": {"players": [{"player_id": "b"}]},
    "outcome": "draw",
}


class NoPool:
    """Stands in for the connection pool: hands out no connection (the repository is replaced)."""

    @contextlib.contextmanager
    def connection(self):
        yield None


@pytest.fixture
def rating_service(monkeypatch):
    dead = []
    monkeypatch.setattr(repository, "insert_dead_letter", lambda conn, reason, *a, **k: dead.append(reason) or 1)
    svc = service.RatingService(NoPool(), load_ladders(DEFAULT_LADDERS_FILE), Settings(max_retries=1))
    svc.dead = dead
    return svc


def raising(exc):
    def apply_match(*args, **kwargs):
        raise exc

    return apply_match


def test_a_permanent_error_becomes_an_internal_error_dead_letter(rating_service, monkeypatch):
    """A bug-like exception (RuntimeError) is never retried: the message is kept as internal_error."""
    monkeypatch.setattr(repository, "apply_match", raising(RuntimeError("boom")))
    handled = rating_service.handle(MESSAGE, "t-1")
    assert (handled.outcome, handled.reason_code) == ("dead_letter", "internal_error")
    assert rating_service.dead == ["internal_error"]


@pytest.mark.parametrize("exc", [psycopg.OperationalError("lost"), psycopg.errors.DeadlockDetected("dl"),
                                 psycopg.InterfaceError("closed"), SoftTimeLimitExceeded(), SystemExit(1)])
def test_transient_errors_time_limits_and_shutdown_propagate_so_the_message_is_kept(rating_service, monkeypatch, exc):
    """Transient database errors, the soft time limit and a shutdown propagate (the task requeues, or
    the dying child's message is redelivered); they are never turned into a dead letter or a TypeError."""
    monkeypatch.setattr(repository, "apply_match", raising(exc))
    with pytest.raises(type(exc)):
        rating_service.handle(MESSAGE, "t-2")
    assert rating_service.dead == []
