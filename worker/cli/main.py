"""The ``ratings`` command line (Typer)."""

from __future__ import annotations

import csv
import json
import os
import sys
import tempfile
from collections import Counter
from datetime import UTC
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import psycopg
import typer
from rich.console import Console
from rich.table import Table

from worker import store as repository
from worker.settings import get_settings

app = typer.Typer(
    help="Match rating worker: rate finished matches exactly once.", no_args_is_help=True,
    pretty_exceptions_enable=False,
)
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
    """Ladder name to engine policy from the ladders file; exit 2 naming file, line and key if broken."""
    from worker.cli.policy import ladder_policies_or_exit

    return {name: loaded.policy for name, loaded in ladder_policies_or_exit().items()}


def _known_ladder(ladder: str) -> None:
    policies = _policies()
    if ladder not in policies:
        err.print(f"[red]unknown ladder {ladder!r}[/red]; configured: {', '.join(sorted(policies))}")
        raise typer.Exit(2)


@app.command()
def migrate() -> None:
    """Apply pending database migrations (yoyo-migrations, files in worker/store/migrations)."""
    from worker.store.migrate import migrate as run

    applied = run(_database_url())
    console.print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")
    _record_policies()


def _record_policies() -> None:
    """Keep each configured ladder's policy content under its version (``policies`` table)."""
    from worker.cli.policy import ladder_policies_or_exit

    loaded = ladder_policies_or_exit()
    try:
        with psycopg.connect(_database_url(), connect_timeout=10) as conn:
            repository.record_policies(conn, {name: (lp.version, lp.config.canonical()) for name, lp in loaded.items()})
    except psycopg.errors.UndefinedTable:
        err.print("policies not recorded: run `ratings migrate` first")


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
    _policies()  # a broken ladders file stops the worker here, before it takes any message
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # before prometheus_client is imported
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="ratings-metrics-")
    from worker.service.celery_app import app as celery_app

    settings = get_settings()
    celery_app.worker_main(
        ["worker", "-Q", settings.queue, "-c", str(concurrency), "-n", name, "-l", loglevel,
         "-P", pool, "--without-gossip", "--without-mingle"]
    )


@app.command()
def relay() -> None:
    """Publish committed rating-changed events from the outbox to the Redis Stream."""
    from worker.service.observability import configure_logging
    from worker.service.relay import run_relay, serve_relay_http

    _database_url()
    _broker_url()
    settings = get_settings()
    configure_logging(settings.log_level, settings.log_json)
    heartbeat = serve_relay_http(settings, _policies())
    try:
        run_relay(settings, heartbeat=heartbeat)
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
            publish_match(papp, match, queue=settings.queue, producer=producer, validate=False)
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
    from worker.ops.football import DEFAULT_RESULTS, football_matches

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
    from worker.devtools.generate import generate_sedma_matches

    for m in generate_sedma_matches(matches, players, seed, ladder):
        sys.stdout.write(m.model_dump_json() + "\n")


@app.command()
def leaderboard(
    ladder: Annotated[str, typer.Option(help="Ladder name.")],
    top: Annotated[Optional[int], typer.Option(help="Only the first N.", min=1)] = 20,
    as_csv: Annotated[bool, typer.Option("--csv", help="CSV on standard output.")] = False,
) -> None:
    """Players of a ladder by rating: rank, player, rating, games, wins, draws, losses, win %
    (a draw counts as half a win)."""
    _known_ladder(ladder)
    with psycopg.connect(_database_url()) as conn:
        rows = repository.leaderboard(conn, ladder, top)
    columns = ["rank", "player_id", "rating", "games", "wins", "draws", "losses", "win_pct"]
    if as_csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(["rank", "player", "rating", "games", "wins", "draws", "losses", "win %"])
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
    _known_ladder(ladder)
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
    from worker.ops.verify import verify_ladder

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
            order = "" if result.apply_order == "applied" else f", order {result.apply_order}"
            console.print(f"verify {name}: {result.matches} matches replayed, {result.players} players "
                          f"(policy {result.policy_version}{order}): {status}")
            if result.configured_version != result.policy_version:
                console.print(f"  note: the ladders file has policy {result.configured_version} for {name}; "
                              f"{result.policy_version} stays in force until `ratings rebuild --ladder {name}`")
            for pid, have, want in result.differences[:20]:
                console.print(f"  {pid}: stored {have}, replayed {want}")
            failed |= not result.ok
    if failed:
        raise typer.Exit(1)


