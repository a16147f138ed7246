"""``ratings import``: reconcile a ladder with an organiser's match log (CSV or workbook) (registered by :mod:`worker.cli.main`)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from worker.cli.common import ExitCode
from worker.settings import get_settings

if TYPE_CHECKING:
    from worker.ops.reconcile import Reconciliation

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)

EXIT_REFUSED_ROWS = ExitCode.FINDINGS
"""Exit code when rows were refused (nothing published unless --good-rows-only)."""
EXIT_REFUSED_FILE = ExitCode.USAGE
"""Exit code when the file, an option or the ladder was refused (nothing published)."""
EXIT_REFUSED_STATE = ExitCode.FINDINGS
"""Exit code when the ladder's state refused the import (arrival order, an annulment refused; nothing published)."""
EXIT_REMOVED_KEPT = ExitCode.FINDINGS
"""Exit code when matches no longer in the log stay rated (no --annul-removed): the ladder differs from the log."""


def _report(plan: Reconciliation, dry_run: bool, annul_removed: bool) -> None:
    would = "would " if dry_run else ""
    for change in plan.changes:
        from worker.ops.reconcile import describe

        what = {"added": "added", "moved": "moved in the log",
                "changed": f"result changed from {change.was} to {change.row.result}"}[change.kind]
        tail = f" (annuls {change.replaces})" if change.replaces else ""
        console.print(f"row {change.row.row}: {what}: {describe(change.row)}: {would}publish "
                      f"{change.match.match_id}{tail}", markup=False)
    for error, stored in plan.held:
        err.print(f"row {error.row}: refused, so {stored.match_id} stays as it is", markup=False)
    from worker.ops.reconcile import describe_stored

    for stored in plan.removed:
        if annul_removed and not plan.errors:
            console.print(f"removed from the log: {describe_stored(stored)}: {would}annul {stored.match_id}",
                          markup=False)
        else:
            why = "the log has refused rows" if annul_removed else "pass --annul-removed to annul it"
            err.print(f"removed from the log: {describe_stored(stored)}: {stored.match_id} stays rated ({why})",
                      markup=False)


def _annul(plan: Reconciliation, log_name: str, annul_removed: bool) -> int:
    """Annul the replaced and (when asked) removed matches; return how many removed ones were annulled."""
    from worker.cli.common import ladder_policies, open_database, who_asks
    from worker.store import AnnulmentRefused, annul_matches

    groups = {
        f"ratings import of log {log_name!r}: the row's result changed": [
            c.replaces for c in plan.changes if c.kind == "changed" and c.replaces],
        f"ratings import of log {log_name!r}: the row moved in the log": [
            c.replaces for c in plan.changes if c.kind == "moved" and c.replaces],
        f"ratings import of log {log_name!r}: the row was removed from the log": [
            s.match_id for s in plan.removed] if annul_removed and not plan.errors else [],
    }
    ladders = ladder_policies()
    removed = {s.match_id for s in plan.removed}
    annulled = 0
    done: list[str] = []
    with open_database(autocommit=True) as conn:
        for reason, ids in groups.items():
            if not ids:
                continue
            try:
                result = annul_matches(conn, [i for i in ids if i], reason, who_asks(None), ladders)
            except AnnulmentRefused as exc:
                # each group commits on its own: say what is annulled already (the next import
                # publishes those rows again, in their place)
                already = f"; annulled already: {', '.join(done)}" if done else ""
                err.print(f"[red]annulment refused[/red] (annulment_refused): {exc}; nothing published{already} "
                          "(import again once it can run)")
                raise typer.Exit(EXIT_REFUSED_STATE) from exc
            done += result.annulled
            annulled += sum(1 for m in result.annulled if m in removed)
    return annulled


def _apply(plan: Reconciliation, log_name: str, annul_removed: bool) -> int:
    """Annul, then publish the reconciliation's matches in replay order; return how many removed
    matches were annulled. The broker is checked before anything is annulled."""
    from worker.cli.common import cli_producer_app
    from worker.producer import BrokerUnavailable, publish_match

    if not plan.changes:
        return _annul(plan, log_name, annul_removed)
    app = cli_producer_app()
    published = 0
    try:
        with app.producer_or_acquire() as producer:
            # a broker that cannot take the new results must stop the import before the old ones go
            producer.connection.ensure_connection(max_retries=2)
            annulled = _annul(plan, log_name, annul_removed)
            for change in plan.changes:
                publish_match(app, change.match, queue=get_settings().queue, producer=producer)
                published += 1
    except BrokerUnavailable:
        # the annulments are made: the next import finds those rows missing and publishes them
        err.print(f"published {published} of {len(plan.changes)} match(es) before the broker failed; "
                  "import the log again once it is back (it publishes what is still missing)")
        raise
    return annulled


