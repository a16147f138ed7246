"""``ratings demo`` and ``ratings bench``: development commands (embedded servers, benchmark).

Both run :mod:`worker.devtools`, which a source checkout has and the built wheel (the production
install) does not: without it they exit 3 (not ready) saying what to install.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Annotated, Optional

import typer

from worker.cli.common import ExitCode, err
from worker.extras import MissingExtra


def _devtools(module: str, command: str, extra: str) -> ModuleType:
    """Import ``worker.devtools.<module>``; raise :class:`worker.extras.MissingExtra` naming the
    install that brings it (a source checkout with ``extra``) when the installed package has no
    development tools. An ImportError inside the tools themselves is left as it is."""
    name = f"worker.devtools.{module}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name not in ("worker.devtools", name):
            raise
        raise MissingExtra(
            f"ratings {command} runs the development tools (worker.devtools), which the installed package does "
            f"not ship: from a source checkout of the project, pip install -e '.[{extra}]'"
        ) from exc


def demo(
    limit: Annotated[Optional[int], typer.Option(help="Only the first N football matches.")] = None,
    sedma: Annotated[int, typer.Option(help="Generated Sedma matches (1v1 and 2v2).")] = 3000,
    workers: Annotated[int, typer.Option(help="Worker processes.")] = 2,
) -> None:
    """Run the whole path on real data: embedded servers unless URLs are set."""
    run_demo = _devtools("demo", "demo", "demo").run_demo
    raise typer.Exit(run_demo(football_limit=limit, sedma_matches=sedma, workers=workers))


def _counts(text: str, option: str) -> list[int]:
    """Worker counts given as ``"1,2,8"``; exits 2 unless they are positive integers."""
    try:
        counts = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        err.print(f"[red]{option} must be positive integers separated by commas[/red], got {text!r}")
        raise typer.Exit(ExitCode.USAGE)
    return counts


def bench(
    matches: Annotated[int, typer.Option(help="Messages per run: no-op baseline, full load, hot players.", min=10)] = 10_000,
    workers: Annotated[str, typer.Option(help="Worker process counts of the scaling table, comma-separated.")] = "1,2,4,8",
    main_workers: Annotated[Optional[int], typer.Option(help="Worker processes of the headline, half-load and hot-player runs (default: the listed count closest to the CPU count).", min=1)] = None,
    publishers: Annotated[int, typer.Option(help="Publisher processes (pre-encoded messages pipelined to Redis).", min=1, max=64)] = 2,
    players: Annotated[int, typer.Option(help="Players the generated matches draw from (uniformly).", min=10)] = 100_000,
    producer_matches: Annotated[int, typer.Option(help="Publishes per broker of the producer-helper part (0: skip it).", min=0)] = 2000,
    rabbitmq_url: Annotated[Optional[str], typer.Option(help="RabbitMQ (amqp://) of the producer-helper part, with and without publisher confirms (default: RATINGS_BROKER_URL when it is one).")] = None,
    hot_lock_seconds: Annotated[float, typer.Option(help="Seconds hot00's row is held locked mid-run in a second hot-player run, beside the run without the lock (0: skip it).", min=0, max=600)] = 10.0,
    late_share: Annotated[float, typer.Option(help="Share of matches delivered late in the late-arrival run, beside the in-order run of the same size (0: skip it).", min=0, max=1)] = 0.1,
    late_by: Annotated[int, typer.Option(help="How late a late match is delivered, in matches published after its place in finish order.", min=1)] = 500,
    soak_matches: Annotated[int, typer.Option(help="Extra full-load run at the main worker count, for worker memory (e.g. 200000).", min=0)] = 0,
    paired_rounds: Annotated[int, typer.Option(help="Alternating rounds, consumers only, of the no-op and the rating path at each --paired-workers count, each ratio taken within a round (0: skip).", min=0)] = 5,
    paired_matches: Annotated[int, typer.Option(help="Messages per run of a paired round.", min=10)] = 5_000,
    paired_workers: Annotated[str, typer.Option(help="Worker process counts of the paired rounds' rating runs, comma-separated (the main count is added).")] = "2,8",
    model_rounds: Annotated[int, typer.Option(help="Rounds of the rating-model comparison at the main worker count: the same --matches, consumers only, on the Elo, Glicko-2 and Weng-Lin ladders in turns (0: skip).", min=0)] = 3,
    ledger_size: Annotated[int, typer.Option(help="Matches of the generated ledger that verify replays (timed at 10, 30 and 100 %).", min=0)] = 1_000_000,
    ledger_players: Annotated[int, typer.Option(help="Players of the generated ledger.", min=2)] = 10_000,
    engine_matches: Annotated[int, typer.Option(help="Matches per engine-speed measurement.", min=1000)] = 200_000,
    repeats: Annotated[int, typer.Option(help="Engine measurements: best of N.", min=1)] = 3,
    skip_engine: Annotated[bool, typer.Option(help="Skip the engine-speed part.")] = False,
    skip_service: Annotated[bool, typer.Option(help="Skip the worker/relay part.")] = False,
    skip_ledger: Annotated[bool, typer.Option(help="Skip the ledger-at-scale part.")] = False,
    skip_scaling: Annotated[bool, typer.Option(help="Only the main worker count (no scaling table).")] = False,
    durability_matches: Annotated[int, typer.Option(help="Publishes per Redis durability setting (appendfsync everysec / always, WAIT 1 replica) on a replicated Redis of the bench's own (0: skip).", min=0)] = 5_000,
    durability_rounds: Annotated[int, typer.Option(help="Turns each durability setting takes (its figure: the median).", min=1)] = 3,
    api_seconds: Annotated[float, typer.Option(help="Seconds of each read-API measurement (single lookup, 100-player batch, leaderboard page, each beside /health) with the rating path at half load (0: skip).", min=0)] = 5.0,
    api_concurrency: Annotated[int, typer.Option(help="Concurrent keep-alive clients of the read-API measurements.", min=1, max=256)] = 8,
    seed: Annotated[int, typer.Option(help="Random seed of the generated matches.")] = 2026,
    output: Annotated[Path, typer.Option(help="JSON file of every figure.")] = Path("bench-results.json"),
) -> None:
    """Benchmark: throughput and latency against a no-op Celery baseline, scaling, memory, engine
    speed (against elote and an inline loop) and verify of a large ledger, in one run.

    Uses RATINGS_DATABASE_URL / RATINGS_BROKER_URL when set (in a database, queue and stream of its
    own, removed at the end), embedded servers otherwise. Prints tables and writes --output.
    """
    tools = _devtools("bench", "bench", "bench")
    counts = _counts(workers, "--workers")
    paired = _counts(paired_workers, "--paired-workers")
    config = tools.BenchConfig(
        matches=matches, workers=counts, main_workers=main_workers, publishers=publishers, players=players, soak_matches=soak_matches,
        producer_matches=producer_matches, rabbitmq_url=rabbitmq_url,
        ledger_size=ledger_size, ledger_players=ledger_players, engine_matches=engine_matches, repeats=repeats,
        skip_engine=skip_engine, skip_service=skip_service, skip_ledger=skip_ledger, skip_scaling=skip_scaling,
        seed=seed, output=output, hot_lock_seconds=hot_lock_seconds, durability_matches=durability_matches,
        durability_rounds=durability_rounds, late_share=late_share, late_by=late_by,
        paired_rounds=paired_rounds, paired_matches=paired_matches, paired_workers=paired,
        api_seconds=api_seconds, api_concurrency=api_concurrency, model_rounds=model_rounds,
    )
    raise typer.Exit(tools.run_bench(config))
