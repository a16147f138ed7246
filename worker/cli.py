"""The ``ratings`` command line (Typer)."""

from __future__ import annotations

import csv
import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Optional

import psycopg
import typer
from rich.console import Console
from rich.table import Table

from worker import repository
from worker.settings import get_settings

app = typer.Typer(help="Match rating worker: rate finished matches exactly once.", no_args_is_help=True)
console = Console()
err = Console(stderr=True)


def _database_url() -> str:
    url = get_settings().database_url
    if not url:
        err.print("[red]RATINGS_DATABASE_URL is not set[/red] (only `ratings demo` starts embedded servers).")
        raise typer.Exit(2)
    return url


def _broker_url() -> str:
    url = get_settings().broker_url
    if not url:
        err.print("[red]RATINGS_BROKER_URL is not set[/red] (only `ratings demo` starts embedded servers).")
        raise typer.Exit(2)
    return url


def _policies():
    from worker.ladders import LadderConfigError, load_ladders

    try:
        return load_ladders(get_settings().ladders_file)
    except LadderConfigError as exc:
        err.print(f"[red]ladders file error[/red]: {exc}")
        raise typer.Exit(2) from exc


@app.command()
def migrate() -> None:
    """Apply pending database migrations (yoyo-migrations, files in worker/migrations)."""
    from worker.migrations import migrate as run

    applied = run(_database_url())
    console.print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option(help="Worker child processes.")] = 2,
    name: Annotated[str, typer.Option(help="Celery node name.")] = "ratings@%h",
    loglevel: Annotated[str, typer.Option(help="Log level.")] = "INFO",
    pool: Annotated[str, typer.Option(help="Celery pool (prefork, solo, threads).")] = "prefork",
) -> None:
    """Start a Celery worker consuming the ratings queue with the service's settings."""
    _database_url()
    _broker_url()
    from worker.celery_app import app as celery_app

    settings = get_settings()
    celery_app.worker_main(
        ["worker", "-Q", settings.queue, "-c", str(concurrency), "-n", name, "-l", loglevel,
         "-P", pool, "--without-gossip", "--without-mingle"]
    )


@app.command()
def relay() -> None:
    """Publish committed rating-changed events from the outbox to the Redis Stream."""
    from worker.relay import run_relay

    _database_url()
    _broker_url()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        run_relay(get_settings())
    except KeyboardInterrupt:
        pass


def _publish_all(matches, total: int | None, label: str) -> int:
    from rich.progress import Progress

    from worker.producer import producer_app, publish_match

    settings = get_settings()
    papp = producer_app(_broker_url())
    n = 0
    with Progress(console=err, transient=False) as progress, papp.producer_or_acquire() as producer:
        task = progress.add_task(label, total=total)
        for match in matches:
            publish_match(papp, match, queue=settings.queue, producer=producer)
            n += 1
            progress.advance(task)
    return n


