"""Glicko-2: the paper's worked example, hand-computed edge cases, the per-match policy, teams and
properties over generated matches."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import rate
from engine.glicko2 import SCALE, Glicko2Policy, rate_period
from engine.model import FreeForAll, Match, Outcome, Participant, PlayerState
from engine.replay import replay
from tests.profiles import examples

DAY = 86_400.0


# --- the paper and hand calculations --------------------------------------------------------------


def test_the_papers_worked_example() -> None:
    """Glickman's "Example of the Glicko-2 system": 1500/200/0.06 beats 1400/30, loses to 1550/100
    and 1700/300 with tau 0.5; the paper gives 1464.05, 151.52 and 0.05999."""
    rating, deviation, volatility = rate_period(1500, 200, 0.06, [(1400, 30, 1), (1550, 100, 0), (1700, 300, 0)], 0.5)
    assert round(rating, 2) == 1464.05
    assert round(deviation, 2) == 151.52
    assert volatility == pytest.approx(0.05999, abs=1e-5)


def test_an_inactive_period_only_grows_the_deviation() -> None:
    """No games: the paper's step 6 alone, written out: RD' = 173.7178 sqrt((200/173.7178)² + 0.06²)."""
    phi = 200 / 173.7178
    expected = 173.7178 * math.sqrt(phi * phi + 0.06 * 0.06)
    rating, deviation, volatility = rate_period(1500, 200, 0.06, [], 0.5)
    assert (rating, volatility) == (1500, 0.06)
    assert deviation == pytest.approx(expected, rel=1e-12)
    assert deviation == pytest.approx(200.27, abs=0.005)


def test_lichess_periods_per_day_grow_60_to_110_in_a_year() -> None:
    """lichess chose 0.21436 periods a day so that a deviation of 60 becomes 110 after a year
    without games (its ``Glicko.scala`` comment; volatility 0.06)."""
    policy = Glicko2Policy()
    state = PlayerState(1500.0, 10, None, None, 60.0, 0.06, 0.0)
    assert policy.display(state, 365 * DAY).deviation == pytest.approx(110.0, abs=0.05)
    assert policy.display(state, 0.0).deviation == 60.0
    assert policy.display(state, None).deviation == 60.0


def test_a_single_game_matches_the_hand_computed_steps() -> None:
    """1500/350/0.06 beats 1500/350 (tau 0.5), steps 3 to 7 written out; the volatility solved by
    bisection here, independent of the Illinois loop."""
    phi = 350 / SCALE
    g = 1 / math.sqrt(1 + 3 * phi**2 / math.pi**2)
    e = 0.5
    v = 1 / (g * g * e * (1 - e))
    delta = v * g * (1 - e)
    a = math.log(0.06**2)

    def f(x: float) -> float:
        return math.exp(x) * (delta**2 - phi**2 - v - math.exp(x)) / (2 * (phi**2 + v + math.exp(x)) ** 2) - (x - a) / 0.25

    lo, hi = a - 10, a + 10  # f is decreasing: f(lo) > 0 > f(hi)
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    sigma = math.exp(lo / 2)
    phi_new = 1 / math.sqrt(1 / (phi**2 + sigma**2) + 1 / v)
    rating, deviation, volatility = rate_period(1500, 350, 0.06, [(1500, 350, 1)], 0.5)
    assert volatility == pytest.approx(sigma, abs=1e-6)
    assert deviation == pytest.approx(phi_new * SCALE, rel=1e-6)
    assert rating == pytest.approx(1500 + SCALE * phi_new**2 * g * 0.5, rel=1e-6)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1500, 0, 0.06, [], 0.5), "above 0"),
        ((1500, 200, 0.06, [], 0.0), "above 0"),
        ((math.nan, 200, 0.06, [], 0.5), "finite"),
        ((1500, 200, 0.06, [(1400, 30, 1.5)], 0.5), "score"),
        ((1500, 200, 0.06, [(1400, 0, 1)], 0.5), "opponent"),
    ],
)
def test_bad_input_is_refused_with_a_reason(args: tuple, message: str) -> None:
    """Non-finite values, deviations or tau not above 0 and scores outside [0, 1] raise ValueError."""
    with pytest.raises(ValueError, match=message):
        rate_period(*args)


def test_weight_and_periods_are_checked() -> None:
    """A weight outside (0, 1] and negative periods raise ValueError."""
    with pytest.raises(ValueError, match="weight"):
        rate_period(1500, 200, 0.06, [(1400, 30, 1)], 0.5, weight=0.0)
    with pytest.raises(ValueError, match="periods"):
        rate_period(1500, 200, 0.06, [(1400, 30, 1)], 0.5, periods=-1.0)


# --- the policy -----------------------------------------------------------------------------------


def one_v_one(outcome: Outcome, at: float | None = None, a: str = "a", b: str = "b", weight: float = 1.0) -> Match:
    return Match("m", (Participant(a, weight=weight),), (Participant(b),), outcome, played_at=at)


def test_lichess_defaults_are_pinned() -> None:
    """The defaults are lichess's (Glicko.scala, liglicko2's RatingSystem::builder)."""
    p = Glicko2Policy()
    assert (p.initial_rating, p.initial_deviation, p.initial_volatility, p.tau) == (1500.0, 500.0, 0.09, 0.75)
    assert (p.min_deviation, p.max_deviation, p.max_volatility, p.max_rating_change) == (45.0, 500.0, 0.1, 700.0)
    assert (p.periods_per_day, p.provisional_deviation, p.rankable_deviation, p.conservative_k) == (
        0.21436, 110.0, 75.0, 2.0)
    assert p.model == "glicko2"


def test_a_1v1_match_is_the_papers_period_from_the_grown_deviation() -> None:
    """Each player's change is rate_period against the other, with the deviation grown for the
    days since their last match and no further step 6 growth."""
    policy = Glicko2Policy()
    states = {"a": PlayerState(1600.0, 5, None, None, 80.0, 0.06, 0.0),
              "b": PlayerState(1450.0, 9, None, None, 120.0, 0.07, 10 * DAY)}
    change_a, change_b = rate(one_v_one(Outcome.SIDE_B_WON, 30 * DAY), states, policy)
    grown_a = SCALE * math.sqrt((80 / SCALE) ** 2 + 30 * 0.21436 * 0.06**2)
    grown_b = SCALE * math.sqrt((120 / SCALE) ** 2 + 20 * 0.21436 * 0.07**2)
    assert change_a.deviation_before == pytest.approx(grown_a, rel=1e-12)
    assert change_b.deviation_before == pytest.approx(grown_b, rel=1e-12)
    r, d, v = rate_period(1600, grown_a, 0.06, [(1450, grown_b, 0.0)], 0.75, periods=0.0)
    assert (change_a.rating_after, change_a.deviation_after, change_a.volatility_after) == pytest.approx((r, d, v))
    r, d, v = rate_period(1450, grown_b, 0.07, [(1600, grown_a, 1.0)], 0.75, periods=0.0)
    assert (change_b.rating_after, change_b.deviation_after, change_b.volatility_after) == pytest.approx((r, d, v))
    assert (change_a.result, change_b.result) == ("loss", "win")
    assert change_a.volatility_before == 0.06
    assert change_a.rating_after == pytest.approx(
        change_a.rating_before + change_a.k_factor * (change_a.actual_score - change_a.expected_score))


def test_bounds_hold_after_a_match() -> None:
    """The deviation after is at least min_deviation, the volatility at most max_volatility and
    the change at most max_rating_change."""
    policy = Glicko2Policy(min_deviation=100.0, initial_deviation=300.0, max_volatility=0.05,
                           initial_volatility=0.05, max_rating_change=20.0)
    states = {"a": PlayerState(1500.0, 1, None, None, 100.0, 0.05, 0.0)}
    change_a, change_b = rate(one_v_one(Outcome.SIDE_A_WON, 0.0), states, policy)
    assert change_a.deviation_after == 100.0
    assert change_b.rating_after == 1480.0  # the newcomer at deviation 300 would lose far more
    assert change_a.volatility_after is not None and change_a.volatility_after <= 0.05


def test_a_newcomer_starts_from_the_initial_state_and_time_is_ignored_without_a_last_match() -> None:
    """A player absent from the states starts at 1500/500/0.09; no growth before the first match."""
    policy = Glicko2Policy()
    change_a, _ = rate(one_v_one(Outcome.DRAW, 1e9), {}, policy)
    assert (change_a.rating_before, change_a.deviation_before, change_a.volatility_before) == (1500.0, 500.0, 0.09)
    assert change_a.rating_after == 1500.0 and change_a.result == "draw"


def test_display_conservative_provisional_and_rankable() -> None:
    """The leaderboard's figures come from the deviation grown to the time asked."""
    policy = Glicko2Policy()
    state = PlayerState(1800.0, 50, None, None, 70.0, 0.06, 0.0)
    assert policy.conservative(state, 0.0) == 1800.0 - 2 * 70.0
    assert policy.rankable(state, 0.0) and not policy.provisional(state, 0.0)
    later = 3 * 365 * DAY
    assert policy.display(state, later).deviation > 110.0
    assert policy.provisional(state, later) and not policy.rankable(state, later)
    assert policy.display(state, 1e12).deviation == 500.0  # capped at max_deviation


