"""``ratings publish``, ``import-football`` and ``generate``: match-finished messages in."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from worker.cli.common import ExitCode, cli_producer_app, console, err
from worker.settings import get_settings


def _publish_all(matches, total: int | None, label: str) -> int:
    from rich.progress import Progress

    from worker.producer import publish_match

    settings = get_settings()
    papp = cli_producer_app()
    n = 0
    with Progress(console=err, transient=False) as progress, papp.producer_or_acquire() as producer:
        task = progress.add_task(label, total=total)
        for match in matches:
            publish_match(papp, match, queue=settings.queue, producer=producer, validate=False)
            n += 1
            progress.advance(task)
    return n


def _json_object(line: str) -> bool:
    import json

    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def publish(
    file: Annotated[Path, typer.Argument(help="JSON Lines file, one MatchFinished per line.")],
    send_invalid: Annotated[bool, typer.Option(
        "--send-invalid", help="Also send the lines that are not JSON objects (to test dead letters).")] = False,
) -> None:
    """Publish every line of FILE to the ratings queue.

    Lines that are not JSON objects (a CSV by mistake...) are counted and left out, with a
    warning and exit code 1, unless `--send-invalid` (the worker then dead-letters them). Other
    invalid messages are dead-lettered by the worker.
    """
    lines = [line for line in file.read_text(encoding="utf-8-sig").splitlines() if line.strip()]
    invalid = [n for n, line in enumerate(lines, 1) if not _json_object(line)]
    if invalid:
        first = lines[invalid[0] - 1]
        err.print(f"[yellow]warning[/yellow]: {len(invalid)} of {len(lines)} line(s) of {file.name} are not JSON "
                  f"objects (first: line {invalid[0]}: {first[:60]!r})"
                  + ("; sending them anyway (--send-invalid)" if send_invalid
                     else "; not sent (use --send-invalid to send them, e.g. to test dead letters)"))
        if not send_invalid:
            skip = set(invalid)
            lines = [line for n, line in enumerate(lines, 1) if n not in skip]
    n = _publish_all(iter(lines), len(lines), f"publishing {file.name}") if lines else 0
    console.print(f"published {n} message{'' if n == 1 else 's'}")
    if invalid and not send_invalid:
        raise typer.Exit(ExitCode.FINDINGS)


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


def generate(
    matches: Annotated[int, typer.Option(help="Number of matches.", min=0)] = 1000,
    players: Annotated[int, typer.Option(help="Number of players.", min=2)] = 200,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 7,
    ladder: Annotated[str, typer.Option(help="Ladder name.")] = "sedma",
) -> None:
    """Write seeded Sedma matches (1v1 and 2v2) as JSON Lines to standard output."""
    from worker.ops.generate import generate_sedma_matches

    for m in generate_sedma_matches(matches, players, seed, ladder):
        sys.stdout.write(m.model_dump_json() + "\n")