@app.command()
def publish(file: Annotated[Path, typer.Argument(help="JSON Lines file, one MatchFinished per line.")]) -> None:
    """Publish every line of FILE to the ratings queue (invalid lines are dead-lettered by the worker)."""
    lines = [line for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
    n = _publish_all(iter(lines), len(lines), f"publishing {file.name}")
    console.print(f"published {n} message(s)")


@app.command("import-football")
def import_football(
    path: Annotated[Optional[Path], typer.Option(help="results.csv of the international football data.")] = None,
    ladder: Annotated[str, typer.Option(help="Ladder to rate the matches on.")] = "elo",
    limit: Annotated[Optional[int], typer.Option(help="Only the first N matches.")] = None,
) -> None:
    """Publish the international football results as MatchFinished messages, one per match."""
    from worker.football import DEFAULT_RESULTS, football_matches

    matches = list(football_matches(path or DEFAULT_RESULTS, ladder, limit))
    n = _publish_all(iter(matches), len(matches), "publishing football matches")
    console.print(f"published {n} football match(es) to ladder {ladder!r}")


@app.command()
def generate(
    matches: Annotated[int, typer.Option(help="Number of matches.")] = 1000,
    players: Annotated[int, typer.Option(help="Number of players.")] = 200,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 7,
    ladder: Annotated[str, typer.Option(help="Ladder name.")] = "sedma",
) -> None:
    """Write seeded Sedma matches (1v1 and 2v2) as JSON Lines to standard output."""
    from worker.generate import generate_sedma_matches

    for m in generate_sedma_matches(matches, players, seed, ladder):
        sys.stdout.write(m.model_dump_json() + "\n")


@app.command()
def leaderboard(
    ladder: Annotated[str, typer.Option(help="Ladder name.")],
    top: Annotated[Optional[int], typer.Option(help="Only the first N.")] = 20,
    as_csv: Annotated[bool, typer.Option("--csv", help="CSV on standard output.")] = False,
) -> None:
    """Players of a ladder by rating: rank, player, rating, games, wins, draws, losses, win %."""
    with psycopg.connect(_database_url()) as conn:
        rows = repository.leaderboard(conn, ladder, top)
    columns = ["rank", "player_id", "rating", "games", "wins", "draws", "losses", "win_pct"]
    if as_csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        for r in rows:
            writer.writerow([r[c] for c in columns])
        return
    console.print(leaderboard_table(ladder, rows))


def leaderboard_table(ladder: str, rows: list[dict]) -> Table:
    """A rich table of leaderboard rows."""
    table = Table(title=f"ladder {ladder}")
    for col, just in [("rank", "right"), ("player", "left"), ("rating", "right"), ("games", "right"),
                      ("wins", "right"), ("draws", "right"), ("losses", "right"), ("win %", "right")]:
        table.add_column(col, justify=just)
    for r in rows:
        table.add_row(str(r["rank"]), r["player_id"], f"{r['rating']:.1f}", str(r["games"]), str(r["wins"]),
                      str(r["draws"]), str(r["losses"]), f"{r['win_pct'] or 0:.1f}")
    return table


@app.command()
def history(
    player: Annotated[str, typer.Argument(help="Player id.")],
    ladder: Annotated[str, typer.Option(help="Ladder name.")],
    as_csv: Annotated[bool, typer.Option("--csv", help="CSV on standard output.")] = False,
) -> None:
    """One player's rating history on a ladder, oldest first."""
    with psycopg.connect(_database_url()) as conn:
        rows = repository.history(conn, ladder, player)
    if not rows:
        err.print(f"no history for {player!r} on ladder {ladder!r}")
        raise typer.Exit(1)
    if as_csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        return
    table = Table(title=f"{player} on {ladder}")
    for col in ["#", "match", "finished", "result", "before", "after", "delta", "expected", "actual", "K"]:
        table.add_column(col)
    for r in rows:
        table.add_row(str(r["sequence"]), r["match_id"], r["finished_at"].date().isoformat(), r["result"],
                      f"{r['rating_before']:.1f}", f"{r['rating_after']:.1f}", f"{r['delta']:+.1f}",
                      f"{r['expected_score']:.3f}", f"{r['actual_score']:.3f}", f"{r['k_factor']:g}")
    console.print(table)


@app.command()
def verify(ladder: Annotated[Optional[str], typer.Option(help="Ladder (default: every configured ladder).")] = None) -> None:
    """Replay the ledger with the engine and compare with stored ratings; exit 1 on any difference."""
    from worker.verify import verify_ladder

    policies = _policies()
    ladders = [ladder] if ladder else sorted(policies)
    failed = False
    with psycopg.connect(_database_url()) as conn:
        for name in ladders:
            if name not in policies:
                err.print(f"[red]unknown ladder {name!r}[/red]; configured: {', '.join(sorted(policies))}")
                raise typer.Exit(2)
            result = verify_ladder(conn, name, policies[name])
            status = "[green]OK[/green]" if result.ok else f"[red]{len(result.differences)} difference(s)[/red]"
            console.print(f"verify {name}: {result.matches} matches replayed, {result.players} players: {status}")
            for pid, have, want in result.differences[:20]:
                console.print(f"  {pid}: stored {have}, replayed {want}")
            failed |= not result.ok
    if failed:
        raise typer.Exit(1)


@app.command("dead-letters")
def dead_letters_cmd(limit: Annotated[int, typer.Option(help="How many, newest first.")] = 50) -> None:
    """List dead letters with their reason codes (and a count by reason)."""
    with psycopg.connect(_database_url()) as conn:
        by_reason = repository.dead_letter_counts(conn)
        rows = repository.dead_letters(conn, limit)
    console.print("by reason: " + (", ".join(f"{k}={v}" for k, v in by_reason.items()) or "none"))
    table = Table()
    for col in ["id", "received", "reason", "match_id", "detail", "raw body"]:
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(str(r["id"]), r["received_at"].isoformat(timespec="seconds"), r["reason_code"],
                      r["match_id"] or "", r["detail"][:160], r["raw_body"][:120])
    console.print(table)


@app.command()
def demo(
    limit: Annotated[Optional[int], typer.Option(help="Only the first N football matches.")] = None,
    sedma: Annotated[int, typer.Option(help="Generated Sedma matches (1v1 and 2v2).")] = 3000,
    workers: Annotated[int, typer.Option(help="Worker processes.")] = 2,
) -> None:
    """Run the whole path on real data: embedded servers unless URLs are set."""
    from worker.demo import run_demo

    raise typer.Exit(run_demo(football_limit=limit, sedma_matches=sedma, workers=workers))


if __name__ == "__main__":  # pragma: no cover
    app()
