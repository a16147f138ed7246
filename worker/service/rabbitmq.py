"""Reading the RabbitMQ broker: the rating queue's depth (doctor, the relay's metrics) and the start-up TLS check."""

from __future__ import annotations

from typing import Any

from worker.broker import rabbitmq_tls_options


def rabbitmq_queue_depth(broker_url: str, queue: str, ca_file: str | None = None, timeout: float = 5.0) -> int:
    """Messages ready in RabbitMQ ``queue`` (``queue.declare`` passive: its ``message-count``; 0 when
    the queue does not exist yet). Messages delivered to a worker and not yet acknowledged are not
    counted: AMQP does not report them (the management API does). Raises kombu's
    ``OperationalError`` (or the transport's connection errors) when the broker cannot be reached."""
    from amqp.exceptions import NotFound

    with _connection(broker_url, ca_file, timeout) as conn:
        channel = conn.channel()
        try:
            return int(channel.queue_declare(queue=queue, passive=True).message_count)
        except NotFound:
            return 0


def connect_once(broker_url: str, ca_file: str | None = None, timeout: float = 5.0) -> None:
    """Open and close one connection to the RabbitMQ broker (an ``amqps://`` server's certificate
    verified as the worker verifies it: against ``ca_file`` and the URL's host). Raises what kombu
    raises: ``ssl.SSLCertVerificationError`` in the chain for a refused certificate
    (:func:`worker.tls.tls_refusal` tells it apart), a connection error when the broker is down."""
    with _connection(broker_url, ca_file, timeout) as conn:
        conn.connect()


def _connection(broker_url: str, ca_file: str | None, timeout: float) -> Any:
    """A kombu ``Connection`` to the RabbitMQ broker, an ``amqps://`` one verified as the worker
    verifies it (:func:`worker.broker.rabbitmq_tls_options`)."""
    from kombu import Connection

    ssl_options: dict[str, Any] | bool = False
    if broker_url.startswith("amqps://"):
        ssl_options = rabbitmq_tls_options(broker_url, ca_file)
    return Connection(broker_url, ssl=ssl_options, connect_timeout=timeout)
