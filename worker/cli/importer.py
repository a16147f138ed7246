"""``ratings import``: publish an organiser's match log (CSV or workbook) (registered by :mod:`worker.cli.main`)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from worker.settings import get_settings

console = Console()
err = Console(stderr=True)


def import_log(
    file: Annotated[Path, typer.Option("--file", exists=True, dir_okay=False, help="The log: .csv or .xlsx.")],
    ladder: Annotated[str, typer.Option("--ladder", help="Ladder the matches belong to.")],
    player_a_column: Annotated[str, typer.Option(help="Header of player A's column.")] = "Player A",
    player_b_column: Annotated[str, typer.Option(help="Header of player B's column.")] = "Player B",
    result_column: Annotated[str, typer.Option(help="Header of the result column (A, B or E).")] = "Result",
    date_column: Annotated[str, typer.Option(help="Header of the optional date column.")] = "Date",
    default_date: Annotated[Optional[str], typer.Option("--date", help="Date (YYYY-MM-DD) of rows before the first dated one.")] = None,
    log_name: Annotated[Optional[str], typer.Option(help="Name in every match id (default: the file name); keep it if the file is renamed.")] = None,
    sheet: Annotated[Optional[str], typer.Option(help="Workbook sheet (default: the first).")] = None,
    encoding: Annotated[str, typer.Option(help="CSV text encoding.")] = "utf-8-sig",
    good_rows_only: Annotated[bool, typer.Option("--good-rows-only", help="Publish the good rows even if some are bad.")] = False,
) -> None:
    """Publish each row of an organiser's match log (player A, player B, result A/B/E, maybe a date)
    as a match. The whole file is checked first: a bad row is reported with its row number and
    reason, and nothing is published unless --good-rows-only. Re-importing the log, or the log
    with rows added at the end, rates each match once."""
    from worker.cli.common import cli_producer_app
    from worker.cli.common import require_known_ladder as _known_ladder
    from worker.ops.importer import Columns, LogFileError, plan_import
    from worker.producer import publish_match

    _known_ladder(ladder)
    try:
        when = datetime.strptime(default_date, "%Y-%m-%d").date() if default_date else None
    except ValueError:
        err.print(f"--date {default_date!r} is not YYYY-MM-DD")
        raise typer.Exit(2) from None
    try:
        plan = plan_import(file, ladder, Columns(player_a_column, player_b_column, result_column, date_column),
                           log_name, when, sheet, encoding)
    except LogFileError as exc:
        err.print(f"[red]{exc}[/red]", markup=True, highlight=False)
        raise typer.Exit(2) from None
    for error in plan.errors:
        err.print(f"row {error.row}: {error.reason_code}: {error.detail} {error.cells}", markup=False, highlight=False)
    if plan.errors and not good_rows_only:
        err.print(f"{len(plan.errors)} bad row(s) of {len(plan.errors) + len(plan.matches)}: nothing published "
                  "(fix them, or pass --good-rows-only)")
        raise typer.Exit(1)
    settings = get_settings()
    app = cli_producer_app()
    with app.producer_or_acquire() as producer:
        for _, match in plan.matches:
            publish_match(app, match, queue=settings.queue, producer=producer)
    console.print(f"published {len(plan.matches)} match(es) from {file.name}"
                  + (f"; skipped {len(plan.errors)} bad row(s)" if plan.errors else ""))
