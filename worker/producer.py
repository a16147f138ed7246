"""Publishing match-finished messages, for game backends: the one Python producer of the wire format.

Depends on ``schemas``, Celery, kombu, redis-py and pydantic only (no database driver, no worker
settings): the project's default install, which a game backend makes with
``pip install match-rating-worker`` (the service itself is ``pip install 'match-rating-worker[server]'``).
The packages ship ``py.typed``: a type checker reads these functions' annotations. ::

    from worker.producer import producer_app, publish_match
    app = producer_app("redis://localhost:6379/0")
    publish_match(app, match)      # a schemas.MatchFinished, or a dict with datetime/Decimal values
    publish_annulment(app, ["m-1"], reason="cheating", annulled_by="anti-cheat")  # void matches

What goes on the wire (README, "Producers: the wire format"): a Celery protocol 2 task message for
``ratings.apply_match`` whose body is ``[[<match JSON>], {}, {<embed>}]``, pushed (``LPUSH``) on the
Redis list of the queue (``ratings``; a priority puts it on kombu's list for that priority), or on
RabbitMQ (``amqp://``/``amqps://``, :mod:`worker.broker`) published through the default exchange to
the durable quorum queue of that name (declared if missing), returning only once the broker
confirmed it (publisher confirms). The
match JSON is the match's canonical JSON (:meth:`schemas.MatchFinished.canonical_json`) and is
embedded in the body verbatim: the worker validates exactly those bytes.

When the broker cannot be reached, :func:`publish_match` retries with exponential backoff
(:data:`PUBLISH_RETRY_POLICY`: about 7.5 s) and then raises :class:`BrokerUnavailable`;
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
from kombu.transport import redis as kombu_redis
from kombu.utils.json import dumps

from schemas import AnnulMatches, InvalidMessage, MatchFinished, parse_annul_matches, parse_match_finished
from worker.broker import (
    CONFIRM_TIMEOUT,
    QUORUM_QUEUE_ARGUMENTS,
    is_rabbitmq,
    rabbitmq_tls_options,
    rabbitmq_transport_options,
)

TASK_NAME = "ratings.apply_match"
ANNUL_TASK_NAME = "ratings.annul_matches"
DEFAULT_QUEUE = "ratings"

EMBED = b'{"callbacks":null,"errbacks":null,"chain":null,"chord":null}'
"""The third element of a protocol 2 task body (no workflow)."""

PUBLISH_RETRY_POLICY = {"max_retries": 4, "interval_start": 0.5, "interval_step": 1.0, "interval_max": 3.0}
"""kombu retry policy of a publish while the broker is unreachable (kombu's ``Connection.ensure``):
waits of 0.5, 1.5, 2.5 and 3 s between tries, then :class:`BrokerUnavailable`; about 7.5 s in all
when connections are refused at once (measured 7.5 s, for one Redis, three Sentinels or three
RabbitMQ nodes: :func:`publish_retry_policy`), at most :data:`PUBLISH_RETRY_DEADLINE` when each
connect runs into its 2 s timeout (:data:`BROKER_SOCKET_TIMEOUTS`). Each wait is logged as a warning."""

def publish_retry_policy(broker_url: str | None) -> dict[str, float]:
    """:data:`PUBLISH_RETRY_POLICY` for a broker URL that may name several hosts (``;``-separated:
    the Sentinels of a ``sentinel://`` URL, the nodes of a RabbitMQ cluster). kombu counts each
    host it tries as one retry and sleeps only after trying them all (``Connection.completes_cycle``),
    so with three hosts the plain policy gave up after about 0.5 s (five tries, one wait) instead of
    about 7.5 s: ``max_retries`` is multiplied by the number of hosts, which gives every host the
    same waits as a single-host URL (measured: 4 of 3,000 publishes refused during a Sentinel
    failover of 2.4 s before this, none after)."""
    hosts = len([part for part in (broker_url or "").split(";") if part.strip()]) or 1
    return {**PUBLISH_RETRY_POLICY, "max_retries": PUBLISH_RETRY_POLICY["max_retries"] * hosts}


def log_publish_retry(exc: BaseException, interval: float) -> None:
    """kombu's connection errback while a publish retries: a warning naming the error and the wait
    (``interval`` seconds; 0 when kombu moves on to the URL's next host at once, logged at debug)."""
    from worker.redis_url import short_error

    log = logging.getLogger(__name__)
    if interval:
        log.warning("broker unreachable (%s: %s); publish retried in %.1f s", type(exc).__name__, short_error(exc),
                    interval)
    else:
        log.debug("broker host unreachable (%s: %s); trying the next host", type(exc).__name__, short_error(exc))


PUBLISH_RETRY_DEADLINE = 12.0
"""Most seconds a publish spends reconnecting (kombu's ``connect_retries_timeout``; without it
kombu stops at Celery's ``broker_connection_timeout``, 4 s, before the policy's waits are over)."""

_RETRY_TRANSPORT_OPTIONS = {"errback": log_publish_retry, "connect_retries_timeout": PUBLISH_RETRY_DEADLINE}


BROKER_SOCKET_TIMEOUTS = {"socket_connect_timeout": 2.0, "socket_timeout": 5.0}
"""Redis socket timeouts of the producer (seconds): a stopped or unreachable broker fails fast."""


RABBITMQ_SOCKET_TIMEOUTS = {"read_timeout": BROKER_SOCKET_TIMEOUTS["socket_timeout"],
                            "write_timeout": BROKER_SOCKET_TIMEOUTS["socket_timeout"]}
"""py-amqp socket timeouts of the producer on RabbitMQ (seconds): a synchronous AMQP method (channel
open, queue declaration, connection close) on a node that stopped answering fails after this and
the publish is retried on the URL's next node."""


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


class BrokerTlsRefused(BrokerUnavailable):
    """The broker's TLS certificate was refused (``reason``: ``tls_certificate_mismatch``, the
    certificate does not name the URL's host; ``tls_certificate_untrusted``, not signed by the CA
    the URL trusts; ``tls_ca_file_unreadable``, the CA file named cannot be read). Retrying cannot
    help: the message says what to change in the URL or the certificate
    (:func:`worker.tls.tls_refusal`). Raised by :func:`producer_app` when its check meets it, else
    by the publish."""

    def __init__(self, message: str, task_id: str, reason: str):
        super().__init__(message, task_id)
        self.reason = reason


class ReplicasNotAcknowledged(BrokerUnavailable):
    """``wait_replicas`` was asked and fewer replicas acknowledged the publish within
    ``wait_timeout_ms`` (Redis ``WAIT``): the primary has the message, but a failover now could
    lose it. Reason code ``replicas_not_acknowledged``.

    What to do: as for :class:`BrokerUnavailable`, keep the match and publish it again later
    (a repeat is applied once). When it keeps happening, a replica is down or lagging: check
    ``INFO replication`` on the primary. ``acknowledged``/``required``: replicas that did / were asked to.
    """

    reason = "replicas_not_acknowledged"

    def __init__(self, message: str, task_id: str, acknowledged: int, required: int):
        super().__init__(message, task_id)
        self.acknowledged, self.required = acknowledged, required


class _WaitForReplicas:
    """A kombu Redis channel whose publish (``LPUSH``) is followed, on the same connection and in
    the same round trip, by ``WAIT wait_replicas wait_timeout_ms``; raises
    :class:`ReplicasNotAcknowledged` when fewer replicas acknowledged in time.

    Redis documents what it gives (https://redis.io/docs/latest/commands/wait/): the write reached
    that many replicas' memory; it does not make Redis strongly consistent: a replica that had it
    can still lose it (restarted without persistence), and Sentinel may promote a replica that did
    not get it. With ``wait_replicas`` = the number of replicas, a promoted replica has every
    acknowledged publish unless it lost it itself.
    """

    wait_replicas = 0
    wait_timeout_ms = 1000

    def _put(self, queue, message, **kwargs):
        if not self.wait_replicas or kwargs.get("_publish_batch") is not None:
            return super()._put(queue, message, **kwargs)  # type: ignore[misc]
        key = self._q_for_pri(queue, self._get_message_priority(message, reverse=False))  # type: ignore[attr-defined]
        with self.conn_or_acquire() as client, client.pipeline(transaction=False) as pipe:  # type: ignore[attr-defined]
            pipe.lpush(key, dumps(message))
            pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
            acknowledged = int(pipe.execute()[-1])
        if acknowledged < self.wait_replicas:
            raise ReplicasNotAcknowledged(
                f"{acknowledged} of {self.wait_replicas} replica(s) acknowledged the publish within "
                f"{self.wait_timeout_ms} ms (replicas_not_acknowledged): the primary has it, a failover "
                "could lose it; keep the match and publish it again later, and check the replicas "
                "(INFO replication)", "", acknowledged, self.wait_replicas)


class _WaitingChannel(_WaitForReplicas, kombu_redis.Channel):
    from_transport_options = kombu_redis.Channel.from_transport_options + (  # type: ignore[assignment]
        "wait_replicas", "wait_timeout_ms")


class _WaitingSentinelChannel(_WaitForReplicas, kombu_redis.SentinelChannel):
    from_transport_options = kombu_redis.SentinelChannel.from_transport_options + (  # type: ignore[assignment]
        "wait_replicas", "wait_timeout_ms")


class WaitingTransport(kombu_redis.Transport):
    """kombu's Redis transport whose publishes wait for replicas (:class:`_WaitForReplicas`)."""

    Channel = _WaitingChannel


class WaitingSentinelTransport(kombu_redis.SentinelTransport):
    """kombu's Sentinel transport whose publishes wait for replicas (:class:`_WaitForReplicas`)."""

    Channel = _WaitingSentinelChannel


def producer_app(broker_url: str, check_broker: bool = True, wait_replicas: int = 0,
                 wait_timeout_ms: int = 1000, ca_file: str | None = None) -> Celery:
    """A Celery app that can only send: JSON serializer, no result backend, short socket timeouts
    (:data:`BROKER_SOCKET_TIMEOUTS`); on RabbitMQ (``amqp://``/``amqps://``) with publisher confirms,
    and for ``amqps://`` the server's certificate verified against ``ca_file`` (a PEM CA bundle;
    ``None``: the system's CAs) and the URL's host.

    ``broker_url``: ``redis://``, ``rediss://``, ``unix://``, or ``sentinel://...?master_name=NAME``
    (:mod:`worker.redis_url`: the publish goes to the primary the Sentinels name, and follows a failover).

    ``wait_replicas`` (0: off): after each publish, wait until that many replicas acknowledged it,
    at most ``wait_timeout_ms`` milliseconds (Redis ``WAIT`` on the connection that wrote, in the
    same round trip), else raise :class:`ReplicasNotAcknowledged` from the publish. The strongest
    durability a Redis producer can ask for (see :class:`_WaitForReplicas` for what it does not give).
    Redis only (a RabbitMQ publish returns once the quorum queue's majority confirmed it).

    A CA file (``ca_file``, or ``ssl_ca_certs=`` in a Redis URL) that cannot be read raises
    :class:`BrokerTlsRefused` (reason ``tls_ca_file_unreadable``) at once: no publish could succeed.

    ``check_broker``: first refuse a Redis that may evict the queue (``maxmemory-policy``
    ``allkeys-*``): raises :class:`worker.broker_durability.EvictingBroker`. A Redis that cannot be
    reached now is not an error here (a game server may start while its broker restarts): the check
    is skipped with a warning, and :func:`publish_match` retries, then raises
    :class:`BrokerUnavailable`.
    """
    from worker.tls import CA_FILE_UNREADABLE, ca_file_refusal, unreadable_ca_file

    unreadable = unreadable_ca_file(broker_url, ca_file if is_rabbitmq(broker_url) else None)
    if unreadable is not None:
        raise BrokerTlsRefused(ca_file_refusal(unreadable, "ca_file" if unreadable == ca_file else "broker URL"), "",
                               CA_FILE_UNREADABLE)
    if check_broker and broker_url.startswith(("redis://", "rediss://", "unix://", "sentinel://")):
        import redis

        from worker.broker_durability import refuse_evicting_broker

        try:
            refuse_evicting_broker(broker_url)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            _refuse_tls(exc, "")
            logging.getLogger(__name__).warning(
                "broker not reachable (%s): its eviction policy was not checked", type(exc).__name__)
    options: dict[str, Any] = {**BROKER_SOCKET_TIMEOUTS, **_RETRY_TRANSPORT_OPTIONS}
    sentinel = broker_url.startswith("sentinel://")
    if sentinel:
        from worker.redis_url import kombu_url, parse_sentinel_url, sentinel_connection_kwargs

        options["master_name"] = parse_sentinel_url(broker_url).master_name
        options["sentinel_kwargs"] = sentinel_connection_kwargs(**BROKER_SOCKET_TIMEOUTS)
        broker_url = kombu_url(broker_url)
    app = Celery("ratings-producer", broker=broker_url)
    app.conf.update(task_serializer="json", accept_content=["json"], task_ignore_result=True,
                    broker_transport_options=options, broker_connection_retry=False)
    if wait_replicas and not is_rabbitmq(broker_url):
        from worker.redis_url import keep_rediss_default

        options.update(wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms)
        app.conf.broker_transport = f"worker.producer:Waiting{'Sentinel' if sentinel else ''}Transport"
        keep_rediss_default(app, broker_url)
    if is_rabbitmq(broker_url):
        # task_default_queue_type: a plain send_task declares the queue as the workers do (a quorum
        # queue); RabbitMQ refuses a declaration whose arguments differ from the queue's.
        # read/write timeouts (SO_RCVTIMEO/SO_SNDTIMEO): without them, after a confirm timed out on
        # a node that froze (paused VM, partition), closing that connection waited for the node's
        # close-ok for ever, and the producer runs no heartbeats to notice
        app.conf.update(broker_transport_options={**rabbitmq_transport_options(), **_RETRY_TRANSPORT_OPTIONS,
                                                  **RABBITMQ_SOCKET_TIMEOUTS},
                        task_default_queue_type="quorum",
                        broker_connection_timeout=BROKER_SOCKET_TIMEOUTS["socket_connect_timeout"])
        if broker_url.startswith("amqps://"):
            app.conf.broker_use_ssl = rabbitmq_tls_options(broker_url, ca_file)
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


def _refuse_tls(exc: BaseException, task_id: str) -> None:
    """Raise :class:`BrokerTlsRefused` when ``exc`` is a refused broker certificate."""
    from worker.tls import tls_reason, tls_refusal

    if (line := tls_refusal(exc, "broker URL")) is not None:
        raise BrokerTlsRefused(f"match message {task_id} not published: {line}" if task_id else line,
                               task_id, tls_reason(exc) or "") from exc


def _connection_errors(app: Celery) -> tuple[type[BaseException], ...]:
    with app.connection_for_write() as conn:
        errors = tuple(conn.connection_errors)
    if is_rabbitmq(app.conf.broker_url):
        from amqp.exceptions import AccessRefused, MessageNacked

        # a publish the broker refused (nack) or did not confirm within CONFIRM_TIMEOUT; a login
        # the broker refused (wrong user or password, no access to the vhost): not retried
        errors += (MessageNacked, TimeoutError, AccessRefused)
    return errors


def _rabbitmq_options(app: Celery, queue: str) -> dict[str, Any]:
    """Publish options on RabbitMQ: declare the quorum queue (once per connection; again after a
    reconnect) and wait at most :data:`CONFIRM_TIMEOUT` for the broker's confirm. Empty on Redis."""
    if not is_rabbitmq(app.conf.broker_url):
        return {}
    from kombu import Exchange, Queue

    rating_queue = Queue(queue, Exchange(""), routing_key=queue, durable=True, queue_arguments=QUORUM_QUEUE_ARGUMENTS)
    return {"declare": [rating_queue], "confirm_timeout": CONFIRM_TIMEOUT}


def publish_body(app: Celery, argument: bytes, queue: str = DEFAULT_QUEUE, producer: Any = None,
                 priority: int | None = None, task_id: str | None = None, task: str = TASK_NAME) -> str:
    """Publish one ``task`` message (``ratings.apply_match`` unless given) whose argument is the
    JSON text ``argument`` (embedded verbatim, :func:`task_body`) on ``queue``; return its task id.

    Pushed on the queue's list through the default exchange (no binding lookup); ``priority``
    (0..9, kombu's Redis order: 0 first) picks kombu's priority list. On RabbitMQ, returns once the
    broker confirmed the message (the quorum queue's majority has it); a priority is carried but
    not ordered by (quorum queues on RabbitMQ < 4.0 are FIFO). Raises :class:`BrokerUnavailable`
    when the broker stays unreachable through :data:`PUBLISH_RETRY_POLICY`, refuses the message
    (nack) or does not confirm it within :data:`worker.broker.CONFIRM_TIMEOUT` seconds.
    """
    task_id = task_id or str(uuid.uuid4())
    options: dict[str, Any] = {"priority": priority} if priority is not None else {}
    options.update(_rabbitmq_options(app, queue))
    try:
        with app.producer_or_acquire(producer) as p:
            p.publish(
                task_body(argument), exchange="", routing_key=queue, serializer=None,
                content_type="application/json", content_encoding="utf-8",
                headers=task_headers(task_id, argument, task),
                correlation_id=task_id, reply_to="", delivery_mode=2, retry=True,
                retry_policy=publish_retry_policy(app.conf.broker_url), **options,
            )
    except ReplicasNotAcknowledged as exc:
        raise ReplicasNotAcknowledged(f"{task} message {task_id}: {exc}", task_id, exc.acknowledged,
                                      exc.required) from exc
    except (OperationalError, *_connection_errors(app)) as exc:  # type: ignore[misc]  # a tuple of exception types
        from worker.redis_url import short_error

        _refuse_tls(exc, task_id)
        raise BrokerUnavailable(
            f"the broker did not take {task} message {task_id} after "
            f"{publish_retry_policy(app.conf.broker_url)['max_retries'] + 1} tries ({type(exc).__name__}: "
            f"{short_error(exc)}); keep the message and publish it again later: the worker applies a match "
            "once however often it is published (and annulling twice does nothing)", task_id) from exc
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
    "ANNUL_TASK_NAME", "BrokerTlsRefused", "BrokerUnavailable", "DEFAULT_QUEUE", "InvalidMessage",
    "PUBLISH_RETRY_POLICY", "ReplicasNotAcknowledged", "TASK_NAME", "annulment_json", "match_json", "producer_app",
    "publish_annulment", "publish_body", "publish_match", "publish_retry_policy", "task_body", "task_headers",
    "to_json_value",
]
