"""``ratings bench``: printing the results as tables."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

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
                  f"PostgreSQL {m.get('postgresql', '-')}, Redis {m.get('redis', '-')} "
                  f"({m.get('servers', 'no servers')})")
    if engine := results.get("engine"):
        _print_engine(console, engine)
    if (durability := results.get("durability")) and "modes" in durability:
        _print_durability(console, durability)
    if producers := results.get("producers"):
        _print_producers(console, producers)
    if service := results.get("service"):
        _print_service(console, service)
    if api := results.get("api"):
        print_api(console, api)
    if (paired := results.get("paired")) and paired.get("per_round"):
        print_paired(console, paired)
    if ledger := results.get("ledger"):
        _print_ledger(console, ledger)
    if rows := results.get("targets"):
        _print_targets(console, rows)


def _print_engine(console: Console, engine: dict[str, Any]) -> None:
    """The engine-speed table: each path beside elote and an inline loop."""
    t = Table(title=f"engine speed (matches per second, best of {engine['repeats']:d})")
    for col in ("path", "1v1 classic", "1v1 Sedma", "Sedma 30 % 2v2"):
        t.add_column(col, justify="right" if col != "path" else "left")
    c, s, x = engine["classic_1v1"], engine["sedma_1v1"], engine["sedma_mixed_30pct_2v2"]
    t.add_row("engine.rate (public call)", _n(c["rate_per_s"]), _n(s["rate_per_s"]), "-")
    t.add_row("engine.replay.replay", _n(c["replay_per_s"]), _n(s["replay_per_s"]), _n(x["replay_per_s"]))
    t.add_row("engine.fast_replay.replay", _n(c["fast_replay_per_s"]), _n(s["fast_replay_per_s"]),
              _n(x["fast_replay_per_s"]))
    t.add_row(f"elote EloCompetitor ({engine['elote_version'] or 'not installed'})", _n(c["elote_per_s"]), "-", "-")
    t.add_row("inline Python Elo loop", _n(c["inline_loop_per_s"]), "-", "-")
    console.print(t)
    if "glicko2_1v1" in engine:
        _print_models(console, engine)


def _print_models(console: Console, engine: dict[str, Any]) -> None:
    """Each model's engine rate beside the Elo ladder's fast replay, same run, same matches."""
    g1, g5 = engine["glicko2_1v1"], engine["glicko2_5v5"]
    t = Table(title=f"engine speed by model (matches per second, best of {engine['repeats']:d}, same run)")
    for col in ("model and path", "1v1", "5v5"):
        t.add_column(col, justify="right" if col != "model and path" else "left")
    t.add_row("Elo: engine.fast_replay.replay (baseline)", _n(g1["elo_fast_replay_per_s"]),
              _n(g5["elo_fast_replay_per_s"]))
    t.add_row("Glicko-2: engine.fast_replay.replay", _n(g1["fast_replay_per_s"]), _n(g5["fast_replay_per_s"]))
    if "fast_replay_per_cpu_s" in g1:
        t.add_row("Elo: fast replay per second of CPU time (baseline)", _n(g1["elo_fast_replay_per_cpu_s"]), "-")
        t.add_row("Glicko-2: fast replay per second of CPU time", _n(g1["fast_replay_per_cpu_s"]), "-")
    t.add_row("Glicko-2: engine.replay.replay", _n(g1["replay_per_s"]), _n(g5["replay_per_s"]))
    t.add_row("Glicko-2: engine.rate (public call)", _n(g1["rate_per_s"]), "-")
    if wl := engine.get("weng_lin"):
        _weng_lin_rows(t, wl)
    console.print(t)


def _weng_lin_rows(t: Table, wl: dict[str, Any]) -> None:
    """The Weng-Lin models' rows of the by-model table: their own matches (``weng_lin_speed``),
    so their own Elo baseline first, each rate then with its share of that baseline."""
    one, five = wl["1v1"], wl["5v5"]

    def share(row: dict[str, Any], key: str, base: str) -> str:
        return f"{_n(row[key])} ({row[key] / row[base]:.0%})" if row.get(key) and row.get(base) else _n(row.get(key))

    t.add_section()
    t.add_row(f"Weng-Lin matches ({wl['matches_1v1']:,} 1v1, {wl['matches_5v5']:,} 5v5): "
              "Elo fast replay (baseline)", _n(one["elo_fast_replay_per_s"]), _n(five["elo_fast_replay_per_s"]))
    t.add_row("Elo: engine.replay.replay (baseline)", _n(one["elo_replay_per_s"]), _n(five["elo_replay_per_s"]))
    models = [k.removesuffix("_fast_replay_per_s") for k in one if k.endswith("_fast_replay_per_s")
              and not k.startswith("elo_")]
    for model in models:
        key = f"{model}_fast_replay_per_s"
        t.add_row(f"{model}: engine.fast_replay.replay (% of Elo's)", share(one, key, "elo_fast_replay_per_s"),
                  share(five, key, "elo_fast_replay_per_s"))
    for model in models:
        key = f"{model}_replay_per_s"
        t.add_row(f"{model}: engine.replay.replay (% of Elo's)", share(one, key, "elo_replay_per_s"),
                  share(five, key, "elo_replay_per_s"))
    for model in models:
        key = f"{model}_openskill_per_s"
        if one.get(key) is not None:
            t.add_row(f"openskill {model} rate (for comparison)", _n(one[key]), _n(five[key]))


def _print_durability(console: Console, durability: dict[str, Any]) -> None:
    """Redis publishes per second by durability setting."""
    t = Table(title=f"Redis publishes per second by durability setting (one publish per round trip, "
                    f"{durability['publishers']} publisher processes, 1 replica, same run; median of "
                    f"{durability['rounds']} rounds taken in turns)")
    for col in ("setting", "publishes/s", "lowest - highest", "vs everysec"):
        t.add_column(col, justify="left" if col == "setting" else "right")
    base = durability["modes"][0]["per_s"]
    for row in durability["modes"]:
        t.add_row(row["mode"], _n(row["per_s"]), f"{_n(row['per_s_min'])} - {_n(row['per_s_max'])}",
                  f"{row['per_s'] / base:.0%}")
    console.print(t)


def _print_producers(console: Console, producers: list[dict[str, Any]]) -> None:
    """The producer helper's publish rates and CPU per publish."""
    t = Table(title="producer helper (publish_match, one process, one message per call)")
    for col in ("broker", "returns after", "publishes", "per second", "CPU ms / publish"):
        t.add_column(col, justify="left" if col in ("broker", "returns after") else "right")
    for row in producers:
        after = ("LPUSH reply" + (" + WAIT (replica acknowledged)" if row.get("wait_replicas") else "")
                 if row["broker"] == "redis"
                 else "publisher confirm" if row["confirms"] else "frame written (no confirms, baseline)")
        broker = row["broker"] + (f" ({row['setting']})" if row.get("setting") else "")
        t.add_row(broker, after, _n(row["messages"]), _n(row["per_s"]), f"{row['cpu_ms_per_publish']:.3f}")
    console.print(t)


