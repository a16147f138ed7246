"""Celery tasks of the rating worker. Pools open per worker child after fork, never at import."""

from __future__ import annotations

import logging
import os

from celery.exceptions import Reject, SoftTimeLimitExceeded
from celery.signals import worker_process_init, worker_process_shutdown

from worker.celery_app import app
from worker.ladders import load_ladders
from worker.service import TRANSIENT_ERRORS, RatingService, open_pool
from worker.settings import get_settings

log = logging.getLogger(__name__)

_service: RatingService | None = None
_service_pid: int | None = None


def get_service() -> RatingService:
    """This process's :class:`RatingService`, created on first use (and again after a fork)."""
    global _service, _service_pid
    if _service is None or _service_pid != os.getpid():
        settings = get_settings()
        _service = RatingService(open_pool(settings), load_ladders(settings.ladders_file), settings)
        _service_pid = os.getpid()
    return _service


@worker_process_init.connect
def _open_pool_in_child(**_: object) -> None:
    global _service
    _service = None  # never reuse a pool inherited through fork
    try:
        get_service()
    except Exception:  # the task retries it, and requeues its message while it fails
        log.exception("cannot set up the rating service in this worker child")


@worker_process_shutdown.connect
def _close_pool(**_: object) -> None:
    if _service is not None and _service_pid == os.getpid():
        _service.pool.close()


@app.task(name="ratings.apply_match", bind=True)
def apply_match(self, *args, **kwargs) -> str:
    """Apply one MatchFinished message (the task's single positional argument).

    Any other call shape (no argument, several, keyword arguments) is kept as a dead letter with
    reason ``bad_task_arguments``. Transient database errors that outlast the in-process retries
    requeue the message (``Reject(requeue=True)``); everything else ends as applied, duplicate or
    dead letter, and the message is acknowledged.
    """
    try:
        service = get_service()
    except Exception as exc:  # broken configuration or database down at start: keep the message
        log.exception("rating service unavailable; requeueing the message")
        raise Reject(f"service unavailable: {exc}", requeue=True) from exc
    task_id = self.request.id
    if len(args) != 1 or kwargs:
        handled = service.dead_letter(
            "bad_task_arguments",
            f"ratings.apply_match takes exactly one positional argument (the MatchFinished "
            f"message); got {len(args)} positional and keyword arguments {sorted(kwargs)}",
            {"args": list(args), "kwargs": kwargs},
            None,
            task_id,
        )
        return handled.outcome
    try:
        handled = service.handle(args[0], task_id)
    except TRANSIENT_ERRORS as exc:
        log.error("transient database error outlasted retries; requeueing: %s", exc)
        raise Reject(str(exc), requeue=True) from exc
    except SoftTimeLimitExceeded as exc:  # the message is fine; this run ran out of time
        log.error("task %s hit its soft time limit; requeueing", task_id)
        raise Reject("soft time limit", requeue=True) from exc
    return handled.outcome
