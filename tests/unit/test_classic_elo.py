"""Classic Elo (community tournaments): constant K, initial rating 1200, win 1 / draw 0.5 / loss 0.

Reference values are the seed tutorial's worked example (``docs/design/policies.md``; 1350 vs 1200, K = 30:
E = 0.70, favourite win 1359 / 1191, upset 1329 / 1221) and hand calculations written out below.
Expected scores used as references are computed here with :mod:`math`, independently of the engine.
"""

from __future__ import annotations

import math

import pytest

from engine import (
    BandedK,
    ConstantK,
    Match,
    Outcome,
    Participant,
    RatingPolicy,
    Rounding,
    expected_score,
    rate,
)

CLASSIC = RatingPolicy(k_factor=ConstantK(30), initial_rating=1200.0)

# E of the 1350 favourite against 1200: 1 / (1 + 10^((1200 - 1350) / 400)) = 1 / (1 + 10^-0.375).
E_FAVOURITE = 1.0 / (1.0 + math.pow(10.0, -150.0 / 400.0))
E_UNDERDOG = 1.0 / (1.0 + math.pow(10.0, 150.0 / 400.0))


def _match(outcome: Outcome, a: str = "fav", b: str = "dog") -> Match:
    return Match(match_id="m", side_a=(Participant(a),), side_b=(Participant(b),), outcome=outcome)


def _tutorial(outcome: Outcome, policy: RatingPolicy = CLASSIC):
    return rate(_match(outcome), {"fav": 1350.0, "dog": 1200.0}, policy)


def test_independent_reference_expected_score_is_the_quoted_value():
    """The test's own reference E for 1350 vs 1200 is 0.7033850034718286 (sanity of the oracle)."""
    assert E_FAVOURITE == pytest.approx(0.7033850034718286, abs=1e-15)


def test_expected_score_of_the_tutorial_favourite_is_about_0_70():
    """expected_score(1350, 1200) is 0.70 to two decimals and equals 1/(1+10^(-150/400))."""
    e = expected_score(1350, 1200)
    assert round(e, 2) == 0.70
    assert e == pytest.approx(E_FAVOURITE, rel=1e-15)


def test_expected_score_of_the_tutorial_underdog_is_the_complement():
    """expected_score(1200, 1350) is 1 - E_favourite (about 0.30)."""
    assert expected_score(1200, 1350) == pytest.approx(1.0 - E_FAVOURITE, abs=1e-15)
    assert expected_score(1200, 1350) == pytest.approx(E_UNDERDOG, rel=1e-15)


def test_expected_score_of_equal_ratings_is_one_half():
    """Equal ratings expect a score of exactly 0.5."""
    assert expected_score(1500, 1500) == 0.5


def test_expected_score_at_a_400_point_gap_is_ten_to_one():
    """A 400-point favourite expects 10/11 (odds 10:1, the meaning of scale 400)."""
    assert expected_score(1600, 1200) == pytest.approx(10 / 11, rel=1e-15)


def test_favourite_win_in_the_tutorial_gives_1359_and_1191():
    """Favourite 1350 beats 1200 with K=30: ratings round to (1359, 1191)."""
    # 1350 + 30 * (1 - 0.703385) = 1358.8984...; 1200 + 30 * (0 - 0.296615) = 1191.1015...
    fav, dog = _tutorial(Outcome.SIDE_A_WON)
    assert (round(fav.rating_after), round(dog.rating_after)) == (1359, 1191)
    assert fav.rating_after == pytest.approx(1350 + 30 * (1 - E_FAVOURITE), abs=1e-9)
    assert dog.rating_after == pytest.approx(1200 + 30 * (0 - E_UNDERDOG), abs=1e-9)


def test_upset_in_the_tutorial_gives_1329_and_1221():
    """Underdog 1200 beats 1350 with K=30: ratings round to (1329, 1221)."""
    # 1350 + 30 * (0 - 0.703385) = 1328.8984...; 1200 + 30 * (1 - 0.296615) = 1221.1015...
    fav, dog = _tutorial(Outcome.SIDE_B_WON)
    assert (round(fav.rating_after), round(dog.rating_after)) == (1329, 1221)
    assert (fav.result, dog.result) == ("loss", "win")


