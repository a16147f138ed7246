"""Properties of ``engine.rate`` that hold for every 1v1 match, plus one hand-computed 2v2 match."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import (
    SEDMA_K,
    ConstantK,
    Match,
    Outcome,
    Participant,
    Performance,
    RatingPolicy,
    Rounding,
    SedmaAdjustment,
    rate,
)
from engine.replay import replay
from tests.profiles import examples

# --- strategies ----------------------------------------------------------------------------------

ratings = st.floats(min_value=0.0, max_value=4000.0, allow_nan=False, allow_infinity=False)
int_ratings = st.integers(min_value=0, max_value=4000)
outcomes = st.sampled_from(list(Outcome))
counts = st.integers(min_value=0, max_value=40)
performances = st.builds(Performance, bad_moves=counts, won_by_16=counts, won_by_24=counts, won_by_4_and_last=counts)
k_values = st.floats(min_value=1.0, max_value=100.0, allow_nan=False)

classic_policies = st.builds(
    RatingPolicy,
    k_factor=st.builds(ConstantK, k_values),
    rounding=st.sampled_from(list(Rounding)),
)
banded_classic_policies = st.builds(
    RatingPolicy,
    k_factor=st.just(SEDMA_K),
    rounding=st.sampled_from(list(Rounding)),
)
sedma_policies = st.builds(
    RatingPolicy,
    k_factor=st.just(SEDMA_K),
    rounding=st.sampled_from(list(Rounding)),
    performance=st.just(SedmaAdjustment()),
)
any_policy = st.one_of(classic_policies, banded_classic_policies, sedma_policies)

MIRROR = {Outcome.SIDE_A_WON: Outcome.SIDE_B_WON, Outcome.SIDE_B_WON: Outcome.SIDE_A_WON, Outcome.DRAW: Outcome.DRAW}


def one_v_one(outcome: Outcome, perf_a: Performance = Performance(), perf_b: Performance = Performance(),
              a: str = "a", b: str = "b", match_id: str = "m") -> Match:
    return Match(match_id=match_id, side_a=(Participant(a, perf_a),), side_b=(Participant(b, perf_b),), outcome=outcome)


# --- 1v1 properties ------------------------------------------------------------------------------


@given(ra=ratings, rb=ratings, outcome=outcomes, perf_a=performances, perf_b=performances, policy=any_policy)
def test_swapping_sides_and_flipping_the_outcome_mirrors_the_changes(ra, rb, outcome, perf_a, perf_b, policy):
    """Rating B-vs-A with the mirrored outcome gives each player exactly the same change."""
    forward = rate(one_v_one(outcome, perf_a, perf_b), {"a": ra, "b": rb}, policy)
    mirrored = rate(
        Match(match_id="m", side_a=(Participant("b", perf_b),), side_b=(Participant("a", perf_a),), outcome=MIRROR[outcome]),
        {"a": ra, "b": rb},
        policy,
    )
    assert forward == (mirrored[1], mirrored[0])


@given(ra=ratings, rb=ratings, outcome=outcomes, policy=st.one_of(classic_policies, banded_classic_policies))
def test_classic_delta_never_exceeds_k(ra, rb, outcome, policy):
    """Unrounded classic Elo moves no player by more than that player's K."""
    policy = RatingPolicy(k_factor=policy.k_factor)  # Rounding.NONE
    for change in rate(one_v_one(outcome), {"a": ra, "b": rb}, policy):
        assert abs(change.delta) <= change.k_factor + 1e-9


@given(ra=ratings, rb=ratings, outcome=outcomes, perf_a=performances, perf_b=performances)
def test_unrounded_sedma_delta_never_exceeds_k(ra, rb, outcome, perf_a, perf_b):
    """Unrounded Sedma moves no player by more than K, whatever the performance counts."""
    policy = RatingPolicy(k_factor=SEDMA_K, performance=SedmaAdjustment())
    for change in rate(one_v_one(outcome, perf_a, perf_b), {"a": ra, "b": rb}, policy):
        assert abs(change.delta) <= change.k_factor + 1e-9


