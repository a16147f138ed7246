"""`ratings evaluate` as a user runs it: from a real ledger in PostgreSQL (matches applied by the
session's Celery workers), from the international football file, and from a JSON Lines file.

Expected figures are computed here, independently of worker.ops.evaluate and of the engine: from the
expected scores the workers stored in ``rating_changes``, or from a few lines of Elo written out
below; counts come from the data set's own README (49,520 matches, 11,258 draws, 337 teams).
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys

import pytest

from tests.conftest import DATA, REPO_ROOT
from tests.integration.test_worker import match, run_cli

pytestmark = pytest.mark.integration

RESULTS = DATA / "international-football" / "results.csv"
POLICIES = REPO_ROOT / "examples" / "policies"


def evaluate_cli(*args: str) -> subprocess.CompletedProcess:
    """``ratings evaluate ARGS`` in a subprocess (a generous timeout: the machine may be shared)."""
    return subprocess.run([sys.executable, "-m", "worker", "evaluate", *args], env=dict(os.environ, COLUMNS="200"),
                          capture_output=True, text=True, timeout=900)


def independent_elo(matches, k: float, initial: float = 1200.0) -> list[tuple[float, float]]:
    """(E of side A before the match, side A's score) per 1v1 match ``(a, b, s)``, classic Elo written out."""
    ratings: dict[str, float] = {}
    out = []
    for a, b, s in matches:
        ra, rb = ratings.get(a, initial), ratings.get(b, initial)
        ea = 1.0 / (1.0 + 10.0 ** ((rb - ra) / 400.0))
        eb = 1.0 / (1.0 + 10.0 ** ((ra - rb) / 400.0))
        ratings[a], ratings[b] = ra + k * (s - ea), rb + k * ((1.0 - s) - eb)
        out.append((ea, s))
    return out


def figures(predictions: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(mean log loss, mean Brier score, accuracy on decisive matches with E = 0.5 counting half)."""
    logloss = sum(-(s * math.log(e) + (1 - s) * math.log(1 - e)) for e, s in predictions) / len(predictions)
    brier = sum((e - s) ** 2 for e, s in predictions) / len(predictions)
    decisive = [(e, s) for e, s in predictions if s != 0.5]
    credit = sum(0.5 if e == 0.5 else float((e > 0.5) == (s == 1.0)) for e, s in decisive)
    return logloss, brier, credit / len(decisive)


SCORE = {"side_a_won": 1.0, "draw": 0.5, "side_b_won": 0.0}


def _apply_football(env, n: int) -> None:
    result = run_cli(env, "import-football", "--limit", str(n))
    assert result.returncode == 0, result.stderr
    counts = env.wait_drained(n)
    assert (counts.applied, counts.dead_letters) == (n, 0)


def test_evaluate_from_the_ledger_reproduces_the_workers_predictions(clean, tmp_path):
    """With the ladder's configured policy, evaluate scores exactly the expected scores the workers
    stored for side A, and ends with the stored ratings (mean, min, max, Scotland's rating)."""
    _apply_football(clean, 80)
    out = tmp_path / "ledger.json"
    result = evaluate_cli("--ladder", "elo", "--json", str(out), "--player", "Scotland")
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    (p,) = report["policies"]
    assert p["label"] == "elo" and report["source"] == "ledger of ladder elo" and report["matches"] == 80

    with clean.connect() as conn:
        rows = conn.execute(
            """SELECT l.payload->>'outcome', rc.expected_score
                 FROM ledger l
                 JOIN rating_changes rc ON rc.ledger_seq = l.seq AND rc.superseded_by IS NULL
                                       AND rc.player_id = l.payload->'side_a'->'players'->0->>'player_id'
                WHERE l.ladder = 'elo' ORDER BY l.finished_at, l.match_id COLLATE "C" """).fetchall()
        mean, low, high, players = conn.execute(
            "SELECT avg(rating), min(rating), max(rating), count(*) FROM players WHERE ladder = 'elo'").fetchone()
        (scotland,) = conn.execute(
            "SELECT rating FROM players WHERE ladder = 'elo' AND player_id = 'Scotland'").fetchone()
    logloss, brier, acc = figures([(e, SCORE[outcome]) for outcome, e in rows])
    assert len(rows) == 80
    assert p["log_loss"] == pytest.approx(logloss, rel=1e-12)
    assert p["brier"] == pytest.approx(brier, rel=1e-12)
    assert p["accuracy"] == pytest.approx(acc, rel=1e-12)
    assert p["distribution"]["players"] == players
    assert (p["distribution"]["min"], p["distribution"]["max"]) == (low, high)  # the replay is bit-exact
    assert p["mean_rating"] == pytest.approx(mean, rel=1e-12)
    assert p["player_rating"] == scotland
    assert "elo" in result.stdout and "log loss (nats)" in result.stdout


def test_evaluate_from_the_ledger_under_policy_files_side_by_side(clean, tmp_path):
    """--policy K20 and K40 over the ledger: two columns, each matching classic Elo written out here
    and folded over the ledger's payloads in chronological order (finished_at, then match_id: the
    ladder's replay order, whatever order the two workers committed them in); the chart is a PNG."""
    _apply_football(clean, 60)
    out, chart = tmp_path / "two.json", tmp_path / "drift.png"
    result = evaluate_cli("--ladder", "elo", "--policy", str(POLICIES / "elo-k20.toml"),
                          "--policy", str(POLICIES / "elo-k40.toml"), "--json", str(out), "--chart", str(chart))
    assert result.returncode == 0, result.stderr
    with clean.connect() as conn:
        payloads = [r[0] for r in conn.execute(
            "SELECT payload FROM ledger WHERE ladder = 'elo' ORDER BY finished_at, match_id COLLATE \"C\"")]
    history = [(p["side_a"]["players"][0]["player_id"], p["side_b"]["players"][0]["player_id"], SCORE[p["outcome"]])
               for p in payloads]
    report = json.loads(out.read_text())
    assert [p["label"] for p in report["policies"]] == ["elo-k20", "elo-k40"]
    for p, k in zip(report["policies"], (20, 40)):
        logloss, brier, _ = figures(independent_elo(history, k))
        assert p["log_loss"] == pytest.approx(logloss, rel=1e-9)
        assert p["brier"] == pytest.approx(brier, rel=1e-9)
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_an_empty_ledger_or_an_unconfigured_ladder_says_so(clean):
    """No match in the ledger: exit 1; a ladder with no configured policy and no --policy: exit 2."""
    empty = evaluate_cli("--ladder", "elo")
    assert empty.returncode == 1 and "holds no match" in empty.stderr
    unknown = evaluate_cli("--ladder", "chess")
    assert unknown.returncode == 2 and "not configured" in unknown.stderr


def test_evaluate_football_compares_k20_k30_k40(tmp_path):
    """The acceptance run: the whole football file under K = 20, 30 and 40. Three columns; log losses
    between 0.4 and 0.7 and equal to classic Elo written out here; counts from the data set's README;
    no drift (constant K is zero-sum); a wider spread for a larger K; both charts written."""
    out, chart, brazil = tmp_path / "football.json", tmp_path / "drift.png", tmp_path / "brazil.png"
    args = ["--file", str(RESULTS), "--json", str(out), "--chart", str(chart), "--player", "Brazil",
            "--player-chart", str(brazil)]
    for k in (20, 30, 40):
        args += ["--policy", str(POLICIES / f"elo-k{k}.toml")]
    result = evaluate_cli(*args)
    assert result.returncode == 0, result.stderr
    header = next(line for line in result.stdout.splitlines() if "elo-k20" in line)
    assert header.index("elo-k20") < header.index("elo-k30") < header.index("elo-k40")

    with open(RESULTS, newline="", encoding="utf-8") as f:
        history = [(r["home_team"], r["away_team"],
                    1.0 if int(r["home_score"]) > int(r["away_score"]) else
                    0.0 if int(r["home_score"]) < int(r["away_score"]) else 0.5) for r in csv.DictReader(f)]
    report = json.loads(out.read_text())
    assert report["matches"] == 49_520 and report["drift_by"] == "year"
    stds = []
    for p, k in zip(report["policies"], (20, 30, 40)):
        logloss, brier, acc = figures(independent_elo(history, k))
        assert 0.4 < p["log_loss"] < 0.7
        assert p["log_loss"] == pytest.approx(logloss, rel=1e-9)
        assert p["brier"] == pytest.approx(brier, rel=1e-9)
        assert p["accuracy"] == pytest.approx(acc, rel=1e-9)
        assert (p["matches"], p["draws_scored"], p["distribution"]["players"]) == (49_520, 11_258, 337)
        assert abs(p["drift"]) < 1e-6 and p["max_abs_drift"] < 1e-6
        assert p["drift_series"][0]["period"] == "1872" and p["drift_series"][-1]["period"] == "2026"
        assert p["player_games"] > 900
        stds.append(p["distribution"]["std"])
    assert stds == sorted(stds)
    for png in (chart, brazil):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_a_jsonl_file_reports_and_skips_bad_lines(tmp_path):
    """Generated Sedma matches plus a broken line, a repeated match and another ladder's match: the
    valid ones are replayed under the sedma ladder's policy, the others counted with their reason."""
    generated = subprocess.run([sys.executable, "-m", "worker", "generate", "--matches", "150", "--seed", "3"],
                               capture_output=True, text=True, timeout=300, check=True).stdout.splitlines()
    path = tmp_path / "matches.jsonl"
    other = json.dumps(match("elsewhere-1", "x", "y", ladder="elo"))
    path.write_text("\n".join([*generated, "{broken", generated[0], other]) + "\n")
    out = tmp_path / "jsonl.json"
    result = evaluate_cli("--file", str(path), "--json", str(out), "--skip-first", "50")
    assert result.returncode == 0, result.stderr
    assert "not_json=1" in result.stderr and "line 151: not_json" in result.stderr
    report = json.loads(out.read_text())
    assert report["matches"] == 150 and report["skip_first"] == 50
    assert report["skipped"]["bad_lines"] == {"not_json": 1}
    assert (report["skipped"]["duplicate_match_ids"], report["skipped"]["other_ladder"]) == (1, 1)
    (p,) = report["policies"]
    assert p["label"] == "sedma" and p["scored"] == 100 and report["drift_by"] == "matches"


def test_evaluate_usage_errors_exit_2_and_an_unknown_player_exits_1(tmp_path):
    """No history named, --player-chart without --player, a CSV that is not the football file: exit 2.
    A --player who never played: the table is printed, then exit 1."""
    assert evaluate_cli().returncode == 2
    assert evaluate_cli("--ladder", "elo", "--player-chart", str(tmp_path / "p.png")).returncode == 2
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    assert evaluate_cli("--file", str(other)).returncode == 2
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(match("one-1", "a", "b")) + "\n")
    nobody = evaluate_cli("--file", str(path), "--player", "nobody", "--player-chart", str(tmp_path / "n.png"))
    assert nobody.returncode == 1 and "no match in the history" in nobody.stderr
    assert "log loss" in nobody.stdout and not (tmp_path / "n.png").exists()
