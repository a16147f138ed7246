"""What a requeued dead letter publishes: the exact bytes of the match argument it was received with."""

from __future__ import annotations

import base64
import json
from typing import Any

from worker.producer import ANNUL_TASK_NAME, TASK_NAME
from worker.service.decoding import _argument_spans

GATE_REASONS = frozenset(
    {"undecodable_body", "unknown_task", "not_a_task_message", "malformed_task_message", "invalid_task_message"}
)
"""Dead letters written by :mod:`worker.service.gate`: their raw body is a whole Celery message body."""


def requeue_task(row: dict[str, Any]) -> str:
    """The task to publish dead letter ``row`` to again: ``ratings.annul_matches`` for an
    annulment's (its headers name that task), else ``ratings.apply_match``."""
    headers = row.get("headers")
    if isinstance(headers, dict) and headers.get("task") == ANNUL_TASK_NAME:
        return ANNUL_TASK_NAME
    return TASK_NAME


class RequeueRefused(ValueError):
    """This dead letter cannot be requeued as it is (the message says why)."""


def _as_argument(text: str) -> bytes:
    """``text`` as the task argument: verbatim when it is one JSON value, else as a JSON string
    holding it (the worker then validates that string's content, as it did the first time)."""
    try:
        json.loads(text)
    except ValueError:
        return json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogateescape")
    return text.encode("utf-8", "surrogateescape")


def requeue_body(row: dict[str, Any]) -> bytes:
    """The task argument (JSON text, UTF-8) to publish again for dead letter ``row`` (a
    ``dead_letters`` row as a dict), for :func:`worker.producer.publish_body`.

    A task-level dead letter's raw body is the exact text of the argument received
    (:mod:`worker.service.decoding`): it is published again byte for byte, so the worker validates
    the same bytes. A Celery-level one (:data:`GATE_REASONS`) holds the whole message body: when it
    is a task body ``[[argument], ...]`` with one argument, that argument's exact text is taken out;
    otherwise the raw text itself is sent (and the worker will dead-letter it again, with the
    reason it has now). Raises :class:`RequeueRefused` for a refused content type (a pickle is never
    deserialized) and for a ``bad_task_arguments`` row.
    """
    if row["reason_code"] == "content_type_refused":
        raise RequeueRefused(
            f"content type {row.get('content_type')!r} is refused for safety (it would have to be "
            "deserialized); fix the producer to send JSON and publish the match again"
        )
    if row["reason_code"] == "bad_task_arguments":
        raise RequeueRefused("the task was called with the wrong arguments; publish the match (or annulment) "
                             "itself again")
    raw = row["raw_body"]
    if row.get("raw_encoding") == "base64":
        raw = base64.b64decode(raw).decode("utf-8", errors="surrogateescape")
    if row["reason_code"] in GATE_REASONS:
        try:
            body = json.loads(raw)
            spans = _argument_spans(raw)
        except ValueError:
            return _as_argument(raw)
        if (isinstance(body, list) and len(body) == 3 and isinstance(body[0], list) and len(body[0]) == 1
                and spans is not None and len(spans) == 1):
            start, end = spans[0]
            return raw[start:end].encode("utf-8", "surrogateescape")
        return _as_argument(raw)
    return _as_argument(raw)
