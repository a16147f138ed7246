"""The edges of each formula, as decided in ``docs/decisions/0003-every-valid-policy-rates-every-valid-match.md``,
against values worked out by hand.

Reference values are written out from the formulas' sources in each test (FiveThirtyEight's
``forecast.py`` multiplier, the logistic expected score, IEEE double arithmetic as C# does it),
never taken from the engine.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from engine import ConstantK, Match, Outcome, Participant, PlayerState, RatingPolicy, expected_score, rate
from engine.policy import MarginOfVictory, SeasonRegression
from worker.policy.config import PolicyConfigError, load_policy
from worker.policy.ladders import load_ladder_policies

ROOT = Path(__file__).resolve().parents[2]
NFL_POLICY = ROOT / "examples" / "fivethirtyeight-nfl.toml"

DOG, FAV = Participant("dog"), Participant("fav")


def upset(**context) -> Match:
    """The underdog (side A) beats the favourite 21-20 on neutral ground."""
    return Match("upset", (DOG,), (FAV,), Outcome.SIDE_A_WON, scores=(21.0, 20.0), **context)


# --------------------------------------------------------------------------------------------
# Margin of victory: the divisor of a win is floored at base / 2
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gap", [2199, 2200, 2201])
def test_fivethirtyeight_policy_rates_a_huge_upset_winner_upward(gap) -> None:
    """FiveThirtyEight's NFL policy, underdog by 2,199 / 2,200 / 2,201 points wins 21-20 on neutral
    ground: the winner goes up, the loser down, with K >= 0 (once +30,498, ZeroDivisionError and
    -30,498)."""
    policy = load_policy(NFL_POLICY).policy
    dog, fav = rate(upset(), {"dog": 1300.0, "fav": 1300.0 + gap}, policy)
    # Winner's difference d = 1300 - (1300 + gap) = -gap (neutral: no home field).
    # X = 0.001 * d + 2.2 = 0.001 / 0 / -0.001, below the floor 2.2 / 2 = 1.1, so X = 1.1.
    # Multiplier = ln(max(|21 - 20|, 1) + 1) * 2.2 / 1.1 = 2 ln 2 = 1.3862943611198906.
    # K = 20 * 1.3862943611198906 = 27.725887222397812 for both teams.
    k = 20 * 2 * math.log(2)
    # E_dog = 1 / (1 + 10^(gap / 400)): 10^5.4975 = 314,412.64 -> 3.18052e-6 (2199),
    # 10^5.5 = 316,227.77 -> 3.16227e-6 (2200), 10^5.5025 = 318,053.37 -> 3.14412e-6 (2201).
    e_dog = 1 / (1 + 10 ** (gap / 400))
    # Winner: 1300 + 27.7258872 * (1 - 3.18e-6) = 1327.72580 (to 1e-5 for all three gaps).
    assert dog.k_factor == pytest.approx(k, rel=1e-15) and fav.k_factor == dog.k_factor
    assert dog.expected_score == pytest.approx(e_dog, rel=1e-12)
    assert dog.rating_after == pytest.approx(1300 + k * (1 - e_dog), abs=1e-9)
    assert dog.rating_after == pytest.approx(1327.72580, abs=1e-5)
    assert fav.rating_after == pytest.approx(1300 + gap - k * (1 - e_dog), abs=1e-9)
    assert dog.delta > 0 > fav.delta


def test_autocorrelation_001_rates_an_upset_by_220_points_winner_upward() -> None:
    """A ladder with autocorrelation = 0.01: the pole moves to 220 points; the winner still goes up
    (was 1300 -> 1059.11 with K = -304.98)."""
    policy = replace(load_policy(NFL_POLICY).policy, margin_of_victory=MarginOfVictory(2.2, 0.01, 1.0))
    dog, fav = rate(upset(), {"dog": 1300.0, "fav": 1520.0}, policy)
    # X = 0.01 * (-220) + 2.2 = 0, floored at 1.1: multiplier 2 ln 2, K = 27.725887222397812.
    # E_dog = 1 / (1 + 10^0.55) = 1 / (1 + 3.5481339) = 0.2198704.
    # Winner: 1300 + 27.7258872 * 0.7801296 = 1321.62979; loser 1520 - 21.62979 = 1498.37021.
    k = 20 * 2 * math.log(2)
    e_dog = 1 / (1 + 10 ** 0.55)
    assert dog.k_factor == pytest.approx(k, rel=1e-15) and dog.k_factor >= 0
    assert dog.expected_score == pytest.approx(0.2198704, abs=1e-7)
    assert dog.rating_after == pytest.approx(1300 + k * (1 - e_dog), abs=1e-9)
    assert dog.rating_after == pytest.approx(1321.62979, abs=1e-5)
    assert fav.rating_after == pytest.approx(1498.37021, abs=1e-5)


def test_the_multiplier_is_fivethirtyeights_own_above_the_floor() -> None:
    """Above X = base / 2 nothing changes: an upset by 1,000 points has X = 1.2, as forecast.py."""
    mov = MarginOfVictory()
    # ln(7 + 1) * 2.2 / (0.001 * -1000 + 2.2) = 2.0794415 * 2.2 / 1.2 = 3.8123095
    assert mov.multiplier(7, -1000.0) == pytest.approx(math.log(8) * 2.2 / 1.2, rel=1e-15)
    assert mov.multiplier(7, -1000.0) == pytest.approx(3.8123095, abs=1e-7)
    # a favourite's win: X = 0.001 * 300 + 2.2 = 2.5; ln(4) * 2.2 / 2.5 = 1.3862944 * 0.88 = 1.2199391
    assert mov.multiplier(-3, 300.0) == pytest.approx(1.2199391, abs=1e-7)
    # at the floor and beyond it: ln 2 * 2.2 / 1.1 = 2 ln 2, whatever the gap
    for difference in (-1100.0, -2200.0, -1e9):
        assert mov.multiplier(1, difference) == pytest.approx(2 * math.log(2), rel=1e-15)
    # a draw: X = draw_divisor = 1, no floor: ln 2 * 2.2 = 1.5249238
    assert mov.multiplier(0, None) == pytest.approx(1.5249238, abs=1e-7)


def test_a_huge_favourite_winning_gets_a_small_positive_multiplier() -> None:
    """A favourite by 10^9 points: X = 0.001 * 1e9 + 2.2 = 1,000,002.2, multiplier ln 2 * 2.2e-6 / 1.0000022."""
    assert MarginOfVictory().multiplier(1, 1e9) == pytest.approx(math.log(2) * 2.2 / 1_000_002.2, rel=1e-12)
    assert MarginOfVictory().multiplier(1, 1e9) > 0


# --------------------------------------------------------------------------------------------
# Expected score: saturates at 0 and 1 as C# double arithmetic does
# --------------------------------------------------------------------------------------------


def test_expected_score_saturates_where_ten_to_the_x_overflows() -> None:
    """At a gap of 123,304 points (x = 308.26 scales) 10^x is beyond the largest double: C#'s
    Math.Pow gives +Infinity and 1 / (1 + Infinity) = 0; the engine gives 0 and 1, not OverflowError."""
    with pytest.raises(OverflowError):
        _ = 10.0 ** 308.26  # what Python does where C# returns +Infinity
    assert 1 / (1 + math.inf) == 0.0 and 1 / (1 + 0.0) == 1.0  # IEEE: C#'s results from there
    assert expected_score(0.0, 123_304.0) == 0.0
    assert expected_score(123_304.0, 0.0) == 1.0
    # just below: 10^308.25 = 1.7782794e308, E = 1 / (1 + 1.7782794e308) = 5.6234133e-309 (subnormal)
    assert expected_score(0.0, 123_300.0) == pytest.approx(5.6234133e-309, rel=1e-7)
    # any positive scale, however small: a gap of 1 point at scale 1e-300 is 1e300 scales
    assert expected_score(0.0, 1.0, 1e-300) == 0.0 and expected_score(1.0, 0.0, 1e-300) == 1.0
    assert expected_score(5.0, 5.0, 5e-324) == 0.5


def test_a_rating_gap_beyond_the_double_range_rates_like_a_certain_result() -> None:
    """Ratings 10^9 apart (within validation): the favourite expects exactly 1, the underdog 0, so
    the underdog's win moves both by the full K (30) and the favourite's win moves nobody."""
    policy = RatingPolicy(ConstantK(30))
    dog, fav = rate(Match("m", (DOG,), (FAV,), Outcome.SIDE_A_WON), {"dog": -1e9, "fav": 1e9}, policy)
    # E_dog = 1 / (1 + 10^(2e9 / 400)) -> 0; -1e9 + 30 * (1 - 0) and 1e9 + 30 * (0 - 1)
    assert (dog.expected_score, fav.expected_score) == (0.0, 1.0)
    assert (dog.rating_after, fav.rating_after) == (-1e9 + 30, 1e9 - 30)
    dog, fav = rate(Match("m", (DOG,), (FAV,), Outcome.SIDE_B_WON), {"dog": -1e9, "fav": 1e9}, policy)
    assert (dog.delta, fav.delta) == (0.0, 0.0)


# --------------------------------------------------------------------------------------------
# Season starts hold the floor
# --------------------------------------------------------------------------------------------


def test_a_season_regression_below_the_floor_stops_at_the_floor() -> None:
    """Regressing 1000 halfway toward 900 would give 950; the floor of 1000 holds at the season start."""
    policy = RatingPolicy(ConstantK(20), initial_rating=1000, floor=1000, season=SeasonRegression(900, 0.5))
    ratings = {"dog": PlayerState(1000.0, 5, 1000.0, "2023"), "fav": PlayerState(1000.0, 5, 1000.0, "2023")}
    dog, fav = rate(Match("m", (DOG,), (FAV,), Outcome.SIDE_B_WON, season="2024"), ratings, policy)
    assert dog.rating_before == 1000.0 and fav.rating_before == 1000.0
    # E = 0.5: dog 1000 - 10 = 990 -> floor 1000 (10 floor points), fav 1000 + 10 = 1010
    assert (dog.rating_after, dog.floor_points, fav.rating_after) == (1000.0, 10.0, 1010.0)


def test_a_regression_at_the_floor_never_lands_one_ulp_under_it() -> None:
    """(1 - w) * F + w * F is 1 ulp below F for F = 4863.006043445407, w = 0.1203947522588692 in
    doubles; the season start is F, so a loser is never lifted above where it started."""
    floor, weight = 4863.006043445407, 0.1203947522588692
    assert floor * (1 - weight) + weight * floor < floor  # the rounding error itself
    policy = RatingPolicy(ConstantK(20), initial_rating=floor, floor=floor, season=SeasonRegression(floor, weight))
    ratings = {"dog": PlayerState(floor, 3, floor, "1"), "fav": PlayerState(floor + 100, 3, floor + 100, "1")}
    dog, _ = rate(Match("m", (DOG,), (FAV,), Outcome.SIDE_B_WON, season="2"), ratings, policy)
    assert dog.rating_before == floor and dog.rating_after == floor and dog.rating_after <= dog.rating_before


# --------------------------------------------------------------------------------------------
# Validation: what is left to reject, with file, line and key
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "key", "words"),
    [
        ("initial_rating = 2e9\nk_factor = { constant = 30 }\n", 1, "initial_rating", "less than or equal to 1000000000"),
        ("k_factor = { constant = 30 }\n[initial_ratings]\nann = -1.5e9\n", 3, "initial_ratings.ann", "greater than or equal to -1000000000"),
        ("home_advantage = 1e300\nk_factor = { constant = 30 }\n", 1, "home_advantage", "less than or equal"),
        ("k_factor = { constant = 1e7 }\n", 1, "k_factor.constant", "less than or equal to 1000000"),
        ("[k_factor]\nbands = [[1200, 40], [1800, 1e300]]\ntop = 16\n", 2, "k_factor.bands", "less than or equal to 1000000"),
        ("[k_factor]\nfide = { top_k = 1e7 }\n", 2, "k_factor.fide.top_k", "less than or equal to 1000000"),
        ("[k_factor]\nconstant = 30\nprovisional = { games = 5, k = 2e6 }\n", 3, "k_factor.provisional.k", "less than or equal"),
        ("k_factor = { constant = 30 }\n[performance]\nbonus_per_16 = 2\n", 3, "performance.bonus_per_16", "less than or equal to 1"),
        ("k_factor = { constant = 30 }\n[margin_of_victory]\nformula = \"fivethirtyeight_nfl\"\ndraw_divisor = 1e-7\n",
         4, "margin_of_victory.draw_divisor", "must be at least base / 1e+06"),
        ("k_factor = { constant = 30 }\n[season]\nregress_to = 1e10\nweight = 0.5\n", 3, "season.regress_to", "less than or equal"),
        ("floor = 1000\nk_factor = { constant = 30 }\n[season]\nregress_to = 1200\nweight = 0.5\n[season.set]\n"
         "CLE = { \"1999\" = 900.0 }\n", 7, "season.set.CLE.1999", "below the floor 1000"),
    ],
)
def test_the_magnitudes_that_could_overflow_are_rejected_with_file_line_and_key(tmp_path, text, line, key, words) -> None:
    """Each new limit names the file, the line and the dotted key, as the other errors do."""
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(PolicyConfigError) as info:
        load_policy(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: {key}: "), message
    assert words in message, message


def test_an_inline_ladder_season_set_below_the_floor_names_the_ladders_file_line_and_key(tmp_path) -> None:
    """The cross-table check reports through the ladders file too, with the ladder's prefix."""
    path = tmp_path / "ladders.toml"
    path.write_text("[ladders.club]\nfloor = 1000\nk_factor = { constant = 30 }\n"
                    "season = { regress_to = 1200, weight = 0.5, set = { ann = { \"2024\" = 10.0 } } }\n")
    with pytest.raises(PolicyConfigError) as info:
        load_ladder_policies(path)
    assert str(info.value).startswith(f"{path}:4: ladders.club.season.set.ann.2024: "), str(info.value)


