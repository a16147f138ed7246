"""PgBouncer in transaction mode, and errors of the environment (read-only, not migrated): real workers, real servers."""

from __future__ import annotations

import json
import os
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from worker import store as repository
from worker.devtools.pgbouncer import PgBouncer, pgbouncer_binary
from worker.devtools.runtime import ServiceProcesses, wait_until_drained
from worker.ops.generate import generate_sedma_matches
from worker.policy.ladders import load_ladders
from worker.producer import producer_app, publish_match
from worker.service.environment import EnvironmentNotReady
from worker.service.rating_service import RatingService
from worker.settings import DEFAULT_LADDERS_FILE, Settings
from worker.store.ladders import LadderPolicy
from worker.store.migrate import migrate
from worker.store.pool import open_pool
from worker.store.urls import url_with

pytestmark = pytest.mark.integration

needs_pgbouncer = pytest.mark.skipif(
    pgbouncer_binary() is None, reason="pgbouncer is not installed (Debian: apt-get install -y pgbouncer; .ci/run does)")


class Scenario:
    """A database, queue and stream of one test, and its worker/relay processes."""

    def __init__(self, admin_url: str, broker_url: str, tmp: Path, migrated: bool = True,
                 events_url: str | None = None):
        suffix = uuid.uuid4().hex[:10]
        self.admin_url = admin_url
        self.dbname = f"ratings_env_{suffix}"
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self.dbname}"')
        self.database_url = url_with(admin_url, dbname=self.dbname)
        if migrated:
            migrate(self.database_url)
        self.broker_url = broker_url
        self.queue, self.stream = f"ratings-env-{suffix}", f"ratings-env-{suffix}.rating-changed"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RATINGS_")}
        self.env.update(RATINGS_DATABASE_URL=self.database_url, RATINGS_DIRECT_DATABASE_URL=self.database_url,
                        RATINGS_BROKER_URL=broker_url, RATINGS_QUEUE=self.queue, RATINGS_STREAM=self.stream,
                        RATINGS_BATCH_SIZE="1", RATINGS_EVENTS_REDIS_URL=events_url or broker_url)
        self.events_url = events_url or broker_url
        self.log_dir = tmp / "logs"
        self.procs = ServiceProcesses(self.env, self.log_dir)
        self.app = producer_app(broker_url)

    def publish(self, matches) -> None:
        with self.app.producer_or_acquire() as producer:
            for m in matches:
                publish_match(self.app, m, queue=self.queue, producer=producer)

    def counts(self) -> repository.Counts:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            return repository.counts(conn)

    def log_lines(self, needle: str) -> int:
        return sum(p.read_text(errors="replace").count(needle) for p in self.log_dir.glob("*.log"))

    def readyz(self, name: str) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.procs.ports[name]}/readyz", timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())
        except OSError:
            return 0, {}

    def close(self) -> None:
        self.procs.stop_all()
        import redis

        client = redis.Redis.from_url(self.events_url)  # the broker too, unless it is RabbitMQ (vhost removed at the end)
        client.delete(self.queue, self.stream, f"_kombu.binding.{self.queue}")
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')


@pytest.fixture
def scenario(servers, events_redis_url, tmp_path) -> Iterator:
    made: list[Scenario] = []

    def make(**kwargs) -> Scenario:
        s = Scenario(servers[0], servers[1], tmp_path, events_url=events_redis_url, **kwargs)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


