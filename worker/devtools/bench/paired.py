"""``ratings bench`` part: the scaling ratios from alternating rounds, each ratio within one round.

The scaling table (:mod:`.service`) measures one worker count after the other, minutes apart, and
on a shared VM the speed of a CPU second drifts within minutes: the same 8 / 2 figure of the same
code came out 95 %, 75 % and 102 % in three runs within 40 minutes. A ratio of
two runs minutes apart then measures the machine's minutes as much as the service.

Here every compared cluster is started and warmed up first, and kept running. Each round then runs,
back to back and consumers only (the queue filled while the cluster's worker nodes are stopped, the
clock started when they continue, :meth:`.cluster.Cluster.run_noop` and
:meth:`.cluster.Cluster.run_matches` with ``preload``):

* the no-op baseline on the batched workers of the main worker count, and on workers of that
  count without batching (``RATINGS_BATCH_SIZE=1``; left out when batching is off): the better of
  the two is the round's baseline, as in the scaling table;
* the rating path at each paired worker count (``--paired-workers``, default 2 and 8).

The order rotates by one each round, so no run always comes first or last. The ratios, rating over
no-op at the main count and each count's rating over the base count's (2 when paired, else the
smallest), are taken within each round between runs seconds apart; the figure reported is their
median over the rounds, with the lowest and highest beside it. While one cluster runs, the worker
nodes of the others are stopped (SIGSTOP), so their idle polls take nothing from it (their relays
keep running, idle on ``LISTEN``). Each cluster has
a database of its own (created beside the bench's, dropped at the end): a relay publishes the events
of its database's outbox, so clusters sharing one would publish each other's events.
"""

from __future__ import annotations

import signal
import statistics
from pathlib import Path
from typing import Any

from worker.devtools.bench import sql as bench_sql
from worker.devtools.bench.cluster import Cluster, _warm_up, autovacuum_on, service_matches
from worker.devtools.bench.common import BenchConfig, _with_dbname, progress
from worker.settings import get_settings
from worker.store.connection import connect
from worker.store.migrate import migrate
from worker.store.urls import conninfo_params

NOOP = "noop"
NOOP_UNBATCHED = "noop_unbatched"


def spread(values: list[float]) -> dict[str, Any]:
    """``{"median", "min", "max", "per_round"}`` of per-round ratios (rounded to 3 places); raises
    ``statistics.StatisticsError`` for no values."""
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "per_round": [round(v, 3) for v in values]}


def base_count(counts: list[int]) -> int:
    """The worker count the others are compared with: 2 when paired (the throughput targets compare 4
    and 8 with 2: adding workers must never make the service slower), else the smallest."""
    return 2 if 2 in counts else min(counts)


def round_order(labels: list[str], round_index: int) -> list[str]:
    """``labels`` rotated left by ``round_index`` (round 0 keeps them as given)."""
    k = round_index % len(labels)
    return labels[k:] + labels[:k]


def round_ratios(noop_per_s: float, noop_unbatched_per_s: float | None, rating_per_s: dict[int, float],
                 main: int, base: int) -> dict[str, Any]:
    """One round's ratios: ``rating_over_noop`` (rating at ``main`` over the better no-op) and
    ``over_base`` ``{count: rating at count / rating at base}`` for every count but ``base``.
    Rates in messages per second; raises ``KeyError`` when ``main`` or ``base`` was not run."""
    baseline = max(noop_per_s, noop_unbatched_per_s or 0.0)
    return {"baseline_per_s": baseline, "rating_over_noop": rating_per_s[main] / baseline,
            "over_base": {w: v / rating_per_s[base] for w, v in rating_per_s.items() if w != base}}


def _rating_label(workers: int) -> str:
    return f"rating_w{workers}"


