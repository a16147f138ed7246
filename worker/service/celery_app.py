"""The Celery configuration of the rating worker, from :class:`worker.settings.Settings`.

The app itself is built by :func:`worker.bootstrap.create_app`.

Choices, each with its reason (the decision record
``docs/decisions/0002-exactly-once-with-acks-late-and-a-ledger.md``):

* JSON only (``accept_content``): a pickled message is refused, never executed;
* ``task_acks_late`` + ``task_reject_on_worker_lost``: a message is acknowledged after the rating
  transaction commits; if the child dies first, the message is redelivered, and the ledger's
  idempotency key turns the redelivery into a counted duplicate;
* a small ``worker_prefetch_multiplier`` without batching: a crashed worker strands few reserved
  messages; with batching (:mod:`worker.service.batching`) two batches per child (``2 x batch_size``),
  so one fills while the other is applied (what a dead node strands comes back after the
  visibility timeout);
* ``visibility_timeout`` (Redis transport) above ``task_time_limit``: a message is only
  redelivered once its first run cannot still be going;
* no result backend: results live in PostgreSQL; no ETA or countdown on the rating path;
* (wired by :mod:`worker.bootstrap`) a consumer (:mod:`worker.service.gate`) that dead-letters the
  messages Celery would log and drop;
* the broker connection is retried for ever: a Redis restart must not leave an idle worker;
* (wired by :mod:`worker.bootstrap`, :func:`use_safe_redis_transport`) a ``redis://``/``rediss://``
  broker goes through :mod:`worker.service.transport` (``broker_transport``;
  the URL stays a plain Redis URL): kombu's transport pops a message (``BRPOP``) and records it as
  unacknowledged in a second command, so a Redis stop between the two lost the message; this one
  moves it atomically into an in-flight list first, from which it is always recovered;
* (:func:`use_rabbitmq_quorum_queue`) an ``amqp://``/``amqps://`` broker is RabbitMQ through kombu's
  py-amqp transport: the queue is a durable quorum queue (replicated), publishes wait for the
  broker's confirm, prefetch is per consumer (Celery detects quorum queues and turns global QoS
  off), and a message held unacknowledged past the broker's ``consumer_timeout`` would be
  redelivered (checked at start by :class:`worker.settings.Settings`).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from celery import Celery

from worker.broker import rabbitmq_tls_options, rabbitmq_transport_options
from worker.redis_url import (
    broker_socket_options,
    is_sentinel,
    keep_rediss_default,
    kombu_url,
    parse_sentinel_url,
    sentinel_connection_kwargs,
)
from worker.service import decoding
from worker.settings import Settings


def configure(app: Celery, settings: Settings) -> Celery:
    """Apply the worker's Celery configuration from ``settings`` to ``app``; return ``app``."""
    decoding.install()  # one decoding of every JSON body: no kombu type markers, exact argument text
    app.conf.update(
        broker_url=settings.broker_url,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout,
            "unacked_restore_interval": settings.restore_interval,
            "unacked_restore_throttle": 1,
            "poll_linger": settings.poll_linger,
            # a broker that goes silent without closing its sockets (frozen, partitioned) is noticed
            **broker_socket_options(settings.redis_socket_timeout, settings.redis_health_check_interval),
        },
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        result_backend=None,
        task_default_queue=settings.queue,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_time_limit=settings.task_time_limit,
        task_soft_time_limit=max(1, int(settings.task_time_limit * 0.8)),
        worker_prefetch_multiplier=settings.reserved_per_child,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        enable_utc=True,
        broker_connection_retry=True,
        broker_connection_max_retries=None,
    )
    return app


def use_safe_redis_transport(app: Celery, settings: Settings) -> None:
    """Route a ``redis://``/``rediss://`` broker through :mod:`worker.service.transport` (the URL stays
    a plain Redis URL), a ``sentinel://`` one through its Sentinel variant (the primary's name from
    the URL's ``master_name``, :mod:`worker.redis_url`); other brokers keep kombu's transport."""
    if is_sentinel(settings.broker_url):
        # sentinel://...?master_name=NAME: the same transport on the primary the Sentinels name
        app.conf.broker_url = kombu_url(settings.broker_url or "")
        app.conf.broker_transport = "worker.service.transport:SentinelTransport"
        app.conf.broker_transport_options = {
            **app.conf.broker_transport_options,
            "master_name": parse_sentinel_url(settings.broker_url or "").master_name,
            "sentinel_kwargs": sentinel_connection_kwargs(socket_connect_timeout=settings.redis_socket_timeout,
                                                          socket_timeout=settings.redis_socket_timeout),
        }
        return
    url = urlsplit(settings.broker_url or "")
    if url.scheme in ("redis", "rediss"):
        # An explicit transport replaces the one the URL scheme names, and with it kombu's
        # "rediss:// without ssl_* parameters" default, which is restored here as kombu has it.
        app.conf.broker_transport = "worker.service.transport:Transport"
        keep_rediss_default(app, settings.broker_url or "")


def use_rabbitmq_quorum_queue(app: Celery, settings: Settings) -> None:
    """On an ``amqp://``/``amqps://`` broker: declare the queue as a durable quorum queue, confirm
    every publish, verify an ``amqps://`` server's certificate (against ``broker_ca_file`` and the
    URL's host). Redis brokers are left as they are."""
    if not settings.broker_is_rabbitmq:
        return
    app.conf.update(
        # read/write timeouts (SO_RCVTIMEO/SO_SNDTIMEO, one heartbeat interval): a synchronous AMQP
        # method (an ack's flush, a channel's open or close) on a node that froze would otherwise
        # block the worker's event loop, and with it the heartbeat checks that notice the node
        broker_transport_options={**rabbitmq_transport_options(), "read_timeout": settings.rabbitmq_heartbeat,
                                  "write_timeout": settings.rabbitmq_heartbeat},
        task_default_queue_type="quorum",
        worker_detect_quorum_queues=True,
        # RabbitMQ pushes up to the prefetch window to a connected consumer: a frozen node's share
        # comes back when the broker misses its heartbeats (the visibility timeout's counterpart).
        broker_heartbeat=settings.rabbitmq_heartbeat,
    )
    if (settings.broker_url or "").startswith("amqps://"):
        app.conf.broker_use_ssl = rabbitmq_tls_options(settings.broker_url or "", settings.broker_ca_file)
