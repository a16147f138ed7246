"""The Sedma performance Elo against the seed's C# reference vectors and hand-computed cases.

Reference values come from ``tests/data/golden/sedma_reference.csv`` (computed by the
seed's C# ``CalculateNewRatings`` under Mono) and from hand calculations written out below with the
seed's formula (``docs/design/policies.md``): K by band, S_adj = clamp(base + share * bonus - malus, 0, 1),
E = 1 / (1 + 10^((R_opp - R) / 400)), new = round_half_even(R + K * (S_adj - E)).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine import (
    SEDMA_K,
    Match,
    Outcome,
    Participant,
    Performance,
    RatingPolicy,
    Rounding,
    SedmaAdjustment,
    calculate_new_ratings,
    rate,
)

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
GOLDEN_CSV = REPO_ROOT / "tests" / "data" / "golden" / "sedma_reference.csv"
EXPECTED_ROWS = 5010

INPUT_COLUMNS = (
    "rating_a",
    "rating_b",
    "a_won",
    "bad_moves_a",
    "bad_moves_b",
    "won_by_16_a",
    "won_by_16_b",
    "won_by_24_a",
    "won_by_24_b",
    "won_by_4_and_last_a",
    "won_by_4_and_last_b",
)
OUTPUT_COLUMNS = ("new_rating_a", "new_rating_b")

SEDMA_POLICY = RatingPolicy(k_factor=SEDMA_K, rounding=Rounding.HALF_EVEN, performance=SedmaAdjustment())


@dataclass(frozen=True)
class GoldenRow:
    line: int
    rating_a: int
    rating_b: int
    a_won: bool
    bad_moves_a: int
    bad_moves_b: int
    won_by_16_a: int
    won_by_16_b: int
    won_by_24_a: int
    won_by_24_b: int
    won_by_4_and_last_a: int
    won_by_4_and_last_b: int
    new_rating_a: int
    new_rating_b: int

    def inputs(self) -> tuple:
        return (
            self.rating_a,
            self.rating_b,
            self.a_won,
            self.bad_moves_a,
            self.bad_moves_b,
            self.won_by_16_a,
            self.won_by_16_b,
            self.won_by_24_a,
            self.won_by_24_b,
            self.won_by_4_and_last_a,
            self.won_by_4_and_last_b,
        )


def _load_golden() -> list[GoldenRow]:
    if not GOLDEN_CSV.is_file():
        pytest.fail(f"golden file not found at {GOLDEN_CSV} (tests/data/golden/ of the repository)")
    with GOLDEN_CSV.open(newline="") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames or ()) == INPUT_COLUMNS + OUTPUT_COLUMNS, reader.fieldnames
        rows = []
        for line, raw in enumerate(reader, start=2):
            assert raw["a_won"] in ("0", "1"), f"line {line}: a_won must be 0 or 1, got {raw['a_won']!r}"
            values = {name: int(raw[name]) for name in INPUT_COLUMNS + OUTPUT_COLUMNS if name != "a_won"}
            rows.append(GoldenRow(line=line, a_won=raw["a_won"] == "1", **values))
    return rows


@pytest.fixture(scope="module")
def golden_rows() -> list[GoldenRow]:
    return _load_golden()


def _report(mismatches: list[tuple[GoldenRow, tuple[int, int]]], limit: int = 5) -> str:
    lines = [f"{len(mismatches)} of {EXPECTED_ROWS} golden rows differ; first {min(limit, len(mismatches))}:"]
    for row, got in mismatches[:limit]:
        lines.append(
            f"  line {row.line}: inputs={row.inputs()} expected=({row.new_rating_a}, {row.new_rating_b}) got={got}"
        )
    return "\n".join(lines)


def test_golden_file_holds_all_5010_reference_rows(golden_rows):
    """The golden file is found in the repository and holds exactly 5,010 cases."""
    assert len(golden_rows) == EXPECTED_ROWS


def test_seed_port_reproduces_every_golden_row_exactly(golden_rows):
    """calculate_new_ratings gives the C# reference's integers for all 5,010 golden rows."""
    mismatches = []
    for row in golden_rows:
        got = calculate_new_ratings(*row.inputs())
        if got != (row.new_rating_a, row.new_rating_b):
            mismatches.append((row, got))
    assert len(golden_rows) == EXPECTED_ROWS
    assert not mismatches, _report(mismatches)