@given(ra=int_ratings, rb=int_ratings, outcome=outcomes, perf_a=performances, perf_b=performances)
def test_rounded_sedma_delta_never_exceeds_k_plus_a_half(ra, rb, outcome, perf_a, perf_b):
    """Rounded Sedma moves no player by more than K + 0.5 and always lands on an integer."""
    policy = RatingPolicy(k_factor=SEDMA_K, rounding=Rounding.HALF_EVEN, performance=SedmaAdjustment())
    for change in rate(one_v_one(outcome, perf_a, perf_b), {"a": ra, "b": rb}, policy):
        assert abs(change.delta) <= change.k_factor + 0.5
        assert change.rating_after.is_integer()


@given(ra=ratings, rb=ratings, outcome=outcomes, k=k_values)
def test_constant_k_without_adjustment_is_zero_sum(ra, rb, outcome, k):
    """With one constant K, no rounding and no performance, the two deltas sum to 0 (1e-9)."""
    policy = RatingPolicy(k_factor=ConstantK(k), rounding=Rounding.NONE)
    a, b = rate(one_v_one(outcome), {"a": ra, "b": rb}, policy)
    assert math.isclose(a.delta + b.delta, 0.0, abs_tol=1e-9)


@given(ra=ratings, rb=ratings, outcome=outcomes, policy=any_policy)
def test_expected_scores_of_the_two_sides_sum_to_one(ra, rb, outcome, policy):
    """E_A + E_B = 1 (within 1e-12) and each lies in [0, 1]."""
    a, b = rate(one_v_one(outcome), {"a": ra, "b": rb}, policy)
    assert math.isclose(a.expected_score + b.expected_score, 1.0, abs_tol=1e-12)
    assert 0.0 <= a.expected_score <= 1.0
    assert 0.0 <= b.expected_score <= 1.0


@given(ra=ratings, rb=ratings, outcome=outcomes, policy=any_policy)
def test_the_higher_rated_player_expects_at_least_as_much(ra, rb, outcome, policy):
    """The expected score is monotone: the higher-rated side never expects less than the other."""
    a, b = rate(one_v_one(outcome), {"a": ra, "b": rb}, policy)
    if ra >= rb:
        assert a.expected_score >= b.expected_score
    else:
        assert a.expected_score <= b.expected_score


@given(ra=ratings, rb=ratings, outcome=outcomes, policy=st.one_of(classic_policies, banded_classic_policies))
def test_classic_winner_never_loses_points_and_loser_never_gains(ra, rb, outcome, policy):
    """Without performance adjustment, a win never lowers a rating and a loss never raises it."""
    policy = RatingPolicy(k_factor=policy.k_factor)  # Rounding.NONE
    for change in rate(one_v_one(outcome), {"a": ra, "b": rb}, policy):
        if change.result == "win":
            assert change.delta >= 0.0
        elif change.result == "loss":
            assert change.delta <= 0.0


@given(base=st.sampled_from([0.0, 0.5, 1.0]), perf=st.builds(
    Performance,
    bad_moves=st.integers(min_value=0, max_value=10_000),
    won_by_16=st.integers(min_value=0, max_value=10_000),
    won_by_24=st.integers(min_value=0, max_value=10_000),
    won_by_4_and_last=st.integers(min_value=0, max_value=10_000),
))
def test_adjusted_sedma_actual_score_is_always_within_zero_and_one(base, perf):
    """SedmaAdjustment.adjusted_score stays in [0, 1] for every base score and count."""
    score = SedmaAdjustment().adjusted_score(base, perf)
    assert 0.0 <= score <= 1.0


