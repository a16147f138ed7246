"""Publishing match-finished messages, for game backends: the one Python producer of the wire format.

Depends on ``schemas``, kombu and Celery only (no database driver, no worker settings): a game
backend installs it with ``pip install 'match-rating-worker[producer]'`` (see the README). ::

    from worker.producer import producer_app, publish_match
    app = producer_app("redis://localhost:6379/0")
    publish_match(app, match)      # a schemas.MatchFinished, or a dict with datetime/Decimal values
    publish_annulment(app, ["m-1"], reason="cheating", annulled_by="anti-cheat")  # void matches

What goes on the wire (README, "Producers: the wire format"): a Celery protocol 2 task message for
``ratings.apply_match`` whose body is ``[[<match JSON>], {}, {<embed>}]``, pushed (``LPUSH``) on the
Redis list of the queue (``ratings``; a priority puts it on kombu's list for that priority). The
match JSON is the match's canonical JSON (:meth:`schemas.MatchFinished.canonical_json`) and is
embedded in the body verbatim: the worker validates exactly those bytes.

When the broker cannot be reached, :func:`publish_match` retries with exponential backoff
(:data:`PUBLISH_RETRY_POLICY`: about 5 s) and then raises :class:`BrokerUnavailable`;
re-publishing the same match later is safe (``match_id`` is the idempotency key).
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError

from schemas import AnnulMatches, InvalidMessage, MatchFinished, parse_annul_matches, parse_match_finished

TASK_NAME = "ratings.apply_match"
ANNUL_TASK_NAME = "ratings.annul_matches"
DEFAULT_QUEUE = "ratings"

EMBED = b'{"callbacks":null,"errbacks":null,"chain":null,"chord":null}'
"""The third element of a protocol 2 task body (no workflow)."""

PUBLISH_RETRY_POLICY = {"max_retries": 4, "interval_start": 0.5, "interval_step": 1.0, "interval_max": 3.0}
"""kombu retry policy of a publish while the broker is unreachable (kombu's ``Connection.ensure``):
waits of 0.5, 1.5 and 2.5 s between tries (each wait at most 3 s), then :class:`BrokerUnavailable`;
about 5 s in all when connections are refused at once (measured 4.6 s), longer when each connect
runs into its 2 s timeout (:data:`BROKER_SOCKET_TIMEOUTS`)."""

BROKER_SOCKET_TIMEOUTS = {"socket_connect_timeout": 2.0, "socket_timeout": 5.0}
"""Redis socket timeouts of the producer (seconds): a stopped or unreachable broker fails fast."""


class BrokerUnavailable(OperationalError):
    """The broker could not be reached after the retries of :data:`PUBLISH_RETRY_POLICY`.

    The match was not published (or its publish cannot be confirmed). What to do: keep the match
    (in the game backend's own storage or outbox) and publish it again later; publishing a match
    twice is safe, the worker applies it once (``match_id`` is the idempotency key).
    ``task_id`` is the id the message would have had.
    """

    def __init__(self, message: str, task_id: str):
        super().__init__(message)
        self.task_id = task_id


def producer_app(broker_url: str, check_broker: bool = True) -> Celery:
    """A Celery app that can only send: JSON serializer, no result backend, short socket timeouts
    (:data:`BROKER_SOCKET_TIMEOUTS`).

    ``check_broker``: first refuse a Redis that may evict the queue (``maxmemory-policy``
    ``allkeys-*``): raises :class:`worker.broker_durability.EvictingBroker`. A Redis that cannot be
    reached now is not an error here (a game server may start while its broker restarts): the check
    is skipped with a warning, and :func:`publish_match` retries, then raises
    :class:`BrokerUnavailable`.
    """
    if check_broker and broker_url.startswith(("redis://", "rediss://", "unix://")):
        import redis

        from worker.broker_durability import refuse_evicting_broker

        try:
            refuse_evicting_broker(broker_url)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            logging.getLogger(__name__).warning(
                "broker not reachable (%s): its eviction policy was not checked", type(exc).__name__)
    app = Celery("ratings-producer", broker=broker_url)
    app.conf.update(task_serializer="json", accept_content=["json"], task_ignore_result=True,
                    broker_transport_options=dict(BROKER_SOCKET_TIMEOUTS), broker_connection_retry=False)
    return app


def to_json_value(value: Any, path: str = "match") -> Any:
    """What a Python caller naturally passes, as plain JSON values (dict, list, str, int, float,
    bool, None); raises ``TypeError`` or ``ValueError`` naming the field for anything else.

    * ``datetime`` with a UTC offset -> ISO 8601 text in UTC with a ``Z`` suffix; a naive one is
      refused (``ValueError``: the instant it means is unknown; attach ``tzinfo``);
    * ``Decimal`` -> ``int`` when integral, else ``float`` (refused when not finite);
    * a pydantic model -> its JSON form (``model_dump(mode="json")``); any mapping -> ``dict``;
      tuples and lists -> ``list``;
    * a bare ``date`` or ``time``, ``bytes``, sets and other objects are refused (``TypeError``).
    """
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value!r} is not a JSON number")
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{path}: naive datetime {value.isoformat()}: attach tzinfo (e.g. timezone.utc)")
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{path}: Decimal {value} is not a JSON number")
        return int(value) if value == value.to_integral_value() else float(value)
    if hasattr(value, "model_dump") and callable(value.model_dump):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): to_json_value(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return [to_json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (date, time)):
        raise TypeError(f"{path}: a bare {type(value).__name__} is not a date-time; pass an aware datetime")
    raise TypeError(f"{path}: values of type {type(value).__name__} are not part of the match-finished contract")


def match_json(match: MatchFinished | Mapping[str, Any] | str | bytes, validate: bool = True) -> bytes:
    """The JSON text (UTF-8) that goes into the task body as the match.

    Validated (default): the match's canonical JSON; raises :class:`schemas.InvalidMessage` (with
    its reason code) for a match the worker would dead-letter, and ``TypeError``/``ValueError``
    (:func:`to_json_value`) for values that are not JSON, so nothing invalid is published.
    ``validate=False`` (tools and tests that publish bad input on purpose): a mapping as
    ``json.dumps(value, ensure_ascii=False)``; ``str``/``bytes`` as given when they are one JSON value,
    else as a JSON string holding
    the text (which the worker validates as the message).
    """
    if isinstance(match, MatchFinished):
        return match.canonical_json()
    if isinstance(match, (str, bytes, bytearray)):
        text = match.decode("utf-8", "surrogateescape") if isinstance(match, (bytes, bytearray)) else match
        if validate:
            return parse_match_finished(text).canonical_json()
        try:
            json.loads(text)
        except ValueError:
            return json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogateescape")
        return text.encode("utf-8", "surrogateescape")
    value = to_json_value(match)
    if validate:
        return parse_match_finished(value).canonical_json()
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: only the escaped form is valid UTF-8 JSON
        return json.dumps(value).encode("ascii")


def task_body(argument: bytes) -> bytes:
    """The protocol 2 body of ``ratings.apply_match`` (or another one-argument task) with
    ``argument`` (one JSON value, UTF-8) embedded verbatim: ``[[<argument>],{},{<embed>}]``."""
    return b"[[" + argument + b"],{}," + EMBED + b"]"


def task_headers(task_id: str, argument: bytes, task: str = TASK_NAME) -> dict[str, Any]:
    """The Celery protocol 2 headers of one ``task`` message (``ratings.apply_match`` unless
    given; what ``Celery.send_task`` sets; the worker needs ``task`` and ``id``)."""
    shown = argument[:200].decode("utf-8", "replace")
    return {
        "lang": "py", "task": task, "id": task_id, "shadow": None, "eta": None, "expires": None,
        "group": None, "group_index": None, "retries": 0, "timelimit": [None, None], "root_id": task_id,
        "parent_id": None, "argsrepr": f"[{shown}]", "kwargsrepr": "{}",
        "origin": f"{os.getpid()}@{socket.gethostname()}", "ignore_result": True,
    }


def _connection_errors(app: Celery) -> tuple[type[BaseException], ...]:
    with app.connection_for_write() as conn:
        return tuple(conn.connection_errors)


def publish_body(app: Celery, argument: bytes, queue: str = DEFAULT_QUEUE, producer: Any = None,
                 priority: int | None = None, task_id: str | None = None, task: str = TASK_NAME) -> str:
    """Publish one ``task`` message (``ratings.apply_match`` unless given) whose argument is the
    JSON text ``argument`` (embedded verbatim, :func:`task_body`) on ``queue``; return its task id.

    Pushed on the queue's list through the default exchange (no binding lookup); ``priority``
    (0..9, kombu's Redis order: 0 first) picks kombu's priority list. Raises
    :class:`BrokerUnavailable` when the broker stays unreachable through :data:`PUBLISH_RETRY_POLICY`.
    """
    task_id = task_id or str(uuid.uuid4())
    options = {"priority": priority} if priority is not None else {}
    try:
        with app.producer_or_acquire(producer) as p:
            p.publish(
                task_body(argument), exchange="", routing_key=queue, serializer=None,
                content_type="application/json", content_encoding="utf-8",
                headers=task_headers(task_id, argument, task),
                correlation_id=task_id, reply_to="", delivery_mode=2, retry=True,
                retry_policy=PUBLISH_RETRY_POLICY, **options,
            )
    except (OperationalError, *_connection_errors(app)) as exc:  # type: ignore[misc]  # a tuple of exception types
        raise BrokerUnavailable(
            f"the broker did not take {task} message {task_id} after {PUBLISH_RETRY_POLICY['max_retries'] + 1} "
            f"tries ({type(exc).__name__}: {exc}); keep the message and publish it again later: the "
            "worker applies a match once however often it is published (and annulling twice does nothing)",
            task_id) from exc
    return task_id


def publish_match(app: Celery, match: MatchFinished | Mapping[str, Any] | str | bytes, queue: str = DEFAULT_QUEUE,
                  producer: Any = None, priority: int | None = None, validate: bool = True) -> str:
    """Send one match to ``ratings.apply_match`` on ``queue``; return the Celery task id.

    ``match``: a :class:`schemas.MatchFinished`, or what a Python caller naturally has (a dict with
    ``datetime`` and ``Decimal`` values, nested models) or its JSON text: turned into the canonical
    message (:func:`match_json`) or refused before anything is published. Raises
    :class:`schemas.InvalidMessage` (with the reason code the worker would give), ``TypeError`` or
    ``ValueError`` for input that is not a valid match, and :class:`BrokerUnavailable` when the
    broker cannot be reached. ``producer``: an open kombu producer to reuse when publishing many
    messages; ``priority``: 0..9 (every priority is consumed; 0 first). ``validate=False`` is for
    tools and tests that publish bad input on purpose.
    """
    return publish_body(app, match_json(match, validate), queue, producer, priority)


def publish_annulment(app: Celery, match_ids: Sequence[str], reason: str, annulled_by: str,
                      queue: str = DEFAULT_QUEUE, producer: Any = None) -> str:
    """Send one annulment to ``ratings.annul_matches`` on ``queue``; return the Celery task id.

    ``match_ids``: the matches to annul (1 to 1000 ids, as published); ``reason``: why (kept on
    record); ``annulled_by``: who decides (a service or a person). The worker removes them from
    their ladders' chronological replay, re-rates what followed and sends ``correction`` events;
    annulling an annulled match does nothing, so publishing it again is safe. Raises
    :class:`schemas.InvalidMessage` (with the reason code the worker would give) before anything
    is published, and :class:`BrokerUnavailable` when the broker cannot be reached.
    """
    message = parse_annul_matches({"schema_version": 1, "match_ids": list(match_ids), "reason": reason,
                                   "annulled_by": annulled_by})
    return publish_body(app, annulment_json(message), queue, producer, task=ANNUL_TASK_NAME)


def annulment_json(message: AnnulMatches) -> bytes:
    """The JSON text (UTF-8, compact, keys in field order) of an :class:`schemas.AnnulMatches`."""
    return json.dumps(message.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


__all__ = [
    "ANNUL_TASK_NAME", "BrokerUnavailable", "DEFAULT_QUEUE", "InvalidMessage", "PUBLISH_RETRY_POLICY", "TASK_NAME",
    "annulment_json", "match_json", "producer_app", "publish_annulment", "publish_body", "publish_match", "task_body",
    "task_headers", "to_json_value",
]
