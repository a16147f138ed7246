"""``ratings bench`` part: the service runs (no-op baseline, rating path, scaling, half load, hot players, memory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from worker.devtools.bench import sql as bench_sql
from worker.devtools.bench.cluster import (
    Cluster,
    _warm_up,
    autovacuum_on,
    delivered_late,
    prepared_statements,
    service_matches,
)
from worker.devtools.bench.common import BenchConfig, progress
from worker.devtools.bench.hot_lock import HOT_PLAYER, hot_lock_run
from worker.devtools.bench.paired import round_order, spread
from worker.settings import get_settings
from worker.store.connection import connect


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
                           "reserved_per_child": settings.reserved_per_child,
                           "database_prepared_statements": prepared_statements()}
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
            plain.publishers = config.publishers
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
        cluster.publishers = config.publishers
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
            progress.print(f"  rating path: {n} matches at full load (then others with the queue filled first)")
            full = cluster.run_matches("uniform_full_load", bodies, timeout) | {"workers": workers}
            drained = cluster.run_matches(
                "uniform_preloaded", service_matches(n, config.seed + 300, f"bench-pre-w{workers}", config.players),
                timeout, preload=True) | {"workers": workers}
            runs += [noop, noop_preloaded, full, drained]
            noop_same, noop_same_preloaded = noop, noop_preloaded
            if unbatched_noop is not None and unbatched_noop["per_s"] > noop["per_s"]:
                noop = unbatched_noop
            if unbatched_noop_preloaded is not None and unbatched_noop_preloaded["per_s"] > noop_preloaded["per_s"]:
                noop_preloaded = unbatched_noop_preloaded
            scaling.append(scaling_row(workers, noop, noop_same, unbatched_noop, noop_preloaded,
                                       noop_same_preloaded, unbatched_noop_preloaded, full, drained))
            processed = 200 + 2 * n
            if workers == main:
                out["headline"] = {"workers": workers, "baseline_per_s": noop["per_s"], "rating_per_s": full["per_s"],
                                   "ratio": round(full["per_s"] / noop["per_s"], 3),
                                   "preloaded_baseline_per_s": noop_preloaded["per_s"],
                                   "preloaded_rating_per_s": drained["per_s"],
                                   "preloaded_ratio": round(drained["per_s"] / noop_preloaded["per_s"], 3),
                                   "cpu_per_match_preloaded": drained["cpu_per_message"],
                                   "cpu_per_match_full_load": full["cpu_per_message"]}
                half_rate = full["per_s"] / 2
                half_n = max(50, n // 2)
                progress.print(f"  half load: {half_n} matches paced at {half_rate:.0f}/s")
                half = cluster.run_matches(
                    "uniform_half_load",
                    service_matches(half_n, config.seed + 500, f"bench-half-w{workers}", config.players),
                    timeout + half_n / half_rate, rate=half_rate) | {"workers": workers}
                progress.print(f"  hot players: {n} matches, {config.hot_share:.0%} with one of {config.hot_players}")
                hot = cluster.run_matches(
                    "hot_players_full_load",
                    service_matches(n, config.seed + 700, f"bench-hot-w{workers}", config.players,
                                    config.hot_share, config.hot_players), timeout) | {"workers": workers}
                runs += [half, hot]
                if config.model_rounds:
                    out["models"] = model_comparison(cluster, config, timeout)
                    runs += out["models"].pop("runs")
                    processed += config.model_rounds * len(MODEL_LADDERS) * n
                if config.hot_lock_seconds:
                    progress.print(f"  hot players, {HOT_PLAYER}'s row locked {config.hot_lock_seconds:g} s mid-run: "
                                   f"{n} matches")
                    locked, out["hot_player_locked"] = hot_lock_run(cluster, service_matches(
                        n, config.seed + 700, f"bench-hotlock-w{workers}", config.players, config.hot_share,
                        config.hot_players), timeout, hot, config.hot_lock_seconds)
                    runs.append(locked)
                    processed += n
                if config.late_share:
                    progress.print(f"  late arrivals: {n} matches, {config.late_share:.0%} delivered "
                                   f"{config.late_by} matches late")
                    late = cluster.run_matches("late_arrivals_full_load", delivered_late(
                        service_matches(n, config.seed + 800, f"bench-late-w{workers}", config.players),
                        config.late_share, config.late_by, config.seed), timeout) | {"workers": workers}
                    with connect(database_url, autocommit=True) as conn:
                        late |= {"corrections": bench_sql.correction_figures(conn)}
                    runs.append(late)
                    processed += n
                    out["late_arrivals"] = {"late_share": config.late_share, "late_by": config.late_by,
                                            "per_s": late["per_s"], "in_order_per_s": full["per_s"],
                                            "share_of_in_order": round(late["per_s"] / full["per_s"], 3),
                                            **late["corrections"]}
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
                        service_matches(config.soak_matches, config.seed + 900, f"bench-soak-w{workers}",
                                        config.players),
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


MODEL_LADDERS = ("sedma", "glicko2", "plackett_luce")
"""The ladders of the rating-model comparison (``worker/ladders.toml``): the bench's Elo ladder
first (Sedma: Elo with performance bonuses, the baseline), then Glicko-2 and Weng-Lin Plackett-Luce.
Each accepts the bench's 1v1 and 2v2 matches."""


