"""Predictions for a proposed match: Elo and Glicko-2 against hand calculations and published
figures, the dispatch, and properties of probabilities and quality."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import ConstantK, RatingPolicy
from engine.glicko2 import Glicko2Policy
from engine.model import PlayerState
from engine.policy import TeamRating
from engine.predict import Prediction, predict
from tests.profiles import examples

DAY = 86_400.0


def g2(rating: float, deviation: float = 60.0, last: float | None = 0.0, volatility: float = 0.06) -> PlayerState:
    return PlayerState(rating, 10, None, None, deviation, volatility, last)


def test_elo_1v1_is_the_expected_score_and_its_closeness() -> None:
    """1600 against 1400 at scale 400: 1 / (1 + 10^-0.5) = 0.759747, quality 1 - |2p - 1|."""
    policy = RatingPolicy(ConstantK(20))
    prediction = predict([[PlayerState(1600.0)], [PlayerState(1400.0)]], policy)
    assert prediction.win_probabilities[0] == pytest.approx(0.759747, abs=1e-6)
    assert prediction.win_probabilities[1] == pytest.approx(1 - 0.759747, abs=1e-6)
    assert prediction.draw_probability is None
    assert prediction.quality == pytest.approx(1 - abs(2 * 0.759747 - 1), abs=1e-6)
    even = predict([[PlayerState(1500.0)], [PlayerState(1500.0)]], policy)
    assert even == Prediction((0.5, 0.5), None, 1.0)


def test_elo_teams_follow_the_policys_team_rating() -> None:
    """Mean: (1600 + 1400) / 2 against 1500 is even; sum: 3000 against 1500 is near certain."""
    sides = [[PlayerState(1600.0), PlayerState(1400.0)], [PlayerState(1500.0)]]
    assert predict(sides, RatingPolicy(ConstantK(20))).win_probabilities == (0.5, 0.5)
    summed = predict(sides, RatingPolicy(ConstantK(20), team_rating=TeamRating.SUM))
    assert summed.win_probabilities[0] == pytest.approx(1 / (1 + 10 ** (-1500 / 400)))


def test_glicko_expected_outcome_is_glickmans_example() -> None:
    """Glickman's Glicko paper: a 1400 (RD 80) player against a 1500 (RD 150) one expects 0.376."""
    prediction = predict([[g2(1400, 80)], [g2(1500, 150)]], Glicko2Policy())
    assert round(prediction.win_probabilities[0], 3) == 0.376
    assert prediction.draw_probability is None


def test_glicko_quality_is_the_trueskill_form_written_out() -> None:
    """Quality g(φ) exp(-Δμ² / (2 (π²/3 + φ²))) with φ² = φ_a² + φ_b², on the Glicko-2 scale."""
    prediction = predict([[g2(1600, 70)], [g2(1500, 120)]], Glicko2Policy())
    phi2 = (70 / 173.7178) ** 2 + (120 / 173.7178) ** 2
    mu = 100 / 173.7178
    expected = 1 / math.sqrt(1 + 3 * phi2 / math.pi**2) * math.exp(-mu * mu / (2 * (math.pi**2 / 3 + phi2)))
    assert prediction.quality == pytest.approx(expected, rel=1e-12)


def test_glicko_grows_deviations_to_the_time_asked() -> None:
    """Asked a year later, the same players' match is less certain: quality falls, odds even out."""
    policy = Glicko2Policy()
    sides = [[g2(1600, 60)], [g2(1500, 60)]]
    now = predict(sides, policy, at=0.0)
    later = predict(sides, policy, at=365 * DAY)
    assert later.quality < now.quality
    assert 0.5 < later.win_probabilities[0] < now.win_probabilities[0]


def test_a_policy_with_its_own_predict_answers_itself() -> None:
    """predict() hands the sides and the time to the policy's predict method."""
    seen = []

    class Own:
        model = "own"
        version = ""

        def predict(self, sides: object, at: float | None) -> Prediction:
            seen.append((sides, at))
            return Prediction((1.0, 0.0), 0.0, 0.0)

    assert predict([[g2(1)], [g2(2)]], Own(), at=5.0) == Prediction((1.0, 0.0), 0.0, 0.0)  # type: ignore[arg-type]
    assert seen[0][1] == 5.0


def test_bad_sides_are_refused() -> None:
    """Fewer than two sides or an empty side raise ValueError."""
    for sides in ([[g2(1500)]], [[g2(1500)], []]):
        with pytest.raises(ValueError):
            predict(sides, Glicko2Policy())
        with pytest.raises(ValueError):
            predict(sides, RatingPolicy(ConstantK(20)))


states = st.builds(g2, st.floats(0, 4000), st.floats(45, 500))
sides_st = st.lists(st.lists(states, min_size=1, max_size=4), min_size=2, max_size=5)


@given(sides_st, st.booleans())
@settings(max_examples=examples(200), deadline=None)
def test_probabilities_sum_to_one_and_quality_is_in_range(sides: list[list[PlayerState]], elo: bool) -> None:
    """For any sides, each model's win probabilities are in [0, 1] and sum to 1; quality in [0, 1]."""
    policy = RatingPolicy(ConstantK(20)) if elo else Glicko2Policy()
    prediction = predict(sides, policy)
    assert len(prediction.win_probabilities) == len(sides)
    assert all(0.0 <= p <= 1.0 for p in prediction.win_probabilities)
    assert math.fsum(prediction.win_probabilities) == pytest.approx(1.0, abs=1e-12)
    assert 0.0 <= prediction.quality <= 1.0


@given(st.floats(0, 4000), st.floats(45, 400), st.floats(1.01, 1.25))
@settings(max_examples=examples(200), deadline=None)
def test_glicko_quality_falls_as_deviations_grow_between_equal_ratings(
    rating: float, deviation: float, factor: float
) -> None:
    """Between equal ratings, larger deviations always mean a lower quality."""
    policy = Glicko2Policy()
    tight = predict([[g2(rating, deviation)], [g2(rating, deviation)]], policy).quality
    loose = predict([[g2(rating, deviation * factor)], [g2(rating, deviation * factor)]], policy).quality
    assert loose < tight


@given(st.floats(0, 4000), st.floats(0, 4000), st.floats(45, 400), st.floats(45, 400))
@settings(max_examples=examples(200), deadline=None)
def test_glicko_1v1_probabilities_mirror(ra: float, rb: float, da: float, db: float) -> None:
    """Swapping the sides swaps the probabilities and keeps the quality."""
    policy = Glicko2Policy()
    ab = predict([[g2(ra, da)], [g2(rb, db)]], policy)
    ba = predict([[g2(rb, db)], [g2(ra, da)]], policy)
    assert ab.win_probabilities[0] == pytest.approx(ba.win_probabilities[1], abs=1e-12)
    assert ab.quality == ba.quality