@app.command()
def evaluate(
    ladder: Annotated[Optional[str], typer.Option(
        help="Ladder: its ledger is the history (unless --file) and its configured policy the default policy.")] = None,
    file: Annotated[Optional[Path], typer.Option(
        help="History from a file instead of the ledger: the international football results.csv, or JSON Lines "
             "of MatchFinished messages (as `ratings generate` writes).", dir_okay=False)] = None,
    policy: Annotated[Optional[list[Path]], typer.Option(
        help="Policy file (the keys of one ladder table, e.g. examples/policies/elo-k20.toml); repeat to compare "
             "several. Default: the ladder's configured policy.", dir_okay=False)] = None,
    skip_first: Annotated[int, typer.Option(
        help="Burn-in: leave the first N matches out of log loss, Brier score and accuracy.", min=0)] = 0,
    drift_by: Annotated[str, typer.Option(
        help="Drift series per `year`, per `matches` (see --drift-every) or `auto` (per year when the "
             "history spans 3 or more calendar years).")] = "auto",
    drift_every: Annotated[Optional[int], typer.Option(
        help="Matches per drift point (default 1,000, more on long histories: at most 500 points).", min=1)] = None,
    player: Annotated[Optional[str], typer.Option(help="Follow this player's rating under each policy.")] = None,
    chart: Annotated[Optional[Path], typer.Option(
        help="PNG: mean-rating drift and rating spread over time per policy (and --player's rating).",
        dir_okay=False)] = None,
    player_chart: Annotated[Optional[Path], typer.Option(
        help="PNG: --player's rating after each of their matches, per policy.", dir_okay=False)] = None,
    json_out: Annotated[Optional[Path], typer.Option(
        "--json", help="Write every figure and series as JSON to this file.", dir_okay=False)] = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
) -> None:
    """Replay a ladder's history under one or several policies and compare them side by side.

    Per policy: log loss, Brier score and accuracy of the expected scores (predictions made before
    each match), mean rating and its drift over time, how often the rating floor and the expected
    score cap were hit, and the final rating distribution. Exit 2 on a usage error, 1 when the
    history is empty or --player has no match in it.
    """
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from worker.ops import evaluate as ev
    from worker.policy.ladders import LadderConfigError, load_policy_file

    if ladder is None and file is None:
        err.print("[red]name a history[/red]: --ladder L (its ledger) or --file F (football CSV or JSON Lines)")
        raise typer.Exit(2)
    if player_chart is not None and player is None:
        err.print("[red]--player-chart needs --player ID[/red]")
        raise typer.Exit(2)
    if drift_by not in ("auto", "year", "matches"):
        err.print(f"[red]--drift-by must be auto, year or matches[/red], got {drift_by!r}")
        raise typer.Exit(2)

    # The history's ladder: it picks the default policy and, in a JSON Lines file, the messages.
    kind = "ledger"
    history_ladder = ladder
    if file is not None:
        if ev.is_football_csv(file):
            kind, history_ladder = "football", ladder or "elo"
        elif file.suffix.lower() == ".csv":
            err.print(f"[red]{file} is not the international football CSV[/red] (it needs the columns date, "
                      "home_team, away_team, home_score, away_score); other files are read as JSON Lines")
            raise typer.Exit(2)
        else:
            kind, history_ladder = "jsonl", ladder or ev.first_ladder(file)
            if history_ladder is None:
                err.print(f"[red]{file} holds no valid MatchFinished line[/red]")
                raise typer.Exit(1)

    policies: list[ev.LabelledPolicy] = []
    if policy:
        labels: Counter[str] = Counter()
        for path in policy:
            try:
                loaded = load_policy_file(path)
            except LadderConfigError as exc:
                err.print(f"[red]policy file error[/red]: {exc}")
                raise typer.Exit(2) from exc
            labels[path.stem] += 1
            label = path.stem if labels[path.stem] == 1 else f"{path.stem} #{labels[path.stem]}"
            policies.append(ev.LabelledPolicy(label, loaded, str(path)))
    else:
        configured = _policies()
        if history_ladder not in configured:
            err.print(f"[red]ladder {history_ladder!r} is not configured[/red] (configured: "
                      f"{', '.join(sorted(configured))}); pass --policy FILE or --ladder L")
            raise typer.Exit(2)
        policies.append(ev.LabelledPolicy(history_ladder, configured[history_ladder],
                                          f"ladder {history_ladder} ({get_settings().ladders_file})"))

    skipped = ev.SkippedLines()

    def run(history, total: int, source: str) -> ev.EvaluationReport:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("matches"),
                   TimeElapsedColumn(), TimeRemainingColumn())
        with Progress(*columns, console=err, transient=True, disable=quiet or not err.is_terminal) as progress:
            task = progress.add_task(f"replaying under {len(policies)} polic{'y' if len(policies) == 1 else 'ies'}",
                                     total=total)
            return ev.evaluate(
                history, policies, source=source, skip_first=skip_first, drift_by=drift_by,
                drift_every=drift_every or ev.drift_period(total), player=player,
                progress=lambda n: progress.advance(task, n), clock=time.perf_counter,
            )

    if kind == "ledger":
        with psycopg.connect(_database_url()) as conn:
            # One REPEATABLE READ snapshot (as verify): workers may keep applying matches meanwhile.
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            with conn.transaction():
                total = repository.ledger_size(conn, history_ladder)
                if total == 0:
                    err.print(f"[red]the ledger of ladder {history_ladder!r} holds no match[/red]")
                    raise typer.Exit(1)
                report = run(ev.ledger_history(conn, history_ladder), total, f"ledger of ladder {history_ladder}")
    elif kind == "football":
        report = run(ev.football_history(file, history_ladder), max(ev.count_lines(file) - 1, 0), file.name)
    else:
        report = run(ev.jsonl_history(file, history_ladder, skipped), ev.count_lines(file),
                     f"{file.name} (ladder {history_ladder})")
        report.skipped = skipped.to_json()
        if skipped.total:
            bad = ", ".join(f"{reason}={n}" for reason, n in sorted(skipped.bad.items())) or "none"
            err.print(f"[yellow]left out {skipped.total:,} line(s)[/yellow]: bad lines by reason: {bad}; "
                      f"other ladders: {skipped.other_ladder:,}; repeated match ids: {skipped.duplicate_ids:,}")
            for number, reason, detail in skipped.examples:
                err.print(f"  line {number}: {reason}: {detail}", highlight=False, markup=False)

    if report.matches == 0:
        err.print("[red]the history holds no match to replay[/red]")
        raise typer.Exit(1)
    console.print(ev.report_table(report))
    console.print(ev.NOTES, highlight=False, markup=False)
    console.print(f"{report.matches:,} matches replayed under {len(policies)} polic"
                  f"{'y' if len(policies) == 1 else 'ies'} in {report.seconds:.1f} s", highlight=False)
    if json_out is not None:
        json_out.write_text(json.dumps(report.to_json(), indent=2, default=str) + "\n", encoding="utf-8")
        console.print(f"wrote {json_out}")
    missing_player = player is not None and not any(p.player_games for p in report.policies)
    if chart is not None:
        ev.draw_drift_chart(report, chart)
        console.print(f"wrote {chart}")
    if player_chart is not None and not missing_player:
        ev.draw_player_chart(report, player_chart)
        console.print(f"wrote {player_chart}")
    if missing_player:
        err.print(f"[red]player {player!r} has no match in the history[/red]")
        raise typer.Exit(1)