def paired_bench(config: BenchConfig, database_url: str, broker_url: str, log_dir: Path) -> dict[str, Any]:
    """Run ``config.paired_rounds`` alternating rounds of ``config.paired_matches`` messages per run
    (see the module's docstring); return the per-round figures, every run (for the correctness
    check) and the ratios' medians. Raises ``RuntimeError`` when a cluster does not start and
    ``TimeoutError`` when a run does not end."""
    settings = get_settings()
    main = config.main_worker_count()
    counts = sorted(set(config.paired_workers) | {main})
    base = base_count(counts)
    n = config.paired_matches
    timeout = max(180.0, n / 20)
    vacuum = 0.0 if autovacuum_on(database_url) else config.vacuum_interval
    clusters: dict[str, Cluster] = {}
    databases: list[str] = []
    # the bench's database name, also in a Unix-socket URL (postgresql://u@/name?host=/dir)
    bench_db = conninfo_params(database_url).get("dbname") or "ratings_bench"

    def add(label: str, workers: int, overrides: dict[str, str] | None = None) -> None:
        name = f"{bench_db}_{label}"
        with connect(database_url, autocommit=True) as conn:
            bench_sql.create_database(conn, name)
        databases.append(name)
        url = _with_dbname(database_url, name)
        migrate(url)
        cluster = Cluster(url, broker_url, workers, log_dir / f"paired-{label}", config.loglevel, overrides)
        cluster.publishers = config.publishers
        cluster.vacuum_interval = vacuum
        clusters[label] = cluster

    labels = [NOOP] + ([NOOP_UNBATCHED] if settings.batch_size > 1 else []) + [_rating_label(w) for w in counts]
    out: dict[str, Any] = {"rounds": config.paired_rounds, "matches": n, "main_workers": main, "workers": counts,
                           "base_workers": base}
    rounds: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    try:
        for w in counts:
            add(_rating_label(w), w)
        if settings.batch_size > 1:
            add(NOOP_UNBATCHED, main, {"RATINGS_BATCH_SIZE": "1"})
        for label, cluster in clusters.items():
            progress.print(f"[bold]paired rounds[/bold]: starting {label} ({cluster.workers} worker process(es))")
            cluster.start()
            _warm_up(cluster, config.seed + 99, config.players)
            cluster.signal_workers(signal.SIGSTOP)
        for r in range(config.paired_rounds):
            order = round_order(labels, r)
            progress.print(f"  round {r + 1} of {config.paired_rounds}: {', '.join(order)}, {n} messages each")
            figures: dict[str, dict[str, Any]] = {}
            for label in order:
                cluster = clusters[_rating_label(main)] if label == NOOP else clusters[label]
                cluster.signal_workers(signal.SIGCONT)
                try:
                    bodies = service_matches(n, config.seed + 1000 + r, f"bench-paired-{r}-{label}", config.players)
                    if label in (NOOP, NOOP_UNBATCHED):
                        result = cluster.run_noop(bodies, timeout, preload=True)
                    else:
                        result = cluster.run_matches(f"paired_{label}", bodies, timeout, preload=True)
                        # stopped with acknowledgements pending, it would hold them (unacknowledged)
                        # through the other clusters' runs
                        if not cluster.wait_acknowledged(30.0):
                            raise TimeoutError(f"paired round {r + 1}, {label}: messages still unacknowledged "
                                               "30 s after the run's last event")
                finally:
                    cluster.signal_workers(signal.SIGSTOP)
                figures[label] = result | {"workers": cluster.workers, "round": r + 1, "paired": label}
                runs.append(figures[label])
            rating = {w: figures[_rating_label(w)]["per_s"] for w in counts}
            ratios = round_ratios(figures[NOOP]["per_s"], figures.get(NOOP_UNBATCHED, {}).get("per_s"),
                                  rating, main, base)
            rounds.append({
                "round": r + 1, "order": order, "noop_per_s": figures[NOOP]["per_s"],
                "noop_unbatched_per_s": figures.get(NOOP_UNBATCHED, {}).get("per_s"),
                "rating_per_s": {str(w): v for w, v in rating.items()},
                "cpu_per_match_ms": {str(w): figures[_rating_label(w)]["cpu_per_message"]["service_total_ms"]
                                     for w in counts},
                "noop_cpu_per_message_ms": figures[NOOP]["cpu_per_message"]["service_total_ms"],
                "machine_busy_pct": {str(w): figures[_rating_label(w)]["cpu_per_message"].get("machine_busy_pct")
                                     for w in counts},
                # the share of the PostgreSQL backends' active time spent waiting for a lock (.activity)
                "lock_waiting_share": {str(w): figures[_rating_label(w)]["backend_activity"]["lock_waiting_share"]
                                       for w in counts},
                "rating_over_noop": round(ratios["rating_over_noop"], 3),
                "over_base": {str(w): round(v, 3) for w, v in ratios["over_base"].items()},
            })
    finally:
        out["queues"] = [c.queue for c in clusters.values()]
        out["streams"] = [c.stream for c in clusters.values()]
        for label, cluster in clusters.items():  # each one stopped whatever befell the others
            try:
                cluster.signal_workers(signal.SIGCONT)  # a stopped process would not see the SIGTERM
                cluster.stop()
            except Exception as exc:  # noqa: BLE001 - go on with the others, the first error stays the one raised
                progress.print(f"[yellow]could not stop the {label} cluster[/yellow]: {exc}")
        for name in databases:
            try:
                with connect(database_url, autocommit=True) as conn:
                    bench_sql.drop_database(conn, name)
            except Exception as exc:  # noqa: BLE001
                progress.print(f"[yellow]could not drop the database {name}[/yellow]: {exc}")
    out["per_round"] = rounds
    out["runs"] = runs
    if rounds:
        out["rating_over_noop"] = spread([r["rating_over_noop"] for r in rounds])
        out["over_base"] = {str(w): spread([r["over_base"][str(w)] for r in rounds]) for w in counts if w != base}
        out["cpu_per_match_ms"] = {str(w): spread([r["cpu_per_match_ms"][str(w)] for r in rounds]) for w in counts}
    return out
