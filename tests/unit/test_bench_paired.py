"""The paired part's arithmetic (worker/devtools/bench/paired.py): rotation, per-round ratios, medians."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.devtools.bench.paired import base_count, round_order, round_ratios, spread


def test_each_run_takes_each_place_once_over_as_many_rounds_as_runs() -> None:
    labels = ["noop", "noop_unbatched", "rating_w2", "rating_w8"]
    orders = [round_order(labels, r) for r in range(len(labels))]
    assert orders[0] == labels
    assert orders[1] == ["noop_unbatched", "rating_w2", "rating_w8", "noop"]
    for place in range(len(labels)):
        assert sorted(order[place] for order in orders) == sorted(labels)
    assert round_order(labels, len(labels)) == labels


def test_a_round_compares_with_the_better_no_op_and_with_the_base_count() -> None:
    r = round_ratios(1000.0, 1250.0, {2: 2500.0, 8: 2250.0}, main=2, base=2)
    assert r["baseline_per_s"] == 1250.0
    assert r["rating_over_noop"] == 2.0
    assert r["over_base"] == {8: 0.9}
    # no unbatched no-op (batching off): the batched one is the baseline
    assert round_ratios(1000.0, None, {2: 1500.0}, main=2, base=2) == {
        "baseline_per_s": 1000.0, "rating_over_noop": 1.5, "over_base": {}}
    with pytest.raises(KeyError):
        round_ratios(1000.0, None, {8: 1500.0}, main=2, base=2)


def test_the_base_count_is_two_when_paired() -> None:
    assert base_count([1, 2, 8]) == 2
    assert base_count([4, 8]) == 4
    assert base_count([1]) == 1


@given(st.lists(st.floats(min_value=0.01, max_value=100.0), min_size=1, max_size=12))
def test_the_figure_is_the_median_with_the_extremes_beside_it(values: list[float]) -> None:
    s = spread(values)
    assert s["median"] == round(statistics.median(values), 3)
    assert s["min"] <= s["median"] <= s["max"]
    assert s["per_round"] == [round(v, 3) for v in values]
    assert (s["min"], s["max"]) == (round(min(values), 3), round(max(values), 3))