def test_draw_in_the_tutorial_moves_the_favourite_down_and_the_underdog_up():
    """A 1350 vs 1200 draw with K=30 gives 1343.898... and 1206.101... (hand computed)."""
    # favourite: 1350 + 30 * (0.5 - 0.7033850034718286) = 1350 - 6.101550104154858 = 1343.898449895845
    # underdog:  1200 + 30 * (0.5 - 0.2966149965281714) = 1200 + 6.101550104154858 = 1206.101550104155
    fav, dog = _tutorial(Outcome.DRAW)
    assert fav.rating_after == pytest.approx(1343.898449895845, abs=1e-9)
    assert dog.rating_after == pytest.approx(1206.101550104155, abs=1e-9)
    assert (fav.actual_score, dog.actual_score) == (0.5, 0.5)
    assert (fav.result, dog.result) == ("draw", "draw")


def test_draw_between_equal_ratings_changes_nothing():
    """A draw between two 1500 players leaves both at exactly 1500 (S = E = 0.5)."""
    a, b = rate(_match(Outcome.DRAW, "a", "b"), {"a": 1500.0, "b": 1500.0}, CLASSIC)
    assert (a.rating_after, b.rating_after) == (1500.0, 1500.0)
    assert a.delta == b.delta == 0.0


def test_win_between_equal_ratings_moves_half_of_k():
    """A win between equal ratings with K=30 moves the winner up 15 and the loser down 15."""
    a, b = rate(_match(Outcome.SIDE_A_WON, "a", "b"), {"a": 1500.0, "b": 1500.0}, CLASSIC)
    assert (a.rating_after, b.rating_after) == (1515.0, 1485.0)


def test_rating_change_records_k_expected_and_actual_scores():
    """Each RatingChange records rating_before, E, S (1/0) and K=30 of the tutorial match."""
    fav, dog = _tutorial(Outcome.SIDE_A_WON)
    assert (fav.player_id, dog.player_id) == ("fav", "dog")
    assert (fav.rating_before, dog.rating_before) == (1350.0, 1200.0)
    assert fav.expected_score == pytest.approx(E_FAVOURITE, rel=1e-15)
    assert dog.expected_score == pytest.approx(E_UNDERDOG, rel=1e-15)
    assert (fav.actual_score, dog.actual_score) == (1.0, 0.0)
    assert fav.k_factor == dog.k_factor == 30
    assert fav.delta == pytest.approx(fav.rating_after - 1350.0)


def test_player_absent_from_ratings_starts_at_the_policy_initial_rating():
    """A newcomer missing from the ratings mapping is rated from 1200 (the tutorial's underdog)."""
    fav, dog = rate(_match(Outcome.SIDE_A_WON), {"fav": 1350.0}, CLASSIC)
    assert dog.rating_before == 1200.0
    assert (round(fav.rating_after), round(dog.rating_after)) == (1359, 1191)


def test_initial_rating_comes_from_the_policy_not_a_constant():
    """Two newcomers under initial_rating=1500 start at 1500 and a win moves them to 1515/1485."""
    policy = RatingPolicy(k_factor=ConstantK(30), initial_rating=1500.0)
    a, b = rate(_match(Outcome.SIDE_A_WON, "a", "b"), {}, policy)
    assert (a.rating_before, b.rating_before) == (1500.0, 1500.0)
    assert (a.rating_after, b.rating_after) == (1515.0, 1485.0)


def test_rate_does_not_mutate_the_ratings_mapping():
    """rate is pure: the ratings mapping passed in is left unchanged (no newcomer inserted)."""
    ratings = {"fav": 1350.0}
    rate(_match(Outcome.SIDE_A_WON), ratings, CLASSIC)
    assert ratings == {"fav": 1350.0}


@pytest.mark.parametrize("rating", [-1000.0, 0.0, 1199.5, 1200.0, 2400.0, 1e6])
def test_constant_k_gives_the_same_k_for_every_rating(rating):
    """ConstantK(30) answers 30 whatever the rating."""
    assert ConstantK(30)(rating) == 30