def test_seed_port_returns_python_ints(golden_rows):
    """calculate_new_ratings returns a pair of ints, like the C# ref ints it replaces."""
    new_a, new_b = calculate_new_ratings(*golden_rows[0].inputs())
    assert type(new_a) is int and type(new_b) is int


def test_general_rate_entry_point_agrees_with_every_golden_row(golden_rows):
    """engine.rate with a 1v1 Sedma policy gives the golden integers for all 5,010 rows."""
    mismatches = []
    for row in golden_rows:
        match = Match(
            match_id=f"golden-{row.line}",
            side_a=(Participant("a", Performance(row.bad_moves_a, row.won_by_16_a, row.won_by_24_a, row.won_by_4_and_last_a)),),
            side_b=(Participant("b", Performance(row.bad_moves_b, row.won_by_16_b, row.won_by_24_b, row.won_by_4_and_last_b)),),
            outcome=Outcome.SIDE_A_WON if row.a_won else Outcome.SIDE_B_WON,
        )
        change_a, change_b = rate(match, {"a": row.rating_a, "b": row.rating_b}, SEDMA_POLICY)
        assert (change_a.player_id, change_b.player_id) == ("a", "b")
        got = (change_a.rating_after, change_b.rating_after)
        if got != (float(row.new_rating_a), float(row.new_rating_b)) or not all(float(r).is_integer() for r in got):
            mismatches.append((row, got))
    assert len(golden_rows) == EXPECTED_ROWS
    assert not mismatches, _report(mismatches)


# --- hand-computed cases -------------------------------------------------------------------------
#
# Each case: (rating_a, rating_b, a_won, bad_a, bad_b, w16_a, w16_b, w24_a, w24_b, w4l_a, w4l_b) ->
# (new_a, new_b). The arithmetic is in the comment; no value was taken from the code under test.
# Every final value is far from a .5 boundary, so 32-bit float noise (~1e-7 in S) cannot move it.

HAND_CASES = [
    pytest.param(
        # Equal ratings: E_A = E_B = 1 / (1 + 10^0) = 0.5; both 1500 -> K = 32.
        # A wins, 2 rounds won by 16 (+0.10), 1 bad move (-0.02): S_A = 1 + 0.10 - 0.02 = 1.08 -> clamp 1.0
        #   new_A = 1500 + 32 * (1.0 - 0.5) = 1516
        # B loses, 3 rounds won by 16: bonus 0.15 at 10 % = 0.015: S_B = 0.015
        #   new_B = 1500 + 32 * (0.015 - 0.5) = 1500 - 15.52 = 1484.48 -> 1484
        (1500, 1500, True, 1, 0, 2, 3, 0, 0, 0, 0),
        (1516, 1484),
        id="winner-clamped-to-1-loser-bonus-at-10-percent",
    ),
    pytest.param(
        # Equal ratings, E = 0.5, K = 32. A wins with 30 bad moves: malus min(0.60, 0.30) = 0.30,
        #   S_A = 1 - 0.30 = 0.70; new_A = 1500 + 32 * 0.20 = 1506.4 -> 1506
        # B loses, nothing: S_B = 0; new_B = 1500 - 16 = 1484
        (1500, 1500, True, 30, 0, 0, 0, 0, 0, 0, 0),
        (1506, 1484),
        id="bad-move-malus-capped-at-0.3",
    ),
    pytest.param(
        # Equal ratings, E = 0.5, K = 32. A wins with 10 bad moves (-0.20) and 1 round won by 24 (+0.10):
        #   S_A = 1 + 0.10 - 0.20 = 0.90; new_A = 1500 + 32 * 0.40 = 1512.8 -> 1513
        # B loses with 5 bad moves: S_B = 0 - 0.10 -> clamp 0.0; new_B = 1500 - 16 = 1484
        (1500, 1500, True, 10, 5, 0, 0, 1, 0, 0, 0),
        (1513, 1484),
        id="bonus-and-malus-combine-loser-clamped-to-0",
    ),
    pytest.param(
        # A = 1000 (K 40), B = 2200 (K 16). E_A = 1 / (1 + 10^(1200/400)) = 1/1001 = 0.000999001,
        #   E_B = 1000/1001 = 0.999000999.
        # A wins (upset), no stats: new_A = 1000 + 40 * (1 - 0.000999001) = 1039.96004 -> 1040
        # B loses with every bonus counter at 8, each capped: 0.15 + 0.20 + 0.09 = 0.44, at 10 % = 0.044
        #   new_B = 2200 + 16 * (0.044 - 0.999000999) = 2200 - 15.280016 = 2184.719984 -> 2185
        (1000, 2200, True, 0, 0, 0, 8, 0, 8, 0, 8),
        (1040, 2185),
        id="every-bonus-cap-on-the-loser-and-k-16",
    ),
    pytest.param(
        # A = 1900 (K 24), B = 1100 (K 40). E_A = 1 / (1 + 10^(-800/400)) = 1/1.01 = 0.990099010,
        #   E_B = 1 / (1 + 100) = 0.009900990.
        # B wins (A lost) with 2 rounds won by 4-and-last (+0.06): S_B = 1.06 -> clamp 1.0
        #   new_B = 1100 + 40 * (1 - 0.009900990) = 1100 + 39.6039604 = 1139.60 -> 1140
        # A loses with 1 round won by 24 (+0.1 at 10 % = 0.01): S_A = 0.01
        #   new_A = 1900 + 24 * (0.01 - 0.990099010) = 1900 - 23.5223762 = 1876.48 -> 1876
        (1900, 1100, False, 0, 0, 0, 0, 1, 0, 0, 2),
        (1876, 1140),
        id="b-wins-loser-a-keeps-10-percent-of-its-24-bonus",
    ),
]


