"""Shared test configuration: where the repository's neighbour ``shared/`` folder is."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.profiles  # noqa: F401 - registers and loads the Hypothesis profile (HYPOTHESIS_PROFILE)
from worker.devtools.embedded import EmbeddedServers

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA = REPO_ROOT / "tests" / "data"
"""Real match data and the Sedma reference vectors (``tests/data/README.md`` says where from)."""



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


RABBITMQ_PASS = os.environ.get("RATINGS_TEST_BROKER") == "rabbitmq"
"""``RATINGS_TEST_BROKER=rabbitmq``: the session's broker is RabbitMQ, a virtual host of its own on the
machine's node (``RATINGS_TEST_RABBITMQ_URL``, default ``amqp://guest:guest@127.0.0.1:5672``), and the
event stream stays on the Redis of ``RATINGS_BROKER_URL`` (or an embedded one)."""


def pytest_collection_modifyitems(config, items):
    """On the RabbitMQ pass, tests marked ``redis_broker`` (they test the Redis broker itself) are
    deselected (not skipped: they ran on the Redis pass)."""
    if not RABBITMQ_PASS:
        return
    keep = [i for i in items if i.get_closest_marker("redis_broker") is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("redis_broker") is not None])
        items[:] = keep


@pytest.fixture(scope="session")
def events_redis_url(servers, tmp_path_factory) -> Iterator[str]:
    """The Redis of the rating-changed stream: ``RATINGS_EVENTS_REDIS_URL`` when set, else the
    session's broker when it is Redis, else ``RATINGS_BROKER_URL`` when that is Redis (the RabbitMQ
    pass), else an embedded Redis."""
    url = os.environ.get("RATINGS_EVENTS_REDIS_URL")
    if not url and not RABBITMQ_PASS:
        url = servers[1]
    if not url and (os.environ.get("RATINGS_BROKER_URL") or "").startswith("redis"):
        url = os.environ["RATINGS_BROKER_URL"]
    if url:
        yield url
        return
    embedded = EmbeddedServers.start(None, postgres=False)
    try:
        yield embedded.broker_url
    finally:
        embedded.stop()


@pytest.fixture(scope="session")
def servers(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(admin database URL, broker URL) of real servers: configured ones or embedded ones; on the
    RabbitMQ pass (``RATINGS_TEST_BROKER=rabbitmq``) the broker is a virtual host made for the session."""
    db = os.environ.get("RATINGS_DATABASE_URL")
    broker = os.environ.get("RATINGS_BROKER_URL")
    vhost = None
    if RABBITMQ_PASS:
        from worker.devtools import rabbitmq

        vhost = f"ratings-test-{uuid.uuid4().hex[:10]}"
        rabbitmq.vhost(vhost)
        base = os.environ.get("RATINGS_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672")
        broker = f"{base}/{vhost}"
    embedded = None
    if not db or not broker:
        embedded = EmbeddedServers.start(None, postgres=not db, redis_server=not broker)
    try:
        yield db or embedded.database_url, broker or embedded.broker_url
    finally:
        if embedded is not None:
            embedded.stop()
        if vhost is not None:
            rabbitmq.vhost(vhost, create=False)


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory):
    """A CA made for this session and a server certificate for ``localhost`` only
    (:class:`tests.tls.TlsFiles`): clients trust ``ca_pem``; connecting to ``127.0.0.1`` instead of
    ``localhost`` meets a certificate that does not match the host."""
    from tests.tls import make_tls_files

    return make_tls_files(tmp_path_factory.mktemp("tls"))