def test_banded_k_picks_the_first_band_whose_bound_exceeds_the_rating():
    """BandedK gives a band's K below its bound, the next band's K at the bound, top_k at the top."""
    k = BandedK(bands=((1000, 50), (2000, 20)), top_k=10)
    assert k(999.999) == 50
    assert k(1000) == 20
    assert k(1999) == 20
    assert k(2000) == 10
    assert k(5000) == 10


def test_banded_k_with_no_bands_always_gives_top_k():
    """BandedK with an empty band tuple is a constant top_k."""
    assert BandedK(bands=(), top_k=25)(1234) == 25


@pytest.mark.parametrize(
    "bands",
    [
        ((1800, 32), (1200, 40)),
        ((1200, 40), (1200, 32)),
        ((1200, 40), (2200, 24), (1800, 32)),
    ],
    ids=["decreasing", "equal", "out-of-order-at-the-end"],
)
def test_banded_k_rejects_bounds_that_are_not_strictly_increasing(bands):
    """BandedK raises ValueError when its band bounds are not strictly increasing."""
    with pytest.raises(ValueError):
        BandedK(bands=bands, top_k=16)


def test_rounding_none_keeps_the_exact_double():
    """With Rounding.NONE the new rating is R + K*(S - E) as a double, not an integer."""
    fav, dog = _tutorial(Outcome.SIDE_A_WON)
    assert fav.rating_after == 1350.0 + 30.0 * (1.0 - E_FAVOURITE)
    assert dog.rating_after == 1200.0 + 30.0 * (0.0 - E_UNDERDOG)
    assert not fav.rating_after.is_integer()
    assert not dog.rating_after.is_integer()


def test_rounding_half_even_gives_the_tutorial_integers():
    """With Rounding.HALF_EVEN the tutorial favourite win is stored as 1359.0 and 1191.0."""
    policy = RatingPolicy(k_factor=ConstantK(30), rounding=Rounding.HALF_EVEN)
    fav, dog = _tutorial(Outcome.SIDE_A_WON, policy)
    assert (fav.rating_after, dog.rating_after) == (1359.0, 1191.0)


def test_rounding_half_even_sends_exact_halves_to_the_even_integer():
    """HALF_EVEN rounds x.5 to even: K=1, equal ratings, win = +0.5 and loss = -0.5."""
    policy = RatingPolicy(k_factor=ConstantK(1), rounding=Rounding.HALF_EVEN)
    # 1200 vs 1200: E = 0.5; winner 1200.5 -> 1200 (even), loser 1199.5 -> 1200 (even)
    a, b = rate(_match(Outcome.SIDE_A_WON, "a", "b"), {"a": 1200.0, "b": 1200.0}, policy)
    assert (a.rating_after, b.rating_after) == (1200.0, 1200.0)
    # 1201 vs 1201: winner 1201.5 -> 1202 (even), loser 1200.5 -> 1200 (even)
    a, b = rate(_match(Outcome.SIDE_A_WON, "a", "b"), {"a": 1201.0, "b": 1201.0}, policy)
    assert (a.rating_after, b.rating_after) == (1202.0, 1200.0)


def test_policy_round_is_a_float_in_both_modes():
    """RatingPolicy.round returns a float: unchanged for NONE, half-to-even integer for HALF_EVEN."""
    none = RatingPolicy(k_factor=ConstantK(30))
    even = RatingPolicy(k_factor=ConstantK(30), rounding=Rounding.HALF_EVEN)
    assert none.round(2.5) == 2.5
    assert even.round(2.5) == 2.0 and type(even.round(2.5)) is float
    assert even.round(3.5) == 4.0
    assert even.round(-2.5) == -2.0
    assert even.round(1358.8984) == 1359.0


def test_classic_policy_has_the_tutorial_defaults():
    """A RatingPolicy defaults to initial 1200, scale 400, no rounding and no performance adjustment."""
    policy = RatingPolicy(k_factor=ConstantK(30))
    assert policy.initial_rating == 1200.0
    assert policy.scale == 400.0
    assert policy.rounding is Rounding.NONE
    assert policy.performance is None


def test_rate_rejects_a_match_with_an_empty_side():
    """rate raises ValueError when a side has no players."""
    match = Match(match_id="m", side_a=(Participant("a"),), side_b=(), outcome=Outcome.SIDE_A_WON)
    with pytest.raises(ValueError):
        rate(match, {}, CLASSIC)
