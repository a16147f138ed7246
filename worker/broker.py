"""Which broker a URL names, and what the RabbitMQ one needs: quorum queues, publisher confirms, TLS.

Standard library only (the producer install and the settings use it). The broker is chosen by the URL's scheme:

* ``redis://``, ``rediss://``, ``unix://``: Redis (the default, and the demo's), through the
  project's own kombu transport (:mod:`worker.service.transport`);
* ``amqp://``, ``amqps://``: RabbitMQ (3.10 or later) through kombu's py-amqp transport. The queue is
  a durable **quorum queue** (Raft-replicated over the cluster's nodes: a publish confirmed by the
  broker is on a majority of them), publishes wait for the broker's **publisher confirm**, and
  workers acknowledge after the rating transaction commits, as on Redis.

What differs on RabbitMQ 3.10 (``docs/operators/brokers.md``): quorum queues have no message
priorities before RabbitMQ 4.0 (a priority is accepted and every message is consumed, in FIFO
order); prefetch is per consumer (quorum queues refuse global QoS; Celery detects this).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "sentinel://")
AMQP_SCHEMES = ("amqp://", "amqps://")

QUORUM_QUEUE_ARGUMENTS = {"x-queue-type": "quorum"}
"""Arguments of the rating queue on RabbitMQ: a replicated quorum queue (always durable). Workers
(Celery's ``task_default_queue_type="quorum"``) and producers declare it with exactly these, so
whichever comes first creates it and the other's declaration matches."""

CONFIRM_TIMEOUT = 10.0
"""Seconds a publish waits for the broker's confirm before it counts as failed (and is retried,
then :class:`worker.producer.BrokerUnavailable`): a quorum queue confirms once a majority of its
nodes wrote the message, which takes longer while a leader is being elected."""


def is_rabbitmq(url: str | None) -> bool:
    """True when ``url`` names a RabbitMQ broker (``amqp://`` or ``amqps://``)."""
    return bool(url and url.startswith(AMQP_SCHEMES))


def rabbitmq_tls_options(broker_url: str, ca_file: str | None = None) -> dict[str, Any]:
    """py-amqp TLS options of an ``amqps://`` connection (Celery's ``broker_use_ssl``): the server's
    certificate must chain to ``ca_file`` (a PEM bundle; ``None``: the system's trusted CAs) and name
    the URL's host (the first URL's, for a ``;``-separated failover list: give its nodes one
    certificate naming every host). A certificate that does not is refused at connect time with
    ``ssl.SSLCertVerificationError``. The host is set here because kombu would otherwise check
    ``127.0.0.1`` for a URL naming ``localhost`` (it rewrites that name before the TLS handshake)."""
    host = urlsplit(broker_url.split(";")[0]).hostname
    return {"context": {"cafile": ca_file, "check_hostname": True}, "server_hostname": host}


def rabbitmq_transport_options() -> dict[str, Any]:
    """kombu transport options of a RabbitMQ connection: publisher confirms on every channel (a
    publish returns once the broker has taken responsibility for the message, raises otherwise)."""
    return {"confirm_publish": True}
