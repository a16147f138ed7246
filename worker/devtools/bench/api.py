"""``ratings bench`` part: the read API under load beside the rating path at half load.

Requests per second and p50/p99 latency of a single player lookup, a 100-player batch lookup and a
leaderboard page (a walk of up to 5 pages through the cursor), each measured right after the same
``ratings api`` process's trivial endpoint (``/health``: the framework, the pool and one
``SELECT 1``) in the same run, at a stated number of concurrent clients with keep-alive
connections. Meanwhile the rating path runs at half its full-load rate; its achieved rate and
publish-to-event latency are reported beside the same half-load run without API load.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import random
import threading
import time
from pathlib import Path
from typing import Any

from worker.devtools.bench.cluster import Cluster, _warm_up, service_matches
from worker.devtools.bench.common import BenchConfig, latency_summary, progress
from worker.devtools.runtime import wait_until
from worker.store.connection import connect

KINDS = ("single_lookup", "batch_100", "leaderboard_page")
"""The measured requests, each beside the trivial endpoint."""

CLIENT_PROCESSES = 2
"""Load-generating processes (threads split between them), so the client's GIL is not the limit."""


def _request(kind: str, ids: list[str], rng: random.Random, state: dict[str, Any]) -> tuple[str, str, bytes | None]:
    if kind == "trivial":
        return "GET", "/health", None
    if kind == "single_lookup":
        return "GET", f"/v1/ladders/sedma/players/{rng.choice(ids)}", None
    if kind == "batch_100":
        return "POST", "/v1/ladders/sedma/players", json.dumps({"player_ids": rng.sample(ids, 100)}).encode()
    cursor = state.get("cursor")
    return "GET", "/v1/ladders/sedma/leaderboard?limit=50" + (f"&cursor={cursor}" if cursor else ""), None


def _client(port: int, kind: str, ids: list[str], seconds: float, threads: int, seed: int, out) -> None:
    """One load-generating process: ``threads`` keep-alive clients for ``seconds``; puts
    (latencies in seconds, errors) on ``out``."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def loop(n: int) -> None:
        rng = random.Random(seed * 1000 + n)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: list[float] = []
        state: dict[str, Any] = {}
        bad = 0
        while time.monotonic() < stop:
            method, path, body = _request(kind, ids, rng, state)
            headers = {"Content-Type": "application/json"} if body else {}
            t0 = time.perf_counter()
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            mine.append(time.perf_counter() - t0)
            if response.status != 200:
                bad += 1
            elif kind == "leaderboard_page":  # a walk of up to 5 pages, then from the top again
                state["pages"] = state.get("pages", 0) + 1
                state["cursor"] = json.loads(data)["next_cursor"] if state["pages"] % 5 else None
        conn.close()
        with lock:
            latencies.extend(mine)
            errors[0] += bad

    workers = [threading.Thread(target=loop, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out.put((latencies, errors[0]))


def measure(port: int, kind: str, ids: list[str], seconds: float, concurrency: int, seed: int) -> dict[str, Any]:
    """``concurrency`` clients (split over :data:`CLIENT_PROCESSES` processes) sending ``kind``
    requests for ``seconds``: requests per second, latency percentiles (ms), non-200 answers."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    split = [concurrency // CLIENT_PROCESSES + (i < concurrency % CLIENT_PROCESSES) for i in range(CLIENT_PROCESSES)]
    procs = [ctx.Process(target=_client, args=(port, kind, ids, seconds, n, seed + i, out))
             for i, n in enumerate(split) if n]
    started = time.monotonic()
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    elapsed = time.monotonic() - started
    latencies = [v for lat, _ in results for v in lat]
    return {"kind": kind, "requests": len(latencies), "per_s": round(len(latencies) / elapsed, 1),
            "errors": sum(e for _, e in results), "latency": latency_summary(latencies)}