def test_parameters_out_of_range_are_refused() -> None:
    """Deviation bounds out of order, tau 0 or a model other than glicko2 raise ValueError."""
    for kwargs in ({"min_deviation": 600.0}, {"tau": 0.0}, {"initial_volatility": 0.2}, {"model": "elo"},
                   {"max_rating_change": 0.0}, {"periods_per_day": math.inf}):
        with pytest.raises(ValueError):
            Glicko2Policy(**kwargs)  # type: ignore[arg-type]


# --- teams and free-for-all -----------------------------------------------------------------------


def state(rating: float, deviation: float, volatility: float = 0.06) -> PlayerState:
    return PlayerState(rating, 1, None, None, deviation, volatility, 0.0)


def test_a_team_plays_the_other_sides_composite_opponent() -> None:
    """In a 2v2 each player is rated against the other side's mean rating and root-mean-square
    deviation, from their own rating, deviation and volatility."""
    policy = Glicko2Policy()
    states = {"a1": state(1600, 60), "a2": state(1400, 200), "b1": state(1550, 80), "b2": state(1500, 150)}
    match = Match("m", (Participant("a1"), Participant("a2")), (Participant("b1"), Participant("b2")),
                  Outcome.SIDE_A_WON, played_at=0.0)
    changes = rate(match, states, policy)
    b_rating, b_deviation = (1550 + 1500) / 2, math.sqrt((80**2 + 150**2) / 2)
    r, d, v = rate_period(1400, 200, 0.06, [(b_rating, b_deviation, 1.0)], 0.75, periods=0.0)
    assert (changes[1].rating_after, changes[1].deviation_after, changes[1].volatility_after) == pytest.approx((r, d, v))
    a_rating, a_deviation = 1500.0, math.sqrt((60**2 + 200**2) / 2)
    r, d, v = rate_period(1500, 150, 0.06, [(a_rating, a_deviation, 0.0)], 0.75, periods=0.0)
    assert (changes[3].rating_after, changes[3].deviation_after) == pytest.approx((r, d))


