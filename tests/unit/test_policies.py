"""Rating policies as configuration: every policy feature against hand-computed values, the
configuration file's errors, versions, and FiveThirtyEight's published NFL table."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from engine import (
    SEDMA_K,
    ConstantK,
    FreeForAll,
    Match,
    Outcome,
    Participant,
    PlayerState,
    RatingPolicy,
    Rounding,
    UnratableMatch,
    fast_replay,
    rate,
)
from engine.k_factor import FideK, ProvisionalK
from engine.policy import MarginOfVictory, SeasonRegression, TeamRating
from engine.replay import replay
from worker.ops.published import check_published
from worker.policy.config import PolicyConfigError, diff, load_policy
from worker.policy.ladders import LadderConfigError, load_ladder_policies

ROOT = Path(__file__).resolve().parents[2]
NFL_GAMES = ROOT / "tests" / "data" / "nfl-elo" / "nfl_games.csv"
NFL_POLICY = ROOT / "examples" / "fivethirtyeight-nfl.toml"

A, B, C, D = (Participant(x) for x in "abcd")


def one_v_one(outcome=Outcome.SIDE_A_WON, **context) -> Match:
    return Match("m", (A,), (B,), outcome, **context)


def expected(own: float, opponent: float) -> float:
    """The logistic expected score, written out independently of the engine."""
    return 1 / (1 + 10 ** ((opponent - own) / 400))


# --------------------------------------------------------------------------------------------
# K-factors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rating", "games", "peak", "k"),
    [
        (1500, 0, None, 40),      # provisional: fewer than 30 games
        (2450, 29, 2450, 40),     # still provisional, whatever the rating
        (2000, 30, 2100, 20),     # established, never reached 2400
        (2399, 100, 2399, 20),
        (2400, 100, 2400, 10),    # reached 2400
        (2350, 100, 2410, 10),    # fell back below 2400: keeps 10 (peak decides)
    ],
)
def test_fide_k(rating, games, peak, k) -> None:
    assert FideK()(rating, games, peak) == k


def test_provisional_k_then_the_inner_policy() -> None:
    k = ProvisionalK(games=10, k=50, then=SEDMA_K)
    assert [k(1000, 9), k(1000, 10), k(1900, 10)] == [50, 40, 24]


def test_fide_k_in_a_match_reads_games_and_peak_from_the_player_state() -> None:
    policy = RatingPolicy(FideK())
    ratings = {"a": PlayerState(2300.0, 50, 2405.0), "b": PlayerState(2300.0, 5, 2300.0)}
    change_a, change_b = rate(one_v_one(), ratings, policy)
    assert (change_a.k_factor, change_b.k_factor) == (10, 40)
    assert change_a.rating_after == 2300 + 10 * 0.5 and change_b.rating_after == 2300 - 40 * 0.5


# --------------------------------------------------------------------------------------------
# Rounding, floor, cap
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "half_even", "half_away"),
    [(1234.5, 1234, 1235), (1233.5, 1234, 1234), (1233.49, 1233, 1233), (-2.5, -2, -3), (0.5, 0, 1)],
)
def test_rounding_modes(value, half_even, half_away) -> None:
    assert RatingPolicy(ConstantK(1), rounding=Rounding.HALF_EVEN).round(value) == half_even
    assert RatingPolicy(ConstantK(1), rounding=Rounding.HALF_AWAY).round(value) == half_away
    assert RatingPolicy(ConstantK(1)).round(value) == value


def test_the_floor_holds_and_counts_the_points_it_creates() -> None:
    policy = RatingPolicy(ConstantK(32), initial_rating=1000, floor=1000)
    winner, loser = rate(one_v_one(), {}, policy)
    assert winner.rating_after == 1016 and winner.floor_points == 0
    assert loser.rating_after == 1000 and loser.floor_points == 16  # 1000 - 32 * 0.5 = 984, raised to 1000


def test_the_400_point_rule_caps_the_difference_used_for_the_expected_score() -> None:
    policy = RatingPolicy(ConstantK(20), difference_cap=400)
    strong, weak = rate(one_v_one(), {"a": 2000.0, "b": 1400.0}, policy)
    assert strong.expected_score == pytest.approx(expected(400, 0)) and strong.capped
    assert weak.expected_score == pytest.approx(expected(0, 400)) and weak.capped
    assert strong.rating_after == pytest.approx(2000 + 20 * (1 - 1 / 1.1))
    uncapped, _ = rate(one_v_one(), {"a": 1700.0, "b": 1400.0}, policy)
    assert not uncapped.capped and uncapped.expected_score == pytest.approx(expected(1700, 1400))


# --------------------------------------------------------------------------------------------
# Home advantage, margin of victory, seasons
# --------------------------------------------------------------------------------------------


def test_home_advantage_goes_to_the_side_the_match_names() -> None:
    policy = RatingPolicy(ConstantK(20), home_advantage=65)
    home_a, _ = rate(one_v_one(home="side_a"), {}, policy)
    home_b, _ = rate(one_v_one(home="side_b"), {}, policy)
    neutral, _ = rate(one_v_one(), {}, policy)
    assert home_a.expected_score == pytest.approx(expected(1265, 1200))
    assert home_b.expected_score == pytest.approx(expected(1200, 1265))
    assert neutral.expected_score == 0.5


def test_fivethirtyeight_margin_of_victory_multiplier() -> None:
    policy = RatingPolicy(ConstantK(20), home_advantage=65, margin_of_victory=MarginOfVictory())
    ratings = {"a": 1550.0, "b": 1480.0}
    a, b = rate(one_v_one(home="side_a", scores=(27, 10)), ratings, policy)
    difference = 1550 + 65 - 1480  # the winner's difference, home field included
    multiplier = math.log(17 + 1) * 2.2 / (difference * 0.001 + 2.2)
    e = 1 / (10 ** (-difference / 400) + 1)
    assert a.rating_after == pytest.approx(1550 + 20 * multiplier * (1 - e), abs=1e-9)
    assert b.rating_after == pytest.approx(1480 - 20 * multiplier * (1 - e), abs=1e-9)
    # a tie: X = 1 and the margin is at least 1
    a, _ = rate(one_v_one(Outcome.DRAW, scores=(7, 7)), ratings, policy)
    assert a.k_factor == pytest.approx(20 * math.log(2) * 2.2)
    with pytest.raises(UnratableMatch) as info:
        rate(one_v_one(), ratings, policy)
    assert info.value.reason_code == "missing_score"


def test_season_regression_at_a_players_first_match_of_a_new_season() -> None:
    season = SeasonRegression(mean=1505, weight=1 / 3, overrides={("b", "2021"): 1300.0})
    policy = RatingPolicy(ConstantK(20), season=season)
    ratings = {"a": PlayerState(1600.0, 10, 1650.0, "2020"), "b": PlayerState(1700.0, 10, 1700.0, "2020")}
    a, b = rate(one_v_one(season="2021"), ratings, policy)
    assert a.rating_before == pytest.approx(1600 * 2 / 3 + 1505 / 3)
    assert b.rating_before == 1300.0  # set by hand for that season
    same_season, _ = rate(one_v_one(season="2020"), ratings, policy)
    assert same_season.rating_before == 1600.0
    first_season, _ = rate(one_v_one(season="2021"), {"a": 1600.0}, policy)  # no season yet: no regression
    assert first_season.rating_before == 1600.0


def test_replay_carries_seasons_between_matches() -> None:
    policy = RatingPolicy(ConstantK(20), season=SeasonRegression(1500, 0.5))
    matches = [
        Match("1", (A,), (B,), Outcome.SIDE_A_WON, season="1"),
        Match("2", (A,), (B,), Outcome.SIDE_A_WON, season="2"),
    ]
    standings = replay(matches, policy)
    after_first = 1200 + 20 * 0.5
    regressed = after_first * 0.5 + 0.5 * 1500
    other = (1200 - 10) * 0.5 + 750
    assert standings["a"].rating == pytest.approx(regressed + 20 * (1 - expected(regressed, other)))
    assert standings["a"].season == "2"


# --------------------------------------------------------------------------------------------
# Teams and free-for-all
# --------------------------------------------------------------------------------------------


def test_team_rating_sum_or_mean() -> None:
    ratings = {"a": 1300.0, "b": 1100.0, "c": 1250.0, "d": 1250.0}
    match = Match("t", (A, B), (C, D), Outcome.SIDE_A_WON)
    mean = rate(match, ratings, RatingPolicy(ConstantK(20), team_rating=TeamRating.MEAN))
    total = rate(match, ratings, RatingPolicy(ConstantK(20), team_rating=TeamRating.SUM))
    assert mean[0].expected_score == pytest.approx(expected(1200, 1250))
    assert total[0].expected_score == pytest.approx(expected(2400, 2500))


def test_uneven_sides_rejected_when_the_policy_says_so() -> None:
    match = Match("u", (A, B), (C,), Outcome.DRAW)
    assert len(rate(match, {}, RatingPolicy(ConstantK(20)))) == 3
    with pytest.raises(UnratableMatch) as info:
        rate(match, {}, RatingPolicy(ConstantK(20), uneven_sides=False))
    assert info.value.reason_code == "uneven_sides"


def test_free_for_all_is_rated_pairwise_with_k_divided_by_the_opponents() -> None:
    policy = RatingPolicy(ConstantK(32), initial_rating=1500)
    match = FreeForAll("f", ((A,), (B,), (C,)), (1, 2, 3))
    first, second, third = rate(match, {}, policy)
    # equal ratings: every pairwise E is 0.5; K / (n - 1) = 16 per pairing:
    # first 16 * ((1 - .5) + (1 - .5)) = +16, second 16 * ((0 - .5) + (1 - .5)) = 0, third -16
    assert (first.rating_after, second.rating_after, third.rating_after) == (1516.0, 1500.0, 1484.0)
    assert (first.result, second.result, third.result) == ("win", "draw", "loss")
    # a tie for first between a and b: a gets 16 * ((.5 - .5) + (1 - .5)) = +8, c 16 * (-.5 - .5) = -16
    a, b, c = rate(FreeForAll("g", ((A,), (B,), (C,)), (1, 1, 2)), {}, policy)
    assert (a.rating_after, b.rating_after, c.rating_after) == (1508.0, 1508.0, 1484.0)
    assert (a.result, c.result) == ("win", "loss")
    # without division, each pairing counts fully: 32 * (.5 + .5)
    a, _, _ = rate(match, {}, replace(policy, free_for_all_divide=False))
    assert a.rating_after == 1532.0 and a.k_factor == 64


# --------------------------------------------------------------------------------------------
# The general path agrees with the fast path, and fast_replay with replay
# --------------------------------------------------------------------------------------------


def test_the_general_path_gives_the_seed_integers_when_no_extra_feature_bites() -> None:
    """A floor far below any rating takes the general path but changes nothing: all 5,010 golden
    rows (tests/data/golden/sedma_reference.csv, computed by the seed's C# code) still match."""
    import csv

    from engine import Performance, SedmaAdjustment

    policy = RatingPolicy(SEDMA_K, 1000, rounding=Rounding.HALF_EVEN, performance=SedmaAdjustment(), floor=-1e9)
    assert not policy.is_basic
    with open(ROOT / "tests" / "data" / "golden" / "sedma_reference.csv", newline="") as handle:
        rows = [{k: int(v) for k, v in raw.items()} for raw in csv.DictReader(handle)]
    assert len(rows) == 5010
    for row in rows:
        a = Participant("a", Performance(row["bad_moves_a"], row["won_by_16_a"], row["won_by_24_a"], row["won_by_4_and_last_a"]))
        b = Participant("b", Performance(row["bad_moves_b"], row["won_by_16_b"], row["won_by_24_b"], row["won_by_4_and_last_b"]))
        outcome = Outcome.SIDE_A_WON if row["a_won"] else Outcome.SIDE_B_WON
        ca, cb = rate(Match("g", (a,), (b,), outcome), {"a": row["rating_a"], "b": row["rating_b"]}, policy)
        assert (ca.rating_after, cb.rating_after) == (row["new_rating_a"], row["new_rating_b"])


def test_fast_replay_falls_back_for_richer_policies() -> None:
    policy = RatingPolicy(FideK(), floor=1100, season=SeasonRegression(1500, 0.25), home_advantage=30)
    players = [Participant(f"p{i}") for i in range(6)]
    matches = [
        Match(str(i), (players[i % 6],), (players[(i * 7 + 1) % 6],), list(Outcome)[i % 3],
              home="side_a" if i % 2 else None, season=str(i // 40))
        for i in range(400) if i % 6 != (i * 7 + 1) % 6
    ]
    want = replay(matches, policy)
    got = fast_replay.replay(matches, policy)
    assert {p: (s.rating, s.games_played) for p, s in got.items()} == {p: (s.rating, s.games_played) for p, s in want.items()}


# --------------------------------------------------------------------------------------------
# Policy files: errors with file, line and key; versions; diff
# --------------------------------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "policy.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "line", "key", "words"),
    [
        ("initial_rating = 1200\n\n[k_factor]\nkonstant = 30\n", 4, "k_factor.konstant", "unknown key"),
        ("k_factor = { constant = 30, topp = 3 }\n", 1, "k_factor.topp", "unknown key"),
        ("initial_rating = 1200\nk_factor = { constant = -5 }\n", 2, "k_factor.constant", "greater than 0"),
        ("k_factor = { constant = 30, bands = [[1200, 40]], top = 16 }\n", 1, "k_factor", "exactly one"),
        ("[k_factor]\nbands = [[1800, 40], [1200, 32]]\ntop = 16\n", 1, "k_factor", "strictly increasing"),
        ("floor = 1300\ninitial_rating = 1200\n[k_factor]\nconstant = 30\n", None, "(top level)", "above initial_rating"),
        ("rounding = \"up\"\n[k_factor]\nconstant = 30\n", 1, "rounding", "half_away"),
        ("[k_factor]\nconstant = 30\n[season]\nregress_to = 1505\nweight = 1.5\n", 5, "season.weight", "less than or equal to 1"),
        ("[k_factor]\nconstant = 30\n[margin_of_victory]\nformula = \"nba\"\n", 4, "margin_of_victory.formula", "fivethirtyeight_nfl"),
        ("[k_factor]\nconstant = 30\n[teams]\nuneven = \"maybe\"\n", 4, "teams.uneven", "allow"),
        ("[k_factor]\nconstant = 30\n[performance]\nmax_malus = 2\n", 4, "performance.max_malus", "less than or equal to 1"),
        ("initial_rating = 1200\n", None, "k_factor", "Field required"),
    ],
)
def test_bad_policy_files_name_file_line_and_key(tmp_path, text, line, key, words) -> None:
    path = write(tmp_path, text)
    with pytest.raises(PolicyConfigError) as info:
        load_policy(path)
    message = str(info.value)
    where = f"{path}:{line}: " if line else f"{path}: "
    assert message.startswith(where + key + ": "), message
    assert words in message


def test_not_toml_and_missing_files_are_errors(tmp_path) -> None:
    with pytest.raises(PolicyConfigError, match="not valid TOML"):
        load_policy(write(tmp_path, "k_factor = {"))
    with pytest.raises(PolicyConfigError, match="cannot read"):
        load_policy(tmp_path / "nope.toml")


def test_an_inline_ladder_error_names_the_ladders_file_line_and_key(tmp_path) -> None:
    path = write(tmp_path, "[ladders.club]\nk_factor = { constant = 30 }\nscale = 0\n", "ladders.toml")
    with pytest.raises(LadderConfigError) as info:
        load_ladder_policies(path)
    assert str(info.value).startswith(f"{path}:3: ladders.club.scale: ")


def test_a_ladder_can_name_a_policy_file_or_hold_it_inline_with_the_same_version(tmp_path) -> None:
    write(tmp_path, "# comments and layout do not matter\ninitial_rating = 1200.0\n[k_factor]\nconstant = 24\n", "club.toml")
    path = write(
        tmp_path,
        '[ladders.by_file]\npolicy = "club.toml"\n\n[ladders.inline]\ndescription = "other words"\n'
        "k_factor = { constant = 24 }\n",
        "ladders.toml",
    )
    loaded = load_ladder_policies(path)
    assert loaded["by_file"].version == loaded["inline"].version
    assert loaded["by_file"].policy == loaded["inline"].policy


def test_a_change_that_rates_differently_changes_the_version(tmp_path) -> None:
    base = load_policy(write(tmp_path, "[k_factor]\nconstant = 24\n", "a.toml"))
    other = load_policy(write(tmp_path, "[k_factor]\nconstant = 25\n", "b.toml"))
    described = load_policy(write(tmp_path, 'description = "x"\n[k_factor]\nconstant = 24\n', "c.toml"))
    assert base.version != other.version and base.version == described.version
    assert len(base.version) == 12 and int(base.version, 16) >= 0
    assert diff(base.config.canonical(), other.config.canonical()) == [("k_factor.constant", 24.0, 25.0)]


def test_the_shipped_policies_rate_as_the_seed_and_the_tutorial() -> None:
    loaded = load_ladder_policies(ROOT / "worker" / "ladders.toml")
    sedma, elo = loaded["sedma"].policy, loaded["elo"].policy
    assert sedma.k_factor is SEDMA_K and sedma.rounding is Rounding.HALF_EVEN and sedma.initial_rating == 1000
    assert sedma.is_basic and elo.is_basic
    favourite, underdog = rate(one_v_one(), {"a": 1350.0, "b": 1200.0}, elo)
    assert (round(favourite.rating_after), round(underdog.rating_after)) == (1359, 1191)  # the seed tutorial's example


# --------------------------------------------------------------------------------------------
# FiveThirtyEight's published NFL ratings
# --------------------------------------------------------------------------------------------


def test_fivethirtyeight_nfl_policy_reproduces_every_published_rating_and_probability() -> None:
    policy = load_policy(NFL_POLICY).policy
    result = check_published(NFL_GAMES, policy)
    assert result.games == 16_810
    assert result.over_rating_tolerance == 0 and result.over_prob_tolerance == 0, result.first_failures
    assert result.max_rating_diff <= 0.01 and result.max_prob_diff <= 1e-4
    print(f"538 NFL: largest rating difference {result.max_rating_diff:.6f}, probability {result.max_prob_diff:.3g}")


def test_without_the_season_fixes_the_check_fails() -> None:
    """The check can fail: dropping the hand-set team-seasons breaks it."""
    policy = load_policy(NFL_POLICY).policy
    policy = replace(policy, season=replace(policy.season, overrides={}))
    result = check_published(NFL_GAMES, policy)
    assert result.over_rating_tolerance > 0


def test_check_published_command_exits_zero_and_reports_the_largest_difference() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "worker", "check-published", str(NFL_POLICY), str(NFL_GAMES)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "16,810 games" in proc.stdout and "largest rating difference" in proc.stdout
