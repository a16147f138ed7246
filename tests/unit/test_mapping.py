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
from worker.mapping import PERFORMANCE_CACHE_LIMIT, to_engine_match

COUNT = st.integers(min_value=0, max_value=1000)  # the schema's StatCount
STATS = st.fixed_dictionaries({}, optional={"bad_moves": COUNT, "won_by_16": COUNT, "won_by_24": COUNT,
                                           "won_by_4_and_last": COUNT})


def _payload(stats_a: dict[str, int], stats_b: dict[str, int]) -> dict[str, Any]:
    return {
        "match_id": "m1",
        "side_a": {"players": [{"player_id": "a", "stats": stats_a}]},
        "side_b": {"players": [{"player_id": "b", "stats": stats_b}]},
        "outcome": "side_a_won",
    }


def _performances(match: Match) -> tuple[Performance, Performance]:
    return match.side_a[0].performance, match.side_b[0].performance


@settings(max_examples=300)
@given(stats_a=STATS, stats_b=STATS)
def test_performance_equals_the_stats_field_by_field(stats_a: dict[str, int], stats_b: dict[str, int]) -> None:
    match = to_engine_match(_payload(stats_a, stats_b))
    assert isinstance(match, Match)
    assert _performances(match) == (Performance(**stats_a), Performance(**stats_b))
    again = to_engine_match(_payload(stats_b, stats_a))
    assert isinstance(again, Match)
    assert _performances(again) == (Performance(**stats_b), Performance(**stats_a))


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
