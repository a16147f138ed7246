"""The Celery consumer of the rating worker: messages Celery itself would log and drop become
dead letters.

Celery's consumer acknowledges and forgets a message whose body does not decode, whose content type
is refused (a pickled message: only JSON is accepted), that names a task this worker does not know,
or that is not a task message at all. The guarantee that every message received ends as applied,
duplicate or dead letter (the decision record
``docs/decisions/0002-exactly-once-with-acks-late-and-a-ledger.md``) needs each of them
kept, with a reason code and the raw body.
This consumer writes that dead letter in the worker's main process, *then* acknowledges; if the
database cannot be reached, the message is left unacknowledged and Redis redelivers it after the
visibility timeout.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from celery.worker.consumer import Consumer
from kombu.exceptions import ContentDisallowed

from worker.service import observability

if TYPE_CHECKING:
    from worker.store.dead_letter_writer import DeadLetterWriter

log = logging.getLogger(__name__)


def _headers(message: Any) -> dict[str, Any] | None:
    try:
        return json.loads(json.dumps(dict(message.headers or {}), default=repr))
    except (TypeError, ValueError):
        return None


def _task_id(message: Any) -> str | None:
    headers = message.headers or {}
    task_id = headers.get("id") if isinstance(headers, dict) else None
    if not task_id:
        task_id = (message.properties or {}).get("correlation_id")
    return str(task_id) if task_id else None


class _Blueprint(Consumer.Blueprint):
    """Celery's consumer steps without native delayed delivery: on quorum queues (RabbitMQ) it
    declares 28 exchanges and queues for ETA/countdown, which the rating path never uses (the
    decision record ``docs/decisions/0002-exactly-once-with-acks-late-and-a-ledger.md``), and warns that the
    queue's direct exchange cannot take them."""

    default_steps = [s for s in Consumer.Blueprint.default_steps if not s.endswith(":DelayedDelivery")]


class RatingsConsumer(Consumer):
    """Celery's consumer, with every message it would drop kept as a dead letter."""

    Blueprint = _Blueprint

    @property
    def _dead_letters(self) -> DeadLetterWriter:
        # Built by the composition root (worker.bootstrap.create_app) with the worker's settings.
        return self.app.conf.ratings_dead_letters

    def _dead_letter(self, message: Any, reason_code: str, detail: str) -> None:
        failure = self._dead_letters.write(reason_code, detail, message.body, _task_id(message),
                                           message.content_type, _headers(message))
        if failure is not None:
            log.error("cannot record dead letter %s (%s); leaving the message unacknowledged", reason_code, failure)
            return
        log.warning("dead letter %s: %s", reason_code, detail)
        observability.MESSAGES.labels("dead_letter").inc()
        observability.DEAD_LETTERS.labels(reason_code).inc()
        message.ack()

    def on_decode_error(self, message, exc):
        """The body could not be decoded (malformed JSON, or a serializer that is not allowed)."""
        if isinstance(exc, ContentDisallowed):
            return self.on_invalid_task(None, message, exc)
        self._dead_letter(message, "undecodable_body",
                          f"message body does not decode as {message.content_type}: {exc}")

    def on_invalid_task(self, body, message, exc):
        """A refused content type (pickle, yaml, ...) or a task message Celery finds invalid."""
        if isinstance(exc, ContentDisallowed):
            self._dead_letter(message, "content_type_refused",
                              f"content type {message.content_type!r} refused: only application/json is accepted "
                              f"({exc})")
        else:
            self._dead_letter(message, "invalid_task_message", f"invalid task message: {exc}")

    def on_unknown_task(self, body, message, exc):
        """A task message naming a task this worker does not know."""
        name = (message.headers or {}).get("task") if isinstance(message.headers, dict) else None
        self._dead_letter(message, "unknown_task",
                          f"task {name!r} is not known to the rating worker (it runs ratings.apply_match and "
                          "ratings.annul_matches only)")

    def on_unknown_message(self, body, message):
        """A message on the ratings queue that is not a Celery task message."""
        self._dead_letter(message, "not_a_task_message",
                          "message has no Celery task header: publish with worker.producer.publish_match")

    def create_task_handler(self, *args, **kwargs):
        """Celery's handler, with any other failure to turn a message into a request dead-lettered."""
        handle = super().create_task_handler(*args, **kwargs)

        def on_task_received(message):
            try:
                return handle(message)
            except Exception as exc:  # a body that is not [args, kwargs, embed], for example
                log.exception("malformed task message")
                self._dead_letter(message, "malformed_task_message", f"{type(exc).__name__}: {exc}")

        return on_task_received