def on_ladder(matches: list[dict[str, Any]], ladder: str, prefix: str) -> list[dict[str, Any]]:
    """Copies of ``matches`` (JSON dicts) on ``ladder``, each match id prefixed with ``prefix``
    (every run publishes ids of its own); players, sides, outcome and stats unchanged."""
    return [m | {"ladder": ladder, "match_id": f"{prefix}{m['match_id']}"} for m in matches]


def model_comparison(cluster: Cluster, config: BenchConfig, timeout: float) -> dict[str, Any]:
    """Consumers-only throughput of each ladder of :data:`MODEL_LADDERS` on one cluster: the same
    ``config.matches`` matches published to each ladder with the workers stopped, then drained
    (:meth:`Cluster.run_matches` with ``preload``: tables and stream emptied before each run, so
    every run starts from the same empty state). ``config.model_rounds`` rounds, the ladders' order
    rotated each round so that none always runs first or last; each uncertainty ladder's figure is
    divided by the Elo ladder's of the same round (``over_elo``; ``cpu_over_elo``: the Elo ladder's
    service CPU milliseconds per match over the ladder's, i.e. matches per CPU second against
    Elo's), and the ratios' median, lowest and highest kept.

    Returns ``{"workers", "matches", "rounds", "ladders", "per_round": [{"round", "order",
    "per_s": {ladder: matches/s}, "cpu_per_match_ms": {ladder: ms}, "over_elo": {ladder: ratio},
    "cpu_over_elo": {ladder: ratio}}],
    "over_elo" and "cpu_over_elo": {ladder: {"median", "min", "max", "per_round"}}, "per_s" and
    "cpu_per_match_ms": {ladder: median},
    "runs": [each run's figures]}``.
    """
    base, others = MODEL_LADDERS[0], MODEL_LADDERS[1:]
    bodies = service_matches(config.matches, config.seed + 1100, "bench-models", config.players)
    runs: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    for r in range(config.model_rounds):
        order = round_order(list(MODEL_LADDERS), r)
        progress.print(f"  rating models, round {r + 1} of {config.model_rounds}: {config.matches} matches on "
                       f"each of {', '.join(order)} (consumers only)")
        figures: dict[str, dict[str, Any]] = {}
        for ladder in order:
            figures[ladder] = cluster.run_matches(
                f"model_{ladder}_preloaded", on_ladder(bodies, ladder, f"r{r + 1}-{ladder}-"), timeout,
                preload=True) | {"workers": cluster.workers, "round": r + 1, "ladder": ladder}
            with connect(cluster.database_url, autocommit=True) as conn:  # rated on that ladder, not another
                figures[ladder]["applied_on_ladder"] = bench_sql.applied_on_ladder(conn, ladder)
            runs.append(figures[ladder])
        rounds.append({"round": r + 1, "order": order,
                       "per_s": {ladder: figures[ladder]["per_s"] for ladder in MODEL_LADDERS},
                       "cpu_per_match_ms": {ladder: figures[ladder]["cpu_per_message"]["service_total_ms"]
                                            for ladder in MODEL_LADDERS},
                       "over_elo": {ladder: round(figures[ladder]["per_s"] / figures[base]["per_s"], 3)
                                    for ladder in others},
                       # matches per second of the service's CPU time against the Elo ladder's: the
                       # same question free of what else a shared machine ran meanwhile
                       "cpu_over_elo": {ladder: round(figures[base]["cpu_per_message"]["service_total_ms"]
                                                     / figures[ladder]["cpu_per_message"]["service_total_ms"], 3)
                                        for ladder in others}})
    return {"workers": cluster.workers, "matches": config.matches, "rounds": config.model_rounds,
            "ladders": list(MODEL_LADDERS), "per_round": rounds,
            "over_elo": {ladder: spread([r["over_elo"][ladder] for r in rounds]) for ladder in others},
            "cpu_over_elo": {ladder: spread([r["cpu_over_elo"][ladder] for r in rounds]) for ladder in others},
            "per_s": {ladder: spread([r["per_s"][ladder] for r in rounds])["median"] for ladder in MODEL_LADDERS},
            "cpu_per_match_ms": {ladder: spread([r["cpu_per_match_ms"][ladder] for r in rounds])["median"]
                                 for ladder in MODEL_LADDERS},
            "runs": runs}


