"""How RatingService routes the exceptions of the rating transaction (no server: the store's
transaction is replaced by a function that raises for a match and records dead letters, so only the
routing is under test)."""

from __future__ import annotations

import contextlib

import psycopg
import pytest
from celery.exceptions import SoftTimeLimitExceeded

from worker import store as repository
from worker.outcome import Handled, Outcome
from worker.policy.ladders import load_ladders
from worker.service import rating_service as service
from worker.settings import DEFAULT_LADDERS_FILE, Settings
from worker.store.ladders import LadderPolicy

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
    ladders = {name: LadderPolicy(name, policy) for name, policy in load_ladders(DEFAULT_LADDERS_FILE).items()}
    svc = service.RatingService(NoPool(), ladders, Settings(max_retries=1), interrupts=(SoftTimeLimitExceeded,))
    svc.dead = []
    return svc


def raising(exc, dead):
    """A stand-in for ``apply_batch``: raises ``exc`` for a batch holding a match; records the
    reason codes of a batch of dead letters (as the real one does in its transaction)."""
    def apply_batch(conn, entries, before_commit=None, timeouts=None, before_correction_commit=None):
        if any(isinstance(e, repository.BatchMatch) for e in entries):
            raise exc
        dead.extend(e.reason_code for e in entries)
        return [Handled(Outcome.DEAD_LETTER, e.reason_code, e.match_id) for e in entries], None

    return apply_batch


def test_a_permanent_error_becomes_an_internal_error_dead_letter(rating_service, monkeypatch):
    """A bug-like exception (RuntimeError) is never retried: the message is kept as internal_error."""
    monkeypatch.setattr(repository, "apply_batch", raising(RuntimeError("boom"), rating_service.dead))
    handled = [None]
    rating_service.rate([("t-1", [MESSAGE], {})], handled)
    assert (handled[0].outcome, handled[0].reason_code) == (Outcome.DEAD_LETTER, "internal_error")
    assert rating_service.dead == ["internal_error"]


@pytest.mark.parametrize("exc", [psycopg.OperationalError("lost"), psycopg.errors.DeadlockDetected("dl"),
                                 psycopg.InterfaceError("closed"), SoftTimeLimitExceeded(), SystemExit(1)])
def test_transient_errors_time_limits_and_shutdown_propagate_so_the_message_is_kept(rating_service, monkeypatch, exc):
    """Transient database errors, the soft time limit and a shutdown propagate (the task requeues, or
    the dying child's message is redelivered); they are never turned into a dead letter or a TypeError."""
    monkeypatch.setattr(repository, "apply_batch", raising(exc, rating_service.dead))
    with pytest.raises(type(exc)):
        rating_service.rate([("t-2", [MESSAGE], {})])
    assert rating_service.dead == []


def test_an_unratable_match_becomes_a_dead_letter_with_the_engines_reason_code(rating_service, monkeypatch):
    """A valid message the ladder's policy cannot rate keeps the engine's reason code, not internal_error."""
    from engine import UnratableMatch

    monkeypatch.setattr(repository, "apply_batch",
                        raising(UnratableMatch("uneven_sides", "this policy rates sides of equal size only"), rating_service.dead))
    handled = [None]
    rating_service.rate([("t-3", [MESSAGE], {})], handled)
    assert (handled[0].outcome, handled[0].reason_code) == (Outcome.DEAD_LETTER, "uneven_sides")


ANNULMENT = {"schema_version": 1, "match_ids": ["m-1"], "reason": "cheating", "annulled_by": "anti-cheat"}


def annul_raising(exc):
    """A stand-in for ``annul_matches`` that raises ``exc``."""
    def annul_matches(conn, match_ids, reason, annulled_by, ladders, timeouts=None):
        raise exc

    return annul_matches


def recording_dead_letters(dead):
    """A stand-in for ``insert_dead_letter`` that records the reason code and the raw body kept."""
    def insert_dead_letter(conn, code, detail, raw, match_id, task_id, content_type, headers):
        dead.append((code, raw, headers))

    return insert_dead_letter


def test_an_annulment_that_fails_for_a_permanent_reason_is_kept_as_an_internal_error_dead_letter(
        rating_service, monkeypatch):
    """Regression: an annulment whose transaction raised a bug-like exception (a pydantic
    ValidationError of the RatingChanged contract) left the task with an unexpected error and the
    message acknowledged: not annulled, not a dead letter. Now it is kept as ``internal_error``
    with its raw body and its task name (for a requeue)."""
    monkeypatch.setattr(repository, "annul_matches", annul_raising(RuntimeError("boom")))
    monkeypatch.setattr(repository, "insert_dead_letter", recording_dead_letters(rating_service.dead))
    outcome = rating_service.annul("t-4", ['{"schema_version":1,"match_ids":["m-1"],"reason":"x","annulled_by":"y"}'], {})
    assert outcome == ("dead_letter", "internal_error")
    assert rating_service.dead == [("internal_error",
                                    '{"schema_version":1,"match_ids":["m-1"],"reason":"x","annulled_by":"y"}',
                                    {"task": "ratings.annul_matches"})]


@pytest.mark.parametrize("exc", [psycopg.OperationalError("lost"), SoftTimeLimitExceeded(), SystemExit(1)])
def test_an_annulment_interrupted_or_hit_by_transient_errors_propagates_so_the_message_is_kept(
        rating_service, monkeypatch, exc):
    """Transient database errors, the soft time limit and a shutdown still reach the task (which
    requeues the message); they never become a dead letter."""
    monkeypatch.setattr(repository, "annul_matches", annul_raising(exc))
    monkeypatch.setattr(repository, "insert_dead_letter", recording_dead_letters(rating_service.dead))
    with pytest.raises(type(exc)):
        rating_service.annul("t-5", [ANNULMENT], {})
    assert rating_service.dead == []
