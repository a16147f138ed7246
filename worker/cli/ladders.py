"""``ratings leaderboard``, ``history``, ``verify``, ``export``, ``rebuild`` and ``rebuilds``: a ladder's ratings."""

from __future__ import annotations

import csv
import json
import sys
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import JustifyMethod
from rich.markup import escape
from rich.table import Table

from worker import store as repository
from worker.cli.common import (
    ExitCode,
    configured_policies,
    console,
    err,
    ladder_policies,
    open_database,
    print_json,
    require_known_ladder,
    require_session_database_url,
    who_asks,
)
from worker.ops.render import leaderboard_table
from worker.settings import get_settings

if TYPE_CHECKING:
    from worker.cli.models import UncertaintyBoard
    from worker.ops.export import Standing
    from worker.ops.verify import VerifyResult


def leaderboard(
    ladder: Annotated[str, typer.Option(help="Ladder name.")],
    top: Annotated[Optional[int], typer.Option(help="Only the first N.", min=1)] = 20,
    as_csv: Annotated[bool, typer.Option("--csv", help="CSV on standard output.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on standard output (docs/operators/cli.md).")] = False,
    at: Annotated[Optional[str], typer.Option(help="Ladders with uncertainty: the moment shown (ISO 8601 "
                                              "with offset; default now): deviations grow to it. "
                                              "Not before the latest stored match of a player shown "
                                              "(exit 2): stored ratings are those after every match.")] = None,
) -> None:
    """Players of a ladder by rating: rank, player, rating, games, wins, draws, losses, win %
    (a draw counts as half a win). A ladder rated with uncertainty (Glicko-2, Weng-Lin) is ranked by
    its conservative rating, with the deviation grown to the moment shown and provisional and
    inactive marks; players not rankable are listed after, unranked."""
    from worker.cli.models import uncertainty_board, uncertainty_table

    require_known_ladder(ladder)
    with open_database() as conn:
        shown = uncertainty_board(conn, ladder, top, at)
        rows = repository.leaderboard(conn, ladder, None if shown is not None else top)
    if shown is not None:
        if as_json or as_csv:
            _print_uncertainty_board(ladder, shown, rows, as_json)
        else:
            console.print(uncertainty_table(ladder, shown))
        return
    columns = ["rank", "player_id", "rating", "games", "wins", "draws", "losses", "win_pct"]
    if as_json:
        print_json({"ladder": ladder, "players": [{c: r[c] for c in [*columns, "peak_rating"]} for r in rows]})
        return
    if as_csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(["rank", "player", "rating", "games", "wins", "draws", "losses", "win %"])
        for r in rows:
            writer.writerow([r[c] for c in columns])
        return
    console.print(leaderboard_table(ladder, rows))


def _print_uncertainty_board(ladder: str, shown: UncertaintyBoard, rows: list[dict[str, Any]], as_json: bool) -> None:
    """``leaderboard --json`` / ``--csv`` of a ladder rated with uncertainty: the table's rows and
    ranks (by the conservative rating at the moment shown), with each player's wins, draws, losses,
    win % and peak rating from ``rows`` (:func:`worker.store.leaderboard`)."""
    from worker.cli.models import board_dict

    counts = {r["player_id"]: r for r in rows}
    extra = ("wins", "draws", "losses", "win_pct", "peak_rating")
    players = [board_dict(b) | {c: counts[b.player_id][c] if b.player_id in counts else None for c in extra}
               for b in shown.rows]
    if as_json:
        print_json({"ladder": ladder, "model": shown.model,
                    "at": datetime.fromtimestamp(shown.at, UTC).isoformat(),
                    "ranked_by": f"rating - {shown.k:g} * deviation", "players": players})
        return
    fields = ["rank", "player_id", "rating", "deviation", "conservative", "games", "wins", "draws", "losses",
              "win_pct", "provisional", "rankable", "inactive"]
    writer = csv.writer(sys.stdout)
    writer.writerow(["rank", "player", "rating", "deviation", "conservative", "games", "wins", "draws", "losses",
                     "win %", "provisional", "rankable", "inactive"])
    for p in players:
        writer.writerow(["" if p[f] is None else str(p[f]).lower() if isinstance(p[f], bool) else p[f]
                         for f in fields])