def test_free_for_all_is_one_period_of_games_against_every_other_side() -> None:
    """Second of three: one win and one loss in the same period, against each side's composite."""
    policy = Glicko2Policy(tau=0.5)
    states = {"x": state(1500, 200), "y": state(1400, 30), "z": state(1550, 100), "w": state(1700, 300)}
    match = FreeForAll("m", ((Participant("x"),), (Participant("y"),), (Participant("z"), Participant("w"))),
                       (2, 3, 1), played_at=0.0)
    changes = rate(match, states, policy)
    z_side = ((1550 + 1700) / 2, math.sqrt((100**2 + 300**2) / 2))
    r, d, v = rate_period(1500, 200, 0.06, [(1400, 30, 1.0), (*z_side, 0.0)], 0.5, periods=0.0)
    assert (changes[0].rating_after, changes[0].deviation_after) == pytest.approx((r, d))
    assert changes[0].result == "draw"  # one win, one loss: the mean score is one half
    assert changes[0].actual_score == 0.5


@given(
    st.floats(1000, 2200), st.floats(46, 400), st.floats(1000, 2200), st.floats(46, 400),
    st.sampled_from(list(Outcome)), st.integers(1, 4),
)
@settings(max_examples=examples(60), deadline=None)
def test_symmetric_sides_get_symmetric_changes(
    r1: float, d1: float, r2: float, d2: float, outcome: Outcome, size: int
) -> None:
    """Two sides of identical players: A's players when A wins change as B's players when B wins
    (to the bit), draws change both sides alike, and players all at one rating gain in a win what
    they lose in a defeat."""
    policy = Glicko2Policy()
    states = {f"{s}{i}": state(r1 if i % 2 else r2, d1 if i % 2 else d2) for s in "ab" for i in range(size)}
    side_a = tuple(Participant(f"a{i}") for i in range(size))
    side_b = tuple(Participant(f"b{i}") for i in range(size))
    changes = rate(Match("m", side_a, side_b, outcome, played_at=0.0), states, policy)
    mirrored = rate(Match("m", side_b, side_a, MIRROR[outcome], played_at=0.0), states, policy)
    strip = [c[1:] for c in changes]
    assert strip == [c[1:] for c in mirrored[size:] + mirrored[:size]]
    if outcome is Outcome.DRAW:
        assert strip[:size] == strip[size:]
    flat = {pid: state(r1, d1) for pid in states}
    a, b = rate(Match("m", side_a, side_b, Outcome.SIDE_A_WON, played_at=0.0), flat, policy)[:: size]
    assert a.delta == pytest.approx(-b.delta, rel=1e-12)
    assert a.deviation_after == b.deviation_after


