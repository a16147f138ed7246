"""``ratings evaluate --models``: Elo, Glicko-2 and the Weng-Lin models side by side on the shipped data."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import typer

from worker.cli.common import ExitCode, console, err

DATA_SETS = ("football", "nfl")
"""The shipped real-match data sets, by the names ``--data`` takes."""


def compare_models(data: list[str] | None, json_out: Path | None, chart: Path | None, quiet: bool) -> None:
    """Tune every model on the earlier half of each data set, score it on the later half, print
    the table, the best model per data set and the run time; write ``json_out`` and the
    calibration ``chart`` (PNG) when asked. Exit 2 (usage) for an unknown data set name, 3 (not
    ready) when the shipped data are missing (an install without the repository's files)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from worker.ops.evaluate import comparison as cmp
    from worker.ops.evaluate import datasets, table

    names = data or list(DATA_SETS)
    unknown = [n for n in names if n not in DATA_SETS]
    if unknown:
        err.print(f"[red]unknown data set {', '.join(unknown)}[/red]: --data takes {' or '.join(DATA_SETS)}")
        raise typer.Exit(ExitCode.USAGE)
    missing = [p for p in (datasets.FOOTBALL_RESULTS, datasets.NFL_GAMES, cmp.EXAMPLES / "policies") if not p.exists()]
    if missing:
        err.print(f"[red]the shipped data are not here[/red] ({', '.join(map(str, missing))}): --models reads "
                  "tests/data/ and examples/ of a checkout of the repository (pip install -e .)")
        raise typer.Exit(ExitCode.NOT_READY)
    started = time.perf_counter()
    loaded = [datasets.football_data() if n == "football" else datasets.nfl_data() for n in dict.fromkeys(names)]
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("matches replayed"),
               TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True, disable=quiet or not err.is_terminal) as progress:
        task = progress.add_task("tuning and scoring", total=None)
        result = cmp.compare_models(loaded, workers=os.cpu_count() or 1, progress=lambda n: progress.advance(task, n))
    result.seconds = time.perf_counter() - started
    console.print(table.comparison_table(result))
    for line in table.comparison_verdicts(result):
        console.print(line, highlight=False, markup=False)
    console.print(table.COMPARISON_NOTES, highlight=False, markup=False)
    console.print(f"loaded, tuned and scored in {result.seconds:.1f} s", highlight=False)
    if json_out is not None:
        json_out.write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")
        console.print(f"wrote {json_out}")
    if chart is not None:
        from worker.ops.evaluate.charts import draw_calibration_chart

        draw_calibration_chart(result, chart)
        console.print(f"wrote {chart}")