@needs_pgbouncer
def test_200_matches_through_pgbouncer_in_transaction_mode(scenario, tmp_path):
    """The run that once failed: 200 matches, batch size 1, two workers, through PgBouncer (pool_mode =
    transaction, Debian's package): all 200 applied, no dead letter (before: 74 internal_error
    dead letters from prepared statements), and lock_timeout in force inside the transactions."""
    s = scenario()
    bouncer = PgBouncer.start(tmp_path / "pgbouncer", s.admin_url)
    try:
        pooled = bouncer.url_for(s.database_url)
        s.env.update(RATINGS_DATABASE_URL=pooled, RATINGS_LOCK_TIMEOUT_MS="700", RATINGS_STATEMENT_TIMEOUT_MS="20000",
                     RATINGS_PLAYER_LOCK_WAIT_MS="700", RATINGS_DATABASE_PREPARED_STATEMENTS="false")
        # the store's transaction settings, through PgBouncer: SET LOCAL values seen inside, none after
        with psycopg.connect(pooled, autocommit=True, prepare_threshold=None) as conn:
            inside = repository.transaction_timeouts(conn, repository.TransactionTimeouts(700, 20000))
            after = conn.execute("SHOW lock_timeout").fetchone()[0]
        assert inside == ("700ms", "20s")
        assert after == "0"  # nothing leaks into the (shared) server session
        s.procs.start_worker("w1", concurrency=2)
        s.procs.start_worker("w2", concurrency=2)
        s.procs.start_relay()
        matches = list(generate_sedma_matches(200, players=30, seed=14, id_prefix="bouncer"))
        s.publish(matches)
        c = wait_until_drained(s.database_url, 200, timeout=180)
        assert (c.applied, c.dead_letters, c.duplicates) == (200, 0, 0)
        assert s.log_lines("DuplicatePreparedStatement") == 0

        # lock_timeout inside the worker's own transaction: hold a player's row; a worker whose
        # transaction waits for it at most 700 ms (SET LOCAL lock_timeout in a savepoint) defers
        # the match and retries it, where one with lock_timeout 0 (the options PgBouncer drops)
        # would wait silently for ever.
        with psycopg.connect(s.database_url) as blocker:
            held = blocker.execute("SELECT count(*) FROM (SELECT 1 FROM players WHERE ladder = 'sedma' AND "
                                   "player_id IN ('p0001', 'p0002') FOR UPDATE) AS l").fetchone()[0]
            assert held == 2  # the next match's two players (p0001 and p0002, the most frequent ones)
            s.publish(generate_sedma_matches(1, players=2, seed=99, id_prefix="held"))
            _wait_for(lambda: s.log_lines("held by another transaction") > 0, 60,
                      "a worker deferring the match while the row is held")
        c = wait_until_drained(s.database_url, 201, timeout=60)
        assert (c.applied, c.dead_letters) == (201, 0)
    finally:
        s.procs.stop_all()
        bouncer.stop()


@needs_pgbouncer
def test_prepared_statements_through_a_pgbouncer_that_cannot_keep_them_are_an_error_of_the_environment(scenario,
                                                                                                      tmp_path):
    """``RATINGS_DATABASE_PREPARED_STATEMENTS`` turned on through PgBouncer 1.18 in
    transaction mode, one server connection: a second worker's first prepared statement meets the
    first's, of the same name, in the shared server session (``DuplicatePreparedStatement``). That
    is an error of the environment (reason ``prepared_statements``, the setting to change named),
    not of the message: no dead letter, nothing applied (the run above once made 74
    ``internal_error`` dead letters of it). With the setting off the same message applies."""
    s = scenario()
    bouncer = PgBouncer.start(tmp_path / "pgbouncer", s.admin_url, pool_size=1)
    pools = []
    try:
        pooled = bouncer.url_for(s.database_url)
        ladders = {name: LadderPolicy(name, policy) for name, policy in load_ladders(DEFAULT_LADDERS_FILE).items()}

        def service(**settings) -> RatingService:
            config = Settings(database_url=pooled, broker_url=s.broker_url, max_retries=1, **settings)
            pools.append(open_pool(config))
            return RatingService(pools[-1], ladders, config)

        first, second = (json.dumps(m.model_dump(mode="json"))
                         for m in generate_sedma_matches(2, players=4, seed=5, id_prefix="prep"))
        done: list = [None]
        # explicit: the session's env fixture may have set the variable off for its own PgBouncer pass
        service(database_prepared_statements=True).rate([("t-1", [first], {})], done)
        assert done[0].outcome == "applied"
        with pytest.raises(EnvironmentNotReady) as raised:
            service(database_prepared_statements=True).rate([("t-2", [second], {})])
        assert raised.value.reason == "prepared_statements"
        assert "RATINGS_DATABASE_PREPARED_STATEMENTS=false" in raised.value.detail
        c = s.counts()
        assert (c.applied, c.dead_letters) == (1, 0)
        service(database_prepared_statements=False).rate([("t-2", [second], {})], done)
        assert done[0].outcome == "applied"
        c = s.counts()
        assert (c.applied, c.dead_letters) == (2, 0)
    finally:
        for pool in pools:
            pool.close()
        bouncer.stop()