MIRROR = {Outcome.SIDE_A_WON: Outcome.SIDE_B_WON, Outcome.SIDE_B_WON: Outcome.SIDE_A_WON, Outcome.DRAW: Outcome.DRAW}


def test_a_one_player_team_is_the_plain_update() -> None:
    """A side of one player is that player (no averaging): bit-identical to rate_period's figures
    from the same grown deviations."""
    policy = Glicko2Policy()
    states = {"a": state(1600, 90), "b": state(1500, 70)}
    changes = rate(one_v_one(Outcome.SIDE_A_WON, 0.0), states, policy)
    r, d, _ = rate_period(1600, 90, 0.06, [(1500, 70, 1.0)], 0.75, periods=0.0)
    assert changes[0].rating_after == pytest.approx(r, rel=1e-15)
    assert changes[0].deviation_after == pytest.approx(d, rel=1e-15)


@given(st.floats(0.01, 0.99), st.sampled_from([Outcome.SIDE_A_WON, Outcome.SIDE_B_WON]))
@settings(max_examples=examples(60), deadline=None)
def test_partial_play_scales_the_change(weight: float, outcome: Outcome) -> None:
    """A player who played a share w < 1 moves in the same direction, less than at w = 1, and their
    deviation falls less; the opponent is unaffected by it."""
    policy = Glicko2Policy()
    states = {"a": state(1550, 150), "b": state(1500, 100)}
    full = rate(one_v_one(outcome, 0.0), states, policy)
    part = rate(one_v_one(outcome, 0.0, weight=weight), states, policy)
    assert 0 < abs(part[0].delta) < abs(full[0].delta)
    assert math.copysign(1, part[0].delta) == math.copysign(1, full[0].delta)
    assert part[0].deviation_after > full[0].deviation_after  # type: ignore[operator]
    assert part[1] == full[1]


def test_a_bad_weight_is_refused() -> None:
    """A weight outside (0, 1] raises ValueError naming the player."""
    with pytest.raises(ValueError, match="'a'"):
        rate(one_v_one(Outcome.DRAW, 0.0, weight=1.5), {}, Glicko2Policy())


# --- properties over generated matches -------------------------------------------------------------

player_states = st.builds(
    lambda r, d, v, t: PlayerState(r, 1, None, None, d, v, t),
    st.floats(0, 4000), st.floats(45, 500), st.floats(1e-6, 0.1), st.floats(0, 1e9),
)


