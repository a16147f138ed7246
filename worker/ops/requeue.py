"""What a requeued dead letter publishes: the message body the worker will validate again."""

from __future__ import annotations

import base64
import json
from typing import Any

GATE_REASONS = frozenset(
    {"undecodable_body", "unknown_task", "not_a_task_message", "malformed_task_message", "invalid_task_message"}
)
"""Dead letters written by :mod:`worker.service.gate`: their raw body is a whole Celery message body."""


class RequeueRefused(ValueError):
    """This dead letter cannot be requeued as it is (the message says why)."""


def requeue_body(row: dict[str, Any]) -> str | dict | list:
    """The argument to publish again for dead letter ``row`` (a ``dead_letters`` row as a dict).

    A task-level dead letter's raw body is the task argument: it is sent again as it was kept.
    A Celery-level one holds the whole task body ``[args, kwargs, embed]``: its single argument is
    taken out when it has that shape; otherwise the raw text itself is sent (and the worker will
    dead-letter it again, with the reason it has now). Raises :class:`RequeueRefused` for a
    refused content type (a pickle is never deserialized) and for a ``bad_task_arguments`` row.
    """
    if row["reason_code"] == "content_type_refused":
        raise RequeueRefused(
            f"content type {row.get('content_type')!r} is refused for safety (it would have to be "
            "deserialized); fix the producer to send JSON and publish the match again"
        )
    raw = row["raw_body"]
    if row.get("raw_encoding") == "base64":
        raw = base64.b64decode(raw).decode("utf-8", errors="backslashreplace")
    if row["reason_code"] == "bad_task_arguments":
        raise RequeueRefused("the task was called with the wrong arguments; publish the match itself again")
    if row["reason_code"] in GATE_REASONS:
        try:
            body = json.loads(raw)
        except ValueError:
            return raw
        if isinstance(body, list) and len(body) == 3 and isinstance(body[0], list) and len(body[0]) == 1:
            return body[0][0]
        return raw
    return raw
