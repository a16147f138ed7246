"""The worker, the relay and the producer over TLS, to a real PostgreSQL and a real Redis that
accept TLS only, with a CA the test made (``tls_files``, :mod:`tests.tls`); and a certificate that
does not match the host in the URL, refused at start with a reason code and what to change.

The certificate names ``localhost`` only: the URLs with ``localhost`` verify it
(``sslmode=verify-full``, ``ssl_cert_reqs=required``), the same servers reached as ``127.0.0.1``
present a certificate that does not match.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psycopg
import pytest

from tests.tls import MISMATCHED_HOST, PG_BIN, TlsPostgres, TlsRedis
from worker.devtools.runtime import ServiceProcesses, wait_until_drained
from worker.ops.generate import generate_sedma_matches
from worker.producer import BrokerTlsRefused, producer_app, publish_match
from worker.store.migrate import migrate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def tls_servers(tls_files, tmp_path_factory):
    if not (PG_BIN / "postgres").exists():
        pytest.skip("PostgreSQL 15's binaries are not in /usr/lib/postgresql/15/bin")
    redis_server = TlsRedis(tls_files, tmp_path_factory.mktemp("tls-redis"))
    try:
        postgres = TlsPostgres(tls_files)
    except BaseException:
        redis_server.stop()
        raise
    yield postgres, redis_server
    postgres.stop()
    redis_server.stop()


def _env(database_url: str, broker_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATINGS_")}
    env.update(RATINGS_DATABASE_URL=database_url, RATINGS_BROKER_URL=broker_url, RATINGS_QUEUE="ratings-tls",
               RATINGS_STREAM="ratings-tls.rating-changed")
    return env


def test_worker_relay_and_producer_apply_and_relay_matches_over_tls_only(tls_servers, tmp_path):
    """Migrations, a worker, the relay and the producer, every connection TLS with the
    certificate and its host verified (the servers refuse plain connections): 30 matches
    applied, 30 x 2+ events on the stream, and the database saw the worker's sessions encrypted."""
    postgres, redis_server = tls_servers
    database_url, broker_url = postgres.url(), redis_server.url()
    migrate(database_url)
    procs = ServiceProcesses(_env(database_url, broker_url), tmp_path / "logs")
    try:
        procs.start_worker("tls-w1")
        procs.start_relay()
        app = producer_app(broker_url)
        matches = [m.model_dump(mode="json") for m in generate_sedma_matches(30, players=20, seed=7, id_prefix="tls")]
        with app.producer_or_acquire() as producer:
            for m in matches:
                publish_match(app, m, queue="ratings-tls", producer=producer)
        counts = wait_until_drained(database_url, 30, timeout=90)
        assert (counts.applied, counts.dead_letters) == (30, 0)
        with psycopg.connect(database_url, autocommit=True) as conn:
            events = conn.execute("SELECT count(*) FROM outbox").fetchone()[0]
            encrypted = conn.execute(
                "SELECT count(*) FILTER (WHERE s.ssl), count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a "
                "USING (pid) WHERE a.backend_type = 'client backend'").fetchone()
        assert events >= 60
        assert encrypted[0] == encrypted[1] >= 2  # ours, the relay's and the worker's: all TLS
        client = redis_server.client()
        deadline = time.monotonic() + 30
        while client.xlen("ratings-tls.rating-changed") < events and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client.xlen("ratings-tls.rating-changed") == events
    finally:
        procs.stop_all()


def test_a_certificate_that_does_not_match_the_host_is_refused_at_start_with_what_to_change(tls_servers, tmp_path):
    """The same servers as 127.0.0.1 (the certificate names localhost): ``ratings worker`` and
    ``ratings relay`` exit 3 (environment not ready) at once, naming each URL's variable, ``tls_certificate_mismatch`` and
    the fix; the producer raises BrokerTlsRefused with that reason instead of retrying."""
    postgres, redis_server = tls_servers
    env = _env(postgres.url(host=MISMATCHED_HOST), redis_server.url(host=MISMATCHED_HOST))
    for command in (["worker"], ["relay"]):
        done = subprocess.run([sys.executable, "-m", "worker", *command], env=env, capture_output=True,
                              text=True, timeout=60)
        out = " ".join((done.stdout + done.stderr).split())
        assert done.returncode == 3, out
        for setting in ("RATINGS_DATABASE_URL", "RATINGS_BROKER_URL"):
            assert f"{setting}: TLS certificate refused (tls_certificate_mismatch)" in out, out
        assert "put a host name the certificate names" in out
    with pytest.raises(BrokerTlsRefused) as caught:
        producer_app(redis_server.url(host=MISMATCHED_HOST))
    assert caught.value.reason == "tls_certificate_mismatch"
    assert "certificate is not valid for '127.0.0.1'" in str(caught.value)
