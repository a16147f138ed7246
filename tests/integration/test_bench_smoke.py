"""``ratings bench`` in a tiny configuration: it completes and writes every expected figure.

No timing is asserted (a test suite that fails on a slow machine tests the machine): the run uses
the test servers, in a database, queue and stream of its own that it removes at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import psycopg
import pytest
import redis

pytestmark = pytest.mark.integration


def test_bench_runs_and_writes_every_figure(servers, tmp_path) -> None:
    admin_url, broker_url = servers
    output = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATINGS_")}
    env.update(RATINGS_DATABASE_URL=admin_url, RATINGS_BROKER_URL=broker_url, RATINGS_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.run(
        [sys.executable, "-m", "worker", "bench", "--matches", "200", "--workers", "1", "--ledger-size", "2000",
         "--ledger-players", "200", "--engine-matches", "5000", "--repeats", "1", "--players", "5000",
         "--hot-lock-seconds", "1", "--durability-matches", "200", "--durability-rounds", "1",
         "--producer-matches", "50", "--paired-rounds", "2", "--paired-matches", "100", "--paired-workers", "1,2",
         "--api-seconds", "0",  # the read API part: test_bench_api.py
         "--model-rounds", "1",
         "--output", str(output)],
        env=env, capture_output=True, text=True, timeout=280,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    results = json.loads(output.read_text())
    assert {"machine", "config", "engine", "service", "ledger", "targets", "durability"} <= set(results)
    # publishes per second by Redis durability setting, each mode's 200 publishes all on the queue
    assert [(m["appendfsync"], m["wait_replicas"], m["messages"]) for m in results["durability"]["modes"]] == [
        ("everysec", 0, 200), ("always", 0, 200), ("everysec", 1, 200)]
    assert all(m["per_s"] > 0 for m in results["durability"]["modes"])
    assert {"nproc", "cpu_model", "python"} <= set(results["machine"])
    engine = results["engine"]
    assert {"rate_per_s", "replay_per_s", "fast_replay_per_s", "elote_per_s", "inline_loop_per_s"} <= set(engine["classic_1v1"])
    assert {"rate_per_s", "replay_per_s", "fast_replay_per_s"} <= set(engine["sedma_1v1"])
    assert engine["fast_replay_identical"] is True

    service = results["service"]
    assert {"headline", "scaling", "half_load", "hot_players", "rss", "runs"} <= set(service)
    assert {"baseline_per_s", "rating_per_s", "ratio", "preloaded_ratio"} <= set(service["headline"])
    assert [row["workers"] for row in service["scaling"]] == [1]
    for key in ("latency_publish_to_event", "latency_publish_to_commit"):
        assert {"p50_ms", "p95_ms", "p99_ms"} <= set(service["half_load"][key])
    assert {"start_cold_mib", "after_warm_up_mib", "end_mib"} <= set(service["rss"])
    kinds = {run["kind"] for run in service["runs"]}
    # with batching (the default) the no-op baseline also runs on workers without batching
    assert service["batch_size"] == 100
    assert kinds == {"noop", "noop_preloaded", "noop_unbatched", "noop_unbatched_preloaded", "uniform_full_load",
                     "uniform_preloaded", "uniform_half_load", "hot_players_full_load", "hot_players_row_locked_1s",
                     "late_arrivals_full_load", "model_sedma_preloaded", "model_glicko2_preloaded",
                     "model_plackett_luce_preloaded"}
    _check_rating_models(results)
    # the late-arrival run (10 % delivered 500 matches late by default) beside the in-order run of its size
    late = service["late_arrivals"]
    assert {"per_s", "in_order_per_s", "late_matches", "corrections", "largest_correction", "placed_at_end"} <= set(late)
    assert late["per_s"] > 0 and late["in_order_per_s"] > 0
    assert {"per_s", "unlocked_per_s", "share_of_unlocked", "hold_seconds"} <= set(service["hot_player_locked"])
    row = service["scaling"][0]
    assert row["baseline_per_s"] == max(row["baseline_same_workers_per_s"], row["baseline_unbatched_workers_per_s"])
    # end to end and consumers only (queue filled first), each beside its no-op; the publishers' own capacity
    assert row["baseline_preloaded_per_s"] == max(row["baseline_preloaded_same_workers_per_s"],
                                                  row["baseline_preloaded_unbatched_workers_per_s"])
    assert row["rating_preloaded_per_s"] > 0 and row["publishers_alone_per_s"] > 0 and row["publishers"] == 2
    parts = {"postgresql_backends_ms", "postgresql_background_ms", "worker_main_ms", "worker_children_ms",
             "redis_ms", "relay_ms"}
    for key in ("cpu_per_match_preloaded", "cpu_per_match_full_load", "cpu_per_noop_preloaded"):
        cpu = row[key]
        assert parts | {"service_total_ms", "publishers_ms", "machine_busy_ms", "other_ms", "machine_busy_pct"} <= set(cpu)
        assert abs(cpu["service_total_ms"] - sum(cpu[p] for p in parts)) < 0.001
        assert set(cpu["context_switches"]) == {"postgresql_backends", "worker_main", "worker_children", "relay"}
        assert all(v >= 0 for part in cpu["context_switches"].values() for v in part.values())
    # a worker child waits for PostgreSQL in every statement: its voluntary context switches show
    assert row["cpu_per_match_preloaded"]["context_switches"]["worker_children"]["voluntary"] > 0
    # matches per rating transaction (ledger rows over the distinct transactions that wrote them):
    # between one match per transaction and a full batch
    for run in service["runs"]:
        if not run["kind"].startswith("noop"):
            assert 0 < run["rating_transactions"] <= run["applied"]
            assert 1 <= run["matches_per_transaction"] <= service["batch_size"]
            waits = run["lock_waits"]
            assert set(waits) == {"busy_rows", "waiting_transactions", "waited_seconds", "deferred_matches"}
            assert waits["busy_rows"] >= waits["waiting_transactions"] >= 0
            assert waits["waited_seconds"] >= 0 and waits["deferred_matches"] >= 0
            # each worker process runs one transaction at a time: their waits, each counted once,
            # fit in the run's time (a sum over busy rows, as first written, came to 466 s in a
            # 12 s run of 8 worker processes)
            assert waits["waited_seconds"] <= run["seconds_to_last_event"] * run.get("workers", service["main_workers"])
    # the run whose hot player's row the bench held locked: its figures hold at least the waits and
    # deferrals the locker counted for that player when it let go of the row
    locked = next(run for run in service["runs"] if run["kind"].startswith("hot_players_row_locked"))
    held = service["hot_player_locked"]
    if "lock_waits_recorded" in held:  # the locker got to hold the row before the run ended
        assert locked["lock_waits"]["busy_rows"] >= held["lock_waits_recorded"]
        assert locked["lock_waits"]["deferred_matches"] >= held["deferrals_recorded"]
    assert row["matches_per_transaction_preloaded"] is not None and row["matches_per_transaction_full_load"] is not None
    # the rating path's work shows in the processes that do it, the no-op's does not reach PostgreSQL
    assert row["cpu_per_match_preloaded"]["postgresql_backends_ms"] > 0
    assert row["cpu_per_match_preloaded"]["worker_children_ms"] > 0
    # the relay's share of 200 matches is about one 10 ms clock tick of /proc/<pid>/stat (it read 0.0
    # once in CI): it must show over the rating runs together (several hundred matches more)
    relay_seconds = sum(run["cpu_per_message"]["relay_ms"] * run["messages"] for run in service["runs"]
                        if not run["kind"].startswith("noop"))
    assert relay_seconds > 0
    targets = {t["target"] for t in results["targets"]}
    assert "consumers only, 1 worker processes / no-op baseline" in targets
    for run in service["runs"]:  # nothing lost, nothing dead-lettered, verify exact
        if not run["kind"].startswith("noop"):
            assert run["applied"] == run["messages"] and run["dead_letters"] == 0 and run["verify_ok"]
            activity = run["backend_activity"]  # sampled every 40 ms: a run of 200 matches may see none
            assert {"samples", "mean_active_backends", "lock_waiting_share", "top", "interval_s"} <= set(activity)
            assert sum(t["share"] for t in activity["top"]) <= 1 + 0.0005 * len(activity["top"])  # rounded
    # over all the rating runs together the sampler saw the rating transaction at work
    seen = {t["statement"] for run in service["runs"] if not run["kind"].startswith("noop")
            for t in run["backend_activity"]["top"]}
    assert any(label.endswith("(rating transaction)") for label in seen), seen

    # the producer helper's publishes per second on the session's Redis (RabbitMQ rows: test_rabbitmq.py)
    # and on a replicated Redis of the bench's own with each durability setting (when redis-sentinel is
    # installed: .ci/run installs it)
    producer, *replicated = results["producers"]
    assert producer["broker"] == "redis" and producer["messages"] == 50 and producer["per_s"] > 0
    assert all(r["broker"] == "redis" and r["messages"] == 50 and r["per_s"] > 0 for r in replicated)
    if shutil.which("redis-sentinel"):
        assert [r["wait_replicas"] for r in replicated] == [0, 0, 1, 1]

    # alternating rounds: every run of each round, its ratios taken within the round, their medians
    paired = results["paired"]
    assert (paired["rounds"], paired["workers"], paired["base_workers"], paired["main_workers"]) == (2, [1, 2], 2, 1)
    labels = {"noop", "noop_unbatched", "rating_w1", "rating_w2"}
    assert [set(r["order"]) for r in paired["per_round"]] == [labels, labels]
    assert paired["per_round"][1]["order"] == paired["per_round"][0]["order"][1:] + paired["per_round"][0]["order"][:1]
    for r in paired["per_round"]:
        baseline = max(r["noop_per_s"], r["noop_unbatched_per_s"])
        assert r["rating_over_noop"] == round(r["rating_per_s"]["1"] / baseline, 3)
        assert r["over_base"] == {"1": round(r["rating_per_s"]["1"] / r["rating_per_s"]["2"], 3)}
    assert paired["rating_over_noop"]["per_round"] == [r["rating_over_noop"] for r in paired["per_round"]]
    assert len(paired["runs"]) == 8 and all(run["messages"] == 100 for run in paired["runs"])
    for run in paired["runs"]:
        if run["paired"].startswith("rating"):
            assert run["applied"] == 100 and run["dead_letters"] == 0 and run["verify_ok"]
            assert run["cpu_per_message"]["postgresql_backends_ms"] > 0
    assert any(t["target"].startswith("rating path consumers only, 1 / 2 worker processes, median of 2")
               for t in results["targets"])

    ledger = results["ledger"]
    assert [s["matches"] for s in ledger["sizes"]] == [200, 600, 2000]
    assert all(s["verify_ok"] and s["fast_verify_ok"] for s in ledger["sizes"])
    assert {"verify_seconds", "verify_peak_rss_mib", "fast_verify_seconds", "idle_process_peak_rss_mib"} <= set(ledger["sizes"][0])
    assert {t["target"] for t in results["targets"]}

    # it cleaned up after itself: its database, queues and streams are gone
    assert results["database"].startswith("ratings_bench_")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname LIKE %s",
                            (results["database"] + "%",)).fetchone()[0] == 0  # the paired clusters' too
    client = redis.Redis.from_url(broker_url)
    assert service["queues"] and service["streams"] and len(paired["queues"]) == len(paired["streams"]) == 3
    assert not client.exists(*service["queues"], *service["streams"], *paired["queues"], *paired["streams"])


def _check_rating_models(results: dict) -> None:
    """The rating models' figures: the service comparison (the same matches, consumers only, on the
    Elo, Glicko-2 and Weng-Lin ladders, each run's matches all rated on its own ladder, ratios taken
    within the round) and each model's engine rate beside Elo's on the same matches."""
    service, engine = results["service"], results["engine"]
    models = service["models"]
    assert models["ladders"] == ["sedma", "glicko2", "plackett_luce"] and models["matches"] == 200
    [only] = models["per_round"]
    for ladder in ("glicko2", "plackett_luce"):
        assert only["over_elo"][ladder] == round(only["per_s"][ladder] / only["per_s"]["sedma"], 3)
        assert only["cpu_over_elo"][ladder] == round(
            only["cpu_per_match_ms"]["sedma"] / only["cpu_per_match_ms"][ladder], 3)
        assert models["over_elo"][ladder]["median"] == only["over_elo"][ladder]
    for run in service["runs"]:
        if run["kind"].startswith("model_"):
            assert run["kind"] == f"model_{run['ladder']}_preloaded" and run["applied_on_ladder"] == 200
    assert {f"consumers only, {ladder} ladder / sedma (Elo) ladder, 1 worker processes, median of 1 rounds"
            for ladder in ("glicko2", "plackett_luce")} <= {t["target"] for t in results["targets"]}
    assert {"fast_replay_per_s", "elo_fast_replay_per_s"} <= set(engine["glicko2_1v1"])
    for shape in ("1v1", "5v5"):
        row = engine["weng_lin"][shape]
        assert row["elo_fast_replay_per_s"] > 0
        for model in ("plackett_luce", "bradley_terry_full", "thurstone_mosteller_full"):
            assert row[f"{model}_fast_replay_per_s"] > 0 and row[f"{model}_replay_per_s"] > 0
