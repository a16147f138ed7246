"""Real servers and real worker processes for the integration tests.

PostgreSQL and Redis: the servers named by ``RATINGS_DATABASE_URL`` / ``RATINGS_BROKER_URL`` when
set (CI), embedded ones otherwise; with ``RATINGS_TEST_BROKER=rabbitmq`` the broker is a RabbitMQ
virtual host of the session's own and the event stream stays on Redis (``tests/conftest.py``). Each test session gets its own database (created and dropped
here), its own Celery queue and its own stream, so a shared server is not disturbed. Workers and
the relay are real processes started with ``python -m worker``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import redis

from worker import store as repository
from worker.broker import is_rabbitmq
from worker.devtools.runtime import ServiceProcesses, wait_until_drained
from worker.settings import get_settings
from worker.store.migrate import migrate
from worker.store.urls import url_with

pytestmark = pytest.mark.integration

TABLES = ("ledger, players, rating_changes, outbox, outbox_pending, duplicate_deliveries, dead_letters, ladders, policies, rebuilds, "
          "player_lock_waits, corrections")


class Env:
    """Handles of one integration session: URLs, names, a Redis client and the processes."""

    def __init__(self, database_url: str, broker_url: str, queue: str, stream: str, procs: ServiceProcesses,
                 direct_database_url: str | None = None, events_url: str | None = None):
        self.database_url = database_url
        self.direct_database_url = direct_database_url or database_url
        """The session database without PgBouncer (the same as ``database_url`` unless the run goes
        through PgBouncer: ``RATINGS_TEST_PGBOUNCER=1``)."""
        self.broker_url = broker_url
        self.queue = queue
        self.stream = stream
        self.procs = procs
        self.events_url = events_url or broker_url
        self.redis = redis.Redis.from_url(self.events_url, decode_responses=True)
        """A client of the event stream's Redis (the broker too, unless the broker is RabbitMQ)."""

    @property
    def rabbitmq(self) -> bool:
        """True on the RabbitMQ pass (the broker is a RabbitMQ virtual host)."""
        return is_rabbitmq(self.broker_url)

    def broker_messages(self, queue: str | None = None) -> tuple[int, int]:
        """(queued, reserved-but-unacknowledged) messages of ``queue`` (default: the session's) on
        the broker: Redis's lists and ``unacked`` hash, or RabbitMQ's own counts (rabbitmqctl)."""
        queue = queue or self.queue
        if self.rabbitmq:
            from worker.devtools.rabbitmq import queue_counts

            return queue_counts(urlsplit(self.broker_url).path.lstrip("/"), queue)
        from worker.ops.doctor import queue_depth

        return queue_depth(redis.Redis.from_url(self.broker_url), queue)

    def connect(self) -> psycopg.Connection:
        """A new autocommit connection to the session's database."""
        return psycopg.connect(self.database_url, autocommit=True, prepare_threshold=None)

    def wait_drained(self, expected_received: int, timeout: float = 120.0):
        """Wait until ``expected_received`` messages have ended somewhere and the outbox is empty."""
        return wait_until_drained(self.database_url, expected_received, timeout)

    def wait_stream(self, expected: int, timeout: float = 60.0) -> int:
        """Wait until the stream holds at least ``expected`` entries; return its length."""
        deadline = time.monotonic() + timeout
        while (n := self.redis.xlen(self.stream)) < expected and time.monotonic() < deadline:
            time.sleep(0.1)
        return n


@pytest.fixture(scope="session")
def env(servers, events_redis_url, pgbouncer, tmp_path_factory) -> Iterator[Env]:
    """A migrated database of this session's own, two worker nodes and one relay, all running
    (through PgBouncer in transaction mode when ``RATINGS_TEST_PGBOUNCER=1``)."""
    admin_url, broker_url = servers
    suffix = uuid.uuid4().hex[:10]
    dbname = f"ratings_test_{suffix}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    direct_url = url_with(admin_url, dbname=dbname)
    migrate(direct_url)
    database_url = pgbouncer.url_for(direct_url) if pgbouncer is not None else direct_url
    queue, stream = f"ratings-test-{suffix}", f"ratings-test-{suffix}.rating-changed"
    overrides = {
        "RATINGS_DATABASE_URL": database_url,
        "RATINGS_DIRECT_DATABASE_URL": direct_url,
        "RATINGS_BROKER_URL": broker_url,
        "RATINGS_EVENTS_REDIS_URL": events_redis_url,
        "RATINGS_QUEUE": queue,
        "RATINGS_STREAM": stream,
        # PgBouncer 1.18 (Debian's) keeps no prepared statement between transactions
        "RATINGS_DATABASE_PREPARED_STATEMENTS": "false" if pgbouncer is not None else "true",
    }
    saved = {k: os.environ.get(k) for k in overrides}
    os.environ.update(overrides)
    get_settings.cache_clear()
    procs = ServiceProcesses(dict(os.environ), Path(tmp_path_factory.mktemp("logs")))
    procs.start_worker("w1", concurrency=1)
    procs.start_worker("w2", concurrency=1)
    procs.start_relay()
    handle = Env(database_url, broker_url, queue, stream, procs, direct_url, events_redis_url)
    try:
        yield handle
    finally:
        procs.stop_all()
        handle.redis.delete(queue, stream, f"_kombu.binding.{queue}")
        for key in handle.redis.scan_iter(f"_kombu.binding.{queue}-*"):  # queues of single tests (-logs)
            handle.redis.delete(key)
        for key in handle.redis.scan_iter(f"{stream}:*"):
            handle.redis.delete(key)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        get_settings.cache_clear()
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


@pytest.fixture
def clean(env: Env) -> Env:
    """The session's servers with every table and the stream emptied before the test."""
    with env.connect() as conn:
        conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")
    env.redis.delete(env.stream)
    return env


@pytest.fixture
def publisher(env: Env):
    """A function publishing one message (MatchFinished, dict or raw text) to the session's queue."""
    from worker.producer import producer_app, publish_match

    app = producer_app(env.broker_url)

    def publish(message) -> str:
        return publish_match(app, message, queue=env.queue, validate=False)

    return publish


@pytest.fixture
def publish_in_order(env: Env, publisher):
    """A function publishing messages one at a time, each ended (applied, duplicate or dead letter)
    with its events published before the next is sent. Two workers taking messages published at
    once may commit them in either order, and a match committed after a later one of its players
    is placed with a correction (its `correction` events): tests that count events exactly publish
    this way, so arrival order is finish order."""

    def publish(messages) -> None:
        with env.connect() as conn:
            done = repository.counts(conn).received
        for message in messages:
            publisher(message)
            done += 1
            env.wait_drained(done)

    return publish
