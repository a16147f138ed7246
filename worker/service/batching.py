"""Batching on the rating path: one worker child applies many queued matches in one transaction.

Why not a library
-----------------
``celery-batches`` (0.11, the well-known one) was evaluated and not taken: it requires
``celery<5.7`` (this project runs 5.7); it acknowledges every message of a batch when the batch
function *returns*, whatever happened inside it (its ``apply_batches_task`` swallows exceptions), so
a transient database error would lose the whole batch; it has no error callback, so a batch whose
child is killed (``task_reject_on_worker_lost``) is neither requeued nor acknowledged, and its
messages stay counted against the node's prefetch window for ever; it sets no time limit on a batch;
and it flushes on a repeating timer, so at low load every message waits up to the flush interval.
The design below keeps its good idea (buffer Celery requests in the consumer, send one pool job per
batch) and fixes those four points.

How it works
------------
The task ``ratings.apply_match`` names :func:`strategy` as its Celery *strategy*: the function
Celery's consumer (the worker's main process) calls for every message of the task. With
``RATINGS_BATCH_SIZE`` = 1 it is Celery's default strategy (one pool job, one transaction per
message). Otherwise a :class:`Batcher` takes each message as a Celery ``Request`` (decoded as the
default strategy does) into a buffer, and sends a batch to the pool as one job
(:func:`apply_batch_in_child`) when

* the buffer holds ``batch_size`` messages and a child is free, or
* a child is free and the oldest buffered message has waited ``batch_flush_interval`` seconds (a
  short linger: at low load a message goes almost at once, alone or with the few that came
  with it), or
* a child finishes its batch while messages wait (at full load, batches grow by themselves to
  what arrived while the previous batch was applied, up to ``batch_size``).

At most one batch per child is in the pool at a time. Each worker child reserves
``2 x batch_size`` messages (``Settings.reserved_per_child``), so one batch fills while another
is applied.

Why acknowledgements stay safe
------------------------------
The child applies the batch (:meth:`worker.service.rating_service.RatingService.rate`: one transaction,
every message's outcome (applied, duplicate, dead letter, redelivery) committed together) and
returns one verdict per message: ``ack`` once its outcome is committed, ``requeue`` otherwise.
Back in the main process, :meth:`Batcher._done` acknowledges or rejects (requeue) each message by
that verdict. So:

* a message is acknowledged only after the transaction holding its outcome committed;
* a match the transaction deferred (a player's row held by another transaction) returns
  ``defer``: the message stays reserved and unacknowledged in this process for a backoff delay
  (the consumer's prefetch raised by one meanwhile), then goes back at the head of the buffer
  (:mod:`worker.service.deferral`); held a quarter of the visibility timeout in all, it is
  requeued to the broker instead;
* a transient error that outlasts the retries, or the soft time limit, returns ``requeue`` for
  every message not committed yet (the whole batch, as nothing of a rolled-back transaction stays);
* a child killed mid-batch (SIGKILL, OOM, hard time limit) reaches the main process as the pool
  job's error: every message of the batch is rejected with requeue, as Celery does for one task
  with ``task_reject_on_worker_lost``. If the kill came after COMMIT, the redelivered messages find
  their own task ids in the ledger, duplicate deliveries or dead letters, and count as
  redeliveries: "published = applied + duplicates + dead letters" stays exact;
* a worker that dies as a whole (main process included) never acknowledged the buffered and
  in-flight messages: the Redis transport keeps them (``unacked`` hash, in-flight lists) and
  returns them to the queue after the visibility timeout;
* a lost broker connection restarts the consumer: buffered messages of the old connection are
  dropped unacknowledged (the transport returns them), a batch in the pool finishes and its
  acknowledgements on the old channel are lost (the visibility timeout returns those messages,
  then counted as redeliveries).

On the batched path a message is applied when its batch runs: ETA/countdown, expiry and revocation
are not honoured (the rating path uses none of them: on Redis a delay past the visibility timeout
would run a task twice; ``docs/decisions/0002-exactly-once-with-acks-late-and-a-ledger.md``).

A reserved message waits for at most one batch before its own and is applied within one time
limit, so ``visibility_timeout`` must exceed twice ``task_time_limit`` plus the flush interval
(checked by :class:`worker.settings.Settings`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from celery import bootsteps
from celery.exceptions import SoftTimeLimitExceeded
from celery.utils.imports import symbol_by_name
from celery.worker import state as worker_state
from celery.worker.request import create_request_cls
from celery.worker.strategy import default as default_strategy
from celery.worker.strategy import hybrid_to_proto2, proto1_to_proto2

from worker.service.deferral import Deferrals
from worker.settings import Settings

log = logging.getLogger(__name__)

ACK = "ack"
REQUEUE = "requeue"
DEFER = "defer"
"""A match the transaction deferred (a player's row held elsewhere): held, then retried
(:mod:`worker.service.deferral`)."""

_current: dict[str, Batcher] = {}
"""The live :class:`Batcher` of each task name in this process (a consumer restart replaces it)."""


def strategy(task, app, consumer, **kwargs):
    """Celery strategy of ``ratings.apply_match``: Celery's default one when ``batch_size`` is 1,
    else a :class:`Batcher`'s message handler."""
    settings: Settings = app.conf.ratings_settings  # set by worker.bootstrap.create_app
    if settings.batch_size == 1:
        return default_strategy(task, app, consumer, **kwargs)
    batcher = Batcher(task, app, consumer, settings)
    previous = _current.get(task.name)
    if previous is not None:
        previous.retire()
    _current[task.name] = batcher
    return batcher.on_message


class Batcher:
    """Buffers one consumer's ``ratings.apply_match`` requests and sends them to the pool in batches.

    Runs in the worker's main process (the consumer's event loop; a lock guards it for pools whose
    callbacks come from other threads). ``settings.batch_size``: most messages per batch;
    ``settings.batch_flush_interval``: seconds a message may wait for company while a child is free.
    """

    def __init__(self, task, app, consumer, settings: Settings):
        self.task = task
        self.app = app
        self.consumer = consumer
        self.pool = consumer.pool
        self.batch_size = settings.batch_size
        self.flush_interval = settings.batch_flush_interval
        self.time_limit = task.time_limit or app.conf.task_time_limit
        self.soft_time_limit = task.soft_time_limit or app.conf.task_soft_time_limit
        self.slots = max(1, int(getattr(self.pool, "limit", None) or app.conf.worker_concurrency or 1))
        self.buffer: list[Any] = []
        self.received: dict[str, float] = {}
        """When each buffered or in-flight message was received (``time.time()``, by task id): the
        start of its ``ratings_message_latency_seconds``, kept while it is held after a deferral."""
        self.in_flight = 0
        self.retired = False
        self.deferrals = Deferrals(settings.deferral_backoff_initial, settings.deferral_backoff_max,
                                   settings.visibility_timeout / 4)
        self._timer = None
        self._lock = threading.RLock()
        self._Request = create_request_cls(symbol_by_name(task.Request), task, consumer.pool, consumer.hostname,
                                           consumer.event_dispatcher, app=app)

    # -- the consumer side
    def on_message(self, message, body, ack, reject, callbacks, **_: Any) -> None:
        """Celery's strategy call for one message: decode it into a request and buffer it."""
        if body is None and "args" not in message.payload:
            body, headers, decoded, utc = message.body, message.headers, False, self.app.uses_utc_timezone()
        elif "args" in message.payload:
            body, headers, decoded, utc = hybrid_to_proto2(message, message.payload)
        else:
            body, headers, decoded, utc = proto1_to_proto2(message, body)
        request = self._Request(
            message, on_ack=ack, on_reject=reject, app=self.app, hostname=self.consumer.hostname,
            eventer=self.consumer.event_dispatcher, task=self.task,
            connection_errors=self.consumer.connection_errors, body=body, headers=headers, decoded=decoded, utc=utc,
        )
        if callbacks:
            for callback in callbacks:
                callback(request)
        self.add(request)

    def add(self, request) -> None:
        """Buffer one request (anything with ``id``, ``args``, ``kwargs``, ``acknowledge()`` and
        ``reject(requeue=)``); flush when the batch is full, or soon when a child is free."""
        worker_state.task_reserved(request)
        with self._lock:
            self.received.setdefault(request.id, time.time())
            self.buffer.append(request)
            if self.in_flight >= self.slots:
                return  # the next finished batch flushes
            if len(self.buffer) >= self.batch_size or self.flush_interval == 0:
                self._flush()
            elif self._timer is None:
                self._timer = self.consumer.timer.call_after(self.flush_interval, self._on_timer)

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
            if self.in_flight < self.slots:
                self._flush()

    def retire(self) -> None:
        """This batcher's consumer was replaced (a lost broker connection): drop what it buffered.

        The dropped messages are not acknowledged; the transport returns them to the queue.
        """
        with self._lock:
            self.retired = True
            for request in self.buffer:
                worker_state.task_ready(request)
                self.received.pop(request.id, None)
            if self.buffer:
                log.warning("dropped %d buffered message(s) of a closed consumer; the broker redelivers them",
                            len(self.buffer))
            self.buffer.clear()

    def _running(self) -> bool:
        return not self.retired and self.consumer.blueprint.state == bootsteps.RUN

    def _flush(self) -> None:
        """Send batches to the pool while a child is free and messages wait (lock held)."""
        while self.buffer and self.in_flight < self.slots and self._running():
            batch, self.buffer = self.buffer[:self.batch_size], self.buffer[self.batch_size:]
            calls = [(r.id, r.args, r.kwargs) for r in batch]
            received = [self.received.get(r.id) for r in batch]
            self.in_flight += 1
            self.pool.apply_async(
                apply_batch_in_child, args=(calls, received),
                callback=lambda verdicts, batch=batch: self._done(batch, verdicts),
                error_callback=lambda exc_info, batch=batch: self._failed(batch, exc_info),
                timeout=self.time_limit, soft_timeout=self.soft_time_limit,
                correlation_id=f"batch-{uuid.uuid4()}",
            )

    # -- results, in the main process
    def _done(self, batch: list, verdicts: list[str]) -> None:
        """The child returned: acknowledge each message whose outcome committed, requeue the others."""
        with self._lock:
            self.in_flight -= 1
            self._settle(batch, verdicts)
            self._flush()

    def _failed(self, batch: list, exc_info: Any) -> None:
        """The pool job failed (child killed, hard time limit): requeue every message of the batch."""
        with self._lock:
            self.in_flight -= 1
            log.error("batch of %d lost (%s); requeueing its messages", len(batch),
                      getattr(exc_info, "exception", exc_info))
            self._settle(batch, [REQUEUE] * len(batch))
            self._flush()

    def _settle(self, batch: list, verdicts: list[str]) -> None:
        """Acknowledge or requeue each message of ``batch`` by its verdict, on its own channel.

        A deferred message (``defer``) is held for its backoff (:meth:`_hold`), not settled.
        After a lost broker connection (this batcher retired) the channel is gone: nothing is sent,
        and the transport returns the messages after the visibility timeout (redeliveries of
        committed messages are counted once). A failed acknowledgement is logged, never raised:
        it must not stop the worker, and the message comes back the same way.
        """
        held = [r for r, v in zip(batch, verdicts) if v == DEFER] if not self.retired else []
        if held:
            batch, verdicts = self._hold(batch, verdicts)
        for request in batch:
            worker_state.task_ready(request)
            self.deferrals.forget(request.id)
            self.received.pop(request.id, None)
        if not self.retired:
            acks = [r for r, v in zip(batch, verdicts) if v == ACK]
            if acks:
                self._ack_together(acks)
            for request, verdict in zip(batch, verdicts):
                if verdict != ACK:
                    self._one(request, "requeue")
        else:
            log.warning("%d message(s) of a closed consumer left unacknowledged; the broker redelivers them",
                        len(batch))

    def _hold(self, batch: list, verdicts: list[str]) -> tuple[list, list[str]]:
        """Hold each deferred message of ``batch`` for its backoff delay (the consumer's prefetch
        raised by one meanwhile), then put it back at the head of the buffer; a message held too
        long in all is requeued to the broker instead. Returns the rest of ``batch`` and verdicts."""
        rest: list = []
        rest_verdicts: list[str] = []
        held: list = []
        delay = 0.0
        for request, verdict in zip(batch, verdicts):
            wait = self.deferrals.next_delay(request.id) if verdict == DEFER else None
            if wait is not None:
                held.append(request)
                delay = max(delay, wait)
                continue
            rest.append(request)
            rest_verdicts.append(REQUEUE if verdict == DEFER else verdict)
        if held:  # one timer: they come back together, in queue order (per-player order kept)
            self.consumer.qos.increment_eventually(len(held))
            self.consumer.timer.call_after(delay, lambda: self._retry_held(held))
        return rest, rest_verdicts

    def _retry_held(self, held: list) -> None:
        """Held messages' backoff ended: back to the head of the buffer in queue order (dropped if
        this batcher retired: its channel is gone and the transport returns the messages)."""
        with self._lock:
            self.consumer.qos.decrement_eventually(len(held))
            if self.retired:
                for request in held:
                    worker_state.task_ready(request)
                    self.received.pop(request.id, None)
                return
            self.buffer[:0] = held
            self._flush()

    def _ack_together(self, requests: list) -> None:
        """Acknowledge ``requests`` in one broker round trip when their channel can
        (:meth:`worker.service.transport.Channel.basic_ack_many`), else one by one."""
        channel = getattr(requests[0].message, "channel", None)
        bulk = getattr(channel, "basic_ack_many", None)
        if bulk is None or any(getattr(r.message, "channel", None) is not channel for r in requests):
            for request in requests:
                self._one(request, "ack")
            return
        pending = [r for r in requests if not r.acknowledged and not r.message.acknowledged]
        try:
            bulk([r.message.delivery_tag for r in pending])
        except Exception as exc:  # noqa: BLE001 - e.g. the channel closed under us
            log.warning("could not acknowledge %d message(s) (%s: %s); the broker redelivers them", len(pending),
                        type(exc).__name__, exc)
            return
        for request in pending:
            request.message._state = "ACK"  # what kombu's Message.ack records after basic_ack
            request.acknowledged = True

    def _one(self, request, verdict: str) -> None:
        """Acknowledge or requeue one message; a failure is logged, never raised."""
        try:
            if verdict == ACK:
                request.acknowledge()
            else:
                request.reject(requeue=True)
        except Exception as exc:  # noqa: BLE001 - e.g. the channel closed under us
            log.warning("could not %s message %s (%s: %s); the broker redelivers it", verdict, request.id,
                        type(exc).__name__, exc)


def apply_batch_in_child(calls: list[tuple[str | None, list, dict]],
                         received: list[float | None] | None = None) -> list[str]:
    """The pool job: apply ``calls`` (``(task_id, args, kwargs)`` in queue order) as one batch.

    Runs in a worker child. ``received``: when the consumer received each call's message
    (``time.time()``; ``None``: when the batch started here), the start of its latency. Returns one
    verdict per call, ``"ack"`` (its outcome is committed), ``"defer"`` or ``"requeue"``; records
    metrics and one log line per handled message. Never raises for a database error or the soft
    time limit: those calls are requeued.
    """
    from worker.service.environment import BACKOFF, backoff_cap
    from worker.service.tasks import (  # the child's service, opened after fork
        _current_settings,
        get_service,
        record_handled,
        record_transaction,
    )

    handled: list = [None] * len(calls)
    started = time.time()
    lock_wait = None
    BACKOFF.cap = backoff_cap(0.8 * _current_settings().task_time_limit)
    try:
        service = get_service()
        lock_wait = service.rate(calls, handled)
        BACKOFF.reset()
    except SoftTimeLimitExceeded:
        log.error("batch of %d hit its soft time limit; requeueing what did not commit", len(calls))
    except Exception as exc:  # the environment (not migrated, read-only...), transient errors past the
        # retries, the service unavailable: keep the messages, and wait before the next batch (no tight loop)
        BACKOFF.wait(exc, f"requeueing {sum(1 for h in handled if h is None)} message(s) of a batch of {len(calls)}")
    committed = time.time()  # every outcome is committed now; the messages are acknowledged when this returns
    for (task_id, _, _), h, since in zip(calls, handled, received or [None] * len(calls)):
        if h is not None:
            record_handled(h, committed - (since or started), task_id=task_id, batch_size=len(calls))
    # lock_wait None: nothing applied in one transaction (or the messages were applied one by one)
    record_transaction(sum(1 for h in handled if h is not None and h.outcome == "applied"), lock_wait)
    return [REQUEUE if h is None else DEFER if h.outcome == "deferred" else ACK for h in handled]