def test_read_only_database_backs_off_and_recovers(scenario):
    """A database that turns read-only (a demoted primary): no dead letter, no tight loop, not
    ready; once writable again the match is applied within seconds (stale pooled sessions dropped)."""
    s = scenario()
    s.procs.start_worker("w1", concurrency=1)
    s.procs.start_relay()
    _wait_for(lambda: s.readyz("w1")[0] == 200, 60, "the worker ready")
    s.publish(generate_sedma_matches(1, players=4, seed=1, id_prefix="warm"))
    wait_until_drained(s.database_url, 1, timeout=60)  # the child's pool holds a session now
    with psycopg.connect(s.admin_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{s.dbname}" SET default_transaction_read_only = on')
    try:
        # the pooled session predates the setting: make it see read-only as a failed-over one does
        with psycopg.connect(s.admin_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (s.dbname,))
        s.publish(generate_sedma_matches(1, players=4, seed=2, id_prefix="ro"))
        _wait_for(lambda: s.log_lines("database not ready (read_only") >= 1, 60, "the worker reporting read-only")
        status, details = _wait_for(lambda: (r := s.readyz("w1"))[0] == 503 and r, 30, "/readyz not ready")
        assert details["database_writes"] == "read_only"
        observed_from = s.log_lines("database not ready")
        time.sleep(8)  # observe: a tight loop logged ~100 lines a second here
        logged = s.log_lines("database not ready") - observed_from
        print(f"read-only: {logged} 'database not ready' line(s) in 8 s")
        assert logged <= 6  # backoff 1, 2, 4, 8 s: at most a few lines, never hundreds
        with psycopg.connect(s.admin_url, autocommit=True) as admin:
            conn_db = url_with(s.admin_url, dbname=s.dbname)
            with psycopg.connect(conn_db, autocommit=True) as db:
                assert db.execute("SELECT count(*) FROM dead_letters").fetchone()[0] == 0
                assert db.execute("SELECT count(*) FROM ledger").fetchone()[0] == 1
    finally:
        with psycopg.connect(s.admin_url, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{s.dbname}" RESET default_transaction_read_only')
    c = wait_until_drained(s.database_url, 2, timeout=60)
    assert (c.applied, c.dead_letters) == (2, 0)
    _wait_for(lambda: s.readyz("w1")[0] == 200, 30, "ready again")


def test_unmigrated_database_waits_then_applies_after_migrate(scenario):
    """A worker on a database never migrated: one clear line per interval, not ready, no dead
    letter; once `ratings migrate` ran, the queued messages are applied."""
    import subprocess
    import sys

    s = scenario(migrated=False)
    s.publish(generate_sedma_matches(3, players=4, seed=3, id_prefix="early"))
    s.procs.start_worker("w1", concurrency=1)  # the relay refuses a database not migrated: started after
    _wait_for(lambda: s.log_lines("database not ready (not_migrated") >= 1, 60, "the worker reporting not migrated")
    status, details = _wait_for(lambda: (r := s.readyz("w1"))[0] == 503 and r, 30, "/readyz not ready")
    assert details["database_writes"] == "not_migrated"
    observed_from = s.log_lines("database not ready")
    time.sleep(8)
    logged = s.log_lines("database not ready") - observed_from
    print(f"not migrated: {logged} 'database not ready' line(s) in 8 s")
    assert logged <= 6
    done = subprocess.run([sys.executable, "-m", "worker", "migrate"], env=s.env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    s.procs.start_relay()
    c = wait_until_drained(s.database_url, 3, timeout=90)
    assert (c.applied, c.dead_letters) == (3, 0)


def _ratings(env: dict, *args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "worker", *args], env={**env, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=120)


def test_commands_refuse_a_database_not_migrated_and_doctor_reports_it(scenario):
    """One line and exit 3 (environment not ready) for a command on a database never migrated;
    doctor's finding (exit 1); migrate runs."""
    s = scenario(migrated=False)
    for args in (["leaderboard", "--ladder", "sedma"], ["verify", "--ladder", "sedma"], ["dead-letters", "list"],
                 ["relay"]):
        result = _ratings(s.env, *args)
        assert result.returncode == 3, (args, result.stdout, result.stderr)
        assert "not migrated" in result.stderr and "ratings migrate" in result.stderr
        assert "Traceback" not in result.stderr
    doctor = _ratings(s.env, "doctor", "--skip-verify")
    assert doctor.returncode == 1 and "schema version" in doctor.stdout and "not migrated" in doctor.stdout
    assert _ratings(s.env, "migrate").returncode == 0
    assert _ratings(s.env, "leaderboard", "--ladder", "sedma").returncode == 0
    with psycopg.connect(s.database_url, autocommit=True) as conn:  # a migration this code does not ship
        conn.execute("INSERT INTO _yoyo_migration (migration_hash, migration_id, applied_at_utc) "
                     "VALUES ('future', '9999.future', now())")
    newer = _ratings(s.env, "leaderboard", "--ladder", "sedma")
    assert newer.returncode == 3 and "newer than this code" in newer.stderr
    assert _ratings(s.env, "worker").returncode == 3


def test_a_url_of_the_wrong_kind_names_its_variable(scenario):
    s = scenario()
    result = _ratings({**s.env, "RATINGS_DATABASE_URL": "mysql://user:secret@db/ratings"}, "leaderboard",
                      "--ladder", "sedma")
    assert result.returncode == 3
    assert "RATINGS_DATABASE_URL=mysql://... must be a PostgreSQL URL" in result.stderr
    assert "secret" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.redis_broker
def test_publishing_into_an_evicting_redis_is_refused_and_doctor_reports_it(scenario, tmp_path):
    """A Redis with allkeys-lru and maxmemory 4mb evicted the queue; publishing into it is refused."""
    import redis

    from worker.devtools.embedded import EmbeddedServers

    s = scenario()
    own = EmbeddedServers.start(tmp_path / "redis", postgres=False)
    try:
        client = redis.Redis.from_url(own.broker_url)
        client.config_set("maxmemory", "4mb")
        client.config_set("maxmemory-policy", "allkeys-lru")
        env = {**s.env, "RATINGS_BROKER_URL": own.broker_url}
        path = tmp_path / "m.jsonl"
        path.write_text("".join(m.model_dump_json() + "\n" for m in generate_sedma_matches(3, players=4)))
        result = _ratings(env, "publish", str(path))
        assert result.returncode == 3, result.stdout + result.stderr
        assert "maxmemory-policy is allkeys-lru" in result.stderr and "noeviction" in result.stderr
        assert client.llen(s.queue) == 0
        doctor = _ratings(env, "doctor", "--skip-verify")
        assert doctor.returncode == 1 and "allkeys-lru" in doctor.stdout
        client.config_set("maxmemory-policy", "noeviction")
        assert _ratings(env, "publish", str(path)).returncode == 0
        assert client.llen(s.queue) == 3
    finally:
        own.stop()
