"""Composition root of the rating worker, its relay and its operator commands: settings, ladder
policies, database connections, the service, the relay and the Celery app, wired in one place.

Everything a process of the service is made of is chosen here, once per process:

* the settings are read once (:func:`worker.settings.get_settings`) and handed down;
* the ladders file is read here: :func:`ladder_files` (each ladder's policy with its content and
  source, for ``ratings policy``), :func:`engine_policies` (ladder name to engine policy) and
  :func:`load_ladder_policies` (each ladder's :class:`worker.store.ladders.LadderPolicy`: policy,
  canonical content and version together, for the rating service and annulments);
* :func:`open_database` opens the one-off connections of operator commands (the CLI never opens
  one itself);
* :func:`create_app` builds the Celery app through :func:`worker.service.celery_app.configure`
  and registers, in the commented block below, the broker transport, the consumer and its
  dead-letter writer, the rating task with its strategy, the annulment task, and the signal hooks
  (logging, the pool per child after fork, health and metrics);
* the connection pool and the :class:`worker.service.rating_service.RatingService` are built by
  :func:`build_service`, called in each worker child after fork (never at import);
* :func:`build_relay` builds the outbox relay process (its health server and its loop).

No module builds a Celery app at import time; ``ratings worker`` calls ``create_app(settings)``
and starts ``app.worker_main``. Celery and the service modules are imported by the functions that
need them, so an operator command that only reads the database does not load them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from worker.policy.ladders import load_ladder_policies as load_ladder_files
from worker.policy.shapes import ONE_V_ONE, load_ladder_shapes
from worker.policy.stored import ladder_contents
from worker.settings import Settings, get_settings
from worker.store.connection import Connection, connect
from worker.store.dead_letter_writer import DeadLetterWriter
from worker.store.ladders import LadderPolicy

if TYPE_CHECKING:
    from celery import Celery

    from engine.policy import AnyPolicy
    from worker.policy.config import LoadedPolicy
    from worker.service.rating_service import RatingService

RATING_TASK = "ratings.apply_match"
"""The task name of the rating path (what producers send); annulments go to
:data:`worker.service.rating_service.ANNUL_TASK`."""


def ladder_files(settings: Settings) -> dict[str, LoadedPolicy]:
    """Ladder name to :class:`worker.policy.config.LoadedPolicy` (policy, content, source file),
    read from ``settings.ladders_file``.

    Raises :class:`worker.policy.ladders.LadderConfigError` naming the file, line and key at fault.
    """
    return load_ladder_files(settings.ladders_file)


def engine_policies(settings: Settings) -> dict[str, AnyPolicy]:
    """Ladder name to :class:`engine.AnyPolicy` (``version`` set) from ``settings.ladders_file``;
    raises as :func:`ladder_files`."""
    return {name: loaded.policy for name, loaded in ladder_files(settings).items()}


def load_ladder_policies(settings: Settings) -> dict[str, LadderPolicy]:
    """Each configured ladder's :class:`LadderPolicy`, read once from ``settings.ladders_file``.

    Raises :class:`worker.policy.ladders.LadderConfigError` naming the file and key at fault.
    """
    contents = ladder_contents(settings.ladders_file)
    shapes = load_ladder_shapes(settings.ladders_file)
    return {name: LadderPolicy(name, loaded.policy, contents.get(name), shapes.get(name, ONE_V_ONE))
            for name, loaded in ladder_files(settings).items()}


def open_database(settings: Settings, *, autocommit: bool = False, connect_timeout: float | None = None,
                  session: bool = False) -> Connection:
    """One connection for an operator command (use it as a context manager): to
    ``settings.database_url``, or with ``session`` to ``settings.session_database_url`` (a direct
    connection past PgBouncer, for session state: advisory locks, migrations). ``connect_timeout``
    in seconds. Raises ``ValueError`` when the URL is not set and
    :data:`worker.store.connection.DatabaseUnreachable` when the server does not answer."""
    url = settings.session_database_url if session else settings.database_url
    if not url:
        raise ValueError("RATINGS_DATABASE_URL is not set")
    return connect(url, autocommit=autocommit, connect_timeout=connect_timeout)


def build_service(settings: Settings, ladders: Mapping[str, LadderPolicy]) -> RatingService:
    """The rating service of one worker child: its own connection pool (open it after fork) and the
    ladders loaded by the root; the task's soft time limit interrupts it (the message is requeued)."""
    from celery.exceptions import SoftTimeLimitExceeded

    from worker.service.rating_service import RatingService
    from worker.store.pool import open_pool

    return RatingService(open_pool(settings), ladders, settings, interrupts=(SoftTimeLimitExceeded,))


def create_app(settings: Settings | None = None) -> Celery:
    """The worker's Celery app for ``settings`` (read from the environment when omitted).

    Loads the ladder policies once (raises :class:`worker.policy.ladders.LadderConfigError` for a
    broken ladders file, before any message is taken); opens no connection.
    """
    from celery import Celery

    from worker.service import celery_app, tasks
    from worker.service.rating_service import ANNUL_TASK

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
    # Consumer: dead-letters the messages Celery would log and drop (undecodable, unknown task...),
    # through the store's writer (one connection of the main process, opened on first use).
    app.conf.worker_consumer = "worker.service.gate:RatingsConsumer"
    app.conf.ratings_dead_letters = DeadLetterWriter(settings.database_url or "")
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


@dataclass
class Relay:
    """The outbox relay process: ``settings`` and the configured ladders' engine ``policies`` (for
    the metrics' rating figures)."""

    settings: Settings
    policies: dict[str, AnyPolicy]

    def run(self, stop: threading.Event | None = None) -> None:
        """Serve /metrics, /healthz and /readyz, then relay events until ``stop`` is set (forever if
        ``None``); see :func:`worker.service.relay.run_relay`."""
        from worker.service.relay import run_relay, serve_relay_http

        heartbeat = serve_relay_http(self.settings, self.policies)
        run_relay(self.settings, stop, heartbeat=heartbeat)


def build_relay(settings: Settings) -> Relay:
    """The relay for ``settings``, its policies read from the ladders file (raises
    :class:`worker.policy.ladders.LadderConfigError` for a broken file); opens no connection."""
    return Relay(settings, engine_policies(settings))


def build_api(settings: Settings):
    """The read API application (:func:`worker.api.app.create_app`) with its own read-only pool on
    ``settings.api_url`` (``RATINGS_API_DATABASE_URL``, else ``RATINGS_DATABASE_URL``), sized by
    ``settings.api_pool_max_size``. Raises ``ValueError`` when neither URL is set."""
    from worker.api.app import create_app
    from worker.store.pool import open_read_pool

    if not settings.api_url:
        raise ValueError("RATINGS_API_DATABASE_URL is not set (nor RATINGS_DATABASE_URL)")
    pool = open_read_pool(settings.api_url, settings.api_pool_max_size, settings.db_connect_timeout)
    return create_app(settings, pool)


def api_from_environment():
    """The factory ``ratings api`` hands uvicorn: :func:`build_api` on the environment's settings,
    called in each uvicorn worker process (the pool is opened there, never at import)."""
    return build_api(get_settings())
