"""Leaderboards and predictions of ladders rated with uncertainty, from stored states (no server)."""

from __future__ import annotations

import math

import pytest

from engine.elo import expected_score
from worker.policy.config import config_of
from worker.policy.uncertainty import leaderboard_rules
from worker.store.read_models import StoredState
from worker.store.standings import board, prediction

DAY = 86_400.0


def _rules(**keys):
    config = config_of({"model": "glicko2", **keys})
    rules = leaderboard_rules(config.build(), config.canonical())
    assert rules is not None
    return rules


def test_the_board_ranks_rankable_players_by_rating_minus_two_deviations_then_lists_the_others():
    """ann 1700 ± 50 (conservative 1600) ranks above ben 1750 ± 100 (1550) only if ben were
    rankable: ben's RD 100 is above 75, so ben is listed after, unranked and not provisional
    (< 110); cid 1500 ± 60 (1380) is second; dan, never rated (0 games), is not shown."""
    states = {"ann": StoredState(1700.0, 30, 50.0, 0.06, 0.0), "ben": StoredState(1750.0, 8, 100.0, 0.06, 0.0),
              "cid": StoredState(1500.0, 20, 60.0, 0.06, 0.0), "dan": StoredState(1500.0, 0, 500.0, 0.09, None)}
    rows = board(states, _rules(), 0.0)
    assert [(r.rank, r.player_id, r.conservative) for r in rows] == [
        (1, "ann", 1600.0), (2, "cid", 1380.0), (None, "ben", 1550.0)]
    assert not rows[2].provisional and not rows[2].inactive


def test_an_inactive_player_drops_out_of_the_ranking_and_its_deviation_is_shown_grown():
    """With inactive_days 30, a player last seen 31 days ago is unranked and marked inactive; the
    deviation shown is sqrt(50² + 31 × 0.21436 × (0.06 × 173.7178)²) (grown on read), not the stored 50."""
    states = {"ann": StoredState(1700.0, 30, 50.0, 0.06, 0.0), "cid": StoredState(1500.0, 20, 50.0, 0.06, 30 * DAY)}
    rows = board(states, _rules(inactive_days=30), 31 * DAY)
    assert [(r.rank, r.player_id, r.inactive) for r in rows] == [(1, "cid", False), (None, "ann", True)]
    assert rows[1].deviation == pytest.approx(math.sqrt(50**2 + 31 * 0.21436 * (0.06 * 173.7178) ** 2), rel=1e-12)


def test_an_elo_prediction_is_the_logistic_expected_score_and_unknown_players_start_at_the_initial_rating():
    """Under the shipped-style Elo policy (initial 1200, scale 400) a stored 1400 against a player
    the ladder has never seen: 1 / (1 + 10^(-200/400)) = 0.7597 for the first side."""
    policy = config_of({"k_factor": {"constant": 30}}).build()
    got = prediction([["ann"], ["new"]], {"ann": StoredState(1400.0, 5, None, None, None)}, policy, None)
    assert got.win_probabilities[0] == pytest.approx(1 / (1 + 10 ** (-200 / 400)), rel=1e-12)
    assert got.win_probabilities[0] == pytest.approx(expected_score(1400.0, 1200.0), rel=1e-12)


def test_a_player_on_two_sides_is_refused():
    """A proposed match with one player on both sides is a ValueError naming the player."""
    policy = config_of({"model": "glicko2"}).build()
    with pytest.raises(ValueError, match="ann"):
        prediction([["ann"], ["ann", "ben"]], {}, policy, None)


def test_glicko2_quality_falls_as_the_deviations_grow_with_time():
    """Two equal players: each wins with probability 1/2 at any moment, and the match quality a year
    after their last matches is below the quality right after them (their deviations grew)."""
    policy = config_of({"model": "glicko2"}).build()
    states = {p: StoredState(1500.0, 10, 60.0, 0.06, 0.0) for p in ("ann", "ben")}
    soon, later = (prediction([["ann"], ["ben"]], states, policy, t) for t in (0.0, 365 * DAY))
    assert soon.win_probabilities == pytest.approx((0.5, 0.5)) and later.quality < soon.quality


def test_verify_json_names_the_deviation_volatility_and_last_match_of_a_difference():
    """`ratings verify --json` on a ladder rated with uncertainty: a difference's stored and replayed
    states carry deviation, volatility and last_played beside rating and games; an Elo ladder's
    keep the two fields they always had."""
    from worker.cli.ladders import _verify_json
    from worker.ops.verify import VerifyResult

    glicko = VerifyResult("g", 3, 2, [("ann", (1500.0, 2, 200.0, 0.06, 10.0), (1501.0, 2, 199.0, 0.06, 10.0))])
    [diff] = _verify_json(glicko)["differences"]
    assert diff["stored"] == {"rating": 1500.0, "games": 2, "deviation": 200.0, "volatility": 0.06, "last_played": 10.0}
    assert diff["replayed"]["deviation"] == 199.0
    elo = VerifyResult("e", 3, 2, [("ann", (1200.0, 1), None)])
    assert _verify_json(elo)["differences"] == [{"player_id": "ann", "stored": {"rating": 1200.0, "games": 1},
                                                 "replayed": None}]
