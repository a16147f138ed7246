"""``ratings bench`` part: the worker and relay processes under measurement, and one timed run on them."""

from __future__ import annotations

import json
import os
import random
import signal
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import redis

from worker import store as repository
from worker.devtools.bench import sql as bench_sql
from worker.devtools.bench.activity import ActivitySampler
from worker.devtools.bench.common import NOOP_TASK, RATING_TASK, SessionLoop, latency_summary
from worker.devtools.bench.cpu import CpuMeter, Snapshot, per_match
from worker.devtools.bench.publishers import Published, encode_all, publish
from worker.devtools.runtime import ServiceProcesses
from worker.redis_url import stream_entries
from worker.settings import get_settings
from worker.store.connection import connect

# --------------------------------------------------------------------------------------------
# part 2: the service


def service_matches(count: int, seed: int, prefix: str, players: int, hot_share: float = 0.0,
                    hot_players: int = 10) -> list[dict[str, Any]]:
    """``count`` generated Sedma matches (``worker.ops.generate``: 1v1 and 2v2, plausible stats) as JSON
    dicts, their players drawn uniformly from ``players`` ids; with ``hot_share``, that share of the
    matches has one of its players replaced by one of ``hot_players`` hot players."""
    from worker.ops.generate import generate_sedma_matches

    rng = random.Random(seed)
    out = []
    for m in generate_sedma_matches(count, players=200, seed=seed, id_prefix=prefix):
        d = m.model_dump(mode="json")
        slots = d["side_a"]["players"] + d["side_b"]["players"]
        for slot, i in zip(slots, rng.sample(range(players), len(slots))):
            slot["player_id"] = f"u{i:06d}"
        if hot_share and rng.random() < hot_share:
            rng.choice(slots)["player_id"] = f"hot{rng.randrange(hot_players):02d}"
        out.append(d)
    return out


def delivered_late(matches: list[dict[str, Any]], share: float, by: int, seed: int) -> list[dict[str, Any]]:
    """``matches`` (in finish order) in the order they are delivered when ``share`` of them,
    chosen at random, arrive ``by`` matches late: each such match is published ``by`` places after
    its own (the others keep their order)."""
    rng = random.Random(seed)
    keyed = [(n + (by + 0.5 if rng.random() < share else 0), m) for n, m in enumerate(matches)]
    return [m for _, m in sorted(keyed, key=lambda t: t[0])]


def _events_of(matches: list[dict]) -> int:
    return sum(len(m["side_a"]["players"]) + len(m["side_b"]["players"]) for m in matches)


class _BenchProcesses(ServiceProcesses):
    """Worker processes that know ``ratings.noop`` even before ``worker.service.celery_app`` imports
    ``worker.devtools.bench_tasks``: the same ``ratings worker`` command, with that module imported first."""

    def _start(self, name, args, port_setting):
        import subprocess
        import sys

        if args[:1] != ["worker"]:
            return super()._start(name, args, port_setting)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"{name}.log", "ab")
        from worker.devtools.runtime import _free_port

        self.ports[name] = _free_port()
        code = ("import sys, worker.devtools.bench_tasks; from worker.cli.main import main; "
                "sys.argv[0] = 'ratings'; main()")
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args], env={**self.env, port_setting: str(self.ports[name])},
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.procs[name] = proc
        return proc


def _noop_wired() -> bool:
    """Does ``ratings worker`` import the no-op task by itself (``worker.devtools.bench_tasks`` in imports)?"""
    from worker.bootstrap import create_app

    return "worker.devtools.bench_tasks" in tuple(create_app(get_settings()).conf.imports or ())


def _rss(pid: int) -> tuple[int, int]:
    """(RSS of process ``pid``, summed RSS of its children) in bytes."""
    import psutil

    main = psutil.Process(pid)
    children = 0
    for child in main.children(recursive=True):
        try:
            children += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return main.memory_info().rss, children


def prepared_statements() -> str:
    """``RATINGS_DATABASE_PREPARED_STATEMENTS`` of the bench's workers: the environment's, else
    ``"true"`` (the bench's connections are direct, where prepared statements are recommended)."""
    return os.environ.get("RATINGS_DATABASE_PREPARED_STATEMENTS", "true")