def test_the_limits_accept_their_edges_and_any_autocorrelation(tmp_path) -> None:
    """Exactly 1e9, 1e6, 1 and base / 1e6 are accepted; so is autocorrelation 0.01 or 1000
    (the divisor's floor makes every autocorrelation safe)."""
    path = tmp_path / "policy.toml"
    path.write_text(
        "initial_rating = -1e9\nfloor = -1e9\nhome_advantage = 1e9\nk_factor = { constant = 1e6 }\n"
        "performance = { bonus_per_16 = 1, max_bonus_16 = 1 }\n"
        "[margin_of_victory]\nformula = \"fivethirtyeight_nfl\"\nbase = 2.2\nautocorrelation = 1000\n"
        "draw_divisor = 2.2e-6\n[initial_ratings]\nann = 1e9\n"
    )
    policy = load_policy(path).policy
    assert policy.k_factor == ConstantK(1e6) and policy.margin_of_victory.autocorrelation == 1000


@pytest.mark.parametrize("path", sorted((ROOT / "examples").rglob("*.toml")) + sorted((ROOT / "worker" / "policies").glob("*.toml")),
                         ids=lambda p: p.name)
def test_every_shipped_policy_file_still_validates(path) -> None:
    """The tightened validation accepts every policy this repository ships."""
    assert load_policy(path).version
