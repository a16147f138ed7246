"""Composition root of the rating worker: settings, ladder policies, pool, service and Celery app, wired in one place.

Everything the running worker is made of is chosen here, once per process:

* the settings are read once (:func:`worker.settings.get_settings`) and handed down;
* each ladder's policy is loaded once from the ladders file into a
  :class:`worker.store.ladders.LadderPolicy` (policy, canonical content, version together);
* :func:`create_app` builds the Celery app through :func:`worker.service.celery_app.configure`
  and registers, in the commented block below, the broker transport, the consumer, the rating
  task with its strategy, the annulment task, and the signal hooks (logging, the pool per child after fork, health
  and metrics);
* the connection pool and the :class:`worker.service.rating_service.RatingService` are built by
  :func:`build_service`, called in each worker child after fork (never at import).

No module builds a Celery app at import time; ``ratings worker`` calls ``create_app(settings)``
and starts ``app.worker_main``.
"""

from __future__ import annotations

from collections.abc import Mapping

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded

from worker.policy.ladders import load_ladders
from worker.policy.shapes import ONE_V_ONE, load_ladder_shapes
from worker.policy.stored import ladder_contents
from worker.service import celery_app, tasks
from worker.service.rating_service import ANNUL_TASK, RatingService
from worker.settings import Settings, get_settings
from worker.store.ladders import LadderPolicy
from worker.store.pool import open_pool

RATING_TASK = "ratings.apply_match"
"""The task name of the rating path (what producers send); annulments go to
:data:`worker.service.rating_service.ANNUL_TASK`."""


def load_ladder_policies(settings: Settings) -> dict[str, LadderPolicy]:
    """Each configured ladder's :class:`LadderPolicy`, read once from ``settings.ladders_file``.

    Raises :class:`worker.policy.ladders.LadderConfigError` naming the file and key at fault.
    """
    contents = ladder_contents(settings.ladders_file)
    shapes = load_ladder_shapes(settings.ladders_file)
    return {name: LadderPolicy(name, policy, contents.get(name), shapes.get(name, ONE_V_ONE))
            for name, policy in load_ladders(settings.ladders_file).items()}


def build_service(settings: Settings, ladders: Mapping[str, LadderPolicy]) -> RatingService:
    """The rating service of one worker child: its own connection pool (open it after fork) and the
    ladders loaded by the root; the task's soft time limit interrupts it (the message is requeued)."""
    return RatingService(open_pool(settings), ladders, settings, interrupts=(SoftTimeLimitExceeded,))


def create_app(settings: Settings | None = None) -> Celery:
    """The worker's Celery app for ``settings`` (read from the environment when omitted).

    Loads the ladder policies once (raises :class:`worker.policy.ladders.LadderConfigError` for a
    broken ladders file, before any message is taken); opens no connection.
    """
    settings = settings or get_settings()
    ladders = load_ladder_policies(settings)
    app = celery_app.configure(Celery("ratings"), settings)
    app.conf.ratings_settings = settings  # read by the task strategy in the consumer (batching)

    # -- the wiring, in one place ------------------------------------------------------------
    # Broker transport: kombu's Redis transport loses a message popped just before a Redis stop;
    # worker.service.transport moves it atomically into an in-flight list first.
    celery_app.use_safe_redis_transport(app, settings)
    # RabbitMQ (amqp://): a replicated quorum queue, publisher confirms, verified TLS for amqps://.
    celery_app.use_rabbitmq_quorum_queue(app, settings)
    # Consumer: dead-letters the messages Celery would log and drop (undecodable, unknown task...).
    app.conf.worker_consumer = "worker.service.gate:RatingsConsumer"
    # The rating task, with its strategy: one task per message at batch size 1 (Celery's own
    # strategy), else the consumer buffers messages and sends them to the pool in batches.
    app.task(name=RATING_TASK, bind=True, Strategy="worker.service.batching:strategy")(tasks.apply_match)
    # The annulment task (game backends' `ratings annul`): one message, one transaction, Celery's strategy.
    app.task(name=ANNUL_TASK, bind=True)(tasks.annul_matches)
    # The service each worker child builds after fork (the pool is never shared through fork).
    tasks.use_service(lambda: build_service(settings, ladders), settings)
    # Signal hooks: structured logging, the pool per child (open after fork, close at exit), and
    # /metrics, /healthz and /readyz in the main process once the worker is ready.
    tasks.connect_signals()
    return app
