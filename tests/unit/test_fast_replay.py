"""``engine.fast_replay`` against ``engine.replay``: the same standings, bit for bit.

This is an equivalence test of two implementations of one fold: the reference values come from
:func:`engine.replay.replay` (itself checked against the golden Sedma rows and hand-worked Elo
examples elsewhere), and the fast path must give exactly the same floats and game counts.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import engine.fast_replay as fast_replay
from engine import (
    SEDMA_K,
    BandedK,
    ConstantK,
    Match,
    Outcome,
    Participant,
    Performance,
    RatingPolicy,
    Rounding,
    SedmaAdjustment,
)
from engine.fast_replay import Replayer
from engine.replay import replay
from tests.profiles import examples
from worker.mapping import to_engine_match
from worker.ops.generate import generate_sedma_matches
from worker.policy.ladders import load_ladders
from worker.settings import DEFAULT_LADDERS_FILE

POLICIES = load_ladders(DEFAULT_LADDERS_FILE)
EXTRA_POLICIES = {
    "banded-unrounded": RatingPolicy(k_factor=SEDMA_K, initial_rating=1000, rounding=Rounding.NONE),
    "constant-rounded-sedma": RatingPolicy(k_factor=ConstantK(24.5), rounding=Rounding.HALF_EVEN,
                                           performance=SedmaAdjustment()),
    "banded-floats": RatingPolicy(k_factor=BandedK(((1100.5, 50.0), (1500.0, 20.0)), 10.0), scale=300.0),
}


def generated(count: int, seed: int, players: int = 40, team_share: float = 0.3, draws: float = 0.1) -> list[Match]:
    """Generated Sedma matches (1v1 and 2v2) as engine matches, with some outcomes turned into draws."""
    rng = random.Random(seed)
    matches = []
    for m in generate_sedma_matches(count, players=players, seed=seed, team_share=team_share):
        match = to_engine_match(m.model_dump(mode="json"))
        if rng.random() < draws:
            match = replace(match, outcome=Outcome.DRAW)
        matches.append(match)
    return matches


def _rg(standings):
    """(rating, games played) per player: what the fast replay keeps (and verify compares)."""
    return {p: (s.rating, s.games_played) for p, s in standings.items()}


@pytest.mark.parametrize("policy_name", sorted(POLICIES) + sorted(EXTRA_POLICIES))
@pytest.mark.parametrize("team_share", [0.0, 0.3, 1.0])
def test_same_standings_as_replay(policy_name: str, team_share: float) -> None:
    policy = POLICIES.get(policy_name) or EXTRA_POLICIES[policy_name]
    matches = generated(3000, seed=11, team_share=team_share)
    want = replay(matches, policy)
    got = fast_replay.replay(matches, policy)
    assert {p: (s.rating, s.games_played) for p, s in got.items()} == {
        p: (s.rating, s.games_played) for p, s in want.items()
    }
    # bit for bit, not just ==: the same float representation
    assert {p: s.rating.hex() for p, s in got.items()} == {p: s.rating.hex() for p, s in want.items()}


def test_incremental_feeding_equals_one_pass() -> None:
    policy = POLICIES["sedma"]
    matches = generated(2000, seed=3)
    replayer = Replayer(policy)
    for start in range(0, len(matches), 333):
        replayer.feed(iter(matches[start:start + 333]))
    assert replayer.matches == len(matches)
    assert _rg(replayer.standings()) == _rg(replay(matches, policy))
    assert replayer.ratings() == {p: (s.rating, s.games_played) for p, s in replay(matches, policy).items()}


def test_cleared_caches_change_nothing(monkeypatch) -> None:
    monkeypatch.setattr(fast_replay, "CACHE_LIMIT", 3)
    for policy in (POLICIES["sedma"], EXTRA_POLICIES["banded-unrounded"]):
        matches = generated(1500, seed=5)
        assert _rg(fast_replay.replay(matches, policy)) == _rg(replay(matches, policy))


def test_a_player_on_both_sides_is_folded_as_replay_does() -> None:
    """Not a valid message (the schema refuses it), but the two folds must still agree."""
    policy = POLICIES["elo"]
    alice, bob = Participant("alice"), Participant("bob")
    matches = [
        Match("1", (alice,), (bob,), Outcome.SIDE_A_WON),
        Match("2", (alice,), (alice,), Outcome.SIDE_B_WON),
        Match("3", (alice, bob), (alice,), Outcome.DRAW),
    ]
    assert _rg(fast_replay.replay(matches, policy)) == _rg(replay(matches, policy))


def test_an_empty_side_is_refused_like_rate() -> None:
    with pytest.raises(ValueError):
        fast_replay.replay([Match("x", (), (Participant("bob"),), Outcome.DRAW)], POLICIES["elo"])


counts = st.integers(min_value=0, max_value=30)
participants = st.builds(
    Participant, st.sampled_from([f"p{i}" for i in range(8)]),
    st.builds(Performance, counts, counts, counts, counts),
)
matches_strategy = st.lists(
    st.builds(Match, st.just("m"), st.lists(participants, min_size=1, max_size=3).map(tuple),
              st.lists(participants, min_size=1, max_size=3).map(tuple), st.sampled_from(list(Outcome))),
    max_size=60,
)


@settings(max_examples=examples(150), deadline=None)
@given(matches=matches_strategy, policy_name=st.sampled_from(sorted(POLICIES) + sorted(EXTRA_POLICIES)))
def test_any_matches_same_standings(matches: list[Match], policy_name: str) -> None:
    policy = POLICIES.get(policy_name) or EXTRA_POLICIES[policy_name]
    assert _rg(fast_replay.replay(matches, policy)) == _rg(replay(matches, policy))


@pytest.mark.parametrize("bands", [(), ((1000.0, 40),), ((900, 50), (1000, 40), (1100, 30), (1250.5, 20))])
@pytest.mark.parametrize("rounding", [Rounding.NONE, Rounding.HALF_EVEN])
def test_banded_k_of_any_length_same_standings(bands, rounding) -> None:
    """K unrolled for up to three bands, a memo beyond: both as engine.replay gives them."""
    policy = RatingPolicy(k_factor=BandedK(bands, 16), initial_rating=1000, rounding=rounding,
                          performance=SedmaAdjustment())
    matches = generated(1500, seed=9, team_share=0.2)
    got, want = fast_replay.replay(matches, policy), replay(matches, policy)
    assert {p: s.rating.hex() for p, s in got.items()} == {p: s.rating.hex() for p, s in want.items()}
    assert _rg(got) == _rg(want)


@pytest.mark.parametrize("initial", [float("inf"), float("-inf"), float("nan")])
def test_a_non_finite_rating_fails_to_round_as_replay_does(initial: float) -> None:
    policy = replace(POLICIES["sedma"], initial_rating=initial)
    matches = generated(5, seed=1, team_share=0.0)
    with pytest.raises(Exception) as want:
        replay(matches, policy)
    with pytest.raises(want.type):
        fast_replay.replay(matches, policy)
