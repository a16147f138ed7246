"""Reading the RabbitMQ broker: the rating queue's depth (doctor, the relay's metrics) and the start-up TLS check."""

from __future__ import annotations

from typing import Any

from worker.broker import describe_tls_failure, rabbitmq_tls_options


def rabbitmq_queue_depth(broker_url: str, queue: str, ca_file: str | None = None, timeout: float = 5.0) -> int:
    """Messages ready in RabbitMQ ``queue`` (``queue.declare`` passive: its ``message-count``; 0 when
    the queue does not exist yet). Messages delivered to a worker and not yet acknowledged are not
    counted: AMQP does not report them (the management API does). Raises kombu's
    ``OperationalError`` (or the transport's connection errors) when the broker cannot be reached."""
    from amqp.exceptions import NotFound
    from kombu import Connection

    ssl_options: dict[str, Any] | bool = False
    if broker_url.startswith("amqps://"):
        ssl_options = rabbitmq_tls_options(broker_url, ca_file)
    with Connection(broker_url, ssl=ssl_options, connect_timeout=timeout) as conn:
        channel = conn.channel()
        try:
            return int(channel.queue_declare(queue=queue, passive=True).message_count)
        except NotFound:
            return 0


def tls_refusal(broker_url: str, ca_file: str | None = None, timeout: float = 5.0) -> str | None:
    """For an ``amqps://`` broker: connect once; the reason (``tls_certificate_refused: ...``, what to
    change) when the server's certificate is refused, else ``None`` (also when the broker cannot be
    reached now: the worker waits for it as for any broker). ``None`` for ``amqp://``."""
    from kombu import Connection

    if not broker_url.startswith("amqps://"):
        return None
    try:
        with Connection(broker_url, ssl=rabbitmq_tls_options(broker_url, ca_file), connect_timeout=timeout) as conn:
            conn.connect()
    except Exception as exc:  # noqa: BLE001 - only a refused certificate is a reason here
        return describe_tls_failure(exc)
    return None
