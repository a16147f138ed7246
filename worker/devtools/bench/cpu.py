"""``ratings bench`` part: CPU time per match, split by process, from the processes' own counters.

Each process's user + system CPU seconds are read at the start and at the end of a run, and the
difference is divided by the run's messages:

* worker main processes (the Celery consumer: Redis, decoding, batching, acknowledgements) and
  worker children (validation, engine, SQL) through ``psutil`` (``/proc/<pid>/stat``);
* the relay process, likewise;
* PostgreSQL: the backends connected to the bench's database (``pg_stat_activity``, the bench's
  own observing connection and its ``VACUUM (ANALYZE)`` session left out: the latter, standing in
  for a server's autovacuum, is reported apart as ``bench_vacuum_ms``), and apart from them the
  server's background processes (WAL writer, checkpointer, background writer, autovacuum: shared
  with anything else the server runs);
* Redis: the server's own counters (``INFO cpu``: ``used_cpu_user`` + ``used_cpu_sys``), the whole
  server (shared with anything else that uses it);
* the bench's publishers report their own CPU seconds (:mod:`worker.devtools.bench.publishers`);
  they stand for the game servers and are not counted in the service's total;
* the whole machine's busy CPU seconds (``/proc/stat``), so that what ran beside the service
  (the bench's observer, anything else on a shared machine) shows as "everything else", and the
  share of the machine's CPUs that was busy during the run.

Read through psutil, so the servers must run on this machine (as the latency figures need too).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from worker.devtools.bench import sql as bench_sql

SERVICE_PARTS = ("postgresql_backends", "postgresql_background", "worker_main", "worker_children", "redis", "relay")
"""The parts summed into the service's CPU per match."""


SWITCHED_PARTS = ("postgresql_backends", "worker_main", "worker_children", "relay")
"""The parts whose context switches per message :func:`per_match` reports (the service's
processes the bench knows by pid)."""


def _counters(pid: int) -> tuple[float, tuple[int, int]]:
    """CPU seconds (user + system) and (voluntary, involuntary) context switches of ``pid`` so far,
    read together (``/proc/<pid>/stat`` and ``status``): a voluntary switch is a wait (for the
    server, the broker, a lock), an involuntary one a preemption (the process wanted the CPU and
    another got it); zeros for a process gone."""
    import psutil

    try:
        process = psutil.Process(pid)
        with process.oneshot():
            t, c = process.cpu_times(), process.num_ctx_switches()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0, (0, 0)
    return t.user + t.system, (c.voluntary, c.involuntary)


@dataclass
class Snapshot:
    """CPU seconds per process at one instant, grouped by part (``part -> {pid: seconds}``), and
    the whole machine's busy CPU seconds (every CPU, every process: ``/proc/stat``) at that instant;
    ``switches``: the context switches of the same processes (``part -> {pid: (voluntary,
    involuntary)}``; Redis, known by its counters only, has none)."""

    parts: dict[str, dict[int, float]] = field(default_factory=dict)
    switches: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)
    machine_busy: float = 0.0
    at: float = 0.0


def machine_busy_seconds() -> float:
    """CPU seconds the machine has spent busy (not idle, not waiting for I/O), all CPUs summed."""
    import psutil

    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


class CpuMeter:
    """Takes :class:`Snapshot` s of the service's processes.

    ``worker_pids``: the worker nodes' main processes (their children are found at each snapshot);
    ``relay_pids``: relay processes; ``conn``: an autocommit connection to the bench's database
    (its own backend is left out); ``redis_client``: a client of the broker.
    """

    def __init__(self, worker_pids: list[int], relay_pids: list[int], conn, redis_client: redis.Redis):
        self.worker_pids = worker_pids
        self.relay_pids = relay_pids
        self.conn = conn
        self.redis = redis_client

    def snapshot(self) -> Snapshot:
        """Every part's processes and their CPU seconds now."""
        import psutil

        pids: dict[str, list[int]] = {"worker_main": list(self.worker_pids), "worker_children": [],
                                      "relay": list(self.relay_pids)}
        for pid in self.worker_pids:
            try:
                children = psutil.Process(pid).children(recursive=True)
            except psutil.NoSuchProcess:
                children = []
            pids["worker_children"] += [child.pid for child in children]
        backends, background, vacuums = bench_sql.server_process_ids(self.conn)
        pids |= {"postgresql_backends": backends, "bench_vacuum": vacuums, "postgresql_background": background}
        s = Snapshot({p: {} for p in SERVICE_PARTS})
        for part, part_pids in pids.items():
            read = {pid: _counters(pid) for pid in part_pids}
            s.parts[part] = {pid: cpu for pid, (cpu, _) in read.items()}
            s.switches[part] = {pid: switches for pid, (_, switches) in read.items()}
        cpu = self.redis.info("cpu")
        s.parts["redis"] = {0: float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])}
        s.machine_busy, s.at = machine_busy_seconds(), time.monotonic()
        return s


def per_match(start: Snapshot, end: Snapshot, messages: int,
              publisher_cpu_seconds: float | None = None) -> dict[str, Any]:
    """CPU milliseconds per message of each part between two snapshots, and the service's total.

    A process seen only at the end (started during the run) counts from zero; one gone by the end
    is not counted (the bench's pools keep their connections, so this is rare). The bench's own
    ``VACUUM (ANALYZE)`` session is ``bench_vacuum_ms``, outside the service's total.
    ``context_switches``: per part of :data:`SWITCHED_PARTS`, the ``voluntary`` and ``involuntary``
    context switches per message, counted the same way (an involuntary one is a preemption: more
    runnable processes than CPUs).
    """
    out: dict[str, Any] = {}
    total = 0.0

    def part_ms(part: str) -> float:
        before, after = start.parts.get(part, {}), end.parts.get(part, {})
        seconds = sum(max(0.0, v - before.get(pid, 0.0)) for pid, v in after.items())
        return 1000 * seconds / max(1, messages)

    for part in SERVICE_PARTS:
        ms = part_ms(part)
        out[f"{part}_ms"] = round(ms, 4)
        total += ms
    out["service_total_ms"] = round(total, 4)
    switches: dict[str, dict[str, float]] = {}
    for part in SWITCHED_PARTS:
        before_s, after_s = start.switches.get(part, {}), end.switches.get(part, {})
        counts = [sum(max(0, v[k] - before_s.get(pid, (0, 0))[k]) for pid, v in after_s.items()) for k in (0, 1)]
        switches[part] = {"voluntary": round(counts[0] / max(1, messages), 3),
                          "involuntary": round(counts[1] / max(1, messages), 3)}
    out["context_switches"] = switches
    vacuum = part_ms("bench_vacuum")
    out["bench_vacuum_ms"] = round(vacuum, 4)
    publishers = 1000 * (publisher_cpu_seconds or 0.0) / max(1, messages)
    if publisher_cpu_seconds is not None:
        out["publishers_ms"] = round(publishers, 4)
    # Everything else the machine ran meanwhile (the bench's own observing process, other people's
    # work on a shared machine, the kernel's time not charged to a process): what the service could
    # not use.
    busy = 1000 * max(0.0, end.machine_busy - start.machine_busy) / max(1, messages)
    out["machine_busy_ms"] = round(busy, 4)
    out["other_ms"] = round(max(0.0, busy - total - publishers - vacuum), 4)
    wall = end.at - start.at
    cpus = os.cpu_count() or 1
    seconds = end.machine_busy - start.machine_busy
    out["machine_busy_pct"] = round(100 * seconds / (wall * cpus), 1) if wall > 0 else None
    return out