@given(ra=ratings, rb=ratings, outcome=outcomes, perf_a=performances, perf_b=performances)
def test_sedma_actual_score_recorded_by_rate_is_within_zero_and_one(ra, rb, outcome, perf_a, perf_b):
    """Every RatingChange.actual_score under the Sedma policy lies in [0, 1]."""
    policy = RatingPolicy(k_factor=SEDMA_K, performance=SedmaAdjustment())
    for change in rate(one_v_one(outcome, perf_a, perf_b), {"a": ra, "b": rb}, policy):
        assert 0.0 <= change.actual_score <= 1.0


@given(base=st.sampled_from([0.0, 0.5, 1.0]))
def test_sedma_adjustment_without_statistics_leaves_the_base_score(base):
    """With no bonus and no bad move the adjusted score equals the base score 1 / 0.5 / 0."""
    assert SedmaAdjustment().adjusted_score(base, Performance()) == base


PLAYERS = [f"p{i}" for i in range(6)]


@st.composite
def match_sequences(draw):
    n = draw(st.integers(min_value=0, max_value=25))
    matches = []
    for i in range(n):
        a, b = draw(st.lists(st.sampled_from(PLAYERS), min_size=2, max_size=2, unique=True))
        matches.append(one_v_one(draw(outcomes), draw(performances), draw(performances), a=a, b=b, match_id=f"m{i}"))
    return matches


@settings(max_examples=examples(60))
@given(matches=match_sequences(), policy=any_policy)
def test_replay_equals_folding_rate_by_hand(matches, policy):
    """replay(matches) gives the ratings and games played of applying rate match by match."""
    current: dict[str, float] = {}
    played: dict[str, int] = {}
    for match in matches:
        changes = rate(match, current, policy)
        for change in changes:
            current[change.player_id] = change.rating_after
            played[change.player_id] = played.get(change.player_id, 0) + 1
    standings = replay(matches, policy)
    assert {pid: s.rating for pid, s in standings.items()} == current
    assert {pid: s.games_played for pid, s in standings.items()} == played


@given(matches=match_sequences(), policy=any_policy)
@settings(max_examples=examples(30))
def test_replay_is_deterministic(matches, policy):
    """Replaying the same matches twice gives bit-identical ratings (what verify relies on)."""
    first = replay(matches, policy)
    second = replay(list(matches), policy)
    assert {p: (s.rating, s.games_played) for p, s in first.items()} == {
        p: (s.rating, s.games_played) for p, s in second.items()
    }


def test_replay_of_no_matches_is_empty():
    """Replaying an empty ledger gives no standings."""
    assert replay([], RatingPolicy(k_factor=ConstantK(30))) == {}


def test_replay_of_the_tutorial_favourite_win_then_upset():
    """Two classic matches replayed from 1200: the second starts from the first's ratings."""
    # Match 1: both newcomers at 1200, E = 0.5, K = 30: "x" wins -> x 1215, y 1185.
    # Match 2: y (1185) beats x (1215): E_x = 1 / (1 + 10^(-30/400)) = 1 / (1 + 0.841395) = 0.543066;
    #   x = 1215 + 30 * (0 - 0.543066) = 1198.7080; y = 1185 + 30 * (1 - 0.456934) = 1201.2920.
    e_x = 1.0 / (1.0 + 10.0 ** (-30.0 / 400.0))
    policy = RatingPolicy(k_factor=ConstantK(30))
    standings = replay(
        [one_v_one(Outcome.SIDE_A_WON, a="x", b="y", match_id="1"), one_v_one(Outcome.SIDE_B_WON, a="x", b="y", match_id="2")],
        policy,
    )
    assert standings["x"].rating == pytest.approx(1215 - 30 * e_x, abs=1e-9)
    assert standings["y"].rating == pytest.approx(1185 + 30 * e_x, abs=1e-9)
    assert standings["x"].rating == pytest.approx(1198.7080, abs=1e-3)
    assert standings["y"].rating == pytest.approx(1201.2920, abs=1e-3)
    assert (standings["x"].games_played, standings["y"].games_played) == (2, 2)


