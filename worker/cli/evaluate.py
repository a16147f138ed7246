"""``ratings evaluate``: replay a history under one or several policies and compare them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from worker import store as repository
from worker.cli.common import ExitCode, configured_policies, console, err, open_database
from worker.settings import get_settings
from worker.store.connection import snapshot

if TYPE_CHECKING:
    from engine import RatingPolicy
    from engine.policy import AnyPolicy
    from worker.ops.evaluate import EvaluationReport, LabelledPolicy, SkippedLines


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
    models: Annotated[bool, typer.Option(
        "--models", help="Compare the rating models (Elo, Glicko-2, Weng-Lin) on the shipped football and NFL "
                         "data: tuned on the earlier half, scored on the later half (deviance, log loss, Brier); "
                         "--chart draws their calibration. No --ladder, --file or --policy.")] = False,
    data: Annotated[Optional[list[str]], typer.Option(
        help="With --models: a data set to use, football or nfl (repeat for both; default both).")] = None,
) -> None:
    """Replay a ladder's history under one or several policies and compare them side by side.

    With --models, compares Elo, Glicko-2 and the Weng-Lin models on the shipped football and NFL data
    instead (each tuned on the earlier half, scored on the later half).

    Per policy: log loss, Brier score and accuracy of the expected scores (predictions made before
    each match), mean rating and its drift over time, how often the rating floor and the expected
    score cap were hit, and the final rating distribution. Exit 2 on a usage error, 1 when the
    history is empty or --player has no match in it.
    """
    from worker.ops import evaluate as ev

    if models:
        if ladder is not None or file is not None or policy:
            err.print("[red]--models compares the models on the shipped data[/red]: drop --ladder, --file and --policy")
            raise typer.Exit(ExitCode.USAGE)
        from worker.cli.evaluate_models import compare_models

        compare_models(data, json_out, chart, quiet)
        return
    _check_usage(ladder, file, player, player_chart, drift_by)
    kind, history_ladder = _history_kind(ladder, file)
    policies = _chosen_policies(policy, history_ladder)

    def run(history, total: int, source: str) -> ev.EvaluationReport:
        return _replay(history, total, source, policies, quiet=quiet, skip_first=skip_first, drift_by=drift_by,
                       drift_every=drift_every, player=player)

    if kind == "ledger":
        with open_database() as conn:
            # One REPEATABLE READ snapshot (as verify): workers may keep applying matches meanwhile.
            with snapshot(conn):
                total = repository.ledger_size(conn, history_ladder)
                if total == 0:
                    err.print(f"[red]the ledger of ladder {history_ladder!r} holds no match[/red]")
                    raise typer.Exit(ExitCode.FINDINGS)
                report = run(ev.ledger_history(conn, history_ladder), total, f"ledger of ladder {history_ladder}")
    elif kind == "football":
        assert file is not None
        report = run(ev.football_history(file, history_ladder), max(ev.count_lines(file) - 1, 0), file.name)
    else:
        assert file is not None
        from worker.policy.shapes import load_ladder_shapes

        skipped = ev.SkippedLines()
        shapes = load_ladder_shapes(get_settings().ladders_file).get(history_ladder)  # as the worker admits
        report = run(ev.jsonl_history(file, history_ladder, skipped, shapes), ev.count_lines(file),
                     f"{file.name} (ladder {history_ladder})")
        report.skipped = skipped.to_json()
        _print_skipped(skipped)

    if report.matches == 0:
        err.print("[red]the history holds no match to replay[/red]")
        raise typer.Exit(ExitCode.FINDINGS)
    _print_and_write(report, len(policies), player, chart, player_chart, json_out)


def _check_usage(ladder: str | None, file: Path | None, player: str | None, player_chart: Path | None,
                 drift_by: str) -> None:
    """Exit 2 naming the option at fault when the options do not go together."""
    if ladder is None and file is None:
        err.print("[red]name a history[/red]: --ladder L (its ledger) or --file F (football CSV or JSON Lines)")
        raise typer.Exit(ExitCode.USAGE)
    if player_chart is not None and player is None:
        err.print("[red]--player-chart needs --player ID[/red]")
        raise typer.Exit(ExitCode.USAGE)
    if drift_by not in ("auto", "year", "matches"):
        err.print(f"[red]--drift-by must be auto, year or matches[/red], got {drift_by!r}")
        raise typer.Exit(ExitCode.USAGE)


def _history_kind(ladder: str | None, file: Path | None) -> tuple[str, str]:
    """The history's kind (``ledger``, ``football`` or ``jsonl``) and its ladder, which picks the
    default policy and, in a JSON Lines file, the messages; exit 2 for a CSV that is not the
    football one, 1 for a JSON Lines file without a valid message."""
    from worker.ops import evaluate as ev

    if file is None:
        assert ladder is not None  # checked by _check_usage
        return "ledger", ladder
    if ev.is_football_csv(file):
        return "football", ladder or "elo"
    if file.suffix.lower() == ".csv":
        err.print(f"[red]{file} is not the international football CSV[/red] (it needs the columns date, "
                  "home_team, away_team, home_score, away_score); other files are read as JSON Lines")
        raise typer.Exit(ExitCode.USAGE)
    history_ladder = ladder or ev.first_ladder(file)
    if history_ladder is None:
        err.print(f"[red]{file} holds no valid MatchFinished line[/red]")
        raise typer.Exit(ExitCode.FINDINGS)
    return "jsonl", history_ladder


def _chosen_policies(paths: list[Path] | None, history_ladder: str) -> list[LabelledPolicy]:
    """The policies to compare: one per ``--policy`` file (labelled by its stem, numbered when
    repeated), else the history ladder's configured policy; exit 2 on a broken file or an
    unknown ladder."""
    from worker.ops import evaluate as ev
    from worker.policy.ladders import LadderConfigError, load_policy_file

    policies: list[ev.LabelledPolicy] = []
    if not paths:
        configured = configured_policies()
        if history_ladder not in configured:
            err.print(f"[red]ladder {history_ladder!r} is not configured[/red] (configured: "
                      f"{', '.join(sorted(configured))}); pass --policy FILE or --ladder L")
            raise typer.Exit(ExitCode.USAGE)
        return [ev.LabelledPolicy(history_ladder, _elo_only(configured[history_ladder], history_ladder),
                                  f"ladder {history_ladder} ({get_settings().ladders_file})")]
    labels: Counter[str] = Counter()
    for path in paths:
        try:
            loaded = load_policy_file(path)
        except LadderConfigError as exc:
            err.print(f"[red]policy file error[/red]: {exc}")
            raise typer.Exit(ExitCode.USAGE) from exc
        labels[path.stem] += 1
        label = path.stem if labels[path.stem] == 1 else f"{path.stem} #{labels[path.stem]}"
        policies.append(ev.LabelledPolicy(label, _elo_only(loaded, str(path)), str(path)))
    return policies


def _elo_only(policy: AnyPolicy, where: str) -> RatingPolicy:
    """``policy`` when it is an Elo policy, else exit 2 saying so (evaluate scores Elo policies)."""
    from engine import RatingPolicy
    if not isinstance(policy, RatingPolicy):
        err.print(f"[red]{where}[/red]: evaluate scores Elo policies; this one is model {policy.model!r}")
        raise typer.Exit(ExitCode.USAGE)
    return policy


def _replay(history, total: int, source: str, policies: list[LabelledPolicy], *, quiet: bool, skip_first: int,
            drift_by: str, drift_every: int | None, player: str | None) -> EvaluationReport:
    """:func:`worker.ops.evaluate.evaluate` over ``history`` (``total`` matches) with a progress bar
    on a terminal."""
    import time

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from worker.ops import evaluate as ev

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


def _print_skipped(skipped: SkippedLines) -> None:
    """The lines of a JSON Lines history left out, by reason, with examples (on stderr)."""
    if not skipped.total:
        return
    bad = ", ".join(f"{reason}={n}" for reason, n in sorted(skipped.bad.items())) or "none"
    err.print(f"[yellow]left out {skipped.total:,} line(s)[/yellow]: bad lines by reason: {bad}; "
              f"other ladders: {skipped.other_ladder:,}; repeated match ids: {skipped.duplicate_ids:,}")
    for number, reason, detail in skipped.examples:
        err.print(f"  line {number}: {reason}: {detail}", highlight=False, markup=False)


def _print_and_write(report: EvaluationReport, policy_count: int, player: str | None, chart: Path | None,
                     player_chart: Path | None, json_out: Path | None) -> None:
    """The report's table and notes, then the JSON and charts asked for; exit 1 when ``player``
    has no match in the history (after writing the rest)."""
    from worker.ops import evaluate as ev

    console.print(ev.report_table(report))
    console.print(ev.NOTES, highlight=False, markup=False)
    console.print(f"{report.matches:,} match{'' if report.matches == 1 else 'es'} replayed under {policy_count} polic"
                  f"{'y' if policy_count == 1 else 'ies'} in {report.seconds:.1f} s", highlight=False)
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
        raise typer.Exit(ExitCode.FINDINGS)
