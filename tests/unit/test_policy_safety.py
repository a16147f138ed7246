"""Every policy the validator accepts rates every valid match safely
(``docs/decisions/0003-every-valid-policy-rates-every-valid-match.md``).

A policy file that validates is a promise: every valid match is rated with no exception (other
than the refusals a policy states, with their dead-letter reason codes), finite ratings, K >= 0,
expected scores in [0, 1], ratings that move in the direction of the result, and changes that sum
to zero where the policy is zero-sum.

How the space is drawn:

* **Policies** are drawn as policy-file tables over every key (each K-factor form with or without
  a provisional period, floor, difference cap, scale, rounding, home advantage, margin of
  victory, seasons with hand-set ratings, Sedma weights, team rules, free-for-all division,
  per-player initial ratings), mostly from everyday ranges and sometimes from extremes up to the
  largest double. Each is written as TOML and read back through
  :func:`worker.policy.config.validate_policy`, the loader the worker uses for its ladders file;
  a draw that validation rejects is discarded, so the tests see exactly what validation accepts.
* **Matches** are drawn as MatchFinished v1 payloads (1 to 8 players a side, 3 to 16 sides with
  any placements, home, any score from 0 to 10^6, seasons, Sedma counts from 0 to 1000), parsed
  by :func:`schemas.parse_match_finished` and mapped from their canonical JSON by
  :func:`worker.mapping.to_engine_match`, as the worker does.
* **Histories** of up to 100 matches among 2 to 20 players (up to 10 distinct matches, played
  1 to 10 times over, so that repeated upsets drive ratings apart) are folded in order through
  :func:`engine.replay.replay_changes` (what ``verify`` uses; the worker passes the same
  :class:`engine.model.PlayerState`), starting from the policy's initial ratings, so extreme
  ``initial_ratings`` meet every other feature. A match the policy refuses is skipped, as the
  worker dead-letters it.

The direction and zero-sum properties draw from the part of that space they speak of (policies
without a performance malus; zero-sum policies), through the same validator. Each property is its
own test, so that a failure names the property it broke; the properties
other than "no exception" check the changes made before any exception and leave the exception
itself to the first test. Seeded: the same examples on every run (300 per property under the ci Hypothesis profile, a
quarter under dev: ``tests/profiles.py``).
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tomli_w
from hypothesis import HealthCheck, assume, given, seed, settings
from hypothesis import strategies as st

from engine import ConstantK, FreeForAll, Match, Outcome, RatingChange, RatingPolicy, Rounding, UnratableMatch
from engine.replay import Standing, replay_changes
from schemas import parse_match_finished
from tests.profiles import examples
from worker.mapping import to_engine_match
from worker.policy.config import PolicyConfigError, validate_policy

EXAMPLES = examples(300)
SEED = 20_240_511
SAFETY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)

PLAYERS = [f"p{i}" for i in range(20)]
SEASONS = ["2020", "2021", "2022"]
BIGGEST = 1.7976931348623157e308
# Magnitudes at and around the edges: tiny, everyday, at plausible limits, and up to the largest double.
EXTREMES = [0.0, 5e-324, 1e-300, 1e-6, 0.5, 1.0, 2.2, 400.0, 1e3, 1e6, 1e9, 1e9 + 1, 1e12, 1e100, 1e300, BIGGEST]
STAT_KEYS = ("bad_moves", "won_by_16", "won_by_24", "won_by_4_and_last")
SEDMA_KEYS = ("bonus_per_16", "max_bonus_16", "bonus_per_24", "max_bonus_24", "bonus_per_4_and_last",
              "max_bonus_4_and_last", "malus_per_bad_move", "max_malus", "loser_bonus_share", "draw_bonus_share")

any_finite = st.floats(allow_nan=False, allow_infinity=False)


def _signed(magnitudes: st.SearchStrategy[float]) -> st.SearchStrategy[float]:
    return st.tuples(magnitudes, st.booleans()).map(lambda t: -t[0] if t[1] else t[0])


# Every strategy is built once, here: building strategies inside a draw costs more than drawing.
extreme = st.sampled_from(EXTREMES)
positive_extreme = st.sampled_from([x for x in EXTREMES if x > 0])
ratings = st.one_of(st.floats(-500, 4000), st.floats(-500, 4000), st.floats(1000, 2000).map(round).map(float),
                    _signed(extreme), any_finite)
offsets = st.one_of(st.floats(0, 600), st.just(0.0))  # how far a floor lies below a rating, or a mean above it
k_values = st.one_of(st.floats(1, 100), st.floats(1, 100), st.floats(min_value=1e-9, max_value=1e3), positive_extreme,
                     st.floats(min_value=5e-324, allow_infinity=False))
scales = st.one_of(st.floats(50, 1000), st.just(400.0), positive_extreme, st.floats(min_value=5e-324, allow_infinity=False))
unit = st.floats(0, 1)
weights = st.one_of(unit, unit, st.sampled_from([0.0, 1.0]), extreme)
games = st.one_of(st.integers(0, 40), st.sampled_from([0, 10**9]))
provisional_games = st.one_of(st.integers(1, 30), st.just(10**9))
one_in = {n: st.integers(0, n - 1) for n in (2, 3, 4, 5)}
k_kinds = st.sampled_from(["constant", "bands", "fide"])
roundings = st.sampled_from(["none", "none", "half_even", "half_away"])
caps = st.one_of(st.floats(1, 1000), positive_extreme)
home_advantages = st.one_of(st.floats(-200, 200), _signed(extreme), any_finite)
sedma_tables = st.fixed_dictionaries({}, optional={key: weights for key in SEDMA_KEYS})
margins = st.fixed_dictionaries({"formula": st.just("fivethirtyeight_nfl")}, optional={
    "base": st.one_of(st.floats(0.1, 10), positive_extreme),
    "autocorrelation": st.one_of(st.floats(0, 0.02), st.sampled_from([0.0, 0.001, 0.01, 0.1, 1.0]), extreme),
    "draw_divisor": st.one_of(st.floats(0.1, 10), positive_extreme),
})
season_weights = st.one_of(unit, st.sampled_from([0.0, 1 / 3, 1.0]))
season_sets = st.dictionaries(st.sampled_from(PLAYERS), st.dictionaries(st.sampled_from(SEASONS), ratings, min_size=1),
                              max_size=3)
teams = st.fixed_dictionaries({}, optional={
    "rating": st.sampled_from(["mean", "sum"]),
    "uneven": st.sampled_from(["allow", "reject"]),
    "free_for_all_divide": st.booleans(),
})
initial_ratings = st.dictionaries(st.sampled_from(PLAYERS), ratings, min_size=1, max_size=6)
band_bounds = st.lists(ratings, min_size=1, max_size=4)


@st.composite
def k_factor_tables(draw, constant_only: bool = False) -> dict[str, Any]:
    kind = "constant" if constant_only else draw(k_kinds)
    table: dict[str, Any] = {}
    if kind == "constant":
        table["constant"] = draw(k_values)
    elif kind == "bands":
        bounds = sorted(set(draw(band_bounds)))
        table["bands"] = [[b, draw(k_values)] for b in bounds]
        table["top"] = draw(k_values)
    else:
        fide: dict[str, Any] = {}
        if draw(st.booleans()):
            fide["provisional_games"] = draw(games)
            fide["provisional_k"] = draw(k_values)
            fide["k"] = draw(k_values)
            fide["threshold"] = draw(ratings)
            fide["top_k"] = draw(k_values)
        table["fide"] = fide
    if not constant_only and draw(one_in[4]) == 0:
        table["provisional"] = {"games": draw(provisional_games), "k": draw(k_values)}
    return table


@st.composite
def policy_tables(draw, zero_sum: bool = False, follows_result: bool = False) -> dict[str, Any]:
    """A policy file's table: every key, each present or not. ``zero_sum`` keeps to the zero-sum
    policies (one constant K, no rounding, no performance adjustment); ``follows_result`` to those
    whose performance adjustment, if any, has no malus and no bonus for a loser or a draw."""
    raw: dict[str, Any] = {"k_factor": draw(k_factor_tables(constant_only=zero_sum))}
    maybe = lambda: draw(one_in[3]) == 0  # noqa: E731  (a key is present one time in three)
    initial = draw(ratings)
    if maybe():
        raw["initial_rating"] = initial
    else:
        initial = 1200.0
    if maybe():
        raw["scale"] = draw(scales)
    raw["rounding"] = "none" if zero_sum else draw(roundings)
    floor = None
    if maybe():
        floor = raw["floor"] = draw(ratings) if draw(one_in[4]) == 0 else initial - draw(offsets)
    if maybe():
        raw["difference_cap"] = draw(caps)
    if maybe():
        raw["home_advantage"] = draw(home_advantages)
    if maybe() and not zero_sum:
        performance = draw(st.one_of(st.sampled_from(["none", "sedma"]), sedma_tables))
        if follows_result:
            performance = {} if performance == "sedma" else performance
            if isinstance(performance, dict):
                performance.update(malus_per_bad_move=0.0, loser_bonus_share=0.0, draw_bonus_share=0.0)
        raw["performance"] = performance
    if maybe():
        raw["margin_of_victory"] = draw(margins)
    if maybe():
        low = initial if floor is None else floor
        season: dict[str, Any] = {
            "regress_to": draw(ratings) if draw(one_in[4]) == 0 else low + draw(offsets),
            "weight": draw(season_weights),
        }
        fixed = draw(season_sets)
        if fixed:
            season["set"] = fixed
        raw["season"] = season
    if maybe():
        raw["teams"] = draw(teams)
    if maybe():
        raw["initial_ratings"] = draw(initial_ratings)
    return raw


def load(raw: dict[str, Any]) -> tuple[str, RatingPolicy] | None:
    """``(toml text, policy)`` as the worker's loader reads the file, or ``None`` if it is rejected."""
    text = tomli_w.dumps(raw)
    try:
        return text, validate_policy(tomllib.loads(text), Path("drawn.toml"), text).build()
    except PolicyConfigError:
        return None


