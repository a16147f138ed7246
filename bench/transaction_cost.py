"""The rating transaction's own CPU per match, without Celery: ``python bench/transaction_cost.py``.

Options: ``--matches 10000 --batch-sizes 1,10,100 --players 100000``. In a database of its own
(created on ``RATINGS_DATABASE_URL``'s server, migrated, dropped at the end), one process applies
the bench's generated Sedma matches (``ratings bench``'s generator, players drawn from
``--players``) through :meth:`worker.service.rating_service.RatingService.rate`, as a worker child
does, in batches of each size in turn, on one connection (prepared statements on, as the bench's
workers), with no broker, no Celery and no relay. The batch sizes run in the order given, on one
database that grows (the later sizes meet fewer new players; no VACUUM is run). For each batch size
it prints, per match: this process's CPU (validation, rating, events, psycopg), the CPU of the
PostgreSQL backend serving its connection (``/proc`` through psutil: the server must run on this
machine, in the same PID namespace), their sum, and the wall time; beside them, measured in the
same run on the same messages, the CPU of validation alone (:meth:`RatingService.validate`, no
I/O). What the service's CPU per match cannot go below with this transaction: a worker's main
process (Celery, the broker), the relay and Redis come on top.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

import psutil
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from worker.devtools.bench.cluster import service_matches  # noqa: E402
from worker.store.migrate import migrate  # noqa: E402
from worker.store.urls import url_with  # noqa: E402

WARM_UP = 1000
"""Matches applied before each batch size's measure (connection, prepared statements, caches)."""


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matches", type=int, default=10_000, help="matches measured per batch size")
    parser.add_argument("--batch-sizes", default="1,10,100")
    parser.add_argument("--players", type=int, default=100_000)
    args = parser.parse_args()
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    admin = os.environ.get("RATINGS_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    dbname = f"ratings_transaction_cost_{uuid.uuid4().hex[:8]}"
    url = url_with(admin, dbname=dbname)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    try:
        migrate(url)
        os.environ["RATINGS_DATABASE_URL"] = url
        os.environ["RATINGS_DATABASE_PREPARED_STATEMENTS"] = "true"  # as the bench's workers
        os.environ["RATINGS_POOL_MAX_SIZE"] = "1"  # one connection: its backend is the one measured
        from worker import bootstrap
        from worker.settings import get_settings

        settings = get_settings()
        service = bootstrap.build_service(settings, bootstrap.load_ladder_policies(settings))
        per = WARM_UP + args.matches
        matches = service_matches(per * len(sizes), 7, "cost", args.players)
        calls: list[tuple[str | None, list, dict]] = [
            (str(uuid.uuid4()), [json.dumps(m, separators=(",", ":"))], {}) for m in matches]
        me = psutil.Process()
        rows = []
        for n, size in enumerate(sizes):
            mine = calls[n * per:(n + 1) * per]
            for i in range(0, WARM_UP, size):  # the warm-up's own messages only, whatever the size
                service.rate(mine[i:min(i + size, WARM_UP)])
            with service.pool.connection() as conn:
                backend = psutil.Process(conn.info.backend_pid)
            if not backend.name().startswith("postgres"):
                raise SystemExit(f"process {backend.pid} is {backend.name()!r}, not the connection's PostgreSQL "
                                 "backend: the server must run on this machine, in this PID namespace")
            measured = mine[WARM_UP:]
            start_cpu, start_pg, start_wall = _cpu(me), _cpu(backend), time.perf_counter()
            for i in range(0, len(measured), size):
                service.rate(measured[i:i + size])
            cpu, pg, wall = _cpu(me) - start_cpu, _cpu(backend) - start_pg, time.perf_counter() - start_wall
            start_validate = _cpu(me)
            for task_id, call_args, kwargs in measured:
                service.validate(task_id, call_args, kwargs)
            validate = _cpu(me) - start_validate
            count = len(measured)
            rows.append({"batch_size": size, "matches": count,
                         "process_cpu_ms": 1000 * cpu / count, "postgres_backend_cpu_ms": 1000 * pg / count,
                         "total_cpu_ms": 1000 * (cpu + pg) / count, "wall_ms": 1000 * wall / count,
                         "validation_alone_cpu_ms": 1000 * validate / count})
        service.pool.close()
        print("batch size | this process CPU ms/match | PostgreSQL backend | sum | wall ms/match | "
              "validation alone (same run)")
        for r in rows:
            print(f"{r['batch_size']:>10} | {r['process_cpu_ms']:>25.3f} | {r['postgres_backend_cpu_ms']:>18.3f} | "
                  f"{r['total_cpu_ms']:>5.3f} | {r['wall_ms']:>13.3f} | {r['validation_alone_cpu_ms']:.3f}")
        print(json.dumps(rows))
        return 0
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


if __name__ == "__main__":
    sys.exit(main())
