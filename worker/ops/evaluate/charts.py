"""``ratings evaluate``: charts of drift and of one player's rating (matplotlib, Agg backend)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from worker.extras import require
from worker.ops.evaluate.accumulate import DriftPoint, PolicyReport
from worker.ops.evaluate.comparison import ModelComparison
from worker.ops.evaluate.metrics import FLAT_DRIFT
from worker.ops.evaluate.run import EvaluationReport

# ------------------------------------------------------------------------------------------------
# Charts (matplotlib, Agg: no display needed)
# ------------------------------------------------------------------------------------------------


def _x_of(point: DriftPoint, drift_by: str):
    return int(point.period) if drift_by == "year" else point.matches


def draw_drift_chart(report: EvaluationReport, path: Path, with_player: bool = True) -> None:
    """PNG at ``path``: each policy's mean-rating drift (mean − initial) over time, the spread
    (population std) of the ratings below it, and, when a player was followed and ``with_player``,
    that player's rating in a third panel. Raises ``OSError`` if the file cannot be written."""
    Figure = require("matplotlib.figure", "reports", "ratings evaluate --chart/--player-chart").Figure

    show_player = with_player and any(p.player_series for p in report.policies)
    rows = 3 if show_player else 2
    fig = Figure(figsize=(10, 3.4 * rows), layout="constrained")
    axes = fig.subplots(rows, 1, squeeze=False)[:, 0]
    x_label = "year" if report.drift_by == "year" else "matches replayed"
    for p in report.policies:
        xs = [_x_of(pt, report.drift_by) for pt in p.drift_series]
        axes[0].plot(xs, [pt.drift for pt in p.drift_series], label=_legend(p), linewidth=1.4)
        axes[1].plot(xs, [pt.std for pt in p.drift_series], label=_legend(p), linewidth=1.4)
    axes[0].axhline(0.0, color="grey", linewidth=0.8, linestyle="--")
    largest = max((abs(pt.drift) for p in report.policies for pt in p.drift_series), default=0.0)
    if largest < FLAT_DRIFT:
        # Rounding noise (1e-13 points) would fill the axis: show the honest scale and say so.
        axes[0].set_ylim(-1.0, 1.0)
        axes[0].text(0.5, 0.85, f"no drift: |mean − initial| < {FLAT_DRIFT:g} rating points throughout",
                     transform=axes[0].transAxes, ha="center", fontsize="small")
    axes[0].set_title(f"Mean-rating drift (mean of rated players − initial rating) — {report.source}")
    axes[0].set_ylabel("drift (rating points)")
    axes[1].set_title("Spread of the ratings (population standard deviation)")
    axes[1].set_ylabel("std (rating points)")
    for ax in axes[:2]:
        ax.set_xlabel(x_label)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    if show_player:
        _player_axes(axes[2], report)
    fig.savefig(path, dpi=110)


def draw_player_chart(report: EvaluationReport, path: Path) -> None:
    """PNG at ``path``: the followed player's rating after each of their matches, one line per policy.
    Raises ``ValueError`` when no player was followed or they have no match in the history."""
    Figure = require("matplotlib.figure", "reports", "ratings evaluate --chart/--player-chart").Figure

    if not any(p.player_series for p in report.policies):
        raise ValueError("the player has no match in the history: nothing to draw")
    fig = Figure(figsize=(10, 4.5), layout="constrained")
    _player_axes(fig.subplots(), report)
    fig.savefig(path, dpi=110)


def _player_axes(ax, report: EvaluationReport) -> None:
    dated = all(pt.finished_at for p in report.policies for pt in p.player_series)
    player = report.policies[0].player
    for p in report.policies:
        xs = [datetime.fromisoformat(pt.finished_at) if dated and pt.finished_at else pt.match_number
              for pt in p.player_series]
        ax.plot(xs, [pt.rating_after for pt in p.player_series], label=_legend(p), linewidth=1.0)
    initials = {p.initial_rating for p in report.policies}
    if len(initials) == 1:
        ax.axhline(initials.pop(), color="grey", linewidth=0.8, linestyle="--")
    ax.set_title(f"Rating of {player} after each of their matches")
    ax.set_xlabel("date of the match" if dated else "match number in the history")
    ax.set_ylabel("rating (rating points)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")


def _legend(p: PolicyReport) -> str:
    return f"{p.label} ({p.description})"




def draw_calibration_chart(comparison: ModelComparison, path: Path) -> None:
    """PNG at ``path``: one panel per data set, each model's (and baseline's) calibration on the
    later half with its tuned parameters (the rows scored without a home advantage are left out):
    the mean result s against the mean expected score E per tenth of E (a point for every
    non-empty bin, shaded by its matches), beside the diagonal of perfect calibration. Raises
    ``OSError`` if the file cannot be written."""
    Figure = require("matplotlib.figure", "reports", "ratings evaluate --models --chart").Figure

    names = [d.name for d in comparison.data_sets]
    fig = Figure(figsize=(5.2 * len(names), 5.2), layout="constrained")
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names):
        ax.plot([0, 1], [0, 1], color="grey", linewidth=0.8, linestyle="--", label="perfect calibration")
        # The rows scored without their tuned home advantage stay in the table: five lines are legible.
        curves = [(f"elo ({r.label})" if r.model == "elo" else r.label, r.evaluation)
                  for r in comparison.results if r.data_set == name and (r.model == "elo" or r.label == r.model)]
        curves += [(b.label, b.evaluation) for b in comparison.baselines if b.data_set == name]
        for label, scores in curves:
            bins = [b for b in scores.calibration if b.count]
            total = sum(b.count for b in bins)
            ax.plot([b.mean_expected for b in bins], [b.mean_actual for b in bins], marker="o", linewidth=1.0,
                    markersize=3, label=label)
            ax.scatter([b.mean_expected for b in bins], [b.mean_actual for b in bins],
                       s=[400 * b.count / total for b in bins], alpha=0.15)
        ax.set_title(f"{name}: calibration on the later half")
        ax.set_xlabel("expected score E of side A (mean per tenth)")
        ax.set_ylabel("result s of side A (mean; draw = 0.5)")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", fontsize="x-small")
    fig.savefig(path, dpi=110)