# --- matches -------------------------------------------------------------------------------------

counts = st.one_of(st.integers(0, 3), st.sampled_from([0, 1000]), st.integers(0, 1000))
stats = st.one_of(st.none(), st.none(), st.fixed_dictionaries({key: counts for key in STAT_KEYS}))
points = st.one_of(st.integers(0, 60).map(float), st.sampled_from([0.0, 1.0, 1e6]), st.floats(0, 1e6))
side_sizes = st.one_of(st.just(1), st.just(1), st.integers(1, 3), st.integers(1, 8))
outcomes = st.sampled_from(["side_a_won", "side_b_won", "draw"])
homes = st.sampled_from([None, "side_a", "side_b"])
seasons = st.sampled_from([None, *SEASONS])
below = {n: st.integers(0, n) for n in range(len(PLAYERS) + 1)}  # 0..n
placements = {n: st.one_of(st.integers(1, n), st.integers(1, 16)) for n in range(3, 17)}
side_counts = {n: st.integers(3, min(16, n)) for n in range(3, len(PLAYERS) + 1)}


@st.composite
def payloads(draw, index: int, pool: list[str]) -> dict[str, Any]:
    """One MatchFinished v1 message among the players of ``pool`` (taken in pool order from a
    drawn offset: few draws per match keep long histories cheap to generate)."""
    offset = draw(below[len(pool) - 1])
    order = pool[offset:] + pool[:offset]
    player = lambda pid: {"player_id": pid, "stats": draw(stats)}  # noqa: E731
    message: dict[str, Any] = {"schema_version": 1, "match_id": f"m{index}", "ladder": "drawn",
                               "finished_at": "2024-05-01T18:30:00Z"}
    if len(pool) >= 3 and draw(one_in[5]) == 0:
        n = draw(side_counts[len(pool)])
        extra = draw(below[len(pool) - n])  # players beyond one a side, two at most to each first side
        sides, at = [], 0
        for _ in range(n):
            size = 1 + min(extra, 2)
            extra -= size - 1
            sides.append({"players": [player(p) for p in order[at:at + size]], "placement": draw(placements[n])})
            at += size
        message["sides"] = sides
    else:
        a = min(draw(side_sizes), len(pool) - 1)
        b = min(draw(side_sizes), len(pool) - a)
        message["side_a"] = {"players": [player(p) for p in order[:a]]}
        message["side_b"] = {"players": [player(p) for p in order[a:a + b]]}
        message["outcome"] = draw(outcomes)
        home = draw(homes)
        if home:
            message["home"] = home
        if draw(one_in[4]) > 0:
            message["score"] = {"side_a": draw(points), "side_b": draw(points)}
    season = draw(seasons)
    if season:
        message["season"] = season
    return message


