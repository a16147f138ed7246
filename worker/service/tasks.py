"""The rating task's body and the worker's signal hooks; registered on the app by :mod:`worker.bootstrap`.

Pools open per worker child after fork, never at import.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import structlog
from celery.exceptions import Reject, SoftTimeLimitExceeded
from celery.signals import setup_logging, worker_process_init, worker_process_shutdown, worker_ready

from worker.outcome import Handled, Outcome
from worker.service import observability
from worker.service.environment import BACKOFF, EnvironmentNotReady, backoff_cap
from worker.service.heap import freeze_long_lived
from worker.service.rating_service import TRANSIENT_ERRORS, RatingService
from worker.settings import Settings, get_settings, required_url
from worker.store import AnnulmentBusy

log = logging.getLogger(__name__)

_factory: Callable[[], RatingService] | None = None
_settings: Settings | None = None
_service: RatingService | None = None
_service_pid: int | None = None


def use_service(factory: Callable[[], RatingService], settings: Settings) -> None:
    """Set how this process builds its :class:`RatingService` (called by the composition root);
    ``settings`` are the ones the signal hooks use."""
    global _factory, _settings, _service
    _factory, _settings, _service = factory, settings, None


def _current_settings() -> Settings:
    return _settings if _settings is not None else get_settings()


def get_service() -> RatingService:
    """This process's :class:`RatingService`, created on first use (and again after a fork).

    Raises ``RuntimeError`` when no composition root set a factory (:func:`use_service`), and what
    building the service raises (e.g. the database unreachable while the pool opens).
    """
    global _service, _service_pid
    if _service is None or _service_pid != os.getpid():
        if _factory is None:
            raise RuntimeError("no rating service configured: build the app with worker.bootstrap.create_app")
        _service = _factory()
        _service_pid = os.getpid()
    return _service


def connect_signals() -> None:
    """Connect the worker's signal hooks (Celery signals are process-wide; connecting twice is a no-op)."""
    worker_process_init.connect(_open_pool_in_child)
    worker_process_shutdown.connect(_close_pool)
    setup_logging.connect(_structured_logging)
    worker_ready.connect(_serve_health_and_metrics)
    worker_ready.connect(_freeze_main)  # after the line above: receivers run in the order connected


def _open_pool_in_child(**_: object) -> None:
    global _service
    _service = None  # never reuse a pool inherited through fork
    try:
        get_service()
    except Exception:  # the task retries it, and requeues its message while it fails
        log.exception("cannot set up the rating service in this worker child")
    # what the child keeps for its life is built (or will be, lazily, if that failed): its start-up
    # objects out of the collector's full passes (worker.service.heap)
    freeze_long_lived("worker_child")


def _close_pool(**_: object) -> None:
    if _service is not None and _service_pid == os.getpid():
        _service.pool.close()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(os.getpid())


def _structured_logging(loglevel=None, **_: object) -> None:
    """Celery leaves logging to us: structlog, JSON lines unless on a terminal."""
    settings = _current_settings()
    observability.configure_logging(loglevel or settings.log_level, settings.log_json)


def _serve_health_and_metrics(sender=None, **_: object) -> None:
    """In the worker's main process: /metrics, /healthz and /readyz on ``metrics_port``."""
    from celery import bootsteps

    from worker.redis_url import redis_client

    consumer = sender
    settings = _current_settings()
    # The Redis broker (on RabbitMQ the broker connection is the consumer's: `consuming` below).
    client = (None if settings.broker_is_rabbitmq
              else redis_client(required_url(settings.broker_url, "RATINGS_BROKER_URL"),
                                socket_connect_timeout=3, socket_timeout=3))

    def consuming() -> tuple[bool, dict]:
        running = consumer is not None and consumer.blueprint.state == bootsteps.RUN and consumer.connection is not None
        return running, {"consumer": "running" if running else "stopped"}

    def ready() -> tuple[bool, dict]:
        from worker.store.schema import database_writable

        database_url = required_url(settings.database_url, "RATINGS_DATABASE_URL")
        ok, details = observability.database_and_broker_reachable(database_url, client)
        if ok:  # reachable is not enough: migrated, writable (not a demoted primary), privileged
            details["database_writes"] = database_writable(database_url)
            ok = details["database_writes"] == "ok"
        alive, more = consuming()
        if client is None:  # RabbitMQ: the consumer's own connection is the broker's check
            details["broker"] = "ok" if alive else "not connected"
        return ok and alive, {**details, **more}

    try:
        observability.serve(settings.metrics_port, observability.registry(), consuming, ready)
    except OSError as exc:
        log.error("cannot serve metrics and health on port %s: %s", settings.metrics_port, exc)


