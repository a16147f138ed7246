"""``ratings dead-letters list|show|requeue|discard``: messages that were not applied."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Optional

import typer
from rich.table import Table

from worker import store as repository
from worker.cli.common import ExitCode, cli_producer_app, console, err, open_database, print_json, who_asks
from worker.settings import get_settings

dead_letters_app = typer.Typer(help="Inspect, requeue or discard dead letters.", invoke_without_command=True,
                               rich_markup_mode="markdown")


@dead_letters_app.callback()
def dead_letters_default(ctx: typer.Context) -> None:
    """With no subcommand: the same as `dead-letters list`."""
    if ctx.invoked_subcommand is None:
        dead_letters_list(limit=50, status=DeadLetterStatus.OPEN, reason=None, as_json=False)


class DeadLetterStatus(str, Enum):
    """The ``--status`` choices of ``dead-letters list`` (``any``: every status)."""

    OPEN = "open"
    REQUEUED = "requeued"
    DISCARDED = "discarded"
    ANY = "any"


@dead_letters_app.command("list")
def dead_letters_list(
    limit: Annotated[int, typer.Option(help="How many, newest first.", min=1)] = 50,
    status: Annotated[DeadLetterStatus, typer.Option(help="Which ones.")] = DeadLetterStatus.OPEN,
    reason: Annotated[Optional[str], typer.Option(help="Only this reason code.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on standard output (docs/operators/cli.md).")] = False,
) -> None:
    """List dead letters with their reason codes (and a count of open ones by reason). Exit 0 even
    when some are open: `ratings doctor` is the check that fails on them."""
    chosen = DeadLetterStatus(status).value
    with open_database() as conn:
        by_reason = repository.dead_letter_counts(conn)
        rows = repository.dead_letters(conn, limit, None if chosen == "any" else chosen, reason)
    if as_json:
        print_json({"open_by_reason": by_reason, "dead_letters": rows})
        return
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
    with open_database() as conn:
        row = repository.dead_letter(conn, dead_letter_id)
    if row is None:
        err.print(f"no dead letter {dead_letter_id}")
        raise typer.Exit(ExitCode.FINDINGS)
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
    from worker.ops.requeue import RequeueRefused, requeue_body, requeue_task
    from worker.producer import publish_body

    settings = get_settings()
    papp = cli_producer_app()
    failed = False
    with open_database(autocommit=True) as conn:
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
                task_id = publish_body(papp, body, queue=settings.queue, task=requeue_task(row))
                repository.resolve_dead_letter(conn, dead_letter_id, "requeued", who_asks(by), task_id)
            console.print(f"dead letter {dead_letter_id} requeued as task {task_id}")
    if failed:
        raise typer.Exit(ExitCode.FINDINGS)


@dead_letters_app.command("discard")
def dead_letters_discard(
    ids: Annotated[list[int], typer.Argument(help="Dead letter ids.")],
    by: Annotated[Optional[str], typer.Option(help="Who discards (default: user@host).")] = None,
) -> None:
    """Mark open dead letters discarded (kept, with who and when; never deleted)."""
    failed = False
    with open_database(autocommit=True) as conn:
        for dead_letter_id in ids:
            if repository.resolve_dead_letter(conn, dead_letter_id, "discarded", who_asks(by)):
                console.print(f"dead letter {dead_letter_id} discarded")
            else:
                err.print(f"dead letter {dead_letter_id}: not found or not open")
                failed = True
    if failed:
        raise typer.Exit(ExitCode.FINDINGS)
