"""Publishing match-finished messages, for game backends.

Depends on ``schemas`` and Celery only: a game backend does not import the worker's tasks, its
database code or its settings. ::

    from celery import Celery
    from worker.producer import publish_match
    broker = Celery(broker="redis://localhost:6379/0")
    publish_match(broker, match)            # match: schemas.MatchFinished
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from schemas import MatchFinished

TASK_NAME = "ratings.apply_match"
DEFAULT_QUEUE = "ratings"


def producer_app(broker_url: str, check_broker: bool = True) -> Celery:
    """A Celery app that can only send: JSON serializer, no result backend.

    ``check_broker``: first refuse a Redis that may evict the queue (``maxmemory-policy``
    ``allkeys-*``): raises :class:`worker.broker_durability.EvictingBroker`, or
    ``redis.ConnectionError`` when Redis cannot be reached.
    """
    if check_broker and broker_url.startswith(("redis://", "rediss://", "unix://")):
        from worker.broker_durability import refuse_evicting_broker

        refuse_evicting_broker(broker_url)
    app = Celery("ratings-producer", broker=broker_url)
    app.conf.update(task_serializer="json", accept_content=["json"], task_ignore_result=True)
    return app


def publish_match(app: Celery, match: MatchFinished | dict[str, Any] | str, queue: str = DEFAULT_QUEUE, producer: Any = None) -> str:
    """Send one message to ``ratings.apply_match`` on ``queue``; return the Celery task id.

    ``match`` is a :class:`schemas.MatchFinished` (sent as its JSON form) or, for tools and tests,
    an already-serialized dict or raw text that the worker will validate. ``producer``: an open
    kombu producer to reuse when publishing many messages. Raises kombu's ``OperationalError``
    when the broker cannot be reached.
    """
    body = match.model_dump(mode="json") if isinstance(match, MatchFinished) else match
    result = app.send_task(TASK_NAME, args=[body], queue=queue, producer=producer, ignore_result=True)
    return result.id