def scaling_row(workers: int, noop: dict, noop_same: dict, unbatched_noop: dict | None, noop_preloaded: dict,
                noop_same_preloaded: dict, unbatched_noop_preloaded: dict | None, full: dict,
                drained: dict) -> dict[str, Any]:
    """One row of the scaling table: end to end (publishers beside the workers) and consumers only
    (queue filled first), each beside its no-op baseline of the same run (``noop``/``noop_preloaded``:
    the better of the batched and unbatched workers'), the publishers' own capacity (publishing
    into a queue whose workers are stopped) and CPU milliseconds per message by process."""
    return {
        "workers": workers,
        "baseline_per_s": noop["per_s"], "baseline_kind": noop["kind"],
        "baseline_same_workers_per_s": noop_same["per_s"],
        "baseline_unbatched_workers_per_s": unbatched_noop["per_s"] if unbatched_noop else None,
        "rating_per_s": full["per_s"], "ratio": round(full["per_s"] / noop["per_s"], 3),
        "publish_per_s": full["publish_per_s"],
        "publishers_alone_per_s": max(drained["publish_per_s"], noop_same_preloaded["publish_per_s"]),
        "publishers": full["publishers"],
        "baseline_preloaded_per_s": noop_preloaded["per_s"], "baseline_preloaded_kind": noop_preloaded["kind"],
        "baseline_preloaded_same_workers_per_s": noop_same_preloaded["per_s"],
        "baseline_preloaded_unbatched_workers_per_s":
            unbatched_noop_preloaded["per_s"] if unbatched_noop_preloaded else None,
        "rating_preloaded_per_s": drained["per_s"],
        "preloaded_ratio": round(drained["per_s"] / noop_preloaded["per_s"], 3),
        "p50_publish_to_event_ms": full["latency_publish_to_event"]["p50_ms"],
        "p99_publish_to_event_ms": full["latency_publish_to_event"]["p99_ms"],
        "cpu_per_match_preloaded": drained["cpu_per_message"],
        "cpu_per_match_full_load": full["cpu_per_message"],
        "cpu_per_noop_preloaded": noop_preloaded["cpu_per_message"],
        "matches_per_transaction_preloaded": drained.get("matches_per_transaction"),
        "matches_per_transaction_full_load": full.get("matches_per_transaction"),
        "lock_waits_preloaded": drained.get("lock_waits"),
        "lock_waits_full_load": full.get("lock_waits"),
        "backend_activity_preloaded": drained.get("backend_activity"),
        "backend_activity_full_load": full.get("backend_activity"),
        "corrections_preloaded": drained.get("corrections"),
        "corrections_full_load": full.get("corrections"),
    }