class Case:
    """A drawn policy file (as TOML), the policy the loader built from it, and a history of
    matches; shown as the TOML text and one line per match when hypothesis reports a failure."""

    def __init__(self, text: str, policy: RatingPolicy, matches: list[Match | FreeForAll]) -> None:
        self.text, self.policy, self.matches = text, policy, matches

    def __repr__(self) -> str:
        lines = [f"policy file:\n{self.text}", f"{len(self.matches)} matches:"]
        for m in self.matches:
            if isinstance(m, FreeForAll):
                sides = " | ".join(f"{','.join(p.player_id for p in s)}@{pl}" for s, pl in zip(m.sides, m.placements))
                lines.append(f"  {m.match_id}: free-for-all {sides} season={m.season}")
            else:
                perf = {p.player_id: p.performance for p in m.side_a + m.side_b
                        if any(getattr(p.performance, k) for k in STAT_KEYS)}
                lines.append(f"  {m.match_id}: {','.join(p.player_id for p in m.side_a)} vs "
                             f"{','.join(p.player_id for p in m.side_b)} {m.outcome.value} home={m.home} "
                             f"scores={m.scores} season={m.season}" + (f" stats={perf}" if perf else ""))
        return "\n".join(lines)


pool_sizes = st.integers(2, len(PLAYERS))
distinct_counts = st.integers(1, 10)
round_counts = st.integers(1, 10)


