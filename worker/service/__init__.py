"""The running service: Celery app and tasks, batching, the broker transport, the relay, metrics."""