@given(player_states, player_states, st.sampled_from(list(Outcome)), st.floats(0, 2e9), st.floats(0.01, 3.0))
@settings(max_examples=examples(300), deadline=None)
def test_every_1v1_is_finite_bounded_and_rewards_the_winner(
    sa: PlayerState, sb: PlayerState, outcome: Outcome, at: float, tau: float
) -> None:
    """Finite figures, deviations within [min, max], volatility at most max, the winner gains and
    the loser loses (a draw moves the lower rating up), the same input gives the same bits."""
    policy = Glicko2Policy(tau=tau)
    states = {"a": sa, "b": sb}
    changes = rate(one_v_one(outcome, at), states, policy)
    assert changes == rate(one_v_one(outcome, at), states, policy)
    for c in changes:
        assert all(math.isfinite(x) for x in (c.rating_after, c.deviation_after, c.volatility_after))  # type: ignore[arg-type]
        assert policy.min_deviation <= c.deviation_after <= policy.max_deviation  # type: ignore[operator]
        assert 0 < c.volatility_after <= policy.max_volatility  # type: ignore[operator]
        assert abs(c.delta) <= policy.max_rating_change + 1e-9  # type: ignore[operator]  # r + 700 - r: one rounding
    a, b = changes
    if outcome is Outcome.SIDE_A_WON:
        assert a.delta >= 0 >= b.delta
    elif outcome is Outcome.SIDE_B_WON:
        assert a.delta <= 0 <= b.delta
    elif sa.rating < sb.rating:
        assert a.delta >= 0 >= b.delta


def test_replay_stores_the_deviation_volatility_and_time() -> None:
    """engine.replay folds the policy and keeps each player's deviation, volatility and last match time."""
    policy = Glicko2Policy()
    matches = [one_v_one(Outcome.SIDE_A_WON, 0.0), one_v_one(Outcome.DRAW, 5 * DAY)]
    standings = replay(matches, policy)
    a = standings["a"]
    assert a.games_played == 2 and a.last_played == 5 * DAY
    assert a.deviation is not None and a.deviation < 500.0 and a.volatility is not None
    assert (a.wins, a.draws) == (1, 1)


def test_ratings_too_far_apart_are_refused_with_a_reason() -> None:
    """An expected score of exactly 1 (ratings 8,000 or 200,000 points apart) makes the paper's v
    infinite: the match is unratable (unsupported_match), in the policy and in the fast replay."""
    from engine.fast_replay import replay as fast
    from engine.rating import UnratableMatch

    policy = Glicko2Policy(max_rating_change=None)
    for gap in (8_000.0, 200_000.0):
        states = {"a": state(1500 + gap, 50), "b": state(1500, 50)}
        with pytest.raises(UnratableMatch) as refused:
            rate(one_v_one(Outcome.SIDE_A_WON, 0.0), states, policy)
        assert refused.value.reason_code == "unsupported_match"
    with pytest.raises(UnratableMatch):
        rate_period(9500, 50, 0.06, [(1500, 50, 1.0)], 0.5)
    # the fast fold refuses it too, on the 1v1 path and on the teams path
    from engine.fast_glicko2 import Glicko2Replayer
    from engine.replay import Standing

    for match in (one_v_one(Outcome.SIDE_A_WON, 0.0),
                  Match("t", (Participant("a"), Participant("c")), (Participant("b"),), Outcome.SIDE_A_WON,
                        played_at=0.0)):
        replayer = Glicko2Replayer(policy)
        replayer.standings()["a"] = Standing(200_000.0, 1, 200_000.0, None, 1, 0, 0, 50.0, 0.06, 0.0)
        replayer.standings()["c"] = Standing(200_000.0, 1, 200_000.0, None, 1, 0, 0, 50.0, 0.06, 0.0)
        with pytest.raises(UnratableMatch):
            replayer.feed([match])
    assert fast([one_v_one(Outcome.DRAW, 0.0)], policy) == replay([one_v_one(Outcome.DRAW, 0.0)], policy)