def import_log(
    file: Annotated[Path, typer.Option("--file", exists=True, dir_okay=False, help="The log: .csv or .xlsx.")],
    ladder: Annotated[str, typer.Option("--ladder", help="Ladder the matches belong to.")],
    player_a_column: Annotated[str, typer.Option(help="Header of player A's column.")] = "Player A",
    player_b_column: Annotated[str, typer.Option(help="Header of player B's column.")] = "Player B",
    result_column: Annotated[str, typer.Option(help="Header of the result column (A, B or E).")] = "Result",
    date_column: Annotated[str, typer.Option(help="Header of the optional date column.")] = "Date",
    default_date: Annotated[Optional[str], typer.Option("--date", help="Date (YYYY-MM-DD) of rows before the first dated one.")] = None,
    log_name: Annotated[Optional[str], typer.Option(help="Name in every match id (default: the file name); keep it if the file is renamed.")] = None,
    sheet: Annotated[Optional[str], typer.Option(help="Workbook sheet (default: the first, when no other sheet holds data).")] = None,
    encoding: Annotated[str, typer.Option(help="CSV text encoding.")] = "utf-8-sig",
    good_rows_only: Annotated[bool, typer.Option("--good-rows-only", help="Reconcile the good rows even if some are bad (exit 1 still).")] = False,
    annul_removed: Annotated[bool, typer.Option("--annul-removed", help="Annul the matches no longer in the log.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would change; publish and annul nothing.")] = False,
) -> None:
    """Make a ladder equal an organiser's match log (player A, player B, result A/B/E, maybe a date).

    Every row is read and checked first: a bad row is reported with its row number and reason,
    and nothing changes unless --good-rows-only. Then the log is compared with the ladder: rows
    the ladder lacks are added in their place, a row whose result changed or that moved annuls its
    old match and is rated anew, matches no longer in the log are annulled only with
    --annul-removed. Exit 0: the ladder equals the log; 1: rows refused, matches removed from the
    log stay rated, or the ladder's state refused the import (nothing published); 2: the file or an
    option refused; 3: the environment is not ready (servers, settings)."""
    from worker.cli.common import open_database
    from worker.cli.common import require_known_ladder as _known_ladder
    from worker.ops.importer import Columns, LogFileError, read_log
    from worker.ops.reconcile import check_log_name, id_prefix, needs_chronological_order, reconcile
    from worker.store.import_log import log_matches
    from worker.store.ladders import ladder_record

    _known_ladder(ladder)
    try:
        when = datetime.strptime(default_date, "%Y-%m-%d").date() if default_date else None
    except ValueError:
        err.print(f"--date {default_date!r} is not YYYY-MM-DD")
        raise typer.Exit(EXIT_REFUSED_FILE) from None
    name = log_name or file.stem
    try:
        check_log_name(name)
        log = read_log(file, Columns(player_a_column, player_b_column, result_column, date_column), when, sheet,
                       encoding)
    except LogFileError as exc:
        err.print(f"[red]{escape(str(exc))}[/red]", markup=True)
        raise typer.Exit(EXIT_REFUSED_FILE) from None
    with open_database() as conn:
        stored = log_matches(conn, ladder, id_prefix(name))
        record = ladder_record(conn, ladder)
    plan = reconcile(log, stored, ladder, name)
    if record is not None and record.apply_order == "applied" and needs_chronological_order(plan, stored,
                                                                                             annul_removed):
        err.print(f"[red]refused[/red] (arrival_order): ladder {ladder!r} is rated in arrival order, so a row "
                  f"added before others or an edited row cannot be rated in its place; run `ratings rebuild "
                  f"--ladder {ladder} --order finished-at` first (nothing published)")
        raise typer.Exit(EXIT_REFUSED_STATE)
    for error in plan.errors:
        err.print(f"row {error.row}: {error.reason_code}: {error.detail} {error.cells or ''}".rstrip(), markup=False)
    proceed = not plan.errors or good_rows_only
    _report(plan, dry_run or not proceed, annul_removed)
    if proceed and not dry_run:
        annulled = _apply(plan, name, annul_removed)
    else:
        annulled = len(plan.removed) if annul_removed and not plan.errors else 0
    verb = "would be " if dry_run or not proceed else ""
    console.print(f"{file.name} on {ladder}: {verb}added {plan.count('added')}, {verb}changed "
                  f"{plan.count('changed') + plan.count('moved')}, {verb}annulled {annulled} (removed from the log), "
                  f"unchanged {plan.unchanged}" + (f"; refused {len(plan.errors)} row(s)" if plan.errors else ""),
                  markup=False)
    if plan.errors:
        if not proceed:
            err.print(f"{len(plan.errors)} bad row(s) of {len(plan.errors) + len(log.rows)}: nothing published "
                      "(fix them, or pass --good-rows-only)")
        raise typer.Exit(EXIT_REFUSED_ROWS)
    if plan.removed and not annul_removed:
        raise typer.Exit(EXIT_REMOVED_KEPT)
