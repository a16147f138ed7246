"""``worker.mapping``: wire payloads to engine matches, with shared :class:`engine.Performance`s.

The reference is the dataclass built field by field from the payload's ``stats`` (what the
mapping did before it shared objects); the mapping must give an equal value every time, one
object per distinct value while the cache holds it, and a cache that never outgrows its limit.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import worker.mapping as mapping
from engine import Match, Performance
from tests.profiles import examples
from worker.mapping import PERFORMANCE_CACHE_LIMIT, to_engine_match

COUNT = st.integers(min_value=0, max_value=1000)  # the schema's StatCount
STATS = st.fixed_dictionaries({}, optional={"bad_moves": COUNT, "won_by_16": COUNT, "won_by_24": COUNT,
                                           "won_by_4_and_last": COUNT})


def _payload(stats_a: dict[str, Any], stats_b: dict[str, Any]) -> dict[str, Any]:
    return {
        "match_id": "m1",
        "side_a": {"players": [{"player_id": "a", "stats": stats_a}]},
        "side_b": {"players": [{"player_id": "b", "stats": stats_b}]},
        "outcome": "side_a_won",
    }


def _performances(match: Match) -> tuple[Performance, Performance]:
    return match.side_a[0].performance, match.side_b[0].performance


@settings(max_examples=examples(300))
@given(stats_a=STATS, stats_b=STATS)
def test_performance_equals_the_stats_field_by_field(stats_a: dict[str, int], stats_b: dict[str, int]) -> None:
    match = to_engine_match(_payload(stats_a, stats_b))
    assert isinstance(match, Match)
    assert _performances(match) == (Performance(**stats_a), Performance(**stats_b))
    again = to_engine_match(_payload(stats_b, stats_a))
    assert isinstance(again, Match)
    assert _performances(again) == (Performance(**stats_b), Performance(**stats_a))


def _fields(p: Performance) -> list[tuple[type, object]]:
    return [(type(v), v) for v in (p.bad_moves, p.won_by_16, p.won_by_24, p.won_by_4_and_last)]


def test_counts_that_are_not_plain_ints_keep_their_own_values() -> None:
    """True == 1 == 1.0 and hash alike: a ledger row that skipped validation keeps exactly the
    values it holds (as the mapping gave before it shared objects), whatever was mapped before it;
    a value that cannot be hashed maps as before (a classic ladder ignores statistics)."""
    for first, then in (({"bad_moves": 1}, {"bad_moves": True}), ({"bad_moves": True}, {"bad_moves": 1}),
                        ({"won_by_16": 2}, {"won_by_16": 2.0}), ({"won_by_16": 2.0}, {"won_by_16": 2})):
        to_engine_match(_payload(first, first))
        match = to_engine_match(_payload(then, first))
        assert isinstance(match, Match)
        a, b = _performances(match)
        assert _fields(a) == _fields(Performance(**then))
        assert _fields(b) == _fields(Performance(**first))
    odd = to_engine_match(_payload({"bad_moves": [1]}, {"won_by_24": {"x": 1}}))
    assert isinstance(odd, Match)
    assert _performances(odd) == (Performance(bad_moves=[1]), Performance(won_by_24={"x": 1}))  # type: ignore[arg-type]


def test_zero_counts_are_the_no_stats_performance() -> None:
    zero = to_engine_match(_payload({"bad_moves": 0}, {}))
    assert isinstance(zero, Match)
    a, b = _performances(zero)
    assert a is b


def test_equal_stats_share_one_performance_and_the_cache_stays_bounded() -> None:
    first = to_engine_match(_payload({"bad_moves": 2, "won_by_16": 1}, {"bad_moves": 2, "won_by_16": 1}))
    assert isinstance(first, Match)
    a, b = _performances(first)
    assert a is b
    for n in range(PERFORMANCE_CACHE_LIMIT + 10):
        match = to_engine_match(_payload({"bad_moves": n % 1001, "won_by_24": n // 1001}, {}))
        assert isinstance(match, Match)
        assert match.side_a[0].performance == Performance(bad_moves=n % 1001, won_by_24=n // 1001)
        assert len(mapping._performances) <= PERFORMANCE_CACHE_LIMIT
    assert len(mapping._performances) > 1  # it holds values, within its limit
    zero = to_engine_match(_payload({}, {"won_by_4_and_last": 0}))  # after the cache started over
    assert isinstance(zero, Match)
    assert zero.side_a[0].performance is zero.side_b[0].performance


def test_played_at_is_the_finished_at_of_the_payload_in_epoch_seconds() -> None:
    """A match's played_at is its own finished_at: 2024-05-01T18:30:00Z is 1714588200 s after the
    epoch (19844 days × 86400 s + 18.5 h × 3600 s, worked out by hand), for both match shapes."""
    two = to_engine_match({**_payload({}, {}), "finished_at": "2024-05-01T18:30:00Z"})
    ffa = to_engine_match({"match_id": "f", "finished_at": "2024-05-01T18:30:00.250000Z", "sides": [
        {"players": [{"player_id": p}], "placement": n} for n, p in enumerate("abc", 1)]})
    assert two.played_at == 19844 * 86400 + 18.5 * 3600 == 1714588200.0
    assert ffa.played_at == 1714588200.25


def test_a_players_weight_is_mapped_and_defaults_to_one() -> None:
    """An optional ``weight`` per player (partial play) reaches the participant; absent or null is 1."""
    payload = _payload({}, {})
    payload["side_a"]["players"][0]["weight"] = 0.25
    payload["side_b"]["players"][0]["weight"] = None
    match = to_engine_match(payload)
    assert isinstance(match, Match)
    assert (match.side_a[0].weight, match.side_b[0].weight) == (0.25, 1.0)
    assert to_engine_match(_payload({}, {})).side_a[0].weight == 1.0
