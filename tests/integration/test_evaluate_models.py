"""`ratings evaluate --models` from the command line: usage errors, and a full run on the NFL games."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def evaluate_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``ratings evaluate ARGS`` in a subprocess."""
    return subprocess.run([sys.executable, "-m", "worker", "evaluate", *args], env=dict(os.environ, COLUMNS="200"),
                          capture_output=True, text=True, timeout=timeout)


def test_models_with_a_ladder_is_a_usage_error():
    """--models compares on the shipped data: a --ladder beside it is refused with exit 2."""
    done = evaluate_cli("--models", "--ladder", "elo")
    assert done.returncode == 2
    assert "--models" in done.stderr


def test_an_unknown_data_set_is_a_usage_error_naming_the_choices():
    done = evaluate_cli("--models", "--data", "chess")
    assert done.returncode == 2
    assert "football or nfl" in done.stderr


@pytest.mark.timeout(1800)  # every model tuned: minutes on a shared machine
def test_a_full_comparison_on_the_nfl_games_names_the_best_model_and_writes_json(tmp_path):
    """Every model tuned and scored on the NFL games: the table and the verdict printed, the JSON
    holding each model's later-half scores, FiveThirtyEight's baseline at its published figure, and
    the calibration chart written as a PNG."""
    out, chart = tmp_path / "models.json", tmp_path / "calibration.png"
    done = evaluate_cli("--models", "--data", "nfl", "--quiet", "--json", str(out), "--chart", str(chart),
                        timeout=1800)
    assert done.returncode == 0, done.stderr
    assert "nfl: the best model is" in done.stdout
    report = json.loads(out.read_text())
    models = {r["model"] for r in report["results"]}
    assert models == {"elo", "glicko2", "plackett_luce", "bradley_terry_full", "thurstone_mosteller_full"}
    assert all(r["evaluation"]["matches"] == 8_405 for r in report["results"])
    (baseline,) = report["baselines"]
    assert round(baseline["evaluation"]["deviance"], 4) == 0.2728
    best = min(report["results"], key=lambda r: r["evaluation"]["deviance"])
    assert report["best"]["nfl"] == best["label"]
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
