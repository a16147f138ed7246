"""engine.weng_lin: fixed values worked by hand from the paper's formulas, and the policy's rules.

Reference values come from the formulas of Weng and Lin (JMLR 12, 2011; Algorithms 1, 3 and 4)
written out below for cases small enough to do by hand, never from the code under test. With the
defaults sigma = 25/3 and beta = 25/6, sigma^2 = 4 beta^2, so for two players c^2 = 2 sigma^2 +
2 beta^2 = 10 beta^2 and sigma^2 / c^2 = 0.4 exactly; for three, c^2 = 15 beta^2 (Plackett-Luce).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.model import FreeForAll, Match, Outcome, Participant, PlayerState
from engine.rating import rate
from engine.replay import replay
from engine.weng_lin import ALL_MODELS, WengLinPolicy
from tests.profiles import examples

BETA = 25.0 / 6.0
SIGMA = 25.0 / 3.0
C_1V1 = math.sqrt(10.0) * BETA
NORMAL = NormalDist()


def one_v_one(outcome: Outcome, weight_a: float = 1.0) -> Match:
    return Match("m", (Participant("a", weight=weight_a),), (Participant("b"),), outcome)


def after(changes: tuple, player_id: str) -> tuple[float, float]:
    change = next(c for c in changes if c.player_id == player_id)
    return change.rating_after, change.deviation_after


@pytest.mark.parametrize("model", ["plackett_luce", "bradley_terry_full"])
def test_a_first_1v1_win_matches_the_paper_worked_by_hand(model: str) -> None:
    """Two sides, equal skills: p = 1/2, Omega = sigma^2 / c * 1/2 = 0.2 c and
    Delta = (sigma / c) * (sigma^2 / c^2) * 1/4 = 0.1 sqrt(0.4) (Plackett-Luce and Bradley-Terry
    coincide for two sides). By hand: mu 27.63523, sigma 8.06551."""
    changes = WengLinPolicy(model=model, tau=0.0).rate(one_v_one(Outcome.SIDE_A_WON), {})
    omega = 0.2 * C_1V1
    delta = 0.1 * math.sqrt(0.4)
    winner, loser = after(changes, "a"), after(changes, "b")
    assert winner[0] == pytest.approx(25.0 + omega, abs=1e-12)
    assert loser[0] == pytest.approx(25.0 - omega, abs=1e-12)
    assert winner[1] == pytest.approx(SIGMA * math.sqrt(1.0 - delta), abs=1e-12)
    assert loser[1] == pytest.approx(SIGMA * math.sqrt(1.0 - delta), abs=1e-12)
    assert winner == pytest.approx((27.63523, 8.06551), abs=5e-6)


def test_a_thurstone_mosteller_win_and_draw_match_the_paper_worked_by_hand() -> None:
    """x = 0, t = epsilon / c. A win: Omega = 0.4 c V(0, t) with V(0, t) = phi(-t) / Phi(-t),
    Delta = sqrt(0.4) * 0.4 * W(0, t) with W = V (V - t). A draw: Omega = 0 and
    W~(0, t) = 2 t phi(t) / (2 Phi(t) - 1) (V~(0, t) = 0)."""
    policy = WengLinPolicy(model="thurstone_mosteller_full", tau=0.0, epsilon=0.1)
    t = 0.1 / C_1V1
    v = NORMAL.pdf(-t) / NORMAL.cdf(-t)
    w = v * (v - t)
    win = policy.rate(one_v_one(Outcome.SIDE_A_WON), {})
    assert after(win, "a")[0] == pytest.approx(25.0 + 0.4 * C_1V1 * v, abs=1e-12)
    assert after(win, "b")[0] == pytest.approx(25.0 - 0.4 * C_1V1 * v, abs=1e-12)
    assert after(win, "a")[1] == pytest.approx(SIGMA * math.sqrt(1.0 - math.sqrt(0.4) * 0.4 * w), abs=1e-12)
    w_draw = 2 * t * NORMAL.pdf(t) / (2 * NORMAL.cdf(t) - 1)
    draw = policy.rate(one_v_one(Outcome.DRAW), {})
    for player in ("a", "b"):
        mu, sigma = after(draw, player)
        assert mu == pytest.approx(25.0, abs=1e-12)
        assert sigma == pytest.approx(SIGMA * math.sqrt(1.0 - math.sqrt(0.4) * 0.4 * w_draw), abs=1e-9)


def test_a_three_player_plackett_luce_ranking_matches_the_paper_worked_by_hand() -> None:
    """Three equal players placed 1, 2, 3. c^2 = 15 beta^2; p over C_1 (all) is 1/3, over C_2
    (the last two) 1/2, over C_3 1. Sums over q with r(q) <= r(i): Omega sums 2/3, 1/2 - 1/3 = 1/6,
    -1/3 - 1/2 = -5/6; Delta sums 2/9, 2/9 + 1/4 = 17/36, 17/36 (+ 0 for the last's own term)."""
    match = FreeForAll("m", ((Participant("1"),), (Participant("2"),), (Participant("3"),)), (1, 2, 3))
    changes = WengLinPolicy(model="plackett_luce", tau=0.0).rate(match, {})
    c = math.sqrt(15.0) * BETA
    ratio = SIGMA**2 / c**2
    for player, omega_sum, delta_sum in (("1", 2 / 3, 2 / 9), ("2", 1 / 6, 17 / 36), ("3", -5 / 6, 17 / 36)):
        mu, sigma = after(changes, player)
        assert mu == pytest.approx(25.0 + SIGMA**2 / c * omega_sum, abs=1e-12)
        assert sigma == pytest.approx(SIGMA * math.sqrt(1.0 - (SIGMA / c) * ratio * delta_sum), abs=1e-12)


def test_a_tie_in_a_bradley_terry_free_for_all_scores_a_half_per_pair_worked_by_hand() -> None:
    """Three equal players placed 1, 1, 2: each pair has p = 1/2; the tied pair's s - p = 0, so
    each leader's Omega is 0.2 c (from beating the third) and the third's -0.4 c; every Delta is
    2 * sqrt(0.4) * 0.4 / 4."""
    match = FreeForAll("m", ((Participant("1"),), (Participant("2"),), (Participant("3"),)), (1, 1, 2))
    changes = WengLinPolicy(model="bradley_terry_full", tau=0.0).rate(match, {})
    sigma_after = SIGMA * math.sqrt(1.0 - 2 * math.sqrt(0.4) * 0.4 / 4)
    assert after(changes, "1") == pytest.approx((25.0 + 0.2 * C_1V1, sigma_after), abs=1e-12)
    assert after(changes, "2") == pytest.approx((25.0 + 0.2 * C_1V1, sigma_after), abs=1e-12)
    assert after(changes, "3") == pytest.approx((25.0 - 0.4 * C_1V1, sigma_after), abs=1e-12)
    assert [c.result for c in changes] == ["win", "win", "loss"]
    assert changes[0].actual_score == 0.75


def test_partial_pairing_compares_only_neighbours_in_rank_worked_by_hand() -> None:
    """Three equal players placed 1, 2, 3 under partial pairing (the paper's Algorithm 2): first and
    second, second and third are pairs, first and third are not. Bradley-Terry: p = 1/2, so the
    first gains 0.2 c, the second wins one and loses one (Omega 0) and shrinks twice, the third
    loses 0.2 c. Thurstone-Mosteller alike with V(0, t) and W(0, t), t = epsilon / c."""
    match = FreeForAll("m", ((Participant("1"),), (Participant("2"),), (Participant("3"),)), (1, 2, 3))
    bt = WengLinPolicy(model="bradley_terry_part", tau=0.0).rate(match, {})
    once = SIGMA * math.sqrt(1.0 - 0.1 * math.sqrt(0.4))
    twice = SIGMA * math.sqrt(1.0 - 0.2 * math.sqrt(0.4))
    assert after(bt, "1") == pytest.approx((25.0 + 0.2 * C_1V1, once), abs=1e-12)
    assert after(bt, "2") == pytest.approx((25.0, twice), abs=1e-12)
    assert after(bt, "3") == pytest.approx((25.0 - 0.2 * C_1V1, once), abs=1e-12)
    t = 0.1 / C_1V1
    v = NORMAL.pdf(-t) / NORMAL.cdf(-t)
    shrink = math.sqrt(0.4) * 0.4 * v * (v - t)
    tm = WengLinPolicy(model="thurstone_mosteller_part", tau=0.0).rate(match, {})
    assert after(tm, "1") == pytest.approx((25.0 + 0.4 * C_1V1 * v, SIGMA * math.sqrt(1 - shrink)), abs=1e-12)
    assert after(tm, "2") == pytest.approx((25.0, SIGMA * math.sqrt(1 - 2 * shrink)), abs=1e-12)
    assert after(tm, "3") == pytest.approx((25.0 - 0.4 * C_1V1 * v, SIGMA * math.sqrt(1 - shrink)), abs=1e-12)


@pytest.mark.parametrize("model", ALL_MODELS)
def test_a_player_who_took_part_in_half_the_match_moves_half_as_far(model: str) -> None:
    """Weight 0.5 halves the player's step and the share of variance removed; the side aggregate is
    unchanged, so the opponent's update is the full-weight one."""
    policy = WengLinPolicy(model=model, tau=0.0)
    full = policy.rate(one_v_one(Outcome.SIDE_A_WON), {})
    half = policy.rate(one_v_one(Outcome.SIDE_A_WON, weight_a=0.5), {})
    mu_full, sigma_full = after(full, "a")
    mu_half, sigma_half = after(half, "a")
    assert mu_half - 25.0 == pytest.approx((mu_full - 25.0) / 2, abs=1e-12)
    shrink_full = 1.0 - (sigma_full / SIGMA) ** 2
    assert 1.0 - (sigma_half / SIGMA) ** 2 == pytest.approx(shrink_full / 2, abs=1e-12)
    assert after(half, "b") == after(full, "b")


def test_tau_is_added_to_the_variance_before_the_match() -> None:
    """With tau the match is rated from sqrt(sigma^2 + tau^2): equal to a tau-free policy given
    that sigma, while the change reports the stored sigma as its deviation before."""
    stored = {"a": PlayerState(25.0, deviation=4.0), "b": PlayerState(25.0, deviation=4.0)}
    widened = {pid: PlayerState(25.0, deviation=math.sqrt(16.0 + 0.25)) for pid in stored}
    with_tau = WengLinPolicy(tau=0.5).rate(one_v_one(Outcome.SIDE_A_WON), stored)
    without = WengLinPolicy(tau=0.0).rate(one_v_one(Outcome.SIDE_A_WON), widened)
    assert [(c.rating_after, c.deviation_after) for c in with_tau] == [
        (c.rating_after, c.deviation_after) for c in without
    ]
    assert with_tau[0].deviation_before == 4.0


@settings(max_examples=examples(100), deadline=None)
@given(
    model=st.sampled_from(ALL_MODELS),
    sigma=st.floats(0.05, 10.0),
    tau=st.floats(0.0, 2.0),
    outcome=st.sampled_from(list(Outcome)),
)
def test_limit_sigma_never_leaves_sigma_above_its_value_before(
    model: str, sigma: float, tau: float, outcome: Outcome
) -> None:
    """openskill's limit_sigma: tau may widen sigma for the match, but not past the match."""
    states = {"a": PlayerState(30.0, deviation=sigma), "b": PlayerState(20.0, deviation=sigma)}
    for change in WengLinPolicy(model=model, tau=tau, limit_sigma=True).rate(one_v_one(outcome), states):
        assert change.deviation_after is not None and change.deviation_after <= sigma


def test_sigma_grows_with_days_without_a_match_on_read_and_when_rated() -> None:
    """tau_per_day 1: sigma 2 four days later is sqrt(4 + 4); capped at the policy's sigma; the
    match is rated from that sigma and reports it as its deviation before."""
    policy = WengLinPolicy(tau=0.0, tau_per_day=1.0)
    day = 86_400.0
    state = PlayerState(30.0, deviation=2.0, last_played=0.0)
    assert policy.display(state, 4 * day).deviation == pytest.approx(math.sqrt(8.0), abs=1e-12)
    assert policy.display(state, 10_000 * day).deviation == SIGMA
    assert policy.display(state, None) is state
    assert policy.conservative(state, 4 * day) == pytest.approx(30.0 - 3 * math.sqrt(8.0), abs=1e-12)
    assert policy.conservative(state, 4 * day, k=2) == pytest.approx(30.0 - 2 * math.sqrt(8.0), abs=1e-12)
    match = Match("m", (Participant("a"),), (Participant("b"),), Outcome.DRAW, played_at=4 * day)
    changes = policy.rate(match, {"a": state, "b": PlayerState(30.0, deviation=math.sqrt(8.0), last_played=4 * day)})
    assert changes[0].deviation_before == pytest.approx(math.sqrt(8.0), abs=1e-12)
    assert changes[0].deviation_after == pytest.approx(changes[1].deviation_after, abs=1e-12)


def test_engine_rate_and_replay_dispatch_to_the_policy_and_are_deterministic() -> None:
    """engine.rate hands the match to the policy; two replays of the same matches are equal with ==,
    and standings carry sigma as the deviation and played_at as last_played."""
    policy = WengLinPolicy(model="thurstone_mosteller_full")
    matches = [
        Match("1", (Participant("a"), Participant("b")), (Participant("c"),), Outcome.SIDE_B_WON, played_at=1.0),
        FreeForAll("2", ((Participant("a"),), (Participant("c"),), (Participant("d"),)), (2, 1, 2), played_at=2.0),
        Match("3", (Participant("d"),), (Participant("b", weight=0.3),), Outcome.DRAW, played_at=3.0),
    ]
    assert rate(matches[0], {}, policy) == policy.rate(matches[0], {})
    first, second = replay(matches, policy), replay(matches, policy)
    assert first == second
    assert first["d"].last_played == 3.0
    assert first["a"].deviation is not None and first["a"].deviation < SIGMA
    assert first["a"].volatility is None


def test_bad_input_is_refused_with_its_reason() -> None:
    """An unknown model, a weight outside (0, 1], an empty side and a bare rating are refused."""
    with pytest.raises(ValueError, match="unknown Weng-Lin model"):
        WengLinPolicy(model="trueskill")
    with pytest.raises(ValueError, match="kappa"):
        WengLinPolicy(kappa=0.0)
    with pytest.raises(ValueError, match=r"weight of 'a' must be in \(0, 1\]"):
        WengLinPolicy().rate(one_v_one(Outcome.DRAW, weight_a=0.0), {})
    with pytest.raises(ValueError, match="at least one player"):
        WengLinPolicy().rate(Match("m", (), (Participant("b"),), Outcome.DRAW), {})
    with pytest.raises(TypeError, match="PlayerState"):
        WengLinPolicy().rate(one_v_one(Outcome.DRAW), {"a": 1500.0})  # type: ignore[dict-item]


def test_a_prediction_of_an_even_first_match_worked_by_hand() -> None:
    """Equal new players: win 1/2 each; quality sqrt(2 beta^2 / (2 beta^2 + 2 sigma^2)) = sqrt(0.2);
    draw: margin m = sqrt(2) beta Phi^-1(3/4), P = 2 Phi(m / s) - 1 with s = sqrt(10) beta."""
    policy = WengLinPolicy()
    new = policy.initial_state("x")
    prediction = policy.predict([[new], [new]], None)
    assert prediction.win_probabilities == pytest.approx((0.5, 0.5), abs=1e-15)
    assert prediction.quality == pytest.approx(math.sqrt(0.2), abs=1e-12)
    margin = math.sqrt(2.0) * BETA * NORMAL.inv_cdf(0.75)
    assert prediction.draw_probability == pytest.approx(2 * NORMAL.cdf(margin / C_1V1) - 1, abs=1e-12)


@settings(max_examples=examples(200), deadline=None)
@given(
    mus=st.lists(st.floats(0.0, 50.0), min_size=2, max_size=4),
    sigma=st.floats(0.1, 10.0),
    growth=st.floats(0.01, 10.0),
)
def test_match_quality_is_in_the_unit_interval_and_falls_as_sigma_grows(
    mus: list[float], sigma: float, growth: float
) -> None:
    """Quality in [0, 1]; every sigma larger gives a strictly lower quality; win probabilities sum 1."""
    policy = WengLinPolicy()
    sure = policy.predict([[PlayerState(mu, deviation=sigma)] for mu in mus], None)
    unsure = policy.predict([[PlayerState(mu, deviation=sigma + growth)] for mu in mus], None)
    assert 0.0 <= unsure.quality < sure.quality <= 1.0
    assert math.fsum(sure.win_probabilities) == pytest.approx(1.0, abs=1e-12)


@settings(max_examples=examples(200), deadline=None)
@given(
    model=st.sampled_from(ALL_MODELS),
    mu_a=st.floats(0.0, 50.0),
    mu_b=st.floats(0.0, 50.0),
    sigma=st.floats(0.1, 10.0),
)
def test_a_win_never_lowers_the_winner_nor_raises_the_loser(model: str, mu_a: float, mu_b: float, sigma: float) -> None:
    """Whatever the ratings, the winner's mu does not fall, the loser's does not rise, and without
    tau neither sigma grows."""
    states = {"a": PlayerState(mu_a, deviation=sigma), "b": PlayerState(mu_b, deviation=sigma)}
    winner, loser = WengLinPolicy(model=model, tau=0.0).rate(one_v_one(Outcome.SIDE_A_WON), states)
    assert winner.rating_after >= mu_a and loser.rating_after <= mu_b
    assert winner.deviation_after <= sigma and loser.deviation_after <= sigma


def test_engine_predict_dispatches_to_the_weng_lin_policy() -> None:
    """engine.predict.predict answers for a Weng-Lin policy with the policy's own prediction, the
    sigmas grown to ``at``; fewer than two sides is refused."""
    from engine.predict import predict

    policy = WengLinPolicy(tau_per_day=1.0)
    sides = [[PlayerState(30.0, deviation=2.0, last_played=0.0)], [PlayerState(25.0, deviation=2.0, last_played=0.0)]]
    later = 30 * 86_400.0
    assert predict(sides, policy, later) == policy.predict(sides, later)
    assert predict(sides, policy, later).quality < predict(sides, policy, None).quality
    with pytest.raises(ValueError, match="at least two sides"):
        predict(sides[:1], policy)


@settings(max_examples=examples(300), deadline=None)
@given(
    model=st.sampled_from(ALL_MODELS),
    skills=st.lists(
        st.lists(st.tuples(st.floats(-1e4, 1e4), st.floats(1e-3, 1e3)), min_size=1, max_size=3),
        min_size=2,
        max_size=4,
    ),
    data=st.data(),
)
def test_extreme_ratings_give_finite_results_and_a_positive_sigma(
    model: str, skills: list[list[tuple[float, float]]], data: st.DataObject
) -> None:
    """Far beyond any real ladder (mu +-10,000, sigma 0.001 to 1,000, certain upsets): every mu and
    sigma after is finite and every sigma stays above 0."""
    ranks = data.draw(st.lists(st.integers(1, len(skills)), min_size=len(skills), max_size=len(skills)))
    sides = tuple(tuple(Participant(f"{i}-{j}") for j in range(len(side))) for i, side in enumerate(skills))
    states = {
        f"{i}-{j}": PlayerState(mu, deviation=sigma)
        for i, side in enumerate(skills)
        for j, (mu, sigma) in enumerate(side)
    }
    match: Match | FreeForAll = FreeForAll("m", sides, tuple(ranks))
    if len(sides) == 2:
        outcome = (
            Outcome.SIDE_A_WON if ranks[0] < ranks[1] else Outcome.SIDE_B_WON if ranks[0] > ranks[1] else Outcome.DRAW
        )
        match = Match("m", sides[0], sides[1], outcome)
    for change in WengLinPolicy(model=model).rate(match, states):
        assert math.isfinite(change.rating_after)
        assert change.deviation_after is not None and 0.0 < change.deviation_after < math.inf
        assert 0.0 <= change.expected_score <= 1.0


def test_plackett_luce_rates_sides_far_below_the_winner_without_dividing_by_zero() -> None:
    """Found by the property above: a winner 20,000 points above two sides with tiny deviations left
    every other side's exponential, taken relative to the winner's, at 0, and C_q of the two below it
    summed to 0. Each C_q now has its own reference: the two below, level before, come out finite, in
    their finishing order, and the one that finished second gains what the third loses (equal
    deviations, so the steps are opposite)."""
    sides = (Participant("top"),), (Participant("second"),), (Participant("third"),)
    states = {"top": PlayerState(10_000.0, deviation=0.001), "second": PlayerState(-10_000.0, deviation=0.001),
              "third": PlayerState(-10_000.0, deviation=0.001)}
    changes = {c.player_id: c for c in WengLinPolicy(model="plackett_luce").rate(FreeForAll("m", sides, (1, 2, 3)), states)}
    second, third = changes["second"], changes["third"]
    assert all(math.isfinite(c.rating_after) for c in changes.values())
    assert second.rating_after > -10_000.0 > third.rating_after
    assert second.rating_after + 10_000.0 == pytest.approx(-10_000.0 - third.rating_after, rel=1e-12)
