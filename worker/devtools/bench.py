"""``ratings bench``: the rating path measured against the framework's own ceiling, in one run.

Three parts, each figure printed beside a baseline measured in the same run on the same machine:

* **engine** (no server): :func:`engine.rate` on a 1v1 classic and a 1v1 Sedma match,
  :func:`engine.replay.replay` and :func:`engine.fast_replay.replay` over a list of matches,
  against ``elote``'s ``EloCompetitor`` and a plain inline Python loop of the Elo formula;
* **service** (real worker and relay processes on the configured servers, embedded ones when no
  URL is set): for each worker count, the baseline (as many ``ratings.noop`` Celery tasks as
  matches, same body, same queue, same workers and settings: the ceiling for one task per
  message) and the rating path (generated matches from first publish to last event on the
  stream, latency percentiles publish → commit and publish → event); at the main worker count
  also half of full load (paced publishing), a hot-player run (20 % of matches involve one of
  10 players) and worker memory (RSS) at start and end;
* **ledger at scale**: a ledger of ``--ledger-size`` matches written straight into PostgreSQL
  (``generate_series``), the players table computed by a streaming replay, then ``verify`` timed
  at 10 %, 30 % and 100 % of the size, each in a fresh process whose peak RSS is recorded.

The service part runs in a database of its own (created, dropped at the end) with its own queue
and stream, so a shared server is not disturbed. How each figure is measured:

* times are wall-clock seconds (``time.time()``) of this process, of the workers (the
  ``occurred_at`` they write inside the rating transaction, just before its last statements and
  COMMIT) and of Redis (the millisecond part of a stream entry's id): all one machine's clock,
  which is why the servers must be local for the latency figures to mean anything;
* baseline throughput: messages / (last acknowledgement − first publish), the end seen by polling
  the queue and the broker's unacknowledged set every 5 ms; with batching on, the no-op runs both
  on the batched workers (whose prefetch is 2 x the batch size) and on workers started with
  ``RATINGS_BATCH_SIZE=1`` (the configured prefetch multiplier), and the faster of the two is the
  baseline;
* rating throughput: matches / (last event on the stream − first publish); also to the last commit.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import platform
import random
import resource
import signal
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis
from rich.console import Console
from rich.table import Table

from worker import store as repository
from worker.devtools.runtime import ServiceProcesses
from worker.settings import get_settings

console = Console()
progress = Console(stderr=True)

TABLES = "ledger, players, rating_changes, outbox, duplicate_deliveries, dead_letters"
NOOP_TASK = "ratings.noop"
RATING_TASK = "ratings.apply_match"


@dataclass
class BenchConfig:
    """What ``ratings bench`` runs (see the command's options)."""

    matches: int = 10_000
    workers: list[int] = field(default_factory=lambda: [1, 2, 4])
    main_workers: int | None = None
    players: int = 100_000
    hot_share: float = 0.2
    hot_players: int = 10
    soak_matches: int = 0
    ledger_size: int = 1_000_000
    ledger_players: int = 10_000
    engine_matches: int = 200_000
    repeats: int = 3
    skip_engine: bool = False
    skip_service: bool = False
    skip_ledger: bool = False
    skip_scaling: bool = False
    seed: int = 2026
    output: Path = Path("bench-results.json")
    loglevel: str = "WARNING"
    vacuum_interval: float = 10.0
    """Seconds between the bench's own ``VACUUM (ANALYZE)`` of the service tables while a run goes
    on, when the server's autovacuum is off (0: never). Without it, a worker's cached plan for the
    player-lock query, made when the table was empty, stays a sequential scan for ever."""

    def main_worker_count(self) -> int:
        """The worker count of the headline, half-load, hot-player and soak runs: ``main_workers``,
        else the listed count closest to this machine's CPU count."""
        if self.main_workers:
            return self.main_workers
        cpus = os.cpu_count() or 1
        return min(self.workers, key=lambda w: (abs(w - cpus), -w))


# --------------------------------------------------------------------------------------------
# small helpers


def percentile(sorted_values: list[float], p: float) -> float | None:
    """Nearest-rank ``p``-th percentile of already sorted values (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def latency_summary(seconds: Iterable[float]) -> dict[str, float | None]:
    """p50, p95, p99 and max of latencies given in seconds, in milliseconds (1 decimal)."""
    values = sorted(seconds)

    def ms(v):
        return None if v is None else round(v * 1000, 1)

    return {"count": len(values), "p50_ms": ms(percentile(values, 50)), "p95_ms": ms(percentile(values, 95)),
            "p99_ms": ms(percentile(values, 99)), "max_ms": ms(values[-1] if values else None)}


def best_rate(fn: Callable[[], int], repeats: int) -> float:
    """Items per second of ``fn`` (which returns how many items it processed): best of ``repeats``."""
    best = 0.0
    for _ in range(max(1, repeats)):
        started = time.perf_counter()
        n = fn()
        elapsed = time.perf_counter() - started
        best = max(best, n / elapsed if elapsed > 0 else float("inf"))
    return best


def machine() -> dict[str, Any]:
    """This machine: CPU count and model, memory, Python, OS."""
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        import psutil

        mem = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    return {"nproc": os.cpu_count(), "cpu_model": model or platform.processor() or None, "memory_gib": mem,
            "python": platform.python_version(), "platform": platform.platform(), "code": _code_version()}


def _code_version() -> dict[str, Any]:
    """The code measured: git commit and whether the work tree had changes, the Celery broker transport."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    info: dict[str, Any] = {}
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                                        text=True, timeout=10).stdout.strip() or None
        info["uncommitted_changes"] = bool(subprocess.run(["git", "status", "--porcelain"], cwd=root,
                                                          capture_output=True, text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        info["commit"] = None
    try:
        from worker.bootstrap import create_app

        app = create_app(get_settings())
        info["broker_transport"] = str(app.conf.broker_transport or "kombu default for the URL")
    except Exception as exc:  # noqa: BLE001 - informative only
        info["broker_transport"] = f"unknown ({type(exc).__name__})"
    return info


def _with_dbname(url: str, dbname: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + dbname))


# --------------------------------------------------------------------------------------------
# part 4: engine speed


def _classic_pairs(count: int, players: int, seed: int) -> list[tuple[str, str, float]]:
    """``count`` seeded 1v1 results (player a, player b, a's score 1 / 0.5 / 0) among ``players``."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        a = rng.randrange(players)
        b = (a + 1 + rng.randrange(players - 1)) % players
        r = rng.random()
        pairs.append((f"p{a:05d}", f"p{b:05d}", 1.0 if r < 0.45 else 0.0 if r < 0.9 else 0.5))
    return pairs


def engine_speed(config: BenchConfig) -> dict[str, Any]:
    """Part 4: the engine's public call and replay paths against elote and an inline loop."""
    from engine import Match, Outcome, Participant, rate
    from engine import fast_replay
    from engine.replay import replay
    from worker.devtools.generate import generate_sedma_matches
    from worker.policy.ladders import load_ladders
    from worker.mapping import to_engine_match

    policies = load_ladders(get_settings().ladders_file)
    elo, sedma = policies["elo"], policies["sedma"]
    n = config.engine_matches
    repeats = config.repeats
    pairs = _classic_pairs(n, 1000, config.seed)
    outcome = {1.0: Outcome.SIDE_A_WON, 0.0: Outcome.SIDE_B_WON, 0.5: Outcome.DRAW}
    classic = [Match(str(i), (Participant(a),), (Participant(b),), outcome[s]) for i, (a, b, s) in enumerate(pairs)]
    sedma_count = max(1000, n // 4)
    sedma_1v1 = [to_engine_match(m.model_dump(mode="json"))
                 for m in generate_sedma_matches(sedma_count, players=1000, seed=config.seed, team_share=0.0)]
    sedma_mixed = [to_engine_match(m.model_dump(mode="json"))
                   for m in generate_sedma_matches(sedma_count, players=1000, seed=config.seed + 1, team_share=0.3)]
    standing = {p.player_id: 1200.0 + (i % 400) for i, m in enumerate(classic[:2000]) for p in m.side_a + m.side_b}
    sedma_standing = {p.player_id: 1000.0 + (i % 900) for i, m in enumerate(sedma_1v1) for p in m.side_a + m.side_b}

    def rate_all(matches, ratings, policy):
        def run():
            for m in matches:
                rate(m, ratings, policy)
            return len(matches)
        return run

    def replay_all(fn, matches, policy):
        def run():
            fn(matches, policy)
            return len(matches)
        return run

    def inline_loop():
        ratings: dict[str, float] = {}
        get = ratings.get
        for a, b, s in pairs:
            ra = get(a, 1200.0)
            rb = get(b, 1200.0)
            ea = 1.0 / (1.0 + 10.0 ** ((rb - ra) / 400.0))
            ratings[a] = ra + 30.0 * (s - ea)
            ratings[b] = rb + 30.0 * ((1.0 - s) - (1.0 - ea))
        return len(pairs)

    results: dict[str, Any] = {"matches": n, "sedma_matches": sedma_count, "repeats": repeats, "unit": "matches per second"}
    progress.print("[bold]engine[/bold]: rate, replay, fast replay, elote, inline loop")
    results["classic_1v1"] = {
        "rate_per_s": best_rate(rate_all(classic, standing, elo), repeats),
        "replay_per_s": best_rate(replay_all(replay, classic, elo), repeats),
        "fast_replay_per_s": best_rate(replay_all(fast_replay.replay, classic, elo), repeats),
        "inline_loop_per_s": best_rate(inline_loop, repeats),
    }
    try:
        from elote import EloCompetitor

        def elote_loop():
            competitors: dict[str, EloCompetitor] = {}
            for a, b, s in pairs:
                ca = competitors.get(a)
                if ca is None:
                    ca = competitors[a] = EloCompetitor(initial_rating=1200, k_factor=30)
                cb = competitors.get(b)
                if cb is None:
                    cb = competitors[b] = EloCompetitor(initial_rating=1200, k_factor=30)
                if s == 1.0:
                    ca.beat(cb)
                elif s == 0.0:
                    cb.beat(ca)
                else:
                    ca.tied(cb)
            return len(pairs)

        results["classic_1v1"]["elote_per_s"] = best_rate(elote_loop, repeats)
        from importlib.metadata import version

        results["elote_version"] = version("elote")
    except ImportError:
        results["classic_1v1"]["elote_per_s"] = None
        results["elote_version"] = None
        progress.print("[yellow]elote is not installed[/yellow] (pip install -e '.[bench]'): no elote figure")
    results["sedma_1v1"] = {
        "rate_per_s": best_rate(rate_all(sedma_1v1, sedma_standing, sedma), repeats),
        "replay_per_s": best_rate(replay_all(replay, sedma_1v1, sedma), repeats),
        "fast_replay_per_s": best_rate(replay_all(fast_replay.replay, sedma_1v1, sedma), repeats),
    }
    results["sedma_mixed_30pct_2v2"] = {
        "replay_per_s": best_rate(replay_all(replay, sedma_mixed, sedma), repeats),
        "fast_replay_per_s": best_rate(replay_all(fast_replay.replay, sedma_mixed, sedma), repeats),
    }
    def rating_and_games(standings):
        return {p: (s.rating.hex(), s.games_played) for p, s in standings.items()}

    results["fast_replay_identical"] = all(
        rating_and_games(fast_replay.replay(ms, pol)) == rating_and_games(replay(ms, pol))
        for ms, pol in ((classic, elo), (sedma_1v1, sedma), (sedma_mixed, sedma))
    )
    for group in ("classic_1v1", "sedma_1v1", "sedma_mixed_30pct_2v2"):
        results[group] = {k: (round(v) if isinstance(v, float) else v) for k, v in results[group].items()}
    return results


# --------------------------------------------------------------------------------------------
# part 2: the service


def service_matches(count: int, seed: int, prefix: str, players: int, hot_share: float = 0.0,
                    hot_players: int = 10) -> list[dict[str, Any]]:
    """``count`` generated Sedma matches (``worker.devtools.generate``: 1v1 and 2v2, plausible stats) as JSON
    dicts, their players drawn uniformly from ``players`` ids; with ``hot_share``, that share of the
    matches has one of its players replaced by one of ``hot_players`` hot players."""
    from worker.devtools.generate import generate_sedma_matches

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


def _events_of(matches: list[dict]) -> int:
    return sum(len(m["side_a"]["players"]) + len(m["side_b"]["players"]) for m in matches)


class _BenchProcesses(ServiceProcesses):
    """Worker processes that know ``ratings.noop`` even before the worker's app imports
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
        code = "import sys, worker.devtools.bench_tasks; from worker.cli.main import main; sys.argv[0] = 'ratings'; main()"
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


class _Vacuum:
    """Stands in for autovacuum where the server has it off: ``VACUUM (ANALYZE)`` of the tables the
    rating transaction writes every ``interval`` seconds, in a thread, while a run goes on.

    Why it matters: psycopg prepares a statement after a few executions and PostgreSQL may keep a
    generic plan for it; the plan of the player-lock query made while ``players`` was nearly empty
    is a sequential scan, and only a new ANALYZE makes the workers plan it again. With autovacuum
    off nothing ever does, and the rating path slows down as the table grows (a test server,
    or a production server whose autovacuum is off, would show the same).
    """

    def __init__(self, database_url: str, interval: float):
        import threading

        self.database_url = database_url
        self.interval = interval
        self.rounds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-vacuum", daemon=True)

    def __enter__(self) -> "_Vacuum":
        if self.interval > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            while not self._stop.wait(self.interval):
                conn.execute("VACUUM (ANALYZE) players, ledger, outbox, rating_changes")
                self.rounds += 1


def autovacuum_on(database_url: str) -> bool:
    """Is the server's autovacuum on?"""
    with psycopg.connect(database_url, autocommit=True) as conn:
        return conn.execute("SHOW autovacuum").fetchone()[0] == "on"


class Cluster:
    """``workers`` worker nodes (one child each) and a relay, on the bench's database, queue and stream."""

    vacuum_interval: float = 0.0
    """Seconds between the bench's VACUUM (ANALYZE) rounds during a run (0: none; see :class:`_Vacuum`)."""

    def __init__(self, database_url: str, broker_url: str, workers: int, log_dir: Path, loglevel: str,
                 overrides: dict[str, str] | None = None):
        suffix = uuid.uuid4().hex[:8]
        self.database_url = database_url
        self.broker_url = broker_url
        self.queue, self.stream = f"ratings-bench-{suffix}", f"ratings-bench-{suffix}.rating-changed"
        env = dict(os.environ)
        env.update(RATINGS_DATABASE_URL=database_url, RATINGS_BROKER_URL=broker_url,
                   RATINGS_QUEUE=self.queue, RATINGS_STREAM=self.stream, **(overrides or {}))
        self.wired = _noop_wired()
        cls = ServiceProcesses if self.wired else _BenchProcesses
        self.procs = cls(env, log_dir)
        self.workers = workers
        self.loglevel = loglevel
        self.redis = redis.Redis.from_url(broker_url)
        from worker.producer import producer_app

        self.producer_app = producer_app(broker_url)

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
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")
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

    def publish(self, task: str, bodies: list[dict], rate: float | None = None) -> list[float]:
        """Publish one ``task`` message per body (paced at ``rate`` per second when given); return
        each message's publish time (``time.time()`` just before it was sent)."""
        times = []
        app = self.producer_app
        with app.producer_or_acquire() as producer:
            start = time.time()
            for i, body in enumerate(bodies):
                if rate:
                    delay = start + i / rate - time.time()
                    if delay > 0:
                        time.sleep(delay)
                times.append(time.time())
                app.send_task(task, args=[body], queue=self.queue, producer=producer, ignore_result=True)
        return times

    def _signal_workers(self, sig: int) -> None:
        for name, proc in self.procs.procs.items():
            if name.startswith("w"):
                os.killpg(proc.pid, sig)  # the node's session: its main process and its children

    def _publish_timed(self, task: str, bodies: list[dict], rate: float | None, preload: bool) -> tuple[list[float], float, float]:
        """Publish; return (publish times, when publishing ended, when the clock starts).

        With ``preload`` the worker nodes are stopped (SIGSTOP) while the queue fills and the clock
        starts when they continue (SIGCONT): the consumers' rate without the publisher beside them.
        """
        if not preload:
            times = self.publish(task, bodies, rate)
            return times, time.time(), times[0]
        self._signal_workers(signal.SIGSTOP)
        try:
            times = self.publish(task, bodies, rate)
        finally:
            published = time.time()
            self._signal_workers(signal.SIGCONT)
        return times, published, published

    def run_noop(self, bodies: list[dict], timeout: float, preload: bool = False) -> dict[str, Any]:
        """The baseline: one ``ratings.noop`` per body; messages / (last ack − first publish), or with
        ``preload`` / (last ack − workers continued)."""
        self.reset()
        times, published, clock = self._publish_timed(NOOP_TASK, bodies, None, preload)
        deadline = time.monotonic() + timeout
        end = None
        while True:
            if self.redis.llen(self.queue) == 0 and self._my_unacked() == 0:
                seen = time.time()
                time.sleep(0.1)  # confirm: a message between BRPOP and its unacked entry would reappear
                if self.redis.llen(self.queue) == 0 and self._my_unacked() == 0:
                    end = seen
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"no-op baseline not done after {timeout:.0f} s")
            time.sleep(0.005)
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            dead = repository.counts(conn).dead_letters
        if dead:
            raise RuntimeError(f"{dead} no-op message(s) were dead-lettered: the workers do not know {NOOP_TASK}")
        elapsed = end - clock
        return {"kind": "noop_preloaded" if preload else "noop", "messages": len(bodies), "seconds": round(elapsed, 3),
                "per_s": round(len(bodies) / elapsed, 1),
                "publish_per_s": round(len(bodies) / max(published - times[0], 1e-9), 1)}

    def run_matches(self, label: str, matches: list[dict], timeout: float, rate: float | None = None,
                    preload: bool = False) -> dict[str, Any]:
        """The rating path: publish ``matches``; throughput to the last event on the stream and to
        the last commit; latency publish → commit and publish → event; exact counts and verify.
        ``preload``: the clock starts when the stopped workers continue (see :meth:`_publish_timed`)."""
        self.reset()
        with _Vacuum(self.database_url, self.vacuum_interval) as vacuum:
            result = self._run_matches(label, matches, timeout, rate, preload)
        return result | {"bench_vacuum_rounds": vacuum.rounds}

    def _run_matches(self, label, matches, timeout, rate, preload) -> dict[str, Any]:
        from worker.policy.ladders import load_ladders
        from worker.ops.verify import verify_ladder

        times, published, clock = self._publish_timed(RATING_TASK, matches, rate, preload)
        sent = {m["match_id"]: t for m, t in zip(matches, times)}
        expected_events = _events_of(matches)
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.database_url, autocommit=True) as conn:
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
            committed = dict(conn.execute(
                "SELECT match_id, extract(epoch FROM max(occurred_at))::float8 FROM rating_changes GROUP BY match_id"
            ).fetchall())
            policies = load_ladders(get_settings().ladders_file)
            verified = all(verify_ladder(conn, ladder, policy).ok for ladder, policy in policies.items())
        on_stream: dict[str, float] = {}
        start = "-"
        while True:
            page = self.redis.xrange(self.stream, min=start, count=10_000)
            if not page:
                break
            for entry_id, fields in page:
                at = int(entry_id.split(b"-")[0]) / 1000
                match_id = json.loads(fields[b"payload"])["match_id"]
                if at > on_stream.get(match_id, 0.0):
                    on_stream[match_id] = at
            start = "(" + page[-1][0].decode()
        first = clock
        last_event = max(on_stream.values())
        last_commit = max(committed.values())
        return {
            "kind": label, "messages": len(matches), "events": expected_events,
            "paced_per_s": round(rate, 1) if rate else None,
            "publish_per_s": round(len(matches) / max(published - times[0], 1e-9), 1),
            "seconds_to_last_event": round(last_event - first, 3),
            "per_s": round(len(matches) / (last_event - first), 1),
            "per_s_to_last_commit": round(len(matches) / (last_commit - first), 1),
            "applied": c.applied, "duplicates": c.duplicates, "dead_letters": c.dead_letters,
            "verify_ok": verified,
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


def service_bench(config: BenchConfig, database_url: str, broker_url: str, log_dir: Path) -> dict[str, Any]:
    """Part 2: baseline and rating path per worker count; half load, hot players, memory."""
    main = config.main_worker_count()
    counts = [main] if config.skip_scaling else sorted(set(config.workers) | {main})
    n = config.matches
    timeout = max(180.0, n / 20)
    runs: list[dict[str, Any]] = []
    scaling = []
    settings = get_settings()  # the workers inherit this process's environment: the same values
    out: dict[str, Any] = {"main_workers": main, "matches": n, "players": config.players,
                           "node_layout": "one worker node per process, concurrency 1 (prefork child)",
                           "batch_size": settings.batch_size, "batch_flush_interval_s": settings.batch_flush_interval,
                           "reserved_per_child": settings.reserved_per_child}
    out["server_autovacuum"] = autovacuum_on(database_url)
    out["bench_vacuum_interval_s"] = 0.0 if out["server_autovacuum"] else config.vacuum_interval
    for workers in counts:
        unbatched_noop = unbatched_noop_preloaded = None
        if settings.batch_size > 1:
            # Batching raises the prefetch (2 x batch size per child), which does the one-task-per-
            # message no-op no good: the baseline is also measured on workers without batching
            # (RATINGS_BATCH_SIZE=1, prefetch multiplier as configured), and the better one counts.
            plain = Cluster(database_url, broker_url, workers, log_dir / f"workers-{workers}-unbatched",
                            config.loglevel, overrides={"RATINGS_BATCH_SIZE": "1"})
            out.setdefault("queues", []).append(plain.queue)
            out.setdefault("streams", []).append(plain.stream)
            try:
                progress.print(f"[bold]service[/bold]: {workers} worker process(es) without batching: no-op baseline")
                plain.start()
                plain.run_noop([{"warm": i} for i in range(200)], 120)
                plain_bodies = service_matches(n, config.seed + workers, f"bench-w{workers}", config.players)
                unbatched_noop = plain.run_noop(plain_bodies, timeout) | {"workers": workers, "kind": "noop_unbatched"}
                unbatched_noop_preloaded = plain.run_noop(plain_bodies, timeout, preload=True) | {
                    "workers": workers, "kind": "noop_unbatched_preloaded"}
                runs += [unbatched_noop, unbatched_noop_preloaded]
            finally:
                plain.stop()
        cluster = Cluster(database_url, broker_url, workers, log_dir / f"workers-{workers}", config.loglevel)
        cluster.vacuum_interval = out["bench_vacuum_interval_s"]
        out["noop_task_wired"] = cluster.wired
        out.setdefault("queues", []).append(cluster.queue)
        out.setdefault("streams", []).append(cluster.stream)
        try:
            progress.print(f"[bold]service[/bold]: {workers} worker process(es): starting")
            cluster.start()
            rss_cold = cluster.worker_rss()
            _warm_up(cluster, config.seed + 99, config.players)
            rss_warm = cluster.worker_rss()
            bodies = service_matches(n, config.seed + workers, f"bench-w{workers}", config.players)
            progress.print(f"  baseline: {n} no-op tasks (then again with the queue filled first)")
            noop = cluster.run_noop(bodies, timeout) | {"workers": workers}
            noop_preloaded = cluster.run_noop(bodies, timeout, preload=True) | {"workers": workers}
            progress.print(f"  rating path: {n} matches at full load")
            full = cluster.run_matches("uniform_full_load", bodies, timeout) | {"workers": workers}
            runs += [noop, noop_preloaded, full]
            noop_same = noop
            if unbatched_noop is not None and unbatched_noop["per_s"] > noop["per_s"]:
                noop = unbatched_noop
            if unbatched_noop_preloaded is not None and unbatched_noop_preloaded["per_s"] > noop_preloaded["per_s"]:
                noop_preloaded = unbatched_noop_preloaded
            scaling.append({
                "workers": workers, "baseline_per_s": noop["per_s"], "baseline_kind": noop["kind"],
                "baseline_same_workers_per_s": noop_same["per_s"],
                "baseline_unbatched_workers_per_s": unbatched_noop["per_s"] if unbatched_noop else None,
                "rating_per_s": full["per_s"],
                "ratio": round(full["per_s"] / noop["per_s"], 3),
                "publish_per_s": noop["publish_per_s"], "baseline_preloaded_per_s": noop_preloaded["per_s"],
                "p50_publish_to_event_ms": full["latency_publish_to_event"]["p50_ms"],
                "p99_publish_to_event_ms": full["latency_publish_to_event"]["p99_ms"],
            })
            processed = 200 + n
            if workers == main:
                progress.print(f"  rating path: {n} matches with the queue filled first")
                drained = cluster.run_matches(
                    "uniform_preloaded", service_matches(n, config.seed + 300, f"bench-pre-w{workers}", config.players),
                    timeout, preload=True) | {"workers": workers}
                runs.append(drained)
                out["headline"] = {"workers": workers, "baseline_per_s": noop["per_s"], "rating_per_s": full["per_s"],
                                   "ratio": round(full["per_s"] / noop["per_s"], 3),
                                   "preloaded_baseline_per_s": noop_preloaded["per_s"],
                                   "preloaded_rating_per_s": drained["per_s"],
                                   "preloaded_ratio": round(drained["per_s"] / noop_preloaded["per_s"], 3)}
                processed += n
                half_rate = full["per_s"] / 2
                half_n = max(50, n // 2)
                progress.print(f"  half load: {half_n} matches paced at {half_rate:.0f}/s")
                half = cluster.run_matches(
                    "uniform_half_load", service_matches(half_n, config.seed + 500, f"bench-half-w{workers}", config.players),
                    timeout + half_n / half_rate, rate=half_rate) | {"workers": workers}
                progress.print(f"  hot players: {n} matches, {config.hot_share:.0%} with one of {config.hot_players}")
                hot = cluster.run_matches(
                    "hot_players_full_load",
                    service_matches(n, config.seed + 700, f"bench-hot-w{workers}", config.players,
                                    config.hot_share, config.hot_players), timeout) | {"workers": workers}
                runs += [half, hot]
                out["half_load"] = {"paced_per_s": half["paced_per_s"], "achieved_per_s": half["per_s"],
                                    "latency_publish_to_commit": half["latency_publish_to_commit"],
                                    "latency_publish_to_event": half["latency_publish_to_event"],
                                    "full_load_latency_publish_to_event": full["latency_publish_to_event"]}
                out["hot_players"] = {"hot_share": config.hot_share, "hot_players": config.hot_players,
                                      "per_s": hot["per_s"], "uniform_per_s": full["per_s"],
                                      "share_of_uniform": round(hot["per_s"] / full["per_s"], 3),
                                      "latency_publish_to_event": hot["latency_publish_to_event"]}
                processed += half_n + n
                if config.soak_matches:
                    progress.print(f"  soak: {config.soak_matches} matches at full load")
                    soak = cluster.run_matches(
                        "soak_full_load",
                        service_matches(config.soak_matches, config.seed + 900, f"bench-soak-w{workers}", config.players),
                        max(timeout, config.soak_matches / 20)) | {"workers": workers}
                    runs.append(soak)
                    processed += config.soak_matches
                rss_end = cluster.worker_rss()
                out["rss"] = {
                    "workers": workers, "matches_processed": processed,
                    "start_cold_mib": round(rss_cold["total_bytes"] / 2**20, 1),
                    "after_warm_up_mib": round(rss_warm["total_bytes"] / 2**20, 1),
                    "end_mib": round(rss_end["total_bytes"] / 2**20, 1),
                    "children_after_warm_up_mib": round(rss_warm["children_bytes"] / 2**20, 1),
                    "children_end_mib": round(rss_end["children_bytes"] / 2**20, 1),
                    "growth_from_warm_up_pct": round(100 * (rss_end["total_bytes"] / rss_warm["total_bytes"] - 1), 1),
                    "growth_from_cold_pct": round(100 * (rss_end["total_bytes"] / rss_cold["total_bytes"] - 1), 1),
                }
        finally:
            cluster.stop()
    out["scaling"] = scaling
    out["runs"] = runs
    return out


# --------------------------------------------------------------------------------------------
# part 5: the ledger at scale

_LEDGER_SQL = """
INSERT INTO ledger (match_id, ladder, payload_hash, payload, finished_at)
SELECT id, 'elo', md5(id), jsonb_build_object(
           'schema_version', 1, 'match_id', id, 'ladder', 'elo',
           'finished_at', to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
           'side_a', jsonb_build_object('players', jsonb_build_array(
               jsonb_build_object('player_id', 'pl' || lpad(a::text, 6, '0'), 'stats', NULL))),
           'side_b', jsonb_build_object('players', jsonb_build_array(
               jsonb_build_object('player_id', 'pl' || lpad(((a + 1 + d) %% %(players)s::int)::text, 6, '0'), 'stats', NULL))),
           'outcome', CASE WHEN o < 0.45 THEN 'side_a_won' WHEN o < 0.9 THEN 'side_b_won' ELSE 'draw' END),
       ts
  FROM (SELECT 'bench-ledger-' || g AS id,
               floor(random() * %(players)s::int)::int AS a,
               floor(random() * (%(players)s::int - 1))::int AS d,
               random() AS o,
               timestamptz '2020-01-01 00:00:00+00' + g * interval '1 minute' AS ts
          FROM generate_series(%(first)s::int, %(last)s::int) AS g) AS s
 ORDER BY ts
"""


def _verify_child(database_url: str, ladders_file: str, mode: str) -> dict[str, Any]:
    """In a fresh process: verify the ``elo`` ladder (``mode``: ``verify`` as shipped, ``fast`` with
    :mod:`engine.fast_replay`, ``idle``: imports and a connection only, the memory baseline)."""
    import psutil

    from worker.policy.ladders import load_ladders
    from worker.ops.verify import verify_ladder

    policy = load_ladders(Path(ladders_file))["elo"]
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT 1")
        rss_before = psutil.Process().memory_info().rss
        started = time.perf_counter()
        if mode == "verify":
            result = verify_ladder(conn, "elo", policy)
            ok, matches, players = result.ok, result.matches, result.players
        elif mode == "fast":
            ok, matches, players = fast_verify(conn, "elo", policy)
        else:
            ok, matches, players = True, 0, 0
        seconds = time.perf_counter() - started
    peak = _peak_rss()
    return {"mode": mode, "seconds": seconds, "ok": ok, "matches": matches, "players": players,
            "rss_before_mib": round(rss_before / 2**20, 1), "peak_rss_mib": round(peak / 2**20, 1)}


def _peak_rss() -> int:
    """This process's peak RSS in bytes: VmHWM (reset by exec, unlike getrusage's ru_maxrss, which
    Linux carries over from the parent that forked), else ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if platform.system() == "Darwin" else 1024)


def fast_verify(conn: psycopg.Connection, ladder: str, policy) -> tuple[bool, int, int]:
    """``verify_ladder`` with :mod:`engine.fast_replay` in place of :func:`engine.replay.replay`:
    the same snapshot, the same streaming read, the same exact comparison."""
    from engine.fast_replay import Replayer  # worker.mapping and engine are imported by worker.ops.verify too
    from worker.mapping import to_engine_match

    saved = conn.isolation_level
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    try:
        with conn.transaction():
            stored = repository.stored_standings(conn, ladder)
            replayer = Replayer(policy).feed(map(to_engine_match, repository.iter_ledger(conn, ladder)))
    finally:
        conn.isolation_level = saved
    return replayer.ratings() == stored, replayer.matches, len(stored)


def ledger_bench(config: BenchConfig, database_url: str) -> dict[str, Any]:
    """Part 5: write a ledger of ``ledger_size`` elo matches, time ``verify`` at 10/30/100 %."""
    from engine.fast_replay import Replayer
    from worker.policy.ladders import load_ladders
    from worker.mapping import to_engine_match

    size = config.ledger_size
    ladders_file = str(get_settings().ladders_file)
    policy = load_ladders(Path(ladders_file))["elo"]
    checkpoints = sorted({c for c in (size // 10, size * 3 // 10, size) if c > 0})
    replayer = Replayer(policy)
    ctx = multiprocessing.get_context("spawn")
    sizes = []
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")
        conn.execute("SELECT setseed(%s)", (((config.seed % 1000) / 1000),))
        built = last_seq = 0
        for target in checkpoints:
            progress.print(f"[bold]ledger[/bold]: writing matches {built + 1:,} to {target:,}")
            started = time.perf_counter()
            conn.execute(_LEDGER_SQL, {"players": config.ledger_players, "first": built + 1, "last": target})
            conn.execute("VACUUM ANALYZE ledger")
            write_seconds = time.perf_counter() - started
            started = time.perf_counter()
            new_last = conn.execute("SELECT coalesce(max(seq), 0) FROM ledger").fetchone()[0]
            with conn.transaction(), conn.cursor(name="bench_new_rows") as cur:
                cur.itersize = 5000
                cur.execute("SELECT payload FROM ledger WHERE ladder = 'elo' AND seq > %s AND seq <= %s ORDER BY seq",
                            (last_seq, new_last))
                replayer.feed(to_engine_match(payload) for (payload,) in cur)
            last_seq = new_last
            standings = replayer.ratings()
            with conn.transaction():
                conn.execute("DELETE FROM players WHERE ladder = 'elo'")
                with conn.cursor().copy(
                    "COPY players (ladder, player_id, rating, peak_rating, games_played) FROM STDIN"
                ) as copy:
                    for pid, (rating, games) in standings.items():
                        copy.write_row(("elo", pid, rating, rating, games))
            players_seconds = time.perf_counter() - started
            built = target
            progress.print(f"  verify {target:,} matches (each in a fresh process)")
            with ctx.Pool(1, maxtasksperchild=1) as pool:
                idle = pool.apply(_verify_child, (database_url, ladders_file, "idle"))
            with ctx.Pool(1, maxtasksperchild=1) as pool:
                shipped = pool.apply(_verify_child, (database_url, ladders_file, "verify"))
            with ctx.Pool(1, maxtasksperchild=1) as pool:
                fast = pool.apply(_verify_child, (database_url, ladders_file, "fast"))
            sizes.append({
                "matches": target, "write_seconds": round(write_seconds, 1),
                "players_table_seconds": round(players_seconds, 1),
                "verify_seconds": round(shipped["seconds"], 3), "verify_per_s": round(target / shipped["seconds"]),
                "verify_ok": shipped["ok"] and shipped["matches"] == target,
                "verify_peak_rss_mib": shipped["peak_rss_mib"],
                "fast_verify_seconds": round(fast["seconds"], 3), "fast_verify_per_s": round(target / fast["seconds"]),
                "fast_verify_ok": fast["ok"] and fast["matches"] == target,
                "fast_verify_peak_rss_mib": fast["peak_rss_mib"],
                "idle_process_peak_rss_mib": idle["peak_rss_mib"],
            })
        table_mib = conn.execute("SELECT pg_total_relation_size('ledger')").fetchone()[0] / 2**20
    return {"ladder": "elo", "players": config.ledger_players, "ledger_mib": round(table_mib, 1),
            "batch_rows": 5000, "sizes": sizes}


# --------------------------------------------------------------------------------------------
# the whole run


def targets(results: dict[str, Any], config: BenchConfig) -> list[dict[str, Any]]:
    """The issue's targets beside what this run reached (``met`` is None when not measured)."""
    rows = []

    def add(name, target, value, met, note=""):
        rows.append({"target": name, "wanted": target, "reached": value, "met": met, "note": note})

    engine = results.get("engine")
    if engine:
        v = engine["classic_1v1"]["rate_per_s"]
        add("engine.rate, 1v1 classic", ">= 300,000/s", v, v >= 300_000)
        v = engine["sedma_1v1"]["rate_per_s"]
        add("engine.rate, 1v1 Sedma", ">= 300,000/s", v, v >= 300_000)
        v = engine["classic_1v1"]["fast_replay_per_s"]
        add("replay path (fast_replay), 1v1 classic", ">= 1,000,000/s", v, v >= 1_000_000)
        v = engine["sedma_1v1"]["fast_replay_per_s"]
        add("replay path (fast_replay), 1v1 Sedma", ">= 1,000,000/s", v, v >= 1_000_000)
    ledger = results.get("ledger")
    if ledger and ledger["sizes"]:
        big = ledger["sizes"][-1]
        full = big["matches"] >= 1_000_000
        note = "" if full else f"ledger of {big['matches']:,} only"
        add(f"verify {big['matches']:,} matches", "<= 60 s (1,000,000)", big["verify_seconds"],
            big["verify_seconds"] <= 60 if full else None, note)
        add(f"verify {big['matches']:,} matches, fast replay", "<= 60 s (1,000,000)", big["fast_verify_seconds"],
            big["fast_verify_seconds"] <= 60 if full else None, note)
        peaks = [s["verify_peak_rss_mib"] for s in ledger["sizes"]]
        add("verify memory flat (peak RSS, smallest to largest ledger)", "flat",
            f"{peaks[0]} -> {peaks[-1]} MiB", peaks[-1] <= peaks[0] * 1.1 + 5 if len(peaks) > 1 else None)
    service = results.get("service")
    if service and "rss" in service:
        rss = service["rss"]
        enough = rss["matches_processed"] >= 200_000
        add(f"worker RSS growth over {rss['matches_processed']:,} matches", "< 10 % over 200,000",
            f"{rss['growth_from_warm_up_pct']} %", rss["growth_from_warm_up_pct"] < 10 if enough else None,
            "" if enough else "fewer than 200,000 matches: use --soak-matches 200000")
    if service and "hot_players" in service:
        v = service["hot_players"]["share_of_uniform"]
        add("hot players / uniform throughput", ">= 70 %", f"{v:.0%}", v >= 0.7)
    if service and "half_load" in service:
        v = service["half_load"]["latency_publish_to_event"]["p99_ms"]
        add("p99 publish -> event at half load", "<= 100 ms", v, v is not None and v <= 100)
    return rows


def run_bench(config: BenchConfig) -> int:
    """Run the benchmark, print the tables, write the JSON; exit code 0, or 1 if a correctness
    check failed (a lost message, a dead letter, a failed verify)."""
    try:
        import psutil  # noqa: F401
    except ImportError:
        progress.print("[red]ratings bench needs psutil[/red]: pip install -e '.[bench]'")
        return 2
    settings = get_settings()
    results: dict[str, Any] = {"machine": machine(), "config": {k: (str(v) if isinstance(v, Path) else v)
                                                                for k, v in asdict(config).items()}}
    results["config"]["main_workers"] = config.main_worker_count()
    started = time.monotonic()
    if not config.skip_engine:
        results["engine"] = engine_speed(config)
    embedded = admin = None
    dbname = None
    try:
        if not (config.skip_service and config.skip_ledger):
            from worker.devtools.embedded import EmbeddedServers
            from worker.store.migrate import migrate

            db_url, broker_url = settings.database_url, settings.broker_url
            if not db_url or not broker_url:
                state = settings.state_dir.resolve() / "bench"
                progress.print(f"starting embedded servers under {state}")
                embedded = EmbeddedServers.start(state, postgres=not db_url, redis_server=not broker_url)
                db_url, broker_url = db_url or embedded.database_url, broker_url or embedded.broker_url
            results["machine"]["servers"] = "embedded" if embedded else "configured"
            results["database"] = dbname = f"ratings_bench_{uuid.uuid4().hex[:8]}"
            admin = db_url
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{dbname}"')
                results["machine"]["postgresql"] = conn.execute("SHOW server_version").fetchone()[0]
            results["machine"]["redis"] = redis.Redis.from_url(broker_url).info("server").get("redis_version")
            database_url = _with_dbname(admin, dbname)
            migrate(database_url)
            log_dir = settings.state_dir.resolve() / "bench-logs" / dbname
            if not config.skip_service:
                results["service"] = service_bench(config, database_url, broker_url, log_dir)
            if not config.skip_ledger:
                results["ledger"] = ledger_bench(config, database_url)
    finally:
        if dbname is not None:
            try:
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
            except psycopg.Error as exc:
                progress.print(f"[yellow]could not drop the bench database {dbname}[/yellow]: {exc}")
        if embedded is not None:
            embedded.stop()
    results["targets"] = targets(results, config)
    results["seconds"] = round(time.monotonic() - started, 1)
    config.output.write_text(json.dumps(results, indent=2))
    print_results(results)
    console.print(f"figures written to {config.output} ({results['seconds']:.0f} s)")
    return 0 if correct(results) else 1


def correct(results: dict[str, Any]) -> bool:
    """Every correctness check of the run passed (nothing lost, no dead letter, verify exact)."""
    ok = results.get("engine", {}).get("fast_replay_identical", True)
    for run in results.get("service", {}).get("runs", []):
        if not run["kind"].startswith("noop"):
            ok &= run["verify_ok"] and run["applied"] == run["messages"] and not run["dead_letters"]
    for size in results.get("ledger", {}).get("sizes", []):
        ok &= size["verify_ok"] and size["fast_verify_ok"]
    return bool(ok)


# --------------------------------------------------------------------------------------------
# printing


def _console_width() -> int:
    return Console().width


def _n(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and v >= 100 or isinstance(v, int):
        return f"{v:,.0f}"
    return str(v)


def print_results(results: dict[str, Any]) -> None:
    """The figures as rich tables: each beside the baseline measured in the same run."""
    console = Console(width=max(_console_width(), 120))
    m = results["machine"]
    console.print(f"machine: {m['nproc']} CPU ({m['cpu_model']}), {m.get('memory_gib')} GiB, Python {m['python']}, "
                  f"PostgreSQL {m.get('postgresql', '-')}, Redis {m.get('redis', '-')} ({m.get('servers', 'no servers')})")
    if engine := results.get("engine"):
        t = Table(title="engine speed (matches per second, best of %d)" % engine["repeats"])
        for col in ("path", "1v1 classic", "1v1 Sedma", "Sedma 30 % 2v2"):
            t.add_column(col, justify="right" if col != "path" else "left")
        c, s, x = engine["classic_1v1"], engine["sedma_1v1"], engine["sedma_mixed_30pct_2v2"]
        t.add_row("engine.rate (public call)", _n(c["rate_per_s"]), _n(s["rate_per_s"]), "-")
        t.add_row("engine.replay.replay", _n(c["replay_per_s"]), _n(s["replay_per_s"]), _n(x["replay_per_s"]))
        t.add_row("engine.fast_replay.replay", _n(c["fast_replay_per_s"]), _n(s["fast_replay_per_s"]), _n(x["fast_replay_per_s"]))
        t.add_row(f"elote EloCompetitor ({engine['elote_version'] or 'not installed'})", _n(c["elote_per_s"]), "-", "-")
        t.add_row("inline Python Elo loop", _n(c["inline_loop_per_s"]), "-", "-")
        console.print(t)
    if service := results.get("service"):
        t = Table(title="service: matches per second, first publish to last event (baseline: no-op tasks to last ack); "
                        f"RATINGS_BATCH_SIZE={service.get('batch_size', 1)}")
        for col in ("worker processes", "no-op baseline/s", "rating path/s", "rating / baseline",
                    "p50 publish→event ms", "p99 publish→event ms", "publisher alone/s", "no-op, queue filled first/s"):
            t.add_column(col, justify="right")
        for row in service["scaling"]:
            t.add_row(str(row["workers"]), _n(row["baseline_per_s"]), _n(row["rating_per_s"]), f"{row['ratio']:.0%}",
                      _n(row["p50_publish_to_event_ms"]), _n(row["p99_publish_to_event_ms"]),
                      _n(row["publish_per_s"]), _n(row["baseline_preloaded_per_s"]))
        console.print(t)
        if any(row.get("baseline_unbatched_workers_per_s") for row in service["scaling"]):
            console.print("no-op baseline: the better of the no-op on the batched workers' settings and on workers "
                          "without batching (RATINGS_BATCH_SIZE=1): " + "; ".join(
                              f"{row['workers']} w: {_n(row['baseline_same_workers_per_s'])} / "
                              f"{_n(row['baseline_unbatched_workers_per_s'])}/s" for row in service["scaling"]))
        if not service.get("server_autovacuum", True):
            console.print(f"note: the server's autovacuum is off; the bench ran VACUUM (ANALYZE) of the service tables "
                          f"every {service['bench_vacuum_interval_s']:g} s during each run in its place")
        t = Table(title=f"service at {service['main_workers']} worker processes")
        t.add_column("figure")
        t.add_column("value", justify="right")
        t.add_column("baseline (same run)", justify="right")
        if h := service.get("headline"):
            t.add_row("rating path / no-op baseline (headline)", f"{h['ratio']:.0%}",
                      f"{_n(h['rating_per_s'])}/s vs {_n(h['baseline_per_s'])}/s")
            t.add_row("the same with the queue filled first (consumers only)", f"{h['preloaded_ratio']:.0%}",
                      f"{_n(h['preloaded_rating_per_s'])}/s vs {_n(h['preloaded_baseline_per_s'])}/s")
        if half := service.get("half_load"):
            for key, label in (("latency_publish_to_event", "publish → event"), ("latency_publish_to_commit", "publish → commit")):
                lat = half[key]
                t.add_row(f"half load ({_n(half['paced_per_s'])}/s): {label} p50 / p95 / p99 ms",
                          f"{lat['p50_ms']} / {lat['p95_ms']} / {lat['p99_ms']}",
                          "full load: " + (f"{half['full_load_latency_publish_to_event']['p50_ms']} / "
                                           f"{half['full_load_latency_publish_to_event']['p95_ms']} / "
                                           f"{half['full_load_latency_publish_to_event']['p99_ms']}"
                                           if key == "latency_publish_to_event" else "-"))
        if hot := service.get("hot_players"):
            t.add_row(f"hot players ({hot['hot_share']:.0%} of matches, {hot['hot_players']} players)",
                      f"{_n(hot['per_s'])}/s ({hot['share_of_uniform']:.0%})", f"uniform {_n(hot['uniform_per_s'])}/s")
        if rss := service.get("rss"):
            t.add_row(f"worker RSS over {rss['matches_processed']:,} matches (all {rss['workers']} nodes)",
                      f"{rss['end_mib']} MiB ({rss['growth_from_warm_up_pct']:+} %)",
                      f"after warm-up {rss['after_warm_up_mib']} MiB, cold {rss['start_cold_mib']} MiB")
        console.print(t)
    if ledger := results.get("ledger"):
        t = Table(title=f"verify of the {ledger['ladder']} ledger ({ledger['players']:,} players; each in a fresh process)")
        for col in ("matches", "write s", "verify s", "verify/s", "peak RSS MiB", "fast verify s", "fast peak RSS MiB",
                    "idle process RSS MiB"):
            t.add_column(col, justify="right")
        for s in ledger["sizes"]:
            t.add_row(_n(s["matches"]), str(s["write_seconds"]), str(s["verify_seconds"]), _n(s["verify_per_s"]),
                      str(s["verify_peak_rss_mib"]), str(s["fast_verify_seconds"]), str(s["fast_verify_peak_rss_mib"]),
                      str(s["idle_process_peak_rss_mib"]))
        console.print(t)
    if rows := results.get("targets"):
        t = Table(title="targets (2-core machine)")
        for col in ("target", "wanted", "reached", "met"):
            t.add_column(col)
        for r in rows:
            met = "-" if r["met"] is None else ("[green]yes[/green]" if r["met"] else "[red]no[/red]")
            t.add_row(r["target"], r["wanted"], _n(r["reached"]) + (f" ({r['note']})" if r["note"] else ""), met)
        console.print(t)