class ExportFormat(str, Enum):
    """File formats of `ratings export`."""

    csv = "csv"
    xlsx = "xlsx"


@app.command()
def export(
    ladder: Annotated[str, typer.Option(help="Ladder name.")],
    output: Annotated[Path, typer.Option(help="File to write (`-` with --format csv: standard output).")],
    fmt: Annotated[Optional[ExportFormat], typer.Option("--format", help="csv or xlsx (default: from the --output suffix).")] = None,
    top: Annotated[Optional[int], typer.Option(help="Only the first N players (default: all).", min=1)] = None,
) -> None:
    """Export a ladder's leaderboard for organisers, as CSV or an Excel workbook.

    Columns: Rank, Name, Wins, Losses, Draws, Win %, Rating, Peak, Games. Win % counts a draw as
    half a win: (wins + draws / 2) / games.
    """
    from worker.ops.export import csv_text, standings_from_rows, write_csv_file, write_xlsx

    _known_ladder(ladder)
    if fmt is None and str(output) == "-":
        fmt = ExportFormat.csv
    if fmt is None:
        suffix = output.suffix.lower().lstrip(".")
        if suffix not in ("csv", "xlsx"):
            err.print(f"[red]cannot tell the format from {str(output)!r}[/red]: pass --format csv or --format xlsx")
            raise typer.Exit(2)
        fmt = ExportFormat(suffix)
    to_stdout = str(output) == "-"
    if to_stdout and fmt is not ExportFormat.csv:
        err.print("[red]--output - (standard output) works with --format csv only[/red]")
        raise typer.Exit(2)
    if not to_stdout and not output.parent.is_dir():
        err.print(f"[red]folder {str(output.parent)!r} does not exist[/red]: create it or choose another --output")
        raise typer.Exit(2)
    with psycopg.connect(_database_url()) as conn:
        rows = repository.leaderboard(conn, ladder, top)
        record = repository.ladder_record(conn, ladder)
    standings = standings_from_rows(rows)
    if to_stdout:
        sys.stdout.write(csv_text(standings))
        return
    if fmt is ExportFormat.csv:
        n = write_csv_file(standings, output)
    else:
        about = {"Policy version": record.policy_version if record else _policies()[ladder].version}
        n = write_xlsx(standings, output, ladder, about)
    err.print(f"wrote {n} player(s) of ladder {ladder!r} to {output} ({fmt.value})")