@st.composite
def cases(draw, zero_sum: bool = False, follows_result: bool = False) -> Case:
    """A validated policy and a history: up to 10 distinct matches, played in rounds (1 to 10 times
    over, with fresh match ids) so that ratings drift over histories of up to 100 matches."""
    loaded = load(draw(policy_tables(zero_sum, follows_result)))
    assume(loaded is not None)
    text, policy = loaded  # type: ignore[misc]
    pool = PLAYERS[: draw(pool_sizes)]
    distinct = []
    for index in range(draw(distinct_counts)):
        message = parse_match_finished(draw(payloads(index, pool)))  # the schema accepts it
        distinct.append(to_engine_match(json.loads(message.canonical_json())))  # as the worker maps it
    rounds = draw(round_counts)
    matches = [replace(m, match_id=f"r{r}-{m.match_id}") for r in range(rounds) for m in distinct]
    return Case(text, policy, matches)


# --- folding -------------------------------------------------------------------------------------


def refusal_is_stated(policy: RatingPolicy, match: Match | FreeForAll, error: UnratableMatch) -> bool:
    """True when the policy states that it refuses this match, with this reason code."""
    sides = match.sides if isinstance(match, FreeForAll) else (match.side_a, match.side_b)
    if error.reason_code == "uneven_sides":
        return not policy.uneven_sides and len({len(s) for s in sides}) > 1
    if error.reason_code == "unsupported_match":
        return policy.margin_of_victory is not None and isinstance(match, FreeForAll)
    if error.reason_code == "missing_score":
        return policy.margin_of_victory is not None and match.scores is None
    return False


@dataclass
class Fold:
    """The rated matches ``(match, changes)`` of a history, and the first exception, if any."""

    rated: list[tuple[Match | FreeForAll, tuple[RatingChange, ...]]]
    error: BaseException | None = None
    at: str | None = None


def fold(case: Case) -> Fold:
    """Apply the case's matches in order, skipping the ones the policy states it refuses."""
    standings: dict[str, Standing] = {}
    result = Fold([])
    for match in case.matches:
        try:
            for rated in replay_changes([match], case.policy, standings):
                result.rated.append(rated)
        except UnratableMatch as error:
            if refusal_is_stated(case.policy, match, error):
                continue
            result.error, result.at = error, match.match_id
            break
        except Exception as error:  # noqa: BLE001 - the first property reports it
            result.error, result.at = error, match.match_id
            break
    return result


def sides_of(match: Match | FreeForAll) -> tuple[tuple[str, ...], ...]:
    if isinstance(match, FreeForAll):
        return tuple(tuple(p.player_id for p in side) for side in match.sides)
    return tuple(p.player_id for p in match.side_a), tuple(p.player_id for p in match.side_b)


def placements_of(match: Match | FreeForAll) -> tuple[int, ...]:
    if isinstance(match, FreeForAll):
        return match.placements
    return {Outcome.SIDE_A_WON: (1, 2), Outcome.SIDE_B_WON: (2, 1), Outcome.DRAW: (1, 1)}[match.outcome]


# --- the properties ------------------------------------------------------------------------------


@seed(SEED)
@SAFETY
@given(case=cases())
def test_no_exception_but_the_refusals_a_policy_states(case: Case) -> None:
    """Folding any history raises nothing; a match is refused only with a reason the policy states
    (uneven sides under ``uneven = "reject"``, a missing score or a free-for-all under a margin of
    victory)."""
    result = fold(case)
    assert result.error is None, f"{result.at}: {type(result.error).__name__}: {result.error}"


@seed(SEED)
@SAFETY
@given(case=cases())
def test_every_rating_is_finite(case: Case) -> None:
    """Every rating before and after, every K, score and floor adjustment is a finite number."""
    for match, changes in fold(case).rated:
        for c in changes:
            values = (c.rating_before, c.rating_after, c.k_factor, c.expected_score, c.actual_score, c.floor_points)
            assert all(math.isfinite(v) for v in values), (match.match_id, c)