def _freeze_main(**_: object) -> None:
    """In the worker's main process, once built (consumer, pool, transport, HTTP server): its start-up
    objects out of the collector's full passes, which otherwise stall polling and acknowledging
    (:mod:`worker.service.heap`)."""
    freeze_long_lived("worker_main")


def _service_or_requeue() -> RatingService:
    """This process's service, the backoff capped below the task's time limit; raises ``Reject``
    (requeue) after a backoff when it cannot be built (broken configuration, database down)."""
    BACKOFF.cap = backoff_cap(0.8 * _current_settings().task_time_limit)
    try:
        return get_service()
    except Exception as exc:  # keep the message
        BACKOFF.wait(exc, "rating service unavailable; requeueing the message")
        raise Reject(f"service unavailable: {exc}", requeue=True) from exc


def apply_match(self, *args, **kwargs) -> str:
    """Apply one MatchFinished message (the task's single positional argument); registered as
    ``ratings.apply_match`` (bound) by :func:`worker.bootstrap.create_app`.

    This body runs when ``RATINGS_BATCH_SIZE`` is 1 (one message per task and transaction); with
    batching, the worker's consumer buffers the messages of this task and applies them in batches
    (:mod:`worker.service.batching`), with the same outcomes per message.

    Any other call shape (no argument, several, keyword arguments) is kept as a dead letter with
    reason ``bad_task_arguments``. Transient database errors that outlast the in-process retries
    requeue the message (``Reject(requeue=True)``), and so does a match deferred because a
    player's row stayed held by another transaction past ``player_lock_wait_ms`` (after a pause of
    ``deferral_backoff_initial`` seconds in this child: without batching there is no buffer to hold
    it in, and a child serves one message at a time anyway); everything else ends as applied,
    duplicate or dead letter, and the message is acknowledged.
    """
    service = _service_or_requeue()
    task_id = self.request.id
    started = time.time()  # the message's latency runs from here: Celery's strategy keeps no receive time
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(task_id=task_id)
    try:
        handled: list = [None]
        lock_wait = service.rate([(task_id, args, kwargs)], handled)
    except TRANSIENT_ERRORS as exc:
        log.error("transient database error outlasted retries; requeueing: %s", exc)
        BACKOFF.wait(exc)
        raise Reject(str(exc), requeue=True) from exc
    except EnvironmentNotReady as exc:  # never a dead letter: wait, then requeue
        BACKOFF.wait(exc)
        raise Reject(str(exc), requeue=True) from exc
    except SoftTimeLimitExceeded as exc:  # the message is fine; this run ran out of time
        log.error("task %s hit its soft time limit; requeueing", task_id)
        raise Reject("soft time limit", requeue=True) from exc
    BACKOFF.reset()
    record_handled(handled[0], time.time() - started, task_id=task_id)
    record_transaction(1 if handled[0].outcome is Outcome.APPLIED else 0, lock_wait)
    if handled[0].outcome is Outcome.DEFERRED:  # a player's row held elsewhere: a short pause, then requeue
        time.sleep(_current_settings().deferral_backoff_initial)
        raise Reject(f"deferred: row of {', '.join(handled[0].blocked_players)} held by another transaction",
                     requeue=True)
    return handled[0].outcome.value


