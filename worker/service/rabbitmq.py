"""Reading the RabbitMQ broker: the rating queue's depth (doctor and the relay's metrics)."""

from __future__ import annotations

from typing import Any

from worker.broker import rabbitmq_tls_options


def rabbitmq_queue_depth(broker_url: str, queue: str, ca_file: str | None = None, timeout: float = 5.0) -> int:
    """Messages ready in RabbitMQ ``queue`` (``queue.declare`` passive: its ``message-count``; 0 when
    the queue does not exist yet). Messages delivered to a worker and not yet acknowledged are not
    counted: AMQP does not report them (the management API does). Raises kombu's
    ``OperationalError`` (or the transport's connection errors) when the broker cannot be reached."""
    from amqp.exceptions import NotFound
    from kombu import Connection

    ssl_options: dict[str, Any] | bool = rabbitmq_tls_options(ca_file) if broker_url.startswith("amqps://") else False
    with Connection(broker_url, ssl=ssl_options, connect_timeout=timeout) as conn:
        channel = conn.channel()
        try:
            return int(channel.queue_declare(queue=queue, passive=True).message_count)
        except NotFound:
            return 0
