"""The Weng-Lin engine-speed bench part runs and reports a figure for every model and shape."""

from __future__ import annotations

from engine.weng_lin import ALL_MODELS
from worker.devtools.bench.weng_lin_speed import team_matches, weng_lin_speed


def test_generated_team_matches_have_distinct_players_and_increasing_times() -> None:
    """Each 5v5 match names ten different players; played_at grows by a minute a match."""
    matches = team_matches(50, 5, 1000, seed=3)
    assert all(len(set(m.player_ids())) == 10 for m in matches)
    assert [m.played_at for m in matches] == [60.0 * i for i in range(50)]


def test_the_bench_reports_every_model_beside_elo_and_openskill() -> None:
    """A tiny run gives a positive matches/s for each model (replay and fast replay), Elo (both)
    and openskill (installed by the test extra), for 1v1 and 5v5."""
    results = weng_lin_speed(matches=50, repeats=1)
    for shape in ("1v1", "5v5"):
        row = results[shape]
        assert row["elo_replay_per_s"] > 0 and row["elo_fast_replay_per_s"] > 0
        for model in ALL_MODELS:
            assert row[f"{model}_replay_per_s"] > 0 and row[f"{model}_fast_replay_per_s"] > 0
            assert row[f"{model}_openskill_per_s"] > 0


def test_only_the_models_asked_for_are_measured() -> None:
    """``models`` limits the run (the bench measures the three shipped ladders' models)."""
    results = weng_lin_speed(matches=20, repeats=1, models=("plackett_luce",))
    assert sorted(k for k in results["1v1"] if k.endswith("_fast_replay_per_s")) == [
        "elo_fast_replay_per_s", "plackett_luce_fast_replay_per_s"]
