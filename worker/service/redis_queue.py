"""The Redis lists a kombu or Celery producer fills for a queue, and kombu's message envelope:
what the worker's transport (:mod:`worker.service.transport`), ``ratings doctor``, the queue-depth
metric and the autoscaling trigger need to know of a queue on Redis.

kombu's Redis transport puts a message with a priority in a list of its own: ``<queue><sep><step>``,
where ``step`` is the largest of the producer's ``priority_steps`` (default ``[0, 3, 6, 9]``) not
above the message's priority (0..9, clamped), ``sep`` is ``"\x06\x16"`` by default and ``":"`` in the
configuration Celery's documentation recommends, and step 0 is the queue's own list. A worker that
watched only the plain list stranded priorities 3 to 9 for ever: the transport takes from every list
:func:`queue_keys` names, most urgent first (kombu's order on Redis: priority 0 first, 9 last), and
puts a message back (a recovery, a requeue) on the plain list. An item that is not a kombu message
envelope at all (someone ``LPUSH``-ed a bare match) is wrapped in one (:func:`envelope`)."""

from __future__ import annotations

import base64
import uuid

from kombu.utils.json import loads

SEPARATORS = ("\x06\x16", ":")
"""Separators of kombu's priority lists: kombu's default, then the one Celery's documentation
recommends (``broker_transport_options={"sep": ":", "priority_steps": list(range(10))}``)."""

PRIORITIES = range(10)
"""Message priorities kombu's Redis transport knows (``min_priority`` 0 .. ``max_priority`` 9)."""


def queue_keys(queue: str) -> list[str]:
    """Every Redis list in which a kombu or Celery producer can place a message for ``queue``,
    most urgent first (kombu's order on Redis: priority 0 before 9): ``queue`` itself (priority 0,
    and any priority when the producer's ``priority_steps`` is ``[0]``), then
    ``queue + sep + str(p)`` for p = 1..9 and each of :data:`SEPARATORS`.

    The one place the worker, ``ratings doctor``, the queue-depth metric and the autoscaling
    trigger get the queue's key names from. Keys have no global key prefix.
    """
    return [queue] + [f"{queue}{sep}{p}" for p in PRIORITIES if p for sep in SEPARATORS]


def as_envelope(item: bytes | str) -> dict | None:
    """The kombu message envelope ``item`` is (a JSON object whose ``properties`` hold a string
    ``delivery_tag``), decoded; None when it is not one. Never raises."""
    raw = item.encode("utf-8", "surrogatepass") if isinstance(item, str) else bytes(item)
    try:
        payload = loads(raw.decode("utf-8"))
    except (ValueError, TypeError, UnicodeDecodeError):
        return None
    props = payload.get("properties") if isinstance(payload, dict) else None
    if isinstance(props, dict) and isinstance(props.get("delivery_tag"), str):
        return payload
    return None


def envelope(item: bytes | str, queue: str) -> dict:
    """The kombu message envelope of one raw list item: the item decoded when it is one (a JSON
    object whose ``properties`` hold a string ``delivery_tag``), else a new envelope carrying the
    item's exact bytes as a base64 body (content type ``application/json``, no task header), so
    Celery's consumer hands it to :class:`worker.service.gate.RatingsConsumer` as "not a task
    message" or "undecodable body" with those bytes kept. Never raises."""
    payload = as_envelope(item)
    if payload is not None:
        return payload
    raw = item.encode("utf-8", "surrogatepass") if isinstance(item, str) else bytes(item)
    return {
        "body": base64.b64encode(raw).decode("ascii"),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {},
        "properties": {
            "body_encoding": "base64",
            "delivery_tag": f"wrapped-{uuid.uuid4()}",
            "delivery_info": {"exchange": "", "routing_key": queue},
            "delivery_mode": 2,
            "priority": 0,
        },
    }