class RebuildOrder(str, Enum):
    """Replay orders of `ratings rebuild`."""

    applied = "applied"
    finished_at = "finished-at"


@app.command()
def rebuild(
    ladder: Annotated[str, typer.Option(help="Ladder to recompute.")],
    order: Annotated[Optional[RebuildOrder], typer.Option(help="Replay order: applied (the ledger's apply order) or finished-at (by the time each match finished). Default: the ladder's current order (applied unless an earlier rebuild chose finished-at).")] = None,
    by: Annotated[Optional[str], typer.Option(help="Who asks (recorded in `rebuilds`; default: user@host).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON on standard output.")] = False,
) -> None:
    """Recompute a ladder from its ledger under the ladders file's policy and switch over atomically.

    Safe while workers run: matches applied meanwhile are recomputed too, or rated under the new
    policy after the switch. Emits a `rebuild` rating-changed event for each player whose rating
    changed and records the rebuild in `rebuilds` (see `ratings rebuilds`).
    """
    import json

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from worker.service.faults import FaultInjector
    from worker.policy.stored import ladder_contents
    from worker.ops.rebuild import RebuildError, rebuild_ladder

    _known_ladder(ladder)
    settings = get_settings()
    policy = _policies()[ladder]
    content = ladder_contents(settings.ladders_file)[ladder]
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=False) as bar:
        tasks: dict[str, object] = {}

        def progress(phase: str, done: int, total: int | None) -> None:
            if phase not in tasks:
                label = {"replay": f"replaying {ladder}", "stamp": "stamping ledger (seq)"}[phase]
                tasks[phase] = bar.add_task(label, total=total)
            bar.update(tasks[phase], completed=done, total=total)

        try:
            report = rebuild_ladder(
                _database_url(), ladder, policy, content, order.value if order else None, _who(by), progress,
                FaultInjector(settings.fault_injection),
            )
        except RebuildError as exc:
            err.print(f"[red]rebuild refused[/red]: {exc}")
            raise typer.Exit(1) from exc
    if as_json:
        sys.stdout.write(json.dumps(report.as_dict()) + "\n")
        return
    table = Table(title=f"rebuild {report.rebuild_id} of ladder {ladder}", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    for label, value in [
        ("policy", f"{report.previous_policy_version or 'none'} -> {report.policy_version}"),
        ("order", report.apply_order),
        ("generation", f"{report.previous_generation} -> {report.generation}"),
        ("matches replayed", f"{report.matches_replayed:,}"),
        ("  committed after the snapshot", f"{report.catch_up_matches:,}"),
        ("  replayed inside the switch-over", f"{report.caught_up_in_lock:,}"),
        ("players", f"{report.players:,}"),
        ("players whose rating changed", f"{report.players_changed:,}"),
        ("rebuild events emitted", f"{report.events_emitted:,}"),
        ("ledger rows stamped", f"{report.ledger_rows_stamped:,}"),
        ("replay (outside the lock)", f"{report.replay_seconds:.2f} s"),
        ("snapshot barrier (exclusive lock)", f"{report.barrier_seconds * 1000:.1f} ms"),
        ("switch-over: lock wait", f"{report.lock_wait_seconds * 1000:.1f} ms"),
        ("switch-over: lock held", f"{report.lock_held_seconds * 1000:.1f} ms"),
        ("total", f"{report.duration_seconds:.2f} s"),
    ]:
        table.add_row(label, value)
    console.print(table)


@app.command()
def rebuilds(
    ladder: Annotated[Optional[str], typer.Option(help="Only this ladder.")] = None,
    limit: Annotated[int, typer.Option(help="How many, newest first.", min=1)] = 20,
) -> None:
    """Past and running rebuilds: who, when, policy, order, counts, lock hold time, status."""
    with psycopg.connect(_database_url()) as conn:
        rows = repository.rebuilds(conn, ladder, limit)
    table = Table(title="rebuilds (newest first)")
    for col, just in [("id", "right"), ("ladder", "left"), ("status", "left"), ("started (UTC)", "left"),
                      ("by", "left"), ("order", "left"), ("policy", "left"), ("matches", "right"),
                      ("events", "right"), ("lock held", "right")]:
        table.add_column(col, justify=just)
    errors = []
    for r in rows:
        held = "" if r["lock_held_seconds"] is None else f"{r['lock_held_seconds'] * 1000:,.0f} ms"
        started = r["started_at"].astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(str(r["id"]), r["ladder"], r["status"], started, r["requested_by"], r["apply_order"],
                      f"{r['previous_policy_version'] or 'none'} -> {r['policy_version']}",
                      f"{r['matches_replayed'] or 0:,}", f"{r['events_emitted'] or 0:,}", held)
        if r["error"]:
            errors.append(f"  rebuild {r['id']}: {r['error'][:300]}")
    console.print(table)
    for line in errors:
        console.print(line, highlight=False)


dead_letters_app = typer.Typer(help="Inspect, requeue or discard dead letters.", invoke_without_command=True)
app.add_typer(dead_letters_app, name="dead-letters")

from worker.cli.policy import check_published_command, policy_app  # noqa: E402

app.add_typer(policy_app, name="policy")
from worker.cli.importer import import_log  # noqa: E402
app.command("import")(import_log)
app.command("check-published")(check_published_command)


def _who(by: str | None) -> str:
    import getpass
    import socket

    return by or f"{getpass.getuser()}@{socket.gethostname()}"


@dead_letters_app.callback()
def dead_letters_default(ctx: typer.Context) -> None:
    """With no subcommand: the same as `dead-letters list`."""
    if ctx.invoked_subcommand is None:
        dead_letters_list()


@dead_letters_app.command("list")
def dead_letters_list(
    limit: Annotated[int, typer.Option(help="How many, newest first.")] = 50,
    status: Annotated[str, typer.Option(help="open, requeued, discarded or any.")] = "open",
    reason: Annotated[Optional[str], typer.Option(help="Only this reason code.")] = None,
) -> None:
    """List dead letters with their reason codes (and a count of open ones by reason)."""
    with psycopg.connect(_database_url()) as conn:
        by_reason = repository.dead_letter_counts(conn)
        rows = repository.dead_letters(conn, limit, None if status == "any" else status, reason)
    console.print("open by reason: " + (", ".join(f"{k}={v}" for k, v in by_reason.items()) or "none"))
    table = Table()
    for col in ["id", "received", "reason", "status", "match_id", "detail", "raw body"]:
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(str(r["id"]), r["received_at"].isoformat(timespec="seconds"), r["reason_code"], r["status"],
                      r["match_id"] or "", r["detail"][:160], r["raw_body"][:120])
    console.print(table)


@dead_letters_app.command("show")
def dead_letters_show(dead_letter_id: Annotated[int, typer.Argument(help="Dead letter id.")]) -> None:
    """Every field of one dead letter, the raw body in full."""
    with psycopg.connect(_database_url()) as conn:
        row = repository.dead_letter(conn, dead_letter_id)
    if row is None:
        err.print(f"no dead letter {dead_letter_id}")
        raise typer.Exit(1)
    for key, value in row.items():
        if key != "raw_body":
            console.print(f"[bold]{key}[/bold]: {value}", highlight=False)
    console.print("[bold]raw_body[/bold]:")
    sys.stdout.write(row["raw_body"] + "\n")


@dead_letters_app.command("requeue")
def dead_letters_requeue(
    ids: Annotated[list[int], typer.Argument(help="Dead letter ids.")],
    by: Annotated[Optional[str], typer.Option(help="Who requeues (default: user@host).")] = None,
) -> None:
    """Publish open dead letters again; the worker re-validates them through the same path.

    The row records who requeued it, when, and the new task id. A pickled message (content type
    refused) is never requeued: it would have to be unpickled.
    """
    from worker.producer import producer_app, publish_body
    from worker.ops.requeue import RequeueRefused, requeue_body

    settings = get_settings()
    papp = producer_app(_broker_url())
    failed = False
    with psycopg.connect(_database_url(), autocommit=True) as conn:
        for dead_letter_id in ids:
            row = repository.dead_letter(conn, dead_letter_id)
            if row is None or row["status"] != "open":
                err.print(f"dead letter {dead_letter_id}: not found or not open")
                failed = True
                continue
            try:
                body = requeue_body(row)
            except RequeueRefused as exc:
                err.print(f"dead letter {dead_letter_id}: {exc}")
                failed = True
                continue
            with conn.transaction():
                task_id = publish_body(papp, body, queue=settings.queue)
                repository.resolve_dead_letter(conn, dead_letter_id, "requeued", _who(by), task_id)
            console.print(f"dead letter {dead_letter_id} requeued as task {task_id}")
    if failed:
        raise typer.Exit(1)


@dead_letters_app.command("discard")
def dead_letters_discard(
    ids: Annotated[list[int], typer.Argument(help="Dead letter ids.")],
    by: Annotated[Optional[str], typer.Option(help="Who discards (default: user@host).")] = None,
) -> None:
    """Mark open dead letters discarded (kept, with who and when; never deleted)."""
    failed = False
    with psycopg.connect(_database_url(), autocommit=True) as conn:
        for dead_letter_id in ids:
            if repository.resolve_dead_letter(conn, dead_letter_id, "discarded", _who(by)):
                console.print(f"dead letter {dead_letter_id} discarded")
            else:
                err.print(f"dead letter {dead_letter_id}: not found or not open")
                failed = True
    if failed:
        raise typer.Exit(1)


@app.command()
def doctor(
    outbox_lag: Annotated[float, typer.Option(help="Seconds an event may stay unpublished.")] = 60.0,
    max_queue_depth: Annotated[Optional[int], typer.Option(help="Fail above this many queued messages.")] = None,
    skip_verify: Annotated[bool, typer.Option(help="Do not replay the ledgers (large ledgers).")] = False,
) -> None:
    """Check the service's health; exit 1 when something is wrong.

    Reports: database and broker reachable, outbox rows unpublished for longer than
    ``--outbox-lag`` seconds, open dead letters by reason (any open one is a finding: it waits
    for requeue or discard), queue depth (queued and reserved-unacknowledged), and
    ledger/stored-rating mismatches (``verify`` of every configured ladder).
    """
    from worker.ops.doctor import run_checks

    findings = run_checks(get_settings(), _policies(), outbox_lag, max_queue_depth, not skip_verify)
    table = Table(title="ratings doctor")
    table.add_column("check")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    for f in findings:
        table.add_row(f.check, "[green]ok[/green]" if f.ok else "[red]FAIL[/red]", f.detail)
    console.print(table)
    if not all(f.ok for f in findings):
        raise typer.Exit(1)


@app.command()
def demo(
    limit: Annotated[Optional[int], typer.Option(help="Only the first N football matches.")] = None,
    sedma: Annotated[int, typer.Option(help="Generated Sedma matches (1v1 and 2v2).")] = 3000,
    workers: Annotated[int, typer.Option(help="Worker processes.")] = 2,
) -> None:
    """Run the whole path on real data: embedded servers unless URLs are set."""
    from worker.devtools.demo import run_demo

    raise typer.Exit(run_demo(football_limit=limit, sedma_matches=sedma, workers=workers))


@app.command()
def bench(
    matches: Annotated[int, typer.Option(help="Messages per run: no-op baseline, full load, hot players.", min=10)] = 10_000,
    workers: Annotated[str, typer.Option(help="Worker process counts of the scaling table, comma-separated.")] = "1,2,4",
    main_workers: Annotated[Optional[int], typer.Option(help="Worker processes of the headline, half-load and hot-player runs (default: the listed count closest to the CPU count).", min=1)] = None,
    players: Annotated[int, typer.Option(help="Players the generated matches draw from (uniformly).", min=10)] = 100_000,
    soak_matches: Annotated[int, typer.Option(help="Extra full-load run at the main worker count, for worker memory (e.g. 200000).", min=0)] = 0,
    ledger_size: Annotated[int, typer.Option(help="Matches of the generated ledger that verify replays (timed at 10, 30 and 100 %).", min=0)] = 1_000_000,
    ledger_players: Annotated[int, typer.Option(help="Players of the generated ledger.", min=2)] = 10_000,
    engine_matches: Annotated[int, typer.Option(help="Matches per engine-speed measurement.", min=1000)] = 200_000,
    repeats: Annotated[int, typer.Option(help="Engine measurements: best of N.", min=1)] = 3,
    skip_engine: Annotated[bool, typer.Option(help="Skip the engine-speed part.")] = False,
    skip_service: Annotated[bool, typer.Option(help="Skip the worker/relay part.")] = False,
    skip_ledger: Annotated[bool, typer.Option(help="Skip the ledger-at-scale part.")] = False,
    skip_scaling: Annotated[bool, typer.Option(help="Only the main worker count (no scaling table).")] = False,
    seed: Annotated[int, typer.Option(help="Random seed of the generated matches.")] = 2026,
    output: Annotated[Path, typer.Option(help="JSON file of every figure.")] = Path("bench-results.json"),
) -> None:
    """Benchmark: throughput and latency against a no-op Celery baseline, scaling, memory, engine
    speed (against elote and an inline loop) and verify of a large ledger, in one run.

    Uses RATINGS_DATABASE_URL / RATINGS_BROKER_URL when set (in a database, queue and stream of its
    own, removed at the end), embedded servers otherwise. Prints tables and writes --output.
    """
    from worker.devtools.bench import BenchConfig, run_bench

    try:
        counts = [int(w) for w in workers.split(",") if w.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        err.print(f"[red]--workers must be positive integers separated by commas[/red], got {workers!r}")
        raise typer.Exit(2)
    config = BenchConfig(
        matches=matches, workers=counts, main_workers=main_workers, players=players, soak_matches=soak_matches,
        ledger_size=ledger_size, ledger_players=ledger_players, engine_matches=engine_matches, repeats=repeats,
        skip_engine=skip_engine, skip_service=skip_service, skip_ledger=skip_ledger, skip_scaling=skip_scaling,
        seed=seed, output=output,
    )
    raise typer.Exit(run_bench(config))


def main() -> None:
    """Console-script entry point: the CLI, with expected failures as one-line messages (exit 2)."""
    import kombu.exceptions
    import pydantic
    import redis

    try:
        app(prog_name="ratings")
    except psycopg.OperationalError as exc:
        err.print(f"[red]database unreachable[/red]: {str(exc).strip().splitlines()[0]} (check RATINGS_DATABASE_URL)")
        raise SystemExit(2) from None
    except (redis.ConnectionError, kombu.exceptions.OperationalError) as exc:
        err.print(f"[red]broker unreachable[/red]: {exc} (check RATINGS_BROKER_URL)")
        raise SystemExit(2) from None
    except pydantic.ValidationError as exc:
        err.print(f"[red]invalid settings[/red]: {exc}")
        raise SystemExit(2) from None
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        err.print(f"[red]cannot read {exc.filename}[/red]: {exc.strerror}")
        raise SystemExit(2) from None
    except ValueError as exc:
        err.print(f"[red]error[/red]: {exc}")
        raise SystemExit(2) from None


if __name__ == "__main__":  # pragma: no cover
    main()