def annul_matches(self, *args, **kwargs) -> str:
    """Annul the matches of one AnnulMatches message (the task's single positional argument:
    ``match_ids``, ``reason``, ``annulled_by``; :func:`worker.producer.publish_annulment`);
    registered as ``ratings.annul_matches`` (bound) by :func:`worker.bootstrap.create_app`.

    The matches leave their ladders' chronological replay, what followed them is re-rated and every
    player whose rating changes gets a ``correction`` event, as with ``ratings annul``
    (:meth:`worker.service.rating_service.RatingService.annul`); annulling again is a no-op, so a
    redelivery is harmless. Bad input ends as a dead letter with a reason code (the message kept).
    A rebuild of the ladder running, transient database errors past the in-process retries and an
    environment not ready requeue the message after a backoff; so does the soft time limit. Returns
    the outcome: ``annulled``, ``already_annulled`` or ``dead_letter``.
    """
    service = _service_or_requeue()
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(task_id=self.request.id)
    try:
        outcome, reason_code = service.annul(self.request.id, args, kwargs)
    except (*TRANSIENT_ERRORS, EnvironmentNotReady, AnnulmentBusy) as exc:  # type: ignore[misc]  # exception types
        log.error("annulment not run now (%s); requeueing: %s", type(exc).__name__, exc)
        BACKOFF.wait(exc)
        raise Reject(str(exc), requeue=True) from exc
    except SoftTimeLimitExceeded as exc:
        log.error("annulment task %s hit its soft time limit; requeueing", self.request.id)
        raise Reject("soft time limit", requeue=True) from exc
    BACKOFF.reset()
    observability.ANNULMENT_MESSAGES.labels(outcome).inc()
    if reason_code is not None:
        observability.MESSAGES.labels(Outcome.DEAD_LETTER.value).inc()
        observability.DEAD_LETTERS.labels(reason_code).inc()
    return outcome


def record_handled(handled: Handled, latency: float, task_id: str | None = None, batch_size: int = 1) -> None:
    """Metrics and one structured log line (at INFO: none below that level) for a handled message.

    ``latency``: seconds from the worker receiving this message to its outcome committed
    (``ratings_message_latency_seconds``; the line's ``duration_ms``); ``batch_size``: messages in
    the batch it was handled in (1 without batching). A deferred match is counted
    (``ratings_deferred_matches_total``) but its latency is not observed: it is observed once, when
    a later delivery is handled.
    """
    observability.MESSAGES.labels(handled.outcome.value).inc()
    if handled.outcome is Outcome.DEFERRED:
        observability.DEFERRED_MATCHES.labels(handled.ladder).inc()
    else:
        observability.MESSAGE_LATENCY_SECONDS.observe(latency)
    if handled.outcome is Outcome.DEAD_LETTER:
        observability.DEAD_LETTERS.labels(handled.reason_code).inc()
    if handled.out_of_order:
        observability.OUT_OF_ORDER.labels(handled.ladder).inc()
    if handled.placed_at_end:
        observability.PLACED_AT_END.labels(handled.ladder).inc()
    if handled.rerated:
        observability.MATCHES_RERATED.labels(handled.ladder).inc(handled.rerated)
    if not log.isEnabledFor(logging.INFO):  # below the level: no line to build
        return
    # task_id given with the line, not bound as context: on the batched path it would outlive the line
    structlog.get_logger("worker.service.tasks").info(
        "match handled", task_id=task_id, outcome=handled.outcome.value, match_id=handled.match_id,
        ladder=handled.ladder, reason_code=handled.reason_code, duration_ms=round(latency * 1000, 2),
        batch_size=batch_size,
    )


def record_transaction(applied: int, lock_wait: float | None) -> None:
    """Metrics of one rating transaction: ``applied`` matches in it and the seconds it waited for
    player row locks (nothing is recorded when no match was applied in one transaction)."""
    if applied and lock_wait is not None:
        observability.BATCH_SIZE.observe(applied)
        observability.TRANSACTION_LOCK_WAIT_SECONDS.observe(lock_wait)
