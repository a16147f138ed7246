"""``ratings bench`` part: a large generated ledger and ``verify`` timed over it."""

from __future__ import annotations

import multiprocessing
import platform
import resource
import time
from pathlib import Path
from typing import Any

from worker import store as repository
from worker.devtools.bench import sql as bench_sql
from worker.devtools.bench.common import BenchConfig, progress
from worker.settings import get_settings
from worker.store.connection import Connection, connect, snapshot

# --------------------------------------------------------------------------------------------
# part 5: the ledger at scale

def _verify_child(database_url: str, ladders_file: str, mode: str) -> dict[str, Any]:
    """In a fresh process: verify the ``elo`` ladder (``mode``: ``verify`` as shipped, ``fast`` with
    :mod:`engine.fast_replay`, ``idle``: imports and a connection only, the memory baseline)."""
    import psutil

    from worker.ops.verify import verify_ladder
    from worker.policy.ladders import load_ladders

    policy = load_ladders(Path(ladders_file))["elo"]
    with connect(database_url, autocommit=True) as conn:
        bench_sql.ping(conn)
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


def fast_verify(conn: Connection, ladder: str, policy) -> tuple[bool, int, int]:
    """``verify_ladder`` with :mod:`engine.fast_replay` in place of :func:`engine.replay.replay`:
    the same snapshot, the same streaming read, the same exact comparison."""
    from engine.fast_replay import Replayer  # worker.mapping and engine are imported by worker.ops.verify too
    from worker.mapping import to_engine_match

    with snapshot(conn):
        stored = repository.stored_standings(conn, ladder)
        replayer = Replayer(policy).feed(map(to_engine_match, repository.iter_ledger(conn, ladder)))
    return replayer.ratings() == stored, replayer.matches, len(stored)


def ledger_bench(config: BenchConfig, database_url: str) -> dict[str, Any]:
    """Part 5: write a ledger of ``ledger_size`` elo matches, time ``verify`` at 10/30/100 %."""
    from engine import RatingPolicy
    from engine.fast_replay import Replayer
    from worker.mapping import to_engine_match
    from worker.policy.ladders import load_ladders

    size = config.ledger_size
    ladders_file = str(get_settings().ladders_file)
    policy = load_ladders(Path(ladders_file))["elo"]
    checkpoints = sorted({c for c in (size // 10, size * 3 // 10, size) if c > 0})
    if not isinstance(policy, RatingPolicy):
        raise ValueError(f"the bench's ladder 'elo' must be an Elo policy, not model {policy.model!r}")
    replayer = Replayer(policy)
    ctx = multiprocessing.get_context("spawn")
    sizes = []
    with connect(database_url, autocommit=True) as conn:
        bench_sql.truncate_service_tables(conn)
        bench_sql.seed_random(conn, (config.seed % 1000) / 1000)
        built = last_seq = 0
        for target in checkpoints:
            progress.print(f"[bold]ledger[/bold]: writing matches {built + 1:,} to {target:,}")
            started = time.perf_counter()
            bench_sql.write_synthetic_ledger(conn, config.ledger_players, built + 1, target)
            write_seconds = time.perf_counter() - started
            started = time.perf_counter()
            new_last = bench_sql.ledger_last_seq(conn)
            replayer.feed(to_engine_match(payload)
                          for payload in bench_sql.iter_payloads_between(conn, "elo", last_seq, new_last))
            last_seq = new_last
            standings = replayer.ratings()
            bench_sql.replace_players(conn, "elo", standings)
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
        table_mib = bench_sql.ledger_table_mib(conn)
    return {"ladder": "elo", "players": config.ledger_players, "ledger_mib": round(table_mib, 1),
            "batch_rows": 5000, "sizes": sizes}


