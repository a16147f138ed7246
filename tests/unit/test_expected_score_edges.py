"""``engine.expected_score`` and the inline copies of its expression agree, bit for bit, at the edges.

The flat 1v1 path of :func:`engine.rate` and the 1v1 path of :mod:`engine.fast_replay` write the
logistic expression inline for speed (with the same saturation); the team and general paths call
:func:`engine.expected_score`. Here every path is driven at gaps just below and just above where
``10 ** x`` overflows a double, at tiny and huge scales, and compared with the one definition.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine import ConstantK, Match, Outcome, Participant, RatingPolicy, expected_score, fast_replay, rate
from engine.elo import SATURATION_EXPONENT

A, A2, B, B2 = (Participant(p) for p in ("a", "a2", "b", "b2"))

# (rating of a, rating of b, scale): gaps around the overflow of 10 ** x, in both directions.
EDGES = [
    (0.0, 0.0, 400.0),
    (0.0, 400.0, 400.0),
    (0.0, 400.0 * 308.25, 400.0),  # 10^308.25 = 1.78e308: the last finite powers
    (0.0, 400.0 * 308.2547, 400.0),
    (0.0, 400.0 * 308.2548, 400.0),  # past 2^1024: overflow, saturated
    (0.0, 400.0 * 308.26, 400.0),
    (-1e9, 1e9, 400.0),
    (1e9, -1e9, 400.0),
    (0.0, 1.0, 1e-300),
    (1.0, 0.0, 1e-300),
    (3.0, 3.0, 5e-324),
    (-1e9, 1e9, 1e300),
    (1234.5, 1234.5 + 1e-9, 1e-308),
]
EDGES += [(b, a, s) for a, b, s in EDGES]

BASIC = RatingPolicy(ConstantK(1))  # the flat paths
GENERAL = RatingPolicy(ConstantK(1), floor=-1e300)  # a floor far below: the general path


def with_scale(policy: RatingPolicy, scale: float) -> RatingPolicy:
    return replace(policy, scale=scale)


def test_the_edges_reach_both_sides_of_the_overflow() -> None:
    """The list holds gaps whose 10 ** x is finite and gaps where it overflows."""
    exponents = [(b - a) / s for a, b, s in EDGES]
    assert any(0 < x < SATURATION_EXPONENT for x in exponents) and any(x > SATURATION_EXPONENT for x in exponents)


@pytest.mark.parametrize(("ra", "rb", "scale"), EDGES)
def test_every_path_of_rate_gives_expected_score(ra, rb, scale) -> None:
    """1v1 flat path, 2v2 basic path, general path and free-for-all: the same E as expected_score."""
    want_a, want_b = expected_score(ra, rb, scale), expected_score(rb, ra, scale)
    assert 0.0 <= want_a <= 1.0 and 0.0 <= want_b <= 1.0
    ratings = {"a": ra, "a2": ra, "b": rb, "b2": rb}
    for policy in (with_scale(BASIC, scale), with_scale(GENERAL, scale)):
        for match in (Match("1", (A,), (B,), Outcome.DRAW), Match("2", (A, A2), (B, B2), Outcome.DRAW)):
            changes = rate(match, ratings, policy)
            assert [c.expected_score for c in changes] == [want_a] * len(match.side_a) + [want_b] * len(match.side_b)


@pytest.mark.parametrize(("ra", "rb", "scale"), EDGES)
def test_fast_replay_inline_expression_at_the_edge_gap(ra, rb, scale) -> None:
    """fast_replay's inline 1v1 path and its team path, from ratings at the edge gap, end where
    folding rate (which calls expected_score there) ends, bit for bit. A basic policy has one
    initial rating, so the replayer's state is seeded directly with the two ratings."""
    policy = with_scale(RatingPolicy(ConstantK(1)), scale)
    replayer = fast_replay.Replayer(policy)
    replayer._state.update({"a": [ra, 1], "a2": [ra, 1], "b": [rb, 1], "b2": [rb, 1]})
    replayer.feed([Match("1", (A,), (B,), Outcome.SIDE_A_WON), Match("2", (A2,), (B2,), Outcome.SIDE_B_WON)])
    replayer.feed([Match("3", (A, A2), (B, B2), Outcome.DRAW)])
    # the same three matches through rate (expected_score), from the same ratings
    ratings = {"a": ra, "a2": ra, "b": rb, "b2": rb}
    for match in (Match("1", (A,), (B,), Outcome.SIDE_A_WON), Match("2", (A2,), (B2,), Outcome.SIDE_B_WON),
                  Match("3", (A, A2), (B, B2), Outcome.DRAW)):
        for change in rate(match, ratings, policy):
            ratings[change.player_id] = change.rating_after
    assert {p: r for p, (r, _) in replayer.ratings().items()} == ratings