def history(
    player: Annotated[str, typer.Argument(help="Player id.")],
    ladder: Annotated[str, typer.Option(help="Ladder name.")],
    as_csv: Annotated[bool, typer.Option("--csv", help="CSV on standard output.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on standard output (docs/operators/cli.md).")] = False,
) -> None:
    """One player's rating history on a ladder, oldest first, and the corrections that rewrote it;
    exit 1 when the player has no history on the ladder."""
    require_known_ladder(ladder)
    with open_database() as conn:
        rows = _without_absent(repository.history(conn, ladder, player, uncertainty=as_json))
        rewrites = repository.history_corrections(conn, ladder, player) if rows else []
    if as_json:
        print_json({"ladder": ladder, "player_id": player, "history": rows, "corrections": rewrites})
    if not rows:
        err.print(f"no history for {player!r} on ladder {ladder!r}")
        raise typer.Exit(ExitCode.FINDINGS)
    if as_json:
        return
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
    for c in rewrites:
        what = (f"late match {c['match_id']} placed in its position" if c["kind"] == "late"
                else f"annulment of {', '.join(c['annulled'] or [c['match_id']])}"
                + (f" ({c['reason']}, by {c['annulled_by']})" if c["reason"] else ""))
        console.print(f"correction #{c['id']} at {c['at']:%Y-%m-%d %H:%M:%S}: {what}; "
                      f"{c['rows']} earlier row(s) of {player} superseded")