class _Vacuum(SessionLoop):
    """Stands in for autovacuum where the server has it off: ``VACUUM (ANALYZE)`` of the tables the
    rating transaction writes every ``interval`` seconds, in a thread, while a run goes on.

    Why it matters: psycopg prepares a statement after a few executions and PostgreSQL may keep a
    generic plan for it; the plan of the player-lock query made while ``players`` was nearly empty
    is a sequential scan, and only a new ANALYZE makes the workers plan it again. With autovacuum
    off nothing ever does, and the rating path slows down as the table grows (a test server,
    or a production server whose autovacuum is off, would show the same).
    """

    application = bench_sql.BENCH_VACUUM_APPLICATION
    name = "bench-vacuum"

    def __init__(self, database_url: str, interval: float):
        super().__init__(database_url, interval)
        self.rounds = 0

    def tick(self, conn) -> None:
        """One ``VACUUM (ANALYZE)`` of the rating tables."""
        bench_sql.vacuum_analyze_rating_tables(conn)
        self.rounds += 1


def autovacuum_on(database_url: str) -> bool:
    """Is the server's autovacuum on?"""
    with connect(database_url, autocommit=True) as conn:
        return bench_sql.autovacuum_on(conn)


class Cluster:
    """``workers`` worker nodes (one child each) and a relay, on the bench's database, queue and stream."""

    vacuum_interval: float = 0.0
    """Seconds between the bench's VACUUM (ANALYZE) rounds during a run (0: none; see :class:`_Vacuum`)."""
    publishers: int = 2
    """Publisher processes (:mod:`worker.devtools.bench.publishers`)."""
    chunk: int = 20
    """Messages per pipelined round trip of a publisher (unpaced runs)."""
    activity_interval: float = 0.04
    """Seconds between two samples of the backends' activity during a rating run (:mod:`.activity`; 0: none)."""

    def __init__(self, database_url: str, broker_url: str, workers: int, log_dir: Path, loglevel: str,
                 overrides: dict[str, str] | None = None):
        suffix = uuid.uuid4().hex[:8]
        self.database_url = database_url
        self.broker_url = broker_url
        self.queue, self.stream = f"ratings-bench-{suffix}", f"ratings-bench-{suffix}.rating-changed"
        env = dict(os.environ)
        # the bench's connections are direct: prepared statements on, as recommended there (the
        # variable in the environment, or an override, decides otherwise)
        env.setdefault("RATINGS_DATABASE_PREPARED_STATEMENTS", prepared_statements())
        env.update(RATINGS_DATABASE_URL=database_url, RATINGS_BROKER_URL=broker_url,
                   RATINGS_QUEUE=self.queue, RATINGS_STREAM=self.stream, **(overrides or {}))
        self.wired = _noop_wired()
        cls = ServiceProcesses if self.wired else _BenchProcesses
        self.procs = cls(env, log_dir)
        self.workers = workers
        self.loglevel = loglevel
        self.redis = redis.Redis.from_url(broker_url)

    def start(self, timeout: float = 90.0) -> None:
        for i in range(self.workers):
            self.procs.start_worker(f"w{i + 1}", concurrency=1, loglevel=self.loglevel)
        self.procs.start_relay()
        deadline = time.monotonic() + timeout
        for name, port in list(self.procs.ports.items()):
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=3) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if self.procs.procs[name].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not become ready; see {self.procs.log_dir / (name + '.log')}")
                time.sleep(0.2)

    def stop(self) -> None:
        self.procs.stop_all()
        self.redis.delete(self.queue, self.stream)
        for key in self.redis.scan_iter(f"*{self.queue}*", count=1000):  # kombu's bindings of the queue
            self.redis.delete(key)

    def worker_rss(self) -> dict[str, int]:
        """Summed RSS (bytes) of the worker nodes' main processes and of their children."""
        mains = children = 0
        for name, proc in self.procs.procs.items():
            if name.startswith("w"):
                m, c = _rss(proc.pid)
                mains += m
                children += c
        return {"main_bytes": mains, "children_bytes": children, "total_bytes": mains + children}

    def reset(self) -> None:
        """Empty tables and stream between runs (the queue is empty: every run waits for its end)."""
        with connect(self.database_url, autocommit=True) as conn:
            bench_sql.truncate_service_tables(conn)
        self.redis.delete(self.stream)

    def _my_unacked(self) -> int:
        n = 0
        for raw in self.redis.hvals("unacked"):
            try:
                if json.loads(raw)[2] == self.queue:
                    n += 1
            except (ValueError, IndexError, TypeError):
                pass
        return n

    def wait_acknowledged(self, timeout: float) -> bool:
        """Wait until no message of this cluster's queue is unacknowledged (the workers acknowledge
        a batch after its commit, so the last events can reach the stream first); False on timeout."""
        deadline = time.monotonic() + timeout
        while self._my_unacked():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def publish(self, task: str, bodies: list[dict], rate: float | None = None) -> Published:
        """Publish one ``task`` message per body from :attr:`publishers` processes, pre-encoded and
        pipelined (:mod:`worker.devtools.bench.publishers`; paced at ``rate`` per second in all when
        given); return each message's publish time and the publishers' own figures."""
        envelopes = encode_all(task, bodies, self.queue)
        return publish(self.broker_url, self.queue, envelopes, self.publishers, self.chunk, rate, lockstep=True)

    def signal_workers(self, sig: int) -> None:
        """Send ``sig`` to every worker node's process group (its main process and children), e.g.
        ``SIGSTOP`` / ``SIGCONT`` to pause a node while another cluster is measured. A node that has
        exited is skipped (its run then fails on its own counts)."""
        for name, proc in self.procs.procs.items():
            if name.startswith("w") and proc.poll() is None:
                os.killpg(proc.pid, sig)  # the node's session: its main process and its children

    def cpu_meter(self, conn) -> CpuMeter:
        """A :class:`CpuMeter` of this cluster's processes (``conn``: the bench's own connection)."""
        workers = [p.pid for n, p in self.procs.procs.items() if n.startswith("w")]
        relays = [p.pid for n, p in self.procs.procs.items() if n.startswith("relay")]
        return CpuMeter(workers, relays, conn, self.redis)

    def _publish_timed(self, task: str, bodies: list[dict], rate: float | None, preload: bool,
                       meter: CpuMeter) -> tuple[Published, float, Snapshot]:
        """Publish; return (what the publishers did, when the clock starts, CPU snapshot then).

        With ``preload`` the worker nodes are stopped (SIGSTOP) while the queue fills and the clock
        starts when they continue (SIGCONT): the consumers' rate without the publishers beside them,
        and the publishers' rate without the consumers beside them.
        """
        if not preload:
            before = meter.snapshot()
            out = self.publish(task, bodies, rate)
            return out, out.first, before
        self.signal_workers(signal.SIGSTOP)
        try:
            out = self.publish(task, bodies, rate)
        finally:
            before = meter.snapshot()
            clock = time.time()
            self.signal_workers(signal.SIGCONT)
        return out, clock, before

    def run_noop(self, bodies: list[dict], timeout: float, preload: bool = False) -> dict[str, Any]:
        """The baseline: one ``ratings.noop`` per body; messages / (last ack − first publish), or with
        ``preload`` / (last ack − workers continued)."""
        self.reset()
        with connect(self.database_url, autocommit=True) as conn:
            meter = self.cpu_meter(conn)
            pub, clock, before = self._publish_timed(NOOP_TASK, bodies, None, preload, meter)
            end = self._wait_noop_end(timeout)
            cpu = per_match(before, meter.snapshot(), len(bodies), pub.cpu_seconds)
            dead = repository.counts(conn).dead_letters
        if dead:
            raise RuntimeError(f"{dead} no-op message(s) were dead-lettered: the workers do not know {NOOP_TASK}")
        elapsed = end - clock
        return {"kind": "noop_preloaded" if preload else "noop", "messages": len(bodies), "seconds": round(elapsed, 3),
                "per_s": round(len(bodies) / elapsed, 1), "publish_per_s": round(pub.per_s, 1),
                "publishers": pub.publishers, "cpu_per_message": cpu}

    def _wait_noop_end(self, timeout: float) -> float:
        """When the last no-op message was acknowledged (the queue and this queue's unacked entries empty)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.redis.llen(self.queue) == 0 and self._my_unacked() == 0:
                seen = time.time()
                time.sleep(0.1)  # confirm: a message between BRPOP and its unacked entry would reappear
                if self.redis.llen(self.queue) == 0 and self._my_unacked() == 0:
                    return seen
            if time.monotonic() > deadline:
                raise TimeoutError(f"no-op baseline not done after {timeout:.0f} s")
            time.sleep(0.005)

    def run_matches(self, label: str, matches: list[dict], timeout: float, rate: float | None = None,
                    preload: bool = False) -> dict[str, Any]:
        """The rating path: publish ``matches``; throughput to the last event on the stream and to
        the last commit; latency publish → commit and publish → event; exact counts and verify.
        ``preload``: the clock starts when the stopped workers continue (see :meth:`_publish_timed`)."""
        self.reset()
        with (_Vacuum(self.database_url, self.vacuum_interval) as vacuum,
              ActivitySampler(self.database_url, self.activity_interval) as activity):
            result = self._run_matches(label, matches, timeout, rate, preload)
        return result | {"bench_vacuum_rounds": vacuum.rounds, "backend_activity": activity.summary()}

    def _run_matches(self, label, matches, timeout, rate, preload) -> dict[str, Any]:
        from worker.ops.verify import verify_ladder
        from worker.policy.ladders import load_ladders

        expected_events = _events_of(matches)
        deadline = time.monotonic() + timeout
        with connect(self.database_url, autocommit=True) as conn:
            # the bench's own queries (counts, verify) are not the service's: left out of the
            # backend activity samples, as of the CPU figures
            conn.execute(f"SET application_name = '{bench_sql.BENCH_OBSERVER_APPLICATION}'")
            meter = self.cpu_meter(conn)
            pub, clock, before = self._publish_timed(RATING_TASK, matches, rate, preload, meter)
            sent = {m["match_id"]: t for m, t in zip(matches, pub.times)}
            # Poll the stream's length (O(1) in Redis), not the tables: count(*) over a growing
            # outbox every few milliseconds would take CPU from the workers being measured.
            # Every 5 s the exact counts end the wait if messages were dead-lettered instead.
            next_count = time.monotonic() + 5
            while True:
                if self.redis.xlen(self.stream) >= expected_events:
                    c = repository.counts(conn)
                    if c.received >= len(matches) and c.unpublished_events == 0:
                        break
                elif time.monotonic() > next_count:
                    c = repository.counts(conn)
                    if c.received >= len(matches) and c.unpublished_events == 0:
                        break
                    next_count = time.monotonic() + 5
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{label}: not done after {timeout:.0f} s: {repository.counts(conn)}, "
                                       f"{self.redis.xlen(self.stream)} of {expected_events} events on the stream")
                time.sleep(0.05)
            cpu = per_match(before, meter.snapshot(), len(matches), pub.cpu_seconds)
            committed = bench_sql.commit_times(conn)
            policies = load_ladders(get_settings().ladders_file)
            verified = all(verify_ladder(conn, ladder, policy).ok for ladder, policy in policies.items())
            corrections = bench_sql.correction_figures(conn)
            transactions = bench_sql.rating_transactions(conn)
            lock_waits = bench_sql.lock_wait_figures(conn)
        on_stream: dict[str, float] = {}
        start = "-"
        while True:
            page = stream_entries(self.redis.xrange(self.stream, min=start, count=10_000))
            if not page:
                break
            for entry_id, fields in page:
                at = int(entry_id.split("-")[0]) / 1000
                match_id = json.loads(fields[b"payload"])["match_id"]
                if at > on_stream.get(match_id, 0.0):
                    on_stream[match_id] = at
            start = "(" + page[-1][0]
        first = clock
        last_event = max(on_stream.values())
        last_commit = max(committed.values())
        return {
            "kind": label, "messages": len(matches), "events": expected_events,
            "paced_per_s": round(rate, 1) if rate else None,
            "publish_per_s": round(pub.per_s, 1), "publishers": pub.publishers, "cpu_per_message": cpu,
            "seconds_to_last_event": round(last_event - first, 3),
            "per_s": round(len(matches) / (last_event - first), 1),
            "per_s_to_last_commit": round(len(matches) / (last_commit - first), 1),
            "applied": c.applied, "duplicates": c.duplicates, "dead_letters": c.dead_letters,
            "verify_ok": verified,
            # the batches' mean size: how many matches shared a transaction's fixed cost
            "rating_transactions": transactions,
            "matches_per_transaction": round(c.applied / transactions, 2) if transactions else None,
            # the time transactions waited for player rows other workers' transactions held
            "lock_waits": lock_waits,
            # matches stored out of order (a later match of one of their players committed first, in
            # another worker's batch or an earlier batch of the same worker) and what re-rating
            # them cost
            "corrections": corrections,
            # with the workers stopped while the queue filled, a latency would only measure the pause
            "latency_publish_to_commit": None if preload else
            latency_summary(committed[m] - sent[m] for m in committed if m in sent),
            "latency_publish_to_event": None if preload else
            latency_summary(on_stream[m] - sent[m] for m in on_stream if m in sent),
        }


def _warm_up(cluster: Cluster, seed: int, players: int) -> None:
    """A few hundred untimed messages of each kind: imports, pools and caches settle first."""
    timeout = 120
    cluster.run_noop([{"warm": i} for i in range(200)], timeout)
    cluster.run_matches("warm-up", service_matches(200, seed, f"warm-{uuid.uuid4().hex[:6]}", players), timeout)


