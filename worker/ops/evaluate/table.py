"""``ratings evaluate``: the comparison table (rich) and its notes."""

from __future__ import annotations

from worker.ops.evaluate.comparison import ModelComparison
from worker.ops.evaluate.run import EvaluationReport

# ------------------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------------------


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _share(count: int, total: int) -> str:
    return "–" if not total else f"{100.0 * count / total:.2f} % ({count:,})"


def report_table(report: EvaluationReport):
    """A rich :class:`rich.table.Table`: one row per figure, one column per policy."""
    from rich.table import Table

    title = f"ratings evaluate: {report.source}, {report.matches:,} matches"
    if report.first and report.last:
        title += f" ({report.first.date().isoformat()} to {report.last.date().isoformat()})"
    table = Table(title=title)
    table.add_column("", justify="left")
    for p in report.policies:
        table.add_column(p.label, justify="right")
    pols = report.policies

    def row(name: str, cells) -> None:
        table.add_row(name, *cells)

    row("policy", [p.description for p in pols])
    row("version", [p.version or "–" for p in pols])
    row("matches", [f"{p.matches:,}" for p in pols])
    row(f"scored (burn-in: first {report.skip_first:,} left out)", [f"{p.scored:,}" for p in pols])
    row("  of which draws (s = 0.5)", [_share(p.draws_scored, p.scored) for p in pols])
    row("log loss (nats)", [_num(p.log_loss, ".4f") for p in pols])
    row("Brier score", [_num(p.brier, ".4f") for p in pols])
    row("accuracy (decisive matches)", [f"{100 * p.accuracy:.2f} %" if p.accuracy is not None else "–" for p in pols])
    row("  decisive / no favourite (E = 0.5)", [f"{p.decisive:,} / {p.no_favourite:,}" for p in pols])
    row("mean rating at the end", [_num(p.mean_rating, ".2f") for p in pols])
    row("drift (mean − initial)", [_num(p.drift, "+.2f") for p in pols])
    per = "year" if report.drift_by == "year" else f"{report.drift_every:,} matches"
    row(f"largest |drift| (per {per})", [_num(p.max_abs_drift, ".2f") for p in pols])
    row("rating floor hit (matches)", [_share(p.floor_hits, p.matches) for p in pols])
    row("expected score capped (matches)", [_share(p.cap_hits, p.matches) for p in pols])
    row("players", [f"{p.distribution.players:,}" if p.distribution else "–" for p in pols])
    for name, attr in (("rating min", "min"), ("rating p10", "p10"), ("rating median", "p50"),
                       ("rating p90", "p90"), ("rating max", "max"), ("rating std", "std")):
        row(name, [_num(getattr(p.distribution, attr), ".1f") if p.distribution else "–" for p in pols])
    if pols[0].player is not None:
        row(f"{pols[0].player}: rating (games)",
            [f"{p.player_rating:.1f} ({p.player_games:,})" if p.player_games else "no match" for p in pols])
    return table


NOTES = (
    "E = side A's expected score before the match, s = side A's result (1 / 0.5 / 0). "
    "Log loss = mean of −[s·ln E + (1−s)·ln(1−E)], E clipped to [1e-15, 1−1e-15]: a draw is the soft label "
    "s = 0.5 (a constant E = 0.5 scores ln 2 = 0.6931). Brier = mean of (E − s)². Accuracy: decisive "
    "matches only (draws left out), won by the side with E > 0.5; E = 0.5 counts half. Drift: mean rating "
    "of every player rated so far minus the policy's initial rating. Distribution: every rated player at "
    "the end (population std)."
)
"""Printed under the table: how each figure is defined."""


def _parameters_text(parameters: dict) -> str:
    if "policy" in parameters:
        return f"{parameters['policy']}: {parameters.get('description', '')}"
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in parameters.items())


def comparison_table(comparison: ModelComparison):
    """A rich :class:`rich.table.Table` of :func:`worker.ops.evaluate.comparison.compare_models`:
    one row per model and data set (later-half scores, lower is better; the best model of each data
    set marked), the published baselines below their data set's models."""
    from rich.table import Table

    table = Table(title="ratings evaluate --models: tuned on the earlier half, scored on the later half")
    for name, justify in (("data set", "left"), ("model", "left"), ("deviance", "right"), ("log loss", "right"),
                          ("Brier", "right"), ("tuning deviance", "right"), ("parameters (tuned)", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for data in comparison.data_sets:
        best = comparison.best(data.name)
        for r in (r for r in comparison.results if r.data_set == data.name):
            mark = " (best)" if r is best else ""
            model = ("elo" if r.model == "elo" else r.label) + mark
            table.add_row(data.name, model, f"{r.evaluation.deviance:.4f}", f"{r.evaluation.log_loss:.4f}",
                          f"{r.evaluation.brier:.4f}", f"{r.tuning.deviance:.4f}", _parameters_text(r.parameters))
        for b in (b for b in comparison.baselines if b.data_set == data.name):
            table.add_row(data.name, b.label, f"{b.evaluation.deviance:.4f}", f"{b.evaluation.log_loss:.4f}",
                          f"{b.evaluation.brier:.4f}", "–", "published forecasts, not tuned here")
        table.add_section()
    return table


def _against(ours: float, theirs: float) -> str:
    """How a deviance stands against another, as printed (to 4 decimals)."""
    a, b = round(ours, 4), round(theirs, 4)
    return "below" if a < b else "level with (to 4 decimals)" if a == b else "above"


def comparison_verdicts(comparison: ModelComparison) -> list[str]:
    """One sentence per data set naming its best model (lowest later-half deviance) and how it
    stands against the best shipped Elo policy on that half and against the published baseline."""
    lines = []
    for data in comparison.data_sets:
        best = comparison.best(data.name)
        ours = best.evaluation.deviance
        name = f"elo (policy {best.label})" if best.model == "elo" else best.label
        text = (f"{data.name}: the best model is {name}"
                f", deviance {ours:.4f} on matches {data.split + 1:,} to {data.matches:,} "
                f"({data.later_from} to {data.last})")
        elo = [r for r in comparison.elo_policies if r.data_set == data.name]
        if elo and best.model != "elo":
            top = min(elo, key=lambda r: r.evaluation.deviance)
            text += (f"; {_against(ours, top.evaluation.deviance)} the best shipped Elo policy on this half "
                     f"({top.label}, {top.evaluation.deviance:.4f})")
        for b in (b for b in comparison.baselines if b.data_set == data.name):
            text += f"; {_against(ours, b.evaluation.deviance)} {b.label} ({b.evaluation.deviance:.4f})"
        lines.append(text + ".")
    return lines


COMPARISON_NOTES = (
    "E = side A's expected score before the match (win probability + half the draw probability), s = its "
    "result (1 / 0.5 / 0). Deviance = mean of −[s·log10 E + (1−s)·log10(1−E)], E clamped to [0.01, 0.99] "
    "(Kaggle ChessRatings2, liglicko2; always ½ scores 0.30103). Log loss in nats, Brier = mean (E − s)². "
    "Each model's parameters minimise the deviance on the earlier half (tuning deviance); the later half is "
    "scored with ratings carried over. Elo's candidates are the shipped policy files."
)
"""Printed under the comparison table."""