@seed(SEED)
@SAFETY
@given(case=cases())
def test_k_factor_is_never_negative(case: Case) -> None:
    """The K-factor a change reports (after any margin multiplier or free-for-all division) is >= 0."""
    for match, changes in fold(case).rated:
        for c in changes:
            assert c.k_factor >= 0, (match.match_id, c)


@seed(SEED)
@SAFETY
@given(case=cases())
def test_expected_and_actual_scores_lie_in_zero_one(case: Case) -> None:
    """Expected and actual scores are in [0, 1] (the RatingChanged v1 contract)."""
    for match, changes in fold(case).rated:
        for c in changes:
            assert 0.0 <= c.expected_score <= 1.0, (match.match_id, c)
            assert 0.0 <= c.actual_score <= 1.0, (match.match_id, c)


def scores_follow_the_result(policy: RatingPolicy) -> bool:
    """True when no performance adjustment can move an actual score against the result: none at
    all, or one without a malus and without a bonus for a loser or a draw (a winner's bonus is
    clamped at 1)."""
    p = policy.performance
    if p is None:
        return True
    no_malus = p.malus_per_bad_move == 0 or p.max_malus == 0
    return no_malus and p.loser_bonus_share == 0 and p.draw_bonus_share == 0


@seed(SEED)
@SAFETY
@given(case=cases(follows_result=True))
def test_ratings_move_in_the_direction_of_the_result(case: Case) -> None:
    """Without a performance malus: a player whose side beat every other side never loses rating,
    one whose side lost to every other side never gains, and in a two-sided draw the rating moves
    toward the opponent (down for the side expected to score more than 0.5, up for the other).
    Under a rounding policy the comparison is with the rounded rating before (a rating that is not
    a whole number, e.g. after a season regression, may round by up to 0.5, never across the
    result's direction); with a floor, no rating is below it."""
    assume(scores_follow_the_result(case.policy))
    policy = case.policy
    for match, changes in fold(case).rated:
        by_player = {c.player_id: c for c in changes}
        placements = placements_of(match)
        for i, side in enumerate(sides_of(match)):
            others = [placements[j] for j in range(len(placements)) if j != i]
            for pid in side:
                c = by_player[pid]
                if policy.floor is not None:
                    assert c.rating_before >= policy.floor and c.rating_after >= policy.floor, (match.match_id, c)
                start = policy.round(c.rating_before)
                if all(placements[i] < o for o in others):
                    assert c.rating_after >= start, (match.match_id, "winner lost", c)
                elif all(placements[i] > o for o in others):
                    top = start if policy.floor is None else max(start, policy.floor)
                    assert c.rating_after <= top, (match.match_id, "loser gained", c)
                elif len(others) == 1 and c.expected_score > 0.5:  # a two-sided draw, as favourite
                    top = start if policy.floor is None else max(start, policy.floor)
                    assert c.rating_after <= top, (match.match_id, "favourite gained in a draw", c)
                elif len(others) == 1 and c.expected_score < 0.5:  # a two-sided draw, as underdog
                    assert c.rating_after >= start, (match.match_id, "underdog lost in a draw", c)


def is_zero_sum(policy: RatingPolicy) -> bool:
    """A zero-sum policy: one constant K for everybody, no rounding, no performance adjustment."""
    return policy.k_factor.__class__ is ConstantK and policy.rounding is Rounding.NONE and policy.performance is None


@seed(SEED)
@SAFETY
@given(case=cases(zero_sum=True))
def test_changes_sum_to_zero_where_the_policy_is_zero_sum(case: Case) -> None:
    """Under a zero-sum policy, a match between sides of equal size in which no floor lifted a
    rating moves the ratings by a total of zero (up to the rounding error of the doubles)."""
    assume(is_zero_sum(case.policy))
    for match, changes in fold(case).rated:
        if len({len(side) for side in sides_of(match)}) > 1 or any(c.floor_points for c in changes):
            continue
        total = math.fsum(c.rating_after - c.rating_before for c in changes)
        k = max(abs(c.k_factor) for c in changes)  # abs: a negative K is the K property's failure, not this one's
        tolerance = 1e-9 * k + 4 * math.fsum(math.ulp(abs(c.rating_before) + abs(c.rating_after)) for c in changes)
        assert abs(total) <= tolerance, (match.match_id, total, changes)