def _without_absent(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """History rows without the deviation and volatility columns no row has a value in (a ladder
    rated by Elo has neither; Weng-Lin has no volatility)."""
    absent = [c for c in ("deviation_before", "deviation_after", "volatility_before", "volatility_after")
              if rows and c in rows[0] and all(r[c] is None for r in rows)]
    return [{k: v for k, v in r.items() if k not in absent} for r in rows] if absent else rows


def annul(
    match_ids: Annotated[list[str], typer.Argument(help="Match ids to annul.")],
    reason: Annotated[str, typer.Option(help="Why (kept on record).")],
    by: Annotated[Optional[str], typer.Option(help="Who annuls (default: user@host).")] = None,
) -> None:
    """Annul matches: remove them from their ladder's chronological replay, re-rate what followed them
    exactly, send `correction` events; the ledger keeps them, the annulment is on record. Annulling
    an annulled match does nothing."""
    annulled_by = who_asks(by)
    _check_annulment(match_ids, reason, annulled_by)
    ladders = ladder_policies()
    try:
        with open_database(autocommit=True) as conn:
            result = repository.annul_matches(conn, match_ids, reason, annulled_by, ladders)
    except repository.AnnulmentRefused as exc:
        err.print(f"[red]annulment refused[/red] (annulment_refused): {exc}")
        raise typer.Exit(ExitCode.FINDINGS) from exc
    for ladder in sorted(result.rerated):
        console.print(f"{ladder}: annulled, {result.rerated[ladder]} later match(es) re-rated, "
                      f"{result.players_changed[ladder]} player(s) told by a correction event")
    if result.annulled:
        console.print(f"annulled: {', '.join(result.annulled)}")
    if result.already:
        console.print(f"already annulled (nothing done): {', '.join(result.already)}")
    if result.unknown:
        err.print(f"[red]not in the ledger[/red] (unknown_match): {', '.join(result.unknown)}")
        raise typer.Exit(ExitCode.FINDINGS)


def _check_annulment(match_ids: list[str], reason: str, annulled_by: str) -> None:
    """Hold the command's arguments to the annul-matches contract, as a message would be (the same
    reason codes: ``invalid_id``, ``invalid_text`` for what PostgreSQL text cannot store, such as a
    lone surrogate from an argument that is not UTF-8); exit 2 with the code and the fix if refused.
    The ids are checked in messages' worth (1000 at a time), since the command takes any number."""
    from schemas import InvalidMessage, parse_annul_matches
    from schemas.annul_matches import MAX_ANNULLED_PER_MESSAGE

    try:
        for start in range(0, len(match_ids), MAX_ANNULLED_PER_MESSAGE):
            parse_annul_matches({"schema_version": 1, "match_ids": match_ids[start:start + MAX_ANNULLED_PER_MESSAGE],
                                 "reason": reason, "annulled_by": annulled_by})
    except InvalidMessage as exc:
        err.print(f"[red]annulment refused[/red] ({exc.reason_code}): {escape(exc.detail)}", highlight=False)
        raise typer.Exit(ExitCode.USAGE) from exc


def verify(
    ladder: Annotated[Optional[str], typer.Option(help="Ladder (default: every configured ladder).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on standard output (docs/operators/cli.md).")] = False,
) -> None:
    """Replay the ledger with the engine and compare with stored ratings; exit 1 on any difference."""
    from worker.ops.verify import verify_ladder

    policies = configured_policies()
    ladders = [ladder] if ladder else sorted(policies)
    if ladder is not None:
        require_known_ladder(ladder)
    results = []
    with open_database() as conn:
        for name in ladders:
            results.append(verify_ladder(conn, name, policies[name]))
            if not as_json:
                _print_verify(results[-1])
    if as_json:
        print_json({"ok": all(r.ok for r in results), "ladders": [_verify_json(r) for r in results]})
    if not all(r.ok for r in results):
        raise typer.Exit(ExitCode.FINDINGS)


def _state_fields(value: tuple[float | int | None, ...] | None) -> dict[str, Any] | None:
    """A stored or replayed state of ``verify`` by name: rating and games, and on a ladder rated with
    uncertainty its deviation, volatility and last match time (seconds since the epoch)."""
    if value is None:
        return None
    state = {"rating": value[0], "games": value[1]}
    if len(value) > 2:
        state.update(zip(("deviation", "volatility", "last_played"), value[2:]))
    return state


def _state_text(value: tuple[float | int | None, ...] | None) -> str:
    """A state of ``verify`` for people: ``rating 1215.0, games 1`` (plus deviation, volatility and
    the last match as UTC time on a ladder rated with uncertainty); ``none`` when absent."""
    fields = _state_fields(value)
    if fields is None:
        return "none"
    if fields.get("last_played") is not None:
        fields["last_played"] = datetime.fromtimestamp(fields["last_played"], UTC).isoformat()
    return ", ".join(f"{k} {v!r}" if isinstance(v, float) else f"{k} {v}" for k, v in fields.items())


def _verify_json(result: VerifyResult) -> dict[str, Any]:
    """One ladder's :class:`worker.ops.verify.VerifyResult` as ``verify --json`` prints it."""
    return {"ladder": result.ladder, "ok": result.ok, "matches": result.matches, "players": result.players,
            "policy_version": result.policy_version, "configured_version": result.configured_version,
            "apply_order": result.apply_order,
            "differences": [{"player_id": pid, "stored": _state_fields(have), "replayed": _state_fields(want)}
                            for pid, have, want in result.differences]}


def _print_verify(result: VerifyResult) -> None:
    """One ladder's verify result as lines for people (the first 20 differences)."""
    name = result.ladder
    status = "[green]OK[/green]" if result.ok else f"[red]{len(result.differences)} difference(s)[/red]"
    order = "" if result.apply_order == "applied" else f", order {result.apply_order}"
    console.print(f"verify {name}: {result.matches} match{'' if result.matches == 1 else 'es'} replayed, "
                  f"{result.players} player{'' if result.players == 1 else 's'} "
                  f"(policy {result.policy_version}{order}): {status}")
    if result.configured_version != result.policy_version:
        console.print(f"  note: the ladders file has policy {result.configured_version} for {name}; "
                      f"{result.policy_version} stays in force until `ratings rebuild --ladder {name}`")
    for pid, have, want in result.differences[:20]:
        console.print(f"  {pid}: stored {_state_text(have)}; replayed {_state_text(want)}", highlight=False,
                      soft_wrap=True)


class ExportFormat(str, Enum):
    """File formats of `ratings export`."""

    csv = "csv"
    xlsx = "xlsx"


def export(
    ladder: Annotated[str, typer.Option(help="Ladder name.")],
    output: Annotated[Path, typer.Option(help="File to write (`-` with --format csv: standard output).")],
    fmt: Annotated[Optional[ExportFormat], typer.Option("--format", help="csv or xlsx (default: from the --output suffix).")] = None,
    top: Annotated[Optional[int], typer.Option(help="Only the first N players (default: all).", min=1)] = None,
) -> None:
    """Export a ladder's leaderboard for organisers, as CSV or an Excel workbook.

    Columns: Rank, Name, Wins, Losses, Draws, Win %, Rating, Peak, Games. Win % counts a draw as
    half a win: (wins + draws / 2) / games. A ladder rated with uncertainty (Glicko-2, Weng-Lin) is in
    the order and with the ranks of `ratings leaderboard` now (by conservative rating; players not
    rankable last, Rank blank) and has three more columns after Rating: Deviation (grown since the
    player's last match to now), Conservative (rating - k x deviation, what it ranks by) and Status
    (the marks that apply: provisional, rankable, inactive).
    """
    from worker.ops.export import csv_text, write_csv_file, write_xlsx

    require_known_ladder(ladder)
    if fmt is None and str(output) == "-":
        fmt = ExportFormat.csv
    if fmt is None:
        suffix = output.suffix.lower().lstrip(".")
        if suffix not in ("csv", "xlsx"):
            err.print(f"[red]cannot tell the format from {str(output)!r}[/red]: pass --format csv or --format xlsx")
            raise typer.Exit(ExitCode.USAGE)
        fmt = ExportFormat(suffix)
    to_stdout = str(output) == "-"
    if to_stdout and fmt is not ExportFormat.csv:
        err.print("[red]--output - (standard output) works with --format csv only[/red]")
        raise typer.Exit(ExitCode.USAGE)
    if not to_stdout and not output.parent.is_dir():
        err.print(f"[red]folder {str(output.parent)!r} does not exist[/red]: create it or choose another --output")
        raise typer.Exit(ExitCode.USAGE)
    standings, about, uncertainty = _export_standings(ladder, top)
    if to_stdout:
        sys.stdout.write(csv_text(standings, uncertainty=uncertainty))
        return
    if fmt is ExportFormat.csv:
        n = write_csv_file(standings, output, uncertainty=uncertainty)
    else:
        n = write_xlsx(standings, output, ladder, about, uncertainty=uncertainty)
    err.print(f"wrote {n} player(s) of ladder {ladder!r} to {output} ({fmt.value})")


def _export_standings(ladder: str, top: int | None) -> tuple[list[Standing], dict[str, Any], bool]:
    """What `ratings export` writes: the rows (the first ``top``; all when ``None``), the entries of
    the workbook's About sheet, and whether the ladder is rated with uncertainty. An Elo ladder's
    rows are by rating, its About entry the policy version. A ladder rated with uncertainty's rows
    are the leaderboard's now (:func:`worker.cli.models.uncertainty_board`: rank, deviation,
    conservative rating, marks); its About also says what it ranks by and the moment (UTC) the
    deviations are grown to."""
    from worker.cli.models import uncertainty_board
    from worker.ops.export import standings_from_board, standings_from_rows

    with open_database() as conn:
        shown = uncertainty_board(conn, ladder, top, None)
        rows = repository.leaderboard(conn, ladder, None if shown is not None else top)
        record = repository.ladder_record(conn, ladder)
    about: dict[str, Any] = {
        "Policy version": record.policy_version if record else configured_policies()[ladder].version}
    if shown is None:
        return standings_from_rows(rows), about, False
    about["Ranked by"] = f"Conservative = rating - {shown.k:g} × deviation ({shown.model})"
    about["Deviations as of (UTC)"] = datetime.fromtimestamp(shown.at, UTC).isoformat(timespec="seconds")
    return standings_from_board(shown.rows, rows), about, True


class RebuildOrder(str, Enum):
    """Replay orders of `ratings rebuild`."""

    applied = "applied"
    finished_at = "finished-at"


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

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    from worker.ops.rebuild import RebuildError, rebuild_ladder
    from worker.policy.stored import ladder_contents
    from worker.service.faults import FaultInjector

    require_known_ladder(ladder)
    settings = get_settings()
    policy = configured_policies()[ladder]
    content = ladder_contents(settings.ladders_file)[ladder]
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=False) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(phase: str, done: int, total: int | None) -> None:
            if phase not in tasks:
                label = {"replay": f"replaying {ladder}", "stamp": "stamping ledger (seq)"}[phase]
                tasks[phase] = bar.add_task(label, total=total)
            bar.update(tasks[phase], completed=done, total=total)

        try:
            report = rebuild_ladder(
                require_session_database_url(), ladder, policy, content, order.value if order else None, who_asks(by), progress,
                FaultInjector(settings.fault_injection),
            )
        except RebuildError as exc:
            err.print(f"[red]rebuild refused[/red]: {exc}")
            raise typer.Exit(ExitCode.FINDINGS) from exc
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


def rebuilds(
    ladder: Annotated[Optional[str], typer.Option(help="Only this ladder.")] = None,
    limit: Annotated[int, typer.Option(help="How many, newest first.", min=1)] = 20,
) -> None:
    """Past and running rebuilds: who, when, policy, order, counts, lock hold time, status."""
    with open_database() as conn:
        rows = repository.rebuilds(conn, ladder, limit)
    table = Table(title="rebuilds (newest first)")
    columns: list[tuple[str, JustifyMethod]] = [
        ("id", "right"), ("ladder", "left"), ("status", "left"), ("started (UTC)", "left"), ("by", "left"),
        ("order", "left"), ("policy", "left"), ("matches", "right"), ("events", "right"), ("lock held", "right")]
    for col, just in columns:
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
