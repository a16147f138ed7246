"""``ratings bench``: shared pieces (consoles, configuration, percentiles, machine description)."""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from worker.store.urls import url_with

console = Console()
progress = Console(stderr=True)

NOOP_TASK = "ratings.noop"
RATING_TASK = "ratings.apply_match"


@dataclass
class BenchConfig:
    """What ``ratings bench`` runs (see the command's options)."""

    matches: int = 10_000
    workers: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    main_workers: int | None = None
    publishers: int = 2
    """Publisher processes pushing pre-encoded messages (:mod:`worker.devtools.bench.publishers`)."""
    producer_matches: int = 2000
    """Matches each producer-helper measurement publishes (:func:`.publishers.producer_helper_rate`); 0: skip."""
    rabbitmq_url: str | None = None
    """RabbitMQ broker of the producer-helper part (with and without confirms); None: only when
    RATINGS_BROKER_URL is one."""
    players: int = 100_000
    hot_share: float = 0.2
    hot_players: int = 10
    hot_lock_seconds: float = 10.0
    """Seconds one hot player's row is held locked in the middle of the locked hot-player run (0: no such run)."""
    late_share: float = 0.1
    """Share of the late-arrival run's matches delivered late (0: no such run)."""
    late_by: int = 500
    """How late: each late match is published this many matches after its place in finish order."""
    soak_matches: int = 0
    paired_rounds: int = 5
    """Alternating rounds of the paired part (:mod:`worker.devtools.bench.paired`; 0: skip it)."""
    paired_matches: int = 5_000
    """Messages per run of a paired round."""
    paired_workers: list[int] = field(default_factory=lambda: [2, 8])
    """Worker counts of the paired part's rating runs (with the main count)."""
    model_rounds: int = 3
    """Rounds of the rating-model comparison at the main worker count (:func:`.service.model_comparison`:
    the same matches, consumers only, on the Elo ladder and on uncertainty ladders in turns; 0: skip)."""
    ledger_size: int = 1_000_000
    ledger_players: int = 10_000
    engine_matches: int = 200_000
    repeats: int = 3
    skip_engine: bool = False
    skip_service: bool = False
    skip_ledger: bool = False
    skip_scaling: bool = False
    durability_matches: int = 5_000
    """Publishes per Redis durability setting (:func:`worker.devtools.bench.publishers.durability_rates`; 0: skip)."""
    durability_rounds: int = 3
    """Turns each durability setting takes (its figure: the median)."""
    api_seconds: float = 5.0
    """Seconds of each read-API measurement (:mod:`worker.devtools.bench.api`; 0: skip the part)."""
    api_concurrency: int = 8
    """Concurrent keep-alive clients of the read-API measurements."""
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
        from worker.settings import get_settings

        app = create_app(get_settings())
        info["broker_transport"] = str(app.conf.broker_transport or "kombu default for the URL")
    except Exception as exc:  # noqa: BLE001 - informative only
        info["broker_transport"] = f"unknown ({type(exc).__name__})"
    return info


def _with_dbname(url: str, dbname: str) -> str:
    return url_with(url, dbname=dbname)


class SessionLoop:
    """Calls :meth:`tick` with a session of its own every ``interval`` seconds, in a thread, between
    ``__enter__`` and ``__exit__`` (``interval`` 0: never). The session's ``application_name`` is
    :attr:`application`, by which the bench's CPU accounting leaves it out of the service's
    PostgreSQL figure (:func:`worker.devtools.bench.sql.server_process_ids`)."""

    application = ""
    name = "bench-loop"

    def __init__(self, database_url: str, interval: float):
        import threading

        self.database_url = database_url
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)

    def __enter__(self):
        if self.interval > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def tick(self, conn) -> None:
        """One round (override)."""
        raise NotImplementedError

    def _loop(self) -> None:
        from worker.store.connection import connect

        with connect(self.database_url, autocommit=True) as conn:
            conn.execute(f"SET application_name = '{self.application}'")
            while not self._stop.wait(self.interval):
                self.tick(conn)