def _print_service(console: Console, service: dict[str, Any]) -> None:
    """The service part: the scaling table, its notes and the figures at the main worker count."""
    print_scaling(console, service)
    if any(row.get("baseline_unbatched_workers_per_s") for row in service["scaling"]):
        console.print("no-op baseline: the better of the no-op on the batched workers' settings and on workers "
                      "without batching (RATINGS_BATCH_SIZE=1), batched / unbatched: " + "; ".join(
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
        for key, label in (("latency_publish_to_event", "publish → event"),
                           ("latency_publish_to_commit", "publish → commit")):
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
    if locked := service.get("hot_player_locked"):
        t.add_row(f"hot players, {locked['locked_player']}'s row locked {locked['hold_seconds']:g} s mid-run",
                  f"{_n(locked['per_s'])}/s ({locked['share_of_unlocked']:.0%}); "
                  f"{_n(locked.get('per_s_while_locked'))}/s while locked",
                  f"unlocked {_n(locked['unlocked_per_s'])}/s")
    if late := service.get("late_arrivals"):
        t.add_row(f"late arrivals ({late['late_share']:.0%} of matches delivered {late['late_by']} matches late)",
                  f"{_n(late['per_s'])}/s ({late['share_of_in_order']:.0%}); {late['late_matches']} late, "
                  f"{late['corrections']} corrections re-rated {late['matches_rerated']} matches, "
                  f"largest {late['largest_correction']}",
                  f"in order {_n(late['in_order_per_s'])}/s")
    if models := service.get("models"):
        for ladder, spread in models["over_elo"].items():
            t.add_row(f"{ladder} ladder, consumers only (median of {models['rounds']} rounds; lowest - highest)",
                      f"{_n(models['per_s'][ladder])}/s ({spread['median']:.0%}; "
                      f"{spread['min']:.0%} - {spread['max']:.0%})",
                      f"{models['ladders'][0]} (Elo) {_n(models['per_s'][models['ladders'][0]])}/s")
    if rss := service.get("rss"):
        t.add_row(f"worker RSS over {rss['matches_processed']:,} matches (all {rss['workers']} nodes)",
                  f"{rss['end_mib']} MiB ({rss['growth_from_warm_up_pct']:+} %)",
                  f"after warm-up {rss['after_warm_up_mib']} MiB, cold {rss['start_cold_mib']} MiB")
    console.print(t)
    if models := service.get("models"):
        print_models_service(console, models)


def print_models_service(console: Console, models: dict[str, Any]) -> None:
    """The rating-model comparison: each round's consumers-only rate per ladder, CPU per match and
    the uncertainty ladders' ratios to the Elo ladder within the round, then the medians."""
    ladders, base = models["ladders"], models["ladders"][0]
    t = Table(title=f"service by rating model: consumers only, {models['matches']:,} matches per run, "
                    f"{models['workers']} worker processes, same matches on each ladder")
    for col in ("round", "order", *[f"{ladder}/s" for ladder in ladders],
                *[f"CPU ms/match {ladder}" for ladder in ladders], *[f"{ladder} / {base}" for ladder in ladders[1:]],
                *[f"per CPU s, {ladder} / {base}" for ladder in ladders[1:]]):
        t.add_column(col, justify="left" if col == "order" else "right")
    for r in models["per_round"]:
        t.add_row(str(r["round"]), ", ".join(r["order"]), *[_n(r["per_s"][ladder]) for ladder in ladders],
                  *[f"{r['cpu_per_match_ms'][ladder]:.3f}" for ladder in ladders],
                  *[f"{r['over_elo'][ladder]:.1%}" for ladder in ladders[1:]],
                  *[f"{r['cpu_over_elo'][ladder]:.1%}" for ladder in ladders[1:]])
    t.add_row("median", "", *[_n(models["per_s"][ladder]) for ladder in ladders],
              *[f"{models['cpu_per_match_ms'][ladder]:.3f}" for ladder in ladders],
              *[f"{models['over_elo'][ladder]['median']:.1%}" for ladder in ladders[1:]],
              *[f"{models['cpu_over_elo'][ladder]['median']:.1%}" for ladder in ladders[1:]])
    console.print(t)


def _print_ledger(console: Console, ledger: dict[str, Any]) -> None:
    """The verify table: time and memory per ledger size."""
    t = Table(title=f"verify of the {ledger['ladder']} ledger "
                    f"({ledger['players']:,} players; each in a fresh process)")
    for col in ("matches", "write s", "verify s", "verify/s", "peak RSS MiB", "fast verify s", "fast peak RSS MiB",
                "idle process RSS MiB"):
        t.add_column(col, justify="right")
    for s in ledger["sizes"]:
        t.add_row(_n(s["matches"]), str(s["write_seconds"]), str(s["verify_seconds"]), _n(s["verify_per_s"]),
                  str(s["verify_peak_rss_mib"]), str(s["fast_verify_seconds"]), str(s["fast_verify_peak_rss_mib"]),
                  str(s["idle_process_peak_rss_mib"]))
    console.print(t)


def _print_targets(console: Console, rows: list[dict[str, Any]]) -> None:
    """The targets, what each reached and whether it is met."""
    t = Table(title="targets (2-core machine)")
    for col in ("target", "wanted", "reached", "met"):
        t.add_column(col)
    for r in rows:
        met = "-" if r["met"] is None else ("[green]yes[/green]" if r["met"] else "[red]no[/red]")
        t.add_row(r["target"], r["wanted"], _n(r["reached"]) + (f" ({r['note']})" if r["note"] else ""), met)
    console.print(t)


def print_paired(console: Console, paired: dict[str, Any]) -> None:
    """The paired part: each round's rates and the ratios taken within it, then their medians."""
    counts, main, base = paired["workers"], paired["main_workers"], paired["base_workers"]
    t = Table(title=f"alternating rounds, consumers only ({paired['matches']:,} messages per run; "
                    f"each ratio within its round)")
    for col in ("round", "order", "no-op/s (batched / unbatched)", *[f"rating/s at {w}" for w in counts],
                *[f"CPU ms per match at {w}" for w in counts], *[f"busy % / lock-waiting % at {w}" for w in counts],
                f"rating at {main} / no-op",
                *[f"{w} / {base}" for w in counts if w != base]):
        t.add_column(col, justify="left" if col == "order" else "right")
    for r in paired["per_round"]:
        t.add_row(str(r["round"]), ", ".join(r["order"]),
                  f"{_n(r['noop_per_s'])} / {_n(r['noop_unbatched_per_s'])}",
                  *[_n(r["rating_per_s"][str(w)]) for w in counts],
                  *[f"{r['cpu_per_match_ms'][str(w)]:.3f}" for w in counts],
                  *[f"{_n(r['machine_busy_pct'][str(w)])} / {_pct(r['lock_waiting_share'][str(w)])}" for w in counts],
                  f"{r['rating_over_noop']:.2f} x", *[f"{r['over_base'][str(w)]:.1%}" for w in counts if w != base])
    x = paired["rating_over_noop"]
    t.add_row("median", "", "", *["" for _ in counts],
              *[f"{paired['cpu_per_match_ms'][str(w)]['median']:.3f}" for w in counts], *["" for _ in counts],
              f"{x['median']:.2f} x ({x['min']:.2f}-{x['max']:.2f})",
              *[f"{paired['over_base'][str(w)]['median']:.1%} ({paired['over_base'][str(w)]['min']:.1%}-"
                f"{paired['over_base'][str(w)]['max']:.1%})" for w in counts if w != base])
    console.print(t)


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def _activity(a: dict[str, Any]) -> str:
    """One run's sampled backend activity: mean active backends, the share waiting for a lock, the
    largest (wait, statement) share."""
    top = a["top"][0] if a["top"] else None
    return (f"{a['mean_active_backends']} active, {a['lock_waiting_share']:.0%} waiting for a lock"
            + (f" (most: {top['share']:.0%} {top['wait']} in {top['statement']})" if top else ""))


def _preemptions(cpu: dict[str, Any]) -> str:
    """Involuntary context switches per match of the service's processes we know by pid, summed."""
    switches = cpu.get("context_switches")
    return f"{sum(s['involuntary'] for s in switches.values()):.2f}" if switches else "-"


def print_scaling(console: Console, service: dict[str, Any]) -> None:
    """The scaling tables: throughput end to end and consumers only, each beside its no-op
    baseline, the publishers' own capacity, and CPU milliseconds per match by process."""
    rows = service["scaling"]
    pubs = rows[0].get("publishers", 1) if rows else 1
    t = Table(title=f"service: matches per second, RATINGS_BATCH_SIZE={service.get('batch_size', 1)}; end to end = "
                    f"first publish to last event, {pubs} publisher processes beside the workers; consumers only = "
                    "queue filled first, workers continued to last event (no-op: to last ack)")
    for col in ("worker processes", "end to end: no-op/s", "rating/s", "ratio", "p99 publish→event ms",
                "publishers alone/s", "consumers only: no-op/s", "rating/s", "ratio"):
        t.add_column(col, justify="right")
    for row in rows:
        t.add_row(str(row["workers"]), _n(row["baseline_per_s"]), _n(row["rating_per_s"]), f"{row['ratio']:.0%}",
                  _n(row["p99_publish_to_event_ms"]), _n(row.get("publishers_alone_per_s")),
                  _n(row["baseline_preloaded_per_s"]), _n(row.get("rating_preloaded_per_s")),
                  f"{row['preloaded_ratio']:.0%}" if row.get("preloaded_ratio") is not None else "-")
    console.print(t)
    t = Table(title="CPU ms per match by process (processes' own counters), consumers only; "
                    "no-op baseline in the last column")
    parts = ("postgresql_backends", "postgresql_background", "worker_main", "worker_children", "redis", "relay")
    for col in ("worker processes", "PostgreSQL backends", "PostgreSQL background", "worker main", "worker child",
                "Redis", "relay", "service total", "publishers", "bench VACUUM", "everything else", "machine busy",
                "no-op total", "late / re-rated", "matches / transaction", "preemptions / match"):
        t.add_column(col, justify="right")
    for row in rows:
        cpu, noop = row.get("cpu_per_match_preloaded"), row.get("cpu_per_noop_preloaded")
        if not cpu:
            continue
        late = row.get("corrections_preloaded")
        t.add_row(str(row["workers"]), *(f"{cpu[f'{p}_ms']:.3f}" for p in parts), f"{cpu['service_total_ms']:.3f}",
                  f"{cpu.get('publishers_ms', 0):.3f}", f"{cpu.get('bench_vacuum_ms', 0):.3f}",
                  f"{cpu.get('other_ms', 0):.3f}", f"{cpu.get('machine_busy_pct', 0)} %",
                  f"{noop['service_total_ms']:.3f}" if noop else "-",
                  f"{late['late_matches']:,} / {late['matches_rerated']:,}" if late else "-",
                  _n(row.get("matches_per_transaction_preloaded")), _preemptions(cpu))
    console.print(t)
    waits = []
    for row in rows:
        w, e = row.get("lock_waits_preloaded"), row.get("lock_waits_full_load")
        if w is None:
            continue
        line = (f"{row['workers']} w: {w['busy_rows']:,} busy rows in {w['waiting_transactions']:,} transactions, "
                f"{w['waited_seconds']:.1f} s waited, {w['deferred_matches']:,} deferred")
        if e is not None:
            line += (f" (end to end: {e['busy_rows']:,} in {e['waiting_transactions']:,}, "
                     f"{e['waited_seconds']:.1f} s, {e['deferred_matches']:,})")
        waits.append(line)
    if waits:
        console.print("player row lock waits, consumers only: " + "; ".join(waits))
    activity = [f"{row['workers']} w: {_activity(a)}" for row in rows
                if (a := row.get("backend_activity_preloaded")) and a.get("lock_waiting_share") is not None]
    if activity:
        console.print("PostgreSQL backends' active time (sampled), consumers only: " + "; ".join(activity))


def print_api(console: Console, api: dict[str, Any]) -> None:
    """The read API's requests per second and latency, each beside /health measured just before it,
    and the rating path at half load with and without the API's load."""
    t = Table(title=f"read API ({api['concurrency']} concurrent keep-alive clients, "
                    f"{api['seconds_per_measurement']:g} s each, rating path at half load beside it, "
                    f"{api['workers']} worker processes)")
    for col in ("request", "requests/s", "p50 ms", "p99 ms", "errors", f"{api['trivial_endpoint']}: requests/s",
                "p50 ms", "p99 ms", "share"):
        t.add_column(col, justify="left" if col == "request" else "right")
    for pair in api["pairs"]:
        m, b = pair["measured"], pair["trivial"]
        t.add_row(pair["kind"], _n(m["per_s"]), _n(m["latency"]["p50_ms"]), _n(m["latency"]["p99_ms"]),
                  _n(m["errors"] + b["errors"]), _n(b["per_s"]), _n(b["latency"]["p50_ms"]),
                  _n(b["latency"]["p99_ms"]), _pct(pair["share_of_trivial_per_s"]))
    console.print(t)
    r = api["rating_path"]
    t = Table(title=f"rating path at half load ({r['paced_per_s']:,.0f}/s paced; "
                    f"full load {r['full_load_per_s']:,.0f}/s)")
    for col in ("run", "matches/s", "p50 publish -> event ms", "p99 publish -> event ms"):
        t.add_column(col, justify="left" if col == "run" else "right")
    for label, key in (("alone", "alone"), ("with the API's load", "with_api_load")):
        row = r[key]
        t.add_row(label, _n(row["per_s"]), _n(row["p50_publish_to_event_ms"]), _n(row["p99_publish_to_event_ms"]))
    console.print(t)