# --- team matches --------------------------------------------------------------------------------

SEDMA_ROUNDED = RatingPolicy(k_factor=SEDMA_K, rounding=Rounding.HALF_EVEN, performance=SedmaAdjustment())


def test_two_v_two_sedma_match_computed_by_hand():
    """2v2: E from mean side ratings, K from each player's own rating, S from own performance."""
    # Side A: a1 = 1100 (own K 40), a2 = 1500 (own K 32); mean 1300 (a side K would be 32).
    # Side B: b1 = 1900 (own K 24), b2 = 1100 (own K 40); mean 1500 (a side K would be 32).
    # E_A = 1 / (1 + 10^((1500 - 1300) / 400)) = 1 / (1 + sqrt(10)) = 0.2402530733; E_B = 0.7597469267.
    # A wins.
    #   a1: 3 bad moves, malus 0.06: S = 0.94; 1100 + 40 * (0.94 - 0.2402530733) = 1127.9899 -> 1128
    #   a2: 1 round won by 16: S = 1.05 -> 1.0; 1500 + 32 * (1 - 0.2402530733) = 1524.3119 -> 1524
    #   b1 (loser): 2 won by 24 (0.2, at the cap) + 1 won by 4-and-last (0.03) = 0.23, at 10 % = 0.023,
    #       1 bad move -0.02: S = 0.003; 1900 + 24 * (0.003 - 0.7597469267) = 1881.8381 -> 1882
    #   b2 (loser): nothing: S = 0; 1100 + 40 * (0 - 0.7597469267) = 1069.6101 -> 1070
    e_a = 1.0 / (1.0 + math.sqrt(10.0))
    match = Match(
        match_id="team",
        side_a=(Participant("a1", Performance(bad_moves=3)), Participant("a2", Performance(won_by_16=1))),
        side_b=(
            Participant("b1", Performance(bad_moves=1, won_by_24=2, won_by_4_and_last=1)),
            Participant("b2", Performance()),
        ),
        outcome=Outcome.SIDE_A_WON,
    )
    changes = rate(match, {"a1": 1100, "a2": 1500, "b1": 1900, "b2": 1100}, SEDMA_ROUNDED)
    by_id = {c.player_id: c for c in changes}

    assert [c.player_id for c in changes] == ["a1", "a2", "b1", "b2"]
    assert [by_id[p].k_factor for p in ("a1", "a2", "b1", "b2")] == [40, 32, 24, 40]
    for p in ("a1", "a2"):
        assert by_id[p].expected_score == pytest.approx(e_a, abs=1e-12)
        assert by_id[p].result == "win"
    for p in ("b1", "b2"):
        assert by_id[p].expected_score == pytest.approx(1.0 - e_a, abs=1e-12)
        assert by_id[p].result == "loss"
    assert by_id["a1"].actual_score == pytest.approx(0.94, abs=1e-6)
    assert by_id["a2"].actual_score == 1.0
    assert by_id["b1"].actual_score == pytest.approx(0.003, abs=1e-6)
    assert by_id["b2"].actual_score == 0.0
    assert {p: c.rating_after for p, c in by_id.items()} == {"a1": 1128.0, "a2": 1524.0, "b1": 1882.0, "b2": 1070.0}


