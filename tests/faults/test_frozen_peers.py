"""Peers that go silent: a server SIGSTOPped mid-stream (a paused VM, a partition) keeps its
sockets open and never answers, never sends an RST or a FIN. Only a client-side deadline notices.

A killed server is another matter (its kernel closes the sockets: tests/faults/test_redis_failover.py,
test_server_restarts.py); these scenarios freeze the peer instead, and check that the service goes
on with a replacement where one exists, or waits and resumes where none does, with nothing lost or
applied twice. Every frozen process is resumed or killed in a ``finally``.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from worker.devtools.sentinel import ReplicatedRedis, sentinel_binary
from worker.producer import BrokerUnavailable, producer_app, publish_match

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

FROZEN_SETTINGS = {
    "RATINGS_VISIBILITY_TIMEOUT": "10",
    "RATINGS_TASK_TIME_LIMIT": "4",
    "RATINGS_RESTORE_INTERVAL": "1",
}


@pytest.fixture
def replicated_redis(tmp_path):
    if sentinel_binary() is None:
        pytest.skip("redis-sentinel is not installed (Debian: apt-get install -y redis-sentinel; .ci/run does)")
    rr = ReplicatedRedis.start(tmp_path / "replicated-redis", replicas=2, sentinels=3)
    yield rr
    rr.stop()  # SIGKILL, a frozen node too


def _applied(cluster) -> set[str]:
    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        return {m for (m,) in conn.execute("SELECT match_id FROM ledger")}


def _applied_twice(cluster) -> int:
    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM (SELECT match_id, player_id FROM rating_changes "
                            "WHERE superseded_by IS NULL GROUP BY 1, 2 HAVING count(*) > 1) t").fetchone()[0]


SENTINEL_MATCHES, SENTINEL_RATE, FREEZE_AT = 300, 40, 100
"""Matches published, at most per second, and the publish after which the primary is frozen."""

SENTINEL_BOUND = 60.0
"""Seconds after the freeze by which every acknowledged publish must be applied, the old primary
still frozen: the failover (Sentinel's ``down-after-milliseconds``, 1 s, plus its election, about
3 s), the workers noticing their silent broker connection (``RATINGS_REDIS_SOCKET_TIMEOUT``, 5 s,
for a command; ``brpop_timeout`` + 2 x ``RATINGS_REDIS_HEALTH_CHECK_INTERVAL``, 11 s, for a
waiting poll), the visibility timeout (10 s) for what they held unacknowledged, and the drain."""


def test_primary_frozen_mid_stream_sentinel_fails_over_and_workers_follow(replicated_redis, cluster_factory):
    """A Redis primary SIGSTOPped after 100 of 300 matches published at 40/s: Sentinel promotes a
    replica, the producer publishes the rest to it, and the workers (on the ``sentinel://`` URL)
    apply every acknowledged publish within :data:`SENTINEL_BOUND` seconds of the freeze while the
    old primary is still frozen; none twice, none unpublished; the invariants hold after it is resumed."""
    rr = replicated_redis
    cluster = cluster_factory("frozen-sentinel-primary", FROZEN_SETTINGS, broker_url=rr.url()).start()
    messages = cluster.matches(SENTINEL_MATCHES)
    app = producer_app(rr.url())
    succeeded: list[str] = []
    failed: dict[str, str] = {}
    reached = threading.Event()

    def publish_steadily() -> None:
        start, i = time.monotonic(), 0
        while i < len(messages):
            with app.producer_or_acquire() as producer:  # a new one after a failed publish, as a game server would
                for m in messages[i:]:
                    time.sleep(max(0.0, start + i / SENTINEL_RATE - time.monotonic()))
                    if i == FREEZE_AT:
                        reached.set()
                    i += 1
                    try:
                        publish_match(app, m, queue=cluster.queue, producer=producer)
                        succeeded.append(m["match_id"])
                    except BrokerUnavailable as exc:
                        failed[m["match_id"]] = f"{getattr(exc, 'reason', 'broker_unavailable')}: {exc.__cause__!r}"
                        break

    publisher = threading.Thread(target=publish_steadily)
    publisher.start()
    frozen = None
    try:
        assert reached.wait(60), "the stream never reached the freeze point"
        frozen = rr.freeze_primary()
        frozen_at = time.monotonic()
        failover_seconds = rr.wait_failover()
        publisher.join(timeout=120)
        assert not publisher.is_alive() and len(succeeded) + len(failed) == len(messages)
        deadline = frozen_at + SENTINEL_BOUND
        while not set(succeeded) <= (applied := _applied(cluster)) and time.monotonic() < deadline:
            time.sleep(0.5)
        missing = set(succeeded) - applied
        cluster.figures.update(failover_seconds=round(failover_seconds, 1), publish_succeeded=len(succeeded),
                               publish_failed=len(failed), applied_while_frozen=len(applied),
                               seconds_to_apply_after_freeze=round(time.monotonic() - frozen_at, 1))
        assert not missing, (f"{len(missing)} acknowledged publish(es) not applied {SENTINEL_BOUND:.0f} s after "
                             f"the primary froze (applied {len(applied)} of {len(succeeded)}); the old primary "
                             "still frozen")
    finally:
        if frozen is not None:
            rr.thaw(frozen)
    cluster.wait_broker_empty(timeout=60)
    deadline = time.monotonic() + 60
    while cluster.counts().unpublished_events and time.monotonic() < deadline:
        time.sleep(0.2)
    applied = _applied(cluster)
    assert _applied_twice(cluster) == 0, "a match applied twice"
    assert applied <= set(succeeded) | set(failed), "a match applied that was never published"
    cluster.published = len(succeeded)
    figures = cluster.check_invariants(stream_timeout=10, stream_may_lose=True, unconfirmed=len(failed))
    assert figures["dead_letters"] == 0


REDIS_FROZEN_SECONDS = 20.0
"""How long the plain Redis broker stays frozen: longer than the workers take to notice it
(``RATINGS_REDIS_SOCKET_TIMEOUT``, 5 s, for a command; 1 s + 2 x
``RATINGS_REDIS_HEALTH_CHECK_INTERVAL``, 11 s, for a waiting poll), so they are seen backing off."""

PUBLISH_REFUSED_BOUND = 45.0
"""Seconds within which a publish to a frozen broker must end in ``BrokerUnavailable`` instead of
hanging: the producer's five tries (``PUBLISH_RETRY_POLICY``), each ending at its 5 s socket
timeout (a frozen server's kernel still accepts the connection, then nothing answers), and its
7.5 s of waits between them: 32.5 s, and margin."""

PUBLISH_TRIES = 5
"""Tries of one publish (``PUBLISH_RETRY_POLICY``): each may have reached the frozen broker's
socket buffer and be served when it resumes, so each is a publish that may count."""


class StreamReader:
    """The consumer library (:class:`worker.consumer.RatingEventConsumer`) reading the scenario's
    stream in a thread, as a downstream service would: a poll that raises a Redis error is recorded
    and retried after 0.5 s."""

    def __init__(self, cluster):
        import redis

        from worker.consumer import RatingEventConsumer
        from worker.redis_url import redis_client

        self.cluster, self.seen, self.errors = cluster, set(), []
        self.redis_errors = redis.RedisError
        client = redis_client(cluster.events_url)  # redis-py's defaults: 5 s socket timeouts
        self.consumer = RatingEventConsumer(client, lambda e: self.seen.add(e["event_id"]), stream=cluster.stream,
                                            group="frozen-test")
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.consumer.poll(block_ms=1000)
            except self.redis_errors as exc:
                self.errors.append(type(exc).__name__)
                self.stopping.wait(0.5)

    def stop_and_check(self) -> None:
        """Stop once every rating change's event was handled (at most 30 s); assert none missing."""
        with psycopg.connect(self.cluster.database_url, autocommit=True) as conn:
            events = {str(e) for (e,) in conn.execute("SELECT event_id FROM outbox")}
        deadline = time.monotonic() + 30
        while not events <= self.seen and time.monotonic() < deadline:
            time.sleep(0.2)
        self.stopping.set()
        self.thread.join(timeout=10)
        assert events <= self.seen, f"the consumer library missed {len(events - self.seen)} event(s)"


def test_plain_redis_broker_frozen_workers_and_producer_back_off_say_so_and_resume(cluster_factory):
    """The scenario's own Redis (broker and event stream, no replacement) SIGSTOPped for
    :data:`REDIS_FROZEN_SECONDS` s while 300 matches are in flight: a publish meanwhile is refused
    (``BrokerUnavailable``) within :data:`PUBLISH_REFUSED_BOUND` s instead of hanging, the workers
    log the broker's silence, ``ratings doctor`` reports the broker unreachable (its socket timeout),
    the relay's XADD and the consumer library's poll raise ``TimeoutError`` (5 s socket timeouts)
    and are retried; once resumed everything drains, the refused match, published again as a game
    server would, is applied once (the refused publish may have landed too: then it is a
    duplicate), and the consumer library has handled every event."""
    from worker.ops.doctor import run_checks
    from worker.settings import Settings

    cluster = cluster_factory("frozen-redis-broker", own_redis=True).start()
    reader = StreamReader(cluster)
    cluster.publish(cluster.matches(300))
    cluster.wait_received(50)
    refused = cluster.matches(1, prefix="while-frozen")[0]
    game_server = producer_app(cluster.broker_url)
    outcome: dict[str, object] = {}

    def publish_while_frozen() -> None:
        started = time.monotonic()
        try:
            publish_match(game_server, refused, queue=cluster.queue)
            outcome["result"] = "published"
        except BrokerUnavailable as exc:
            outcome["result"] = f"refused: {exc.__cause__!r}"
        outcome["seconds"] = round(time.monotonic() - started, 1)

    doctor_settings = Settings(database_url=cluster.database_url, broker_url=cluster.broker_url,
                               queue=cluster.queue, stream=cluster.stream)
    try:
        cluster.own.freeze_redis()
        frozen_at = time.monotonic()
        publisher = threading.Thread(target=publish_while_frozen, daemon=True)
        publisher.start()
        findings = {f.check: f for f in run_checks(doctor_settings, {}, 60.0, None, verify=False)}
        time.sleep(max(0.0, frozen_at + REDIS_FROZEN_SECONDS - time.monotonic()))
        # each worker says so in one of three ways, whichever its main loop reaches first: the sweep
        # ("broker not answering"), Celery's consumer losing its connection, or failing to reconnect
        told = [cluster.log_count(r"broker not answering|Connection to broker lost|Cannot connect to", name)
                for name in ("w1", "w2")]
        relay_told = cluster.log_count(r"TimeoutError.*retry_scheduled", "relay")
        reader_errors = list(reader.errors)
        publisher.join(timeout=max(0.0, frozen_at + PUBLISH_REFUSED_BOUND - time.monotonic()))
        assert not publisher.is_alive(), f"a publish to the frozen broker still waits after {PUBLISH_REFUSED_BOUND:.0f} s"
    finally:
        cluster.own.thaw_redis()
    cluster.figures.update(publish_while_frozen=outcome, doctor_broker=findings["broker reachable"].detail,
                           workers_saying_broker_not_answering=told, relay_retries_on_timeout=relay_told,
                           consumer_library_errors=len(reader_errors))
    assert str(outcome["result"]).startswith("refused"), outcome
    assert not findings["broker reachable"].ok and "Timeout" in findings["broker reachable"].detail
    assert all(told), f"a worker did not log the frozen broker: {told}"
    assert relay_told, "the relay did not log the frozen event stream's Redis"
    assert reader_errors and all(e == "TimeoutError" for e in reader_errors), reader_errors
    resumed_at = time.monotonic()
    publish_match(game_server, refused, queue=cluster.queue)
    cluster.published = 301
    cluster.wait_drained(timeout=120)
    cluster.wait_broker_empty(timeout=60)
    cluster.figures["recovery_seconds"] = round(time.monotonic() - resumed_at, 1)
    figures = cluster.check_invariants(unconfirmed=PUBLISH_TRIES)
    assert (figures["applied"], figures["dead_letters"]) == (301, 0)
    reader.stop_and_check()


POSTGRES_FROZEN_SECONDS = 20.0
"""How long PostgreSQL stays frozen: past the fault settings' task time limit (9 s, soft limit
7 s), so the workers' children are seen giving up their transactions."""


DOCTOR_BOUND = 10.0
"""Seconds within which ``ratings doctor`` reports a frozen database unreachable: its 5 s connect
timeout, and the checks that do not wait on the database."""


def test_postgresql_frozen_mid_stream_workers_and_relay_wait_say_so_and_resume(cluster_factory):
    """The scenario's own PostgreSQL (postmaster and every backend) SIGSTOPped for
    :data:`POSTGRES_FROZEN_SECONDS` s while 300 matches are in flight: ``ratings doctor`` reports
    the database unreachable within its 5 s connect timeout, the workers log the transactions they
    gave up; once resumed every match is applied once, none dead-lettered, the invariants hold."""
    from worker.ops.doctor import run_checks
    from worker.settings import Settings

    cluster = cluster_factory("frozen-postgresql", own_postgres=True).start()
    cluster.publish(cluster.matches(300))
    cluster.wait_received(50)
    doctor_settings = Settings(database_url=cluster.database_url, broker_url=cluster.broker_url,
                               queue=cluster.queue, stream=cluster.stream)
    pids = cluster.own.freeze_postgres()
    try:
        frozen_at = time.monotonic()
        findings = {f.check: f for f in run_checks(doctor_settings, {}, 60.0, None, verify=False)}
        doctor_seconds = time.monotonic() - frozen_at
        time.sleep(max(0.0, frozen_at + POSTGRES_FROZEN_SECONDS - time.monotonic()))
        told = [cluster.log_count(r"time limit|TimeLimitExceeded", name) for name in ("w1", "w2")]
    finally:
        cluster.own.thaw_postgres(pids)
    cluster.figures.update(doctor_database=findings["database reachable"].detail,
                           doctor_seconds=round(doctor_seconds, 1), workers_saying_time_limit=told)
    assert not findings["database reachable"].ok
    assert doctor_seconds < DOCTOR_BOUND, f"doctor took {doctor_seconds:.1f} s to say the database is unreachable"
    assert any(told), "no worker said it gave a batch up"
    resumed_at = time.monotonic()
    cluster.wait_drained(timeout=120)
    cluster.wait_broker_empty(timeout=60)
    cluster.figures["recovery_seconds"] = round(time.monotonic() - resumed_at, 1)
    figures = cluster.check_invariants()
    assert (figures["applied"], figures["duplicates"], figures["dead_letters"]) == (300, 0, 0)


RELAY_DATABASE_DEADLINE = 5.0
"""``RATINGS_RELAY_DATABASE_DEADLINE`` of the relay scenario (seconds): the bound within which the
relay gives up a database call PostgreSQL does not answer and says so; well inside
:data:`POSTGRES_FROZEN_SECONDS`, so the relay is seen noticing, backing off and waiting."""

RELAY_NOTICED_BOUND = RELAY_DATABASE_DEADLINE + 4.0
"""Seconds from the freeze within which the relay's WARNING is in its log: its deadline, the idle
wait before its next call (1 s) and the log's flush, well before the thaw."""

RELAY_SILENT = r"the database \S+ at \S+ did not answer the relay within 5.0 s"
RELAY_BACK = r"the database \S+ at \S+ answers the relay again"


def test_postgresql_frozen_relay_gives_up_its_call_says_so_once_and_resumes(cluster_factory):
    """The scenario's own PostgreSQL SIGSTOPped for :data:`POSTGRES_FROZEN_SECONDS` s while the
    workers apply 300 matches and the relay publishes their events: within
    :data:`RELAY_DATABASE_DEADLINE` s of its blocked call (and so before the thaw) the relay logs
    one WARNING naming the database and the bound, once for the whole outage, reconnecting with
    backoff meanwhile; after SIGCONT it logs that the database answers again and publishes every
    outbox event to the stream (no event id with two payloads), the invariants hold."""
    cluster = cluster_factory("frozen-postgresql-relay", {"RATINGS_RELAY_DATABASE_DEADLINE": str(RELAY_DATABASE_DEADLINE)},
                              own_postgres=True).start()
    cluster.publish(cluster.matches(300))
    cluster.wait_received(50)
    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM outbox").fetchone()[0] > 0, "no events for the relay yet"
    pids = cluster.own.freeze_postgres()
    try:
        frozen_at = time.monotonic()
        # the relay's next call starts within its idle wait (1 s): said within the deadline after it
        while cluster.log_count(RELAY_SILENT, "relay") == 0 and time.monotonic() < frozen_at + RELAY_NOTICED_BOUND:
            time.sleep(0.2)
        noticed_seconds = time.monotonic() - frozen_at
        time.sleep(max(0.0, frozen_at + POSTGRES_FROZEN_SECONDS - time.monotonic()))
        told = cluster.log_count(RELAY_SILENT, "relay")
        told_back_while_frozen = cluster.log_count(RELAY_BACK, "relay")
    finally:
        cluster.own.thaw_postgres(pids)
    cluster.figures.update(relay_warnings=told, frozen_seconds=round(time.monotonic() - frozen_at, 1),
                           relay_noticed_seconds=round(noticed_seconds, 1))
    assert noticed_seconds < RELAY_NOTICED_BOUND, f"the relay said nothing within {RELAY_NOTICED_BOUND} s"
    assert told == 1, f"the relay said {told} times (not once) that the database did not answer"
    assert told_back_while_frozen == 0
    cluster.wait_drained(timeout=120)
    cluster.wait_broker_empty(timeout=60)
    figures = cluster.check_invariants()
    assert (figures["applied"], figures["duplicates"], figures["dead_letters"]) == (300, 0, 0)
    assert cluster.log_count(RELAY_BACK, "relay") == 1
    assert cluster.log_count(RELAY_SILENT, "relay") == 1


def test_pgbouncer_frozen_mid_stream_workers_wait_say_so_and_resume(cluster_factory, servers, tmp_path):
    """The workers reach PostgreSQL through a PgBouncer of the test's own (transaction mode), which
    is SIGSTOPped for :data:`POSTGRES_FROZEN_SECONDS` s while 300 matches are in flight:
    ``ratings doctor`` on that URL reports the database unreachable within its 5 s connect timeout,
    the workers' children give their batches up at the task's time limits and say so; once
    resumed every match is applied once, none dead-lettered, the invariants hold."""
    from worker.devtools.pgbouncer import PgBouncer, pgbouncer_binary
    from worker.ops.doctor import run_checks
    from worker.settings import Settings

    if pgbouncer_binary() is None:
        pytest.skip("pgbouncer is not installed (Debian: apt-get install -y pgbouncer; .ci/run does)")
    bouncer = PgBouncer.start(tmp_path / "pgbouncer", servers[0])
    try:
        cluster = cluster_factory("frozen-pgbouncer", bouncer=bouncer).start()
        cluster.publish(cluster.matches(300))
        cluster.wait_received(50)
        doctor_settings = Settings(database_url=cluster.worker_database_url, broker_url=cluster.broker_url,
                                   queue=cluster.queue, stream=cluster.stream)
        bouncer.freeze()
        try:
            frozen_at = time.monotonic()
            findings = {f.check: f for f in run_checks(doctor_settings, {}, 60.0, None, verify=False)}
            doctor_seconds = time.monotonic() - frozen_at
            time.sleep(max(0.0, frozen_at + POSTGRES_FROZEN_SECONDS - time.monotonic()))
            told = [cluster.log_count(r"time limit|TimeLimitExceeded", name) for name in ("w1", "w2")]
        finally:
            bouncer.thaw()
        cluster.figures.update(doctor_database=findings["database reachable"].detail,
                               doctor_seconds=round(doctor_seconds, 1), workers_saying_time_limit=told)
        assert not findings["database reachable"].ok
        assert doctor_seconds < DOCTOR_BOUND, f"doctor took {doctor_seconds:.1f} s to say the database is unreachable"
        assert any(told), "no worker said it gave a batch up"
        resumed_at = time.monotonic()
        cluster.wait_drained(timeout=120)
        cluster.wait_broker_empty(timeout=60)
        cluster.figures["recovery_seconds"] = round(time.monotonic() - resumed_at, 1)
        figures = cluster.check_invariants()
        assert (figures["applied"], figures["duplicates"], figures["dead_letters"]) == (300, 0, 0)
    finally:
        bouncer.stop()
