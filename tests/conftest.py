"""Shared test configuration: where the repository's neighbour ``shared/`` folder is."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.devtools.embedded import EmbeddedServers

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"



@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI (``CI`` set), a skipped test is a failure: nothing may pass by being skipped."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which counts as a failure: {report.longrepr}"


@pytest.fixture(scope="session")
def pgbouncer(servers, tmp_path_factory):
    """With ``RATINGS_TEST_PGBOUNCER=1``: a PgBouncer in transaction pooling mode in front of the
    session's PostgreSQL (the worker processes' ``RATINGS_DATABASE_URL`` then goes through it, and
    ``RATINGS_DIRECT_DATABASE_URL`` reaches PostgreSQL directly). Otherwise None."""
    if os.environ.get("RATINGS_TEST_PGBOUNCER") not in ("1", "true", "yes"):
        yield None
        return
    from worker.devtools.pgbouncer import PgBouncer

    bouncer = PgBouncer.start(tmp_path_factory.mktemp("pgbouncer"), servers[0])
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture(scope="session")
def events_redis_url(servers, tmp_path_factory) -> Iterator[str]:
    """The Redis of the rating-changed stream: ``RATINGS_EVENTS_REDIS_URL`` when set, else the
    session's broker when it is Redis, else (a RabbitMQ broker) an embedded Redis."""
    url = os.environ.get("RATINGS_EVENTS_REDIS_URL")
    if url or not servers[1].startswith(("amqp://", "amqps://")):
        yield url or servers[1]
        return
    embedded = EmbeddedServers.start(tmp_path_factory.mktemp("events-redis"), postgres=False)
    try:
        yield embedded.broker_url
    finally:
        embedded.stop()


@pytest.fixture(scope="session")
def servers(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(admin database URL, broker URL) of real servers: configured ones or embedded ones."""
    db = os.environ.get("RATINGS_DATABASE_URL")
    broker = os.environ.get("RATINGS_BROKER_URL")
    embedded = None
    if not db or not broker:
        embedded = EmbeddedServers.start(tmp_path_factory.mktemp("servers"), postgres=not db, redis_server=not broker)
    try:
        yield db or embedded.database_url, broker or embedded.broker_url
    finally:
        if embedded is not None:
            embedded.stop()