def api_bench(config: BenchConfig, database_url: str, broker_url: str, log_dir: Path) -> dict[str, Any]:
    """The API part (see the module): returns the figures."""
    main = config.main_worker_count()
    cluster = Cluster(database_url, broker_url, main, log_dir / "api", config.loglevel)
    cluster.vacuum_interval = config.vacuum_interval
    cluster.publishers = config.publishers
    out: dict[str, Any] = {"workers": main, "concurrency": config.api_concurrency,
                           "client_processes": CLIENT_PROCESSES, "seconds_per_measurement": config.api_seconds,
                           "trivial_endpoint": "GET /health (SELECT 1)"}
    try:
        progress.print(f"[bold]read API[/bold]: {main} worker process(es), relay and `ratings api`: starting")
        cluster.start()
        _warm_up(cluster, config.seed + 1099, config.players)
        n = config.matches
        timeout = max(180.0, n / 20)
        full = cluster.run_matches("api_reference_full_load",
                                   service_matches(n, config.seed + 1100, "bench-api-full", config.players), timeout)
        half_rate = full["per_s"] / 2
        span = config.api_seconds * 2 * len(KINDS) + 8  # the measurements, and the start before them
        half_n = max(50, int(half_rate * span))
        progress.print(f"  rating path alone at half load: {half_n} matches paced at {half_rate:.0f}/s")
        alone = cluster.run_matches("api_half_load_alone", service_matches(
            half_n, config.seed + 1200, "bench-api-alone", config.players), timeout + span, rate=half_rate)
        cluster.procs.start_api("api")
        port = cluster.procs.ports["api"]
        wait_until(lambda: _health(port), "the read API", timeout=60)
        background: dict[str, Any] = {}
        rating = threading.Thread(target=lambda: background.update(cluster.run_matches(
            "api_half_load_with_api", service_matches(half_n, config.seed + 1300, "bench-api-with", config.players),
            timeout + span, rate=half_rate)))
        rating.start()
        # the run empties the tables first; then players accumulate: 5 s of them, at least 200
        time.sleep(5)
        ids: list[str] = []
        deadline = time.monotonic() + 60
        while len(ids) < 200 and time.monotonic() < deadline:
            with connect(database_url, autocommit=True) as conn:
                ids = [r[0] for r in conn.execute(
                    "SELECT player_id FROM players WHERE ladder = 'sedma' ORDER BY random() LIMIT 5000")]
            time.sleep(0.5)
        if len(ids) < 100:
            raise RuntimeError(f"only {len(ids)} players rated after a minute of the half-load run")
        out["players_looked_up_from"] = len(ids)
        pairs = []
        for i, kind in enumerate(KINDS):
            progress.print(f"  {kind} beside the trivial endpoint: {config.api_seconds:g} s each, "
                           f"{config.api_concurrency} clients")
            trivial = measure(port, "trivial", ids, config.api_seconds, config.api_concurrency, config.seed + 10 * i)
            measured = measure(port, kind, ids, config.api_seconds, config.api_concurrency, config.seed + 10 * i + 5)
            pairs.append({"kind": kind, "trivial": trivial, "measured": measured,
                          "share_of_trivial_per_s": round(measured["per_s"] / trivial["per_s"], 3)})
        rating.join()
        out["pairs"] = pairs
        out["rating_path"] = {"full_load_per_s": full["per_s"], "paced_per_s": round(half_rate, 1),
                              "alone": _rating_figures(alone), "with_api_load": _rating_figures(background)}
        out["runs"] = [full, alone, background]
    finally:
        cluster.stop()
    return out


def _health(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    finally:
        conn.close()


def _rating_figures(run: dict[str, Any]) -> dict[str, Any]:
    return {"per_s": run.get("per_s"), "applied": run.get("applied"), "messages": run.get("messages"),
            "p50_publish_to_event_ms": (run.get("latency_publish_to_event") or {}).get("p50_ms"),
            "p99_publish_to_event_ms": (run.get("latency_publish_to_event") or {}).get("p99_ms")}