@pytest.mark.parametrize(("inputs", "expected"), HAND_CASES)
def test_seed_port_matches_hand_computed_case(inputs, expected):
    """calculate_new_ratings gives the integers worked out by hand from the seed's formula."""
    assert calculate_new_ratings(*inputs) == expected


@pytest.mark.parametrize(("inputs", "expected"), HAND_CASES)
def test_general_rate_entry_point_matches_hand_computed_case(inputs, expected):
    """engine.rate with the Sedma policy gives the same hand-computed integers as the seed port."""
    ra, rb, a_won, bad_a, bad_b, w16_a, w16_b, w24_a, w24_b, w4l_a, w4l_b = inputs
    match = Match(
        match_id="hand",
        side_a=(Participant("a", Performance(bad_a, w16_a, w24_a, w4l_a)),),
        side_b=(Participant("b", Performance(bad_b, w16_b, w24_b, w4l_b)),),
        outcome=Outcome.SIDE_A_WON if a_won else Outcome.SIDE_B_WON,
    )
    change_a, change_b = rate(match, {"a": ra, "b": rb}, SEDMA_POLICY)
    assert (change_a.rating_after, change_b.rating_after) == (float(expected[0]), float(expected[1]))


def test_hand_case_reports_the_clamped_and_discounted_actual_scores():
    """The first hand case records S_A = 1.0 (clamped), S_B = 0.015 (10 % bonus), E = 0.5, K = 32."""
    match = Match(
        match_id="hand-1",
        side_a=(Participant("a", Performance(bad_moves=1, won_by_16=2)),),
        side_b=(Participant("b", Performance(won_by_16=3)),),
        outcome=Outcome.SIDE_A_WON,
    )
    change_a, change_b = rate(match, {"a": 1500, "b": 1500}, SEDMA_POLICY)
    assert change_a.actual_score == 1.0
    assert change_b.actual_score == pytest.approx(0.015, abs=1e-7)  # binary32 arithmetic
    assert change_a.expected_score == change_b.expected_score == 0.5
    assert change_a.k_factor == change_b.k_factor == 32
    assert (change_a.result, change_b.result) == ("win", "loss")


@pytest.mark.parametrize(
    ("rating", "k"),
    [
        (1199, 40),
        (1200, 32),
        (1799, 32),
        (1800, 24),
        (2199, 24),
        (2200, 16),
    ],
)
def test_sedma_k_band_edge_gives_the_seed_k(rating, k):
    """SEDMA_K switches band exactly at 1200, 1800 and 2200 (bound belongs to the higher band)."""
    assert SEDMA_K(rating) == k


def test_sedma_k_covers_ratings_far_outside_the_bands():
    """SEDMA_K gives 40 for 0 and negative ratings and 16 for very high ratings."""
    assert SEDMA_K(0) == 40
    assert SEDMA_K(-500) == 40
    assert SEDMA_K(4000) == 16