def test_two_v_two_classic_uses_the_mean_side_rating():
    """2v2 classic: 1000+1400 (mean 1200) vs 1200+1200 is an even match, each winner gains K/2."""
    # Means 1200 vs 1200: E = 0.5 for every player; K = 30; A wins: +15 for a1, a2, -15 for b1, b2.
    # Using own ratings instead would give a1 (1000 vs 1200) E = 0.24 and a2 E = 0.76, not 0.5.
    match = Match(
        match_id="team",
        side_a=(Participant("a1"), Participant("a2")),
        side_b=(Participant("b1"), Participant("b2")),
        outcome=Outcome.SIDE_A_WON,
    )
    changes = rate(match, {"a1": 1000.0, "a2": 1400.0, "b1": 1200.0, "b2": 1200.0}, RatingPolicy(k_factor=ConstantK(30)))
    assert [c.expected_score for c in changes] == [0.5, 0.5, 0.5, 0.5]
    assert [c.rating_after for c in changes] == [1015.0, 1415.0, 1185.0, 1185.0]


def test_team_members_with_equal_inputs_get_equal_changes():
    """Two teammates with the same rating and performance get the same change."""
    perf = Performance(won_by_16=1, bad_moves=2)
    match = Match(
        match_id="team",
        side_a=(Participant("a1", perf), Participant("a2", perf)),
        side_b=(Participant("b1"), Participant("b2")),
        outcome=Outcome.SIDE_B_WON,
    )
    a1, a2, _, _ = rate(match, {"a1": 1650, "a2": 1650, "b1": 1400, "b2": 1900}, SEDMA_ROUNDED)
    assert a1.delta == a2.delta


@given(
    ra1=ratings, ra2=ratings, rb1=ratings, rb2=ratings, outcome=outcomes,
    p1=performances, p2=performances, p3=performances, p4=performances, policy=any_policy,
)
def test_two_v_two_matches_a_1v1_of_each_player_against_the_opposing_mean(ra1, ra2, rb1, rb2, outcome, p1, p2, p3, p4, policy):
    """Each 2v2 player's change equals a 1v1 of that player at the side mean, own K and own S."""
    match = Match(
        match_id="team",
        side_a=(Participant("a1", p1), Participant("a2", p2)),
        side_b=(Participant("b1", p3), Participant("b2", p4)),
        outcome=outcome,
    )
    changes = rate(match, {"a1": ra1, "a2": ra2, "b1": rb1, "b2": rb2}, policy)
    mean_a, mean_b = (ra1 + ra2) / 2, (rb1 + rb2) / 2
    for change, before, perf, own_mean, opp_mean, on_a in (
        (changes[0], ra1, p1, mean_a, mean_b, True),
        (changes[1], ra2, p2, mean_a, mean_b, True),
        (changes[2], rb1, p3, mean_b, mean_a, False),
        (changes[3], rb2, p4, mean_b, mean_a, False),
    ):
        e = 1.0 / (1.0 + 10.0 ** ((opp_mean - own_mean) / 400.0))
        base = {Outcome.SIDE_A_WON: 1.0, Outcome.SIDE_B_WON: 0.0, Outcome.DRAW: 0.5}[outcome]
        base = base if on_a else 1.0 - base
        s = base if policy.performance is None else policy.performance.adjusted_score(base, perf)
        k = policy.k_factor(before)
        assert change.rating_before == before
        assert change.k_factor == k
        assert change.expected_score == pytest.approx(e, rel=1e-12, abs=1e-15)
        assert change.actual_score == s
        assert change.rating_after == policy.round(before + k * (s - change.expected_score))


def test_banded_k_in_a_team_is_chosen_per_player_at_the_band_edge():
    """Teammates at 1199 and 1201 get K 40 and 32 although their side mean is 1200."""
    match = Match(
        match_id="team",
        side_a=(Participant("a1"), Participant("a2")),
        side_b=(Participant("b1"), Participant("b2")),
        outcome=Outcome.DRAW,
    )
    changes = rate(match, {"a1": 1199, "a2": 1201, "b1": 1200, "b2": 1200}, RatingPolicy(k_factor=SEDMA_K))
    assert [c.k_factor for c in changes] == [40, 32, 32, 32]
    # means 1200 vs 1200 and a draw: E = S = 0.5, nobody moves
    assert [c.delta for c in changes] == [0.0, 0.0, 0.0, 0.0]
