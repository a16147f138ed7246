"""Harness of the fault-test suite: a cluster of real processes per scenario, and the invariants.

Each scenario gets its own database, queue and stream (or, when it restarts a server, its own
embedded PostgreSQL or Redis on a spare port), its own worker and relay processes, and ends with
:meth:`Cluster.check_invariants`, which asserts the service's guarantees (``docs/design/index.md``) and returns the figures the
suite prints at the end of the run.

Every scenario rates on two models at once: :meth:`Cluster.matches` sends its generated matches in
turn to an Elo ladder and to a Glicko-2 ladder (:data:`FAULT_LADDERS`), so each fault hits
transactions of both models and the invariants (``verify`` bit-exact for every ladder, the event
sequences, nothing lost or applied twice) are checked for both
(``docs/decisions/0012-fault-suite-on-two-models.md``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import psycopg
import pytest

from worker import store as repository
from worker.broker import is_rabbitmq
from worker.devtools import rabbitmq
from worker.devtools.embedded import EmbeddedServers
from worker.devtools.runtime import ServiceProcesses
from worker.ops.generate import generate_sedma_matches
from worker.ops.verify import verify_ladder
from worker.policy.ladders import load_ladders
from worker.producer import producer_app, publish_match
from worker.redis_url import redis_client
from worker.settings import DEFAULT_LADDERS_FILE
from worker.store.migrate import migrate
from worker.store.urls import url_with

pytestmark = pytest.mark.faults

FIGURES: list[dict] = []

FAULT_SETTINGS = {
    # Short enough that a lost worker's messages come back within the scenario's time bound.
    "RATINGS_VISIBILITY_TIMEOUT": "20",
    "RATINGS_TASK_TIME_LIMIT": "9",  # batching: the visibility timeout must exceed 2 x this
    "RATINGS_RESTORE_INTERVAL": "2",
    "RATINGS_PREFETCH_MULTIPLIER": "4",
    # RabbitMQ: a frozen node's reserved messages come back after about two missed heartbeats.
    "RATINGS_RABBITMQ_HEARTBEAT": "5",
}


FAULT_LADDERS = ("sedma", "glicko2")
"""The ladders a scenario's generated matches go to in turn: the Sedma Elo policy and the shipped
Glicko-2 policy (the Sedma messages' stats unused there), both in ``worker/ladders.toml``."""


RABBITMQ_SETTLE = 11.0
"""Seconds a RabbitMQ queue must look empty in a row before it counts as empty: more than twice
RabbitMQ's statistics interval (5 s), behind which ``rabbitmqctl list_queues`` counts lag."""


def publish_many(broker_url: str, queue: str, messages: list) -> int:
    """Publish ``messages`` over one producer connection; return how many (a process entry point)."""
    app = producer_app(broker_url)
    with app.producer_or_acquire() as producer:
        for m in messages:
            publish_match(app, m, queue=queue, producer=producer)
    return len(messages)


class Cluster:
    """Real servers, worker nodes and a relay for one fault scenario."""

    batch_size: int = 1
    """``RATINGS_BATCH_SIZE`` of the scenario's workers."""

    def __init__(self, name: str, admin_url: str, broker_url: str, tmp: Path, overrides: dict[str, str],
                 own: EmbeddedServers | None = None, bouncer=None, events_url: str | None = None):
        self.name = name
        self.own = own
        suffix = uuid.uuid4().hex[:8]
        self.admin_url = admin_url
        self.dbname = f"ratings_fault_{suffix}"
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self.dbname}"')
        self.database_url = url_with(admin_url, dbname=self.dbname)
        migrate(self.database_url)
        self.broker_url = broker_url
        self.queue, self.stream = f"ratings-fault-{suffix}", f"ratings-fault-{suffix}.rating-changed"
        env = {k: v for k, v in os.environ.items() if not k.startswith("RATINGS_")}
        env.update(FAULT_SETTINGS)
        # The workers' URL goes through PgBouncer (transaction mode) when the run asks for it
        # (RATINGS_TEST_PGBOUNCER=1); the relay and the checks here use the direct one.
        self.worker_database_url = bouncer.url_for(self.database_url) if bouncer is not None else self.database_url
        env.update(RATINGS_DATABASE_URL=self.worker_database_url, RATINGS_DIRECT_DATABASE_URL=self.database_url,
                   RATINGS_BROKER_URL=broker_url, RATINGS_QUEUE=self.queue, RATINGS_STREAM=self.stream)
        # prepared statements on a direct connection, as recommended; PgBouncer 1.18 (Debian's)
        # keeps none between transactions
        env.update(RATINGS_DATABASE_PREPARED_STATEMENTS="false" if bouncer is not None else "true")
        # The event stream's Redis: the broker unless it is RabbitMQ (then events_url, required).
        self.events_url = events_url or broker_url
        env.update(RATINGS_EVENTS_REDIS_URL=self.events_url)
        env.update(overrides)
        self.env = env
        self.log_dir = tmp / "logs"
        self.procs = ServiceProcesses(env, self.log_dir)
        self.redis = redis_client(self.events_url, decode_responses=True)
        """A client of the event stream's Redis (the broker too, unless the broker is RabbitMQ)."""
        self.broker_redis = (self.redis if self.events_url == broker_url or is_rabbitmq(broker_url)
                             else redis_client(broker_url, decode_responses=True))
        """A client of the Redis broker (the events client when they are one Redis), made once for
        the scenario's polls."""
        self.published = 0
        self.figures: dict = {"scenario": name}
        self.rabbit_cluster: rabbitmq.RabbitCluster | None = None
        """The RabbitMQ cluster of the scenario's own, when its broker is one (for the queue's counts)."""

    # -- processes
    def start(self, workers: int = 2, concurrency: int = 1, relay: bool = True) -> Cluster:
        for i in range(workers):
            self.procs.start_worker(f"w{i + 1}", concurrency=concurrency)
        if relay:
            self.procs.start_relay()
        return self

    def children(self, name: str) -> list[psutil.Process]:
        """The prefork children of worker node ``name`` (the processes that run tasks)."""
        return psutil.Process(self.procs.procs[name].pid).children(recursive=True)

    def log_count(self, pattern: str, process: str = "*") -> int:
        """Occurrences of ``pattern`` (a regex) in the log of ``process`` (a worker node's name,
        ``relay``), or of every process of this scenario."""
        rx = re.compile(pattern)
        return sum(len(rx.findall(p.read_text(errors="replace"))) for p in self.log_dir.glob(f"{process}.log"))

    # -- messages
    def matches(self, count: int, players: int = 60, seed: int = 1, prefix: str | None = None,
                ladders: tuple[str, ...] = FAULT_LADDERS) -> list[dict]:
        """``count`` generated Sedma matches as JSON dicts, unique to this scenario, the ``n``-th
        (from 0) on ``ladders[n % len(ladders)]``: the first is always on ``ladders[0]``."""
        generated = generate_sedma_matches(count, players=players, seed=seed, id_prefix=prefix or self.name)
        return [dict(m.model_dump(mode="json"), ladder=ladders[n % len(ladders)]) for n, m in enumerate(generated)]

    def publish(self, messages: list) -> None:
        self.published += publish_many(self.broker_url, self.queue, messages)

    def publish_from_processes(self, batches: list[list]) -> None:
        """Publish each batch from its own process, all at once."""
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(len(batches)) as pool:
            done = pool.starmap(publish_many, [(self.broker_url, self.queue, b) for b in batches])
        self.published += sum(done)

    def wait_received(self, at_least: int, timeout: float = 60.0) -> int:
        """Wait until at least ``at_least`` messages ended somewhere (so a fault hits a busy system)."""
        deadline = time.monotonic() + timeout
        while (n := self.counts().received) < at_least and time.monotonic() < deadline:
            time.sleep(0.05)
        return n

    def counts(self) -> repository.Counts:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            return repository.counts(conn)

    def wait_drained(self, timeout: float = 120.0) -> float:
        """Wait until every published message ended somewhere and the outbox is empty; seconds waited."""
        start = time.monotonic()
        while True:
            try:
                c = self.counts()
                if c.received >= self.published and c.unpublished_events == 0:
                    return time.monotonic() - start
            except psycopg.OperationalError:
                pass  # the scenario's own PostgreSQL may be restarting
            if time.monotonic() - start > timeout:
                raise AssertionError(f"{self.name}: not drained after {timeout:.0f} s: {c}, published "
                                     f"{self.published}; broker: {self.broker_state()}")
            time.sleep(0.2)

    def wait_broker_empty(self, timeout: float = 120.0) -> None:
        """Wait until no message of this scenario is queued or reserved: the redeliveries of
        messages whose effect had already committed have been processed (and counted) too.

        On RabbitMQ the counts ``rabbitmqctl`` reports lag the queue (statistics, emitted every
        few seconds): empty must then hold for :data:`RABBITMQ_SETTLE` seconds in a row."""
        deadline = time.monotonic() + timeout
        settle = RABBITMQ_SETTLE if is_rabbitmq(self.broker_url) else 0.0
        empty_since: float | None = None
        while True:
            state = self.broker_state()
            if state["queued"] == 0 and state["unacked"] == 0:
                empty_since = empty_since or time.monotonic()
                if time.monotonic() - empty_since >= settle:
                    return
            else:
                empty_since = None
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: broker not empty after {timeout:.0f} s: {state}")
            time.sleep(0.2)

    def broker_state(self) -> dict:
        """Messages of this scenario's queue still in Redis: queued, and reserved but unacknowledged.
        On RabbitMQ: ready and unacknowledged, as ``rabbitmqctl`` reports them (on the machine's node,
        or on ``rabbit_cluster``'s when the scenario runs on a cluster of its own)."""
        if is_rabbitmq(self.broker_url):
            vhost = urlsplit(self.broker_url.split(";")[0]).path.lstrip("/") or "/"
            queued, unacked = rabbitmq.queue_counts(vhost, self.queue, self.rabbit_cluster)
            return {"queued": queued, "unacked": unacked}
        broker = self.broker_redis
        unacked = [json.loads(v) for v in broker.hvals("unacked")]
        mine = [u for u in unacked if u[2] == self.queue]
        return {"queued": broker.llen(self.queue), "unacked": len(mine),
                "unacked_task_ids": [u[0]["headers"].get("id") for u in mine][:5]}

    # -- invariants
    def check_invariants(self, stream_timeout: float = 60.0, stream_may_lose: bool = False,
                         unconfirmed: int = 0) -> dict:
        """Assert the service's guarantees (``docs/design/index.md``); return the scenario's figures.

        1/3: published = applied + duplicates + dead letters, each message once (``unconfirmed``:
        publishes that raised, which may or may not have reached the queue: received may exceed
        ``published`` by at most that many);
        2: ``verify`` passes for every ladder (under the policy in force);
        4: one outbox row and one stream event id per rating change a match made (and per
           ``rebuild`` event), duplicates on the stream only with the same event id and payload,
           per-player sequences 1, 2, 3, ... in the current history and on the stream.
        ``stream_may_lose``: a broker failover may lose stream entries the relay wrote (Redis
        replication is asynchronous): every entry must still be an event of the history, and the
        missing ones are counted (``stream_events_missing``) instead of failing the check.
        """
        policies = load_ladders(DEFAULT_LADDERS_FILE)
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            c = repository.counts(conn)
            assert self.published <= c.received <= self.published + unconfirmed, \
                f"published {self.published} (+ {unconfirmed} unconfirmed) != {c}"
            for ladder, policy in policies.items():
                result = verify_ladder(conn, ladder, policy)
                assert result.ok, f"verify {ladder}: {result.differences[:5]}"
            # Events: one per history row written by a match (rows a rebuild wrote announce none),
            # plus the rebuild and correction events, which take their place in the per-player sequence.
            events = {str(e): (lad, p) for e, lad, p in conn.execute(
                "SELECT event_id, ladder, player_id FROM rating_changes WHERE event_id IS NOT NULL")}
            events.update({e: (lad, p) for e, lad, p in conn.execute(
                "SELECT event_id::text, payload->>'ladder', payload->>'player_id' FROM outbox "
                "WHERE payload->>'reason' IN ('rebuild', 'correction')")})
            current = conn.execute(
                "SELECT rc.ladder, rc.player_id, rc.sequence FROM rating_changes rc "
                "LEFT JOIN ladders l ON l.ladder = rc.ladder WHERE rc.generation = coalesce(l.generation, 0) "
                "AND rc.superseded_by IS NULL"
            ).fetchall()
            outbox = conn.execute("SELECT count(*) FROM outbox").fetchone()[0]
            redeliveries = conn.execute("SELECT coalesce(sum(redeliveries), 0) FROM ledger").fetchone()[0]
            dead_reasons = dict(conn.execute("SELECT reason_code, count(*) FROM dead_letters GROUP BY 1").fetchall())
        assert outbox == len(events)
        deadline = time.monotonic() + stream_timeout
        while len({f["event_id"] for _, f in self.redis.xrange(self.stream)}) < len(events) and time.monotonic() < deadline:
            time.sleep(0.2)
        entries = self.redis.xrange(self.stream)
        per_event = defaultdict(set)
        for _, fields in entries:
            per_event[fields["event_id"]].add(fields["payload"])
        if stream_may_lose:
            assert set(per_event) <= set(events), "stream event ids that are not in the rating history"
            self.figures["stream_events_missing"] = len(set(events) - set(per_event))
        else:
            assert set(per_event) == set(events), "stream event ids differ from the rating history"
        assert all(len(payloads) == 1 for payloads in per_event.values()), "one event id with two payloads"
        by_player = defaultdict(list)
        for ladder, player, seq in current:
            by_player[(ladder, player)].append(seq)
        for key, seqs in by_player.items():
            assert sorted(seqs) == list(range(1, len(seqs) + 1)), f"sequence gap for {key}"
        stream_seqs = defaultdict(set)
        for payloads in per_event.values():
            event = json.loads(next(iter(payloads)))
            stream_seqs[(event["ladder"], event["player_id"])].add(event["sequence"])
        for key, seqs in stream_seqs.items():
            assert stream_may_lose or sorted(seqs) == list(range(1, len(seqs) + 1)), f"stream sequence gap for {key}"
        self.figures.update(
            published=self.published, applied=c.applied, duplicates=c.duplicates, dead_letters=c.dead_letters,
            redeliveries=int(redeliveries), events=len(events), stream_entries=len(entries),
            stream_duplicate_entries=len(entries) - len(per_event),
            dead_letter_reasons=dead_reasons,
        )
        return self.figures

    def close(self) -> None:
        self.procs.stop_all()
        self.redis.delete(self.queue, self.stream, f"_kombu.binding.{self.queue}")
        try:
            with psycopg.connect(self.admin_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
        except psycopg.OperationalError:
            pass
        if self.own is not None:
            self.own.stop()


BATCH_SIZES = {"one-per-transaction": 1, "batched": 100}
"""The two ways a worker takes messages: Celery's own strategy, one message per task
(``RATINGS_BATCH_SIZE=1``), and the batching consumer (up to 100 per pool job, the default). Both
reach the one rating transaction (a single message is a batch of one), so a scenario runs once,
batched; only a scenario whose fault hits the acknowledgement path, which differs between the two,
runs with both (``@pytest.mark.parametrize("batch_size", BATCH_SIZES.values(), ids=BATCH_SIZES)``)."""


@pytest.fixture
def batch_size() -> int:
    """``RATINGS_BATCH_SIZE`` of the scenario's workers: the default, batched (a test may parametrize it)."""
    return BATCH_SIZES["batched"]


@pytest.fixture
def cluster_factory(servers, events_redis_url, pgbouncer, tmp_path, batch_size) -> Iterator:
    """Make a :class:`Cluster` for the running test: ``make(overrides, own_postgres=, own_redis=,
    broker_url=)`` (``broker_url``: another broker than the session's, e.g. a RabbitMQ cluster).

    The workers run with ``RATINGS_BATCH_SIZE`` = ``batch_size`` (batched unless the test
    parametrizes it) unless ``overrides`` sets it.
    """
    made: list[Cluster] = []

    def make(name: str, overrides: dict[str, str] | None = None, own_postgres: bool = False, own_redis: bool = False,
             broker_url: str | None = None, bouncer=None) -> Cluster:
        """``broker_url``: a broker of the test's own (a replicated Redis, a RabbitMQ cluster)
        instead of the run's; ``bouncer``: a PgBouncer of the test's own for the workers instead of
        the run's (if any)."""
        admin_url, session_broker = servers
        broker_url = broker_url or session_broker
        own = None
        if own_postgres or own_redis:
            own = EmbeddedServers.start(None, postgres=own_postgres, redis_server=own_redis,
                                        redis_durable=True)
            admin_url = own.database_url if own_postgres else admin_url
            broker_url = own.broker_url if own_redis else broker_url
        overrides = {"RATINGS_BATCH_SIZE": str(batch_size), **(overrides or {})}
        cluster = Cluster(name, admin_url, broker_url, tmp_path, overrides, own,
                          bouncer=bouncer or (pgbouncer if not own_postgres else None),
                          events_url=events_redis_url if is_rabbitmq(broker_url) else None)
        cluster.batch_size = int(overrides["RATINGS_BATCH_SIZE"])
        cluster.figures["batch_size"] = cluster.batch_size
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        FIGURES.append(cluster.figures)
        cluster.close()


def pytest_terminal_summary(terminalreporter):
    """Print every fault scenario's figures (and write them to $RATINGS_FAULT_REPORT if set)."""
    if not FIGURES:
        return
    terminalreporter.section("fault scenarios: invariant figures")
    for f in FIGURES:
        terminalreporter.write_line(json.dumps(f, sort_keys=False, default=str))
    if path := os.environ.get("RATINGS_FAULT_REPORT"):
        Path(path).write_text(json.dumps(FIGURES, indent=2, default=str))
