"""`ratings evaluate`'s metrics and replay bookkeeping, against hand calculations.

Every reference value is written out below from its formula with :mod:`math` (or taken from NumPy,
an independent implementation, for the quantiles), never from the code under test.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import numpy as np
import pytest

import worker.ops.evaluate as ev
from engine import BandedK, ConstantK, FreeForAll, Match, Outcome, Participant, RatingChange, RatingPolicy, Rounding
from worker.ops.evaluate import (
    HistoryItem,
    LabelledPolicy,
    accuracy,
    brier_term,
    evaluate,
    log_loss_term,
    mean_brier_score,
    mean_log_loss,
    prediction_credit,
    quantile,
    rating_distribution,
)

K30 = RatingPolicy(k_factor=ConstantK(30), initial_rating=1200.0)
LN2 = 0.6931471805599453  # ln 2


def e(r: float, r_opp: float) -> float:
    """Elo expected score, written out here: 1 / (1 + 10^((R_opp − R) / 400))."""
    return 1.0 / (1.0 + 10.0 ** ((r_opp - r) / 400.0))


def ll(p: float, s: float) -> float:
    """Soft-label log loss, written out here."""
    return -(s * math.log(p) + (1 - s) * math.log(1 - p))


def m(match_id: str, a: str, b: str, outcome: Outcome) -> Match:
    return Match(match_id, (Participant(a),), (Participant(b),), outcome)


def at(year: int, month: int = 6) -> datetime:
    return datetime(year, month, 1, tzinfo=UTC)


# ------------------------------------------------------------------ the metric functions


def test_log_loss_of_a_win_predicted_at_0_8_is_minus_ln_0_8():
    """E = 0.8, side A wins: −ln 0.8 = 0.22314355131420976."""
    assert log_loss_term(0.8, 1.0) == pytest.approx(0.22314355131420976, rel=1e-15)


def test_log_loss_of_a_loss_predicted_at_0_8_is_minus_ln_0_2():
    """E = 0.8, side A loses: −ln 0.2 = 1.6094379124341003."""
    assert log_loss_term(0.8, 0.0) == pytest.approx(1.6094379124341003, rel=1e-15)


def test_log_loss_of_a_draw_is_the_soft_label_half_of_both_logs():
    """E = 0.7, draw: −(ln 0.7 + ln 0.3)/2 = (0.35667494393873245 + 1.2039728043259361)/2."""
    assert log_loss_term(0.7, 0.5) == pytest.approx((0.35667494393873245 + 1.2039728043259361) / 2, rel=1e-15)


def test_log_loss_of_a_coin_flip_is_ln_2_whatever_the_result():
    """E = 0.5 scores ln 2 for a win, a draw and a loss."""
    for s in (1.0, 0.5, 0.0):
        assert log_loss_term(0.5, s) == pytest.approx(LN2, rel=1e-15)


def test_log_loss_clips_certain_predictions_to_1e_minus_15():
    """E = 0 for a win would be infinite: clipped, it is −ln 1e-15 = 34.538776394910684; E = 1 for a win ≈ 1e-15."""
    assert log_loss_term(0.0, 1.0) == pytest.approx(34.538776394910684, rel=1e-12)
    # 1 − (1 − 1e-15) is 9.992e-16 in doubles (1 − 1e-15 is not representable): −ln of it, 34.5396.
    assert log_loss_term(1.0, 0.0) == pytest.approx(-math.log(1.0 - (1.0 - 1e-15)), rel=1e-12)
    assert 0.0 < log_loss_term(1.0, 1.0) < 2e-15


def test_brier_terms_are_squared_differences():
    """(0.8 − 1)² = 0.04, (0.7 − 0.5)² = 0.04, (0.3 − 0)² = 0.09, (0.5 − 0.5)² = 0."""
    assert brier_term(0.8, 1.0) == pytest.approx(0.04, rel=1e-12)
    assert brier_term(0.7, 0.5) == pytest.approx(0.04, rel=1e-12)
    assert brier_term(0.3, 0.0) == pytest.approx(0.09, rel=1e-12)
    assert brier_term(0.5, 0.5) == 0.0


def test_means_over_predictions_and_none_for_no_prediction():
    """Mean log loss and Brier score of three predictions, by hand; None for an empty list."""
    pairs = [(0.8, 1.0), (0.7, 0.5), (0.3, 1.0)]
    assert mean_log_loss(pairs) == pytest.approx((-math.log(0.8) + ll(0.7, 0.5) - math.log(0.3)) / 3, rel=1e-15)
    assert mean_brier_score(pairs) == pytest.approx((0.04 + 0.04 + 0.49) / 3, rel=1e-12)
    assert mean_log_loss([]) is None and mean_brier_score([]) is None


def test_prediction_credit_counts_the_favourite_and_leaves_draws_out():
    """Favourite wins 1, loses 0, no favourite 0.5, a draw None."""
    assert prediction_credit(0.6, 1.0) == 1.0
    assert prediction_credit(0.6, 0.0) == 0.0
    assert prediction_credit(0.4, 0.0) == 1.0
    assert prediction_credit(0.4, 1.0) == 0.0
    assert prediction_credit(0.5, 1.0) == 0.5
    assert prediction_credit(0.9, 0.5) is None


def test_accuracy_is_over_decisive_matches_only():
    """Credits 1, 0, 1, 0.5 (the draw left out): 2.5 / 4 = 0.625; no decisive match gives None."""
    assert accuracy([(0.6, 1.0), (0.6, 0.0), (0.4, 0.0), (0.5, 1.0), (0.7, 0.5)]) == 0.625
    assert accuracy([(0.7, 0.5)]) is None


def test_running_sum_is_exact_where_naive_addition_is_not():
    """1e16 + 1 + 1 − 1e16 is 2 exactly; adding left to right in doubles gives 0. Also equal to math.fsum
    (the same algorithm, an independent implementation) on generated values."""
    total = ev.RunningSum()
    for x in (1e16, 1.0, 1.0, -1e16):
        total.add(x)
    assert total.value == 2.0 and ((1e16 + 1.0) + 1.0) - 1e16 != 2.0
    assert total.mean() == 0.5 and ev.RunningSum().mean() is None
    rng = np.random.default_rng(5)
    values = (rng.standard_normal(10_000) * 10.0 ** rng.integers(-10, 10, 10_000)).tolist()
    total = ev.RunningSum()
    for x in values:
        total.add(x)
    assert total.value == math.fsum(values) and len(total.partials) < 50


def test_quantiles_interpolate_linearly_by_hand():
    """[1..5]: p10 = 1 + 0.4·1 = 1.4, p50 = 3, p90 = 4 + 0.6·1 = 4.6, ends are min and max."""
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert quantile(values, 0.1) == pytest.approx(1.4)
    assert quantile(values, 0.5) == 3.0
    assert quantile(values, 0.9) == pytest.approx(4.6)
    assert (quantile(values, 0.0), quantile(values, 1.0)) == (1.0, 5.0)
    assert quantile([7.0], 0.9) == 7.0
    with pytest.raises(ValueError):
        quantile([], 0.5)
    with pytest.raises(ValueError):
        quantile(values, 1.5)


@pytest.mark.parametrize("n", [2, 3, 10, 337, 1000])
def test_quantiles_agree_with_numpy_linear_percentiles(n):
    """Definition 7 is NumPy's default ``linear`` method: same values on generated data."""
    rng = np.random.default_rng(n)
    values = sorted(rng.normal(1200, 200, n).tolist())
    for q in (0.1, 0.5, 0.9):
        assert quantile(values, q) == pytest.approx(float(np.percentile(values, 100 * q)), rel=1e-12)


def test_rating_distribution_by_hand():
    """1000, 1100, 1300, 1400: mean 1200, std √((200² + 100² + 100² + 200²)/4) = √25000,
    p10 = 1000 + 0.3·100, median 1200, p90 = 1300 + 0.7·100."""
    d = rating_distribution([1300.0, 1000.0, 1400.0, 1100.0])
    assert (d.players, d.min, d.max) == (4, 1000.0, 1400.0)
    assert d.mean == 1200.0
    assert d.std == pytest.approx(math.sqrt(25000.0), rel=1e-15)
    assert d.p10 == pytest.approx(1030.0)
    assert d.p50 == pytest.approx(1200.0)
    assert d.p90 == pytest.approx(1370.0)
    assert rating_distribution([]) is None


# ------------------------------------------------------------------ evaluate() on a hand-computed history


def _three_matches() -> list[HistoryItem]:
    """a beats b (2020), b draws a with b as side A (2021), c beats a with a as side A (2023)."""
    return [
        HistoryItem(m("m1", "a", "b", Outcome.SIDE_A_WON), at(2020)),
        HistoryItem(m("m2", "b", "a", Outcome.DRAW), at(2021)),
        HistoryItem(m("m3", "a", "c", Outcome.SIDE_B_WON), at(2023)),
    ]


def _by_hand_k30():
    """The three matches above under K = 30, initial 1200: (side A's E, s) per match and the final ratings."""
    a = b = c = 1200.0
    e1 = 0.5  # two new players
    a, b = a + 30 * (1 - e1), b + 30 * (0 - e1)  # 1215, 1185
    e2 = e(b, a)  # b (1185) is side A against a (1215)
    a, b = a + 30 * (0.5 - e(a, b)), b + 30 * (0.5 - e2)
    e3 = e(a, c)  # a against the new c (1200)
    a, c = a + 30 * (0 - e3), c + 30 * (1 - e(c, a))
    return [(e1, 1.0), (e2, 0.5), (e3, 0.0)], {"a": a, "b": b, "c": c}


def test_evaluate_scores_the_predictions_made_before_each_match():
    """Log loss, Brier and accuracy of side A's E before each match, the E's computed by hand."""
    preds, _ = _by_hand_k30()
    (e1, _), (e2, _), (e3, _) = preds
    report = evaluate(_three_matches(), [LabelledPolicy("k30", K30)])
    p = report.policies[0]
    assert (report.matches, p.matches, p.scored, p.draws_scored, p.decisive, p.no_favourite) == (3, 3, 3, 1, 2, 1)
    assert p.log_loss == pytest.approx((LN2 + ll(e2, 0.5) - math.log(1 - e3)) / 3, rel=1e-12)
    assert p.brier == pytest.approx((0.25 + (e2 - 0.5) ** 2 + e3 ** 2) / 3, rel=1e-12)
    # m1: no favourite (half), m3: a (E > 0.5) lost (0); the draw is left out.
    assert e3 > 0.5 and p.accuracy == 0.25


def test_burn_in_leaves_the_first_matches_out_of_the_prediction_figures_only():
    """--skip-first 1: log loss over m2 and m3; the ratings and the distribution still count all three."""
    preds, final = _by_hand_k30()
    (_, _), (e2, _), (e3, _) = preds
    p = evaluate(_three_matches(), [LabelledPolicy("k30", K30)], skip_first=1).policies[0]
    assert (p.matches, p.scored) == (3, 2)
    assert p.log_loss == pytest.approx((ll(e2, 0.5) - math.log(1 - e3)) / 2, rel=1e-12)
    assert p.accuracy == 0.0  # m3 only
    assert p.distribution.max == pytest.approx(max(final.values()), rel=1e-15)


def test_a_free_for_all_in_the_history_moves_ratings_but_is_not_scored():
    """A free-for-all has no side A to score: it is replayed (its three new players are rated) and
    left out of the prediction figures, which then cover m1 alone (E = 0.5, side A won: ln 2)."""
    history = [
        HistoryItem(m("m1", "a", "b", Outcome.SIDE_A_WON), at(2020)),
        HistoryItem(FreeForAll("f1", ((Participant("d"),), (Participant("e"),), (Participant("f"),)), (1, 2, 3)),
                    at(2021)),
    ]
    p = evaluate(history, [LabelledPolicy("k30", K30)], player="d").policies[0]
    assert (p.matches, p.scored, p.decisive) == (2, 1, 1)
    assert p.log_loss == pytest.approx(LN2, rel=1e-15)
    assert p.distribution.players == 5
    # d beats e and f, all new (E = 0.5 each); K = 30 divided by the 2 opponents' sides:
    # 1200 + 30 / 2 * ((1 - 0.5) + (1 - 0.5)) = 1215.
    assert (p.player_rating, p.player_games) == (1215.0, 1)


def test_final_distribution_and_followed_player_match_the_hand_ratings():
    """Final ratings by hand: min, max, mean (1200: classic Elo is zero-sum) and a's rating after each match."""
    _, final = _by_hand_k30()
    p = evaluate(_three_matches(), [LabelledPolicy("k30", K30)], player="a").policies[0]
    assert p.distribution.players == 3
    assert p.distribution.min == pytest.approx(min(final.values()), rel=1e-15)
    assert p.distribution.max == pytest.approx(max(final.values()), rel=1e-15)
    assert p.mean_rating == pytest.approx(1200.0, abs=1e-9) and abs(p.drift) < 1e-9
    assert [pt.match_number for pt in p.player_series] == [1, 2, 3]
    assert p.player_series[0].rating_after == 1215.0
    assert p.player_rating == pytest.approx(final["a"], rel=1e-15) and p.player_games == 3


def test_drift_per_year_has_one_point_per_calendar_year_with_matches():
    """Matches in 2020, 2021 and 2023: three points (no 2022), after 1, 2 and 3 matches."""
    report = evaluate(_three_matches(), [LabelledPolicy("k30", K30)], drift_by="year")
    points = report.policies[0].drift_series
    assert [(pt.period, pt.matches, pt.players) for pt in points] == [("2020", 1, 2), ("2021", 2, 2), ("2023", 3, 3)]
    # After 2020: 1215 and 1185, std 15; after 2021 the mean is still 1200.
    assert points[0].std == pytest.approx(15.0) and points[1].mean == pytest.approx(1200.0)


def test_auto_drift_is_per_year_over_three_years_and_per_matches_otherwise():
    """2020-2023 spans four calendar years: per year. The same matches within one year: every N matches."""
    assert evaluate(_three_matches(), [LabelledPolicy("k30", K30)]).drift_by == "year"
    same_year = [HistoryItem(item.match, at(2020, i + 1)) for i, item in enumerate(_three_matches())]
    report = evaluate(same_year, [LabelledPolicy("k30", K30)], drift_every=2)
    assert report.drift_by == "matches"
    assert [(pt.period, pt.matches) for pt in report.policies[0].drift_series] == [("2", 2), ("3", 3)]


def test_drift_measures_inflation_of_a_policy_that_is_not_zero_sum():
    """K 40 below 1200, 20 from 1200 up, initial 1200. m1: both at 1200 (K 20): 1210 / 1190.
    m2, b (1190, K 40) beats a (1210, K 20): b gains 40·(1 − E_b), a loses 20·E_a... by hand."""
    policy = RatingPolicy(k_factor=BandedK(((1200.0, 40.0),), 20.0), initial_rating=1200.0)
    history = [HistoryItem(m("m1", "a", "b", Outcome.SIDE_A_WON), at(2020)),
               HistoryItem(m("m2", "a", "b", Outcome.SIDE_B_WON), at(2020))]
    a, b = 1210.0, 1190.0
    a2 = a + 20 * (0 - e(a, b))
    b2 = b + 40 * (1 - e(b, a))
    p = evaluate(history, [LabelledPolicy("banded", policy)]).policies[0]
    assert p.drift == pytest.approx((a2 + b2) / 2 - 1200.0, rel=1e-12)
    assert p.drift > 5  # 40 points won against 20 lost: inflation
    assert p.max_abs_drift == pytest.approx(p.drift, rel=1e-12)


def test_several_policies_replay_the_same_history_side_by_side():
    """K 20 and K 40 in one run: each gives the hand-computed first update (±10 and ±20)."""
    history = [HistoryItem(m("m1", "a", "b", Outcome.SIDE_A_WON), None)]
    report = evaluate(history, [LabelledPolicy("k20", RatingPolicy(ConstantK(20))),
                                LabelledPolicy("k40", RatingPolicy(ConstantK(40)))], player="a")
    assert [p.label for p in report.policies] == ["k20", "k40"]
    assert [p.player_rating for p in report.policies] == [1210.0, 1220.0]
    assert report.drift_by == "matches" and report.first is None


def test_floor_and_cap_hits_count_matches_not_players(monkeypatch):
    """A match counts once however many of its players hit the floor; floor points add up per player."""
    def fake_replay(matches, policy, standings=None):
        for match in matches:
            n = int(match.match_id)
            yield match, (
                RatingChange("a", 1200, 1190, 0.5, 0.0, 20, "loss", floor_points=2.0 if n in (1, 2) else 0.0,
                             capped=n == 3),
                RatingChange("b", 1200, 1210, 0.5, 1.0, 20, "win", floor_points=3.0 if n == 1 else 0.0, capped=n == 3),
            )

    monkeypatch.setattr(ev.accumulate, "replay_changes", fake_replay)  # where PolicyEvaluation looks it up
    history = [HistoryItem(m(str(i), "a", "b", Outcome.SIDE_B_WON), None) for i in range(1, 5)]
    p = evaluate(history, [LabelledPolicy("x", K30)]).policies[0]
    assert (p.floor_hits, p.cap_hits, p.floor_points) == (2, 1, 7.0)
    assert (p.floor_share, p.cap_share) == (0.5, 0.25)


def test_progress_is_told_every_thousand_matches_and_at_the_end():
    """2,500 matches: the callback hears 1000, 1000, 500."""
    heard = []
    history = [HistoryItem(m(str(i), "a", "b", Outcome.DRAW), None) for i in range(2500)]
    evaluate(history, [LabelledPolicy("k30", K30)], progress=heard.append)
    assert heard == [1000, 1000, 500]


def test_bad_arguments_are_refused():
    """Unknown drift_by, a negative burn-in and no policy raise ValueError."""
    with pytest.raises(ValueError):
        evaluate([], [LabelledPolicy("k30", K30)], drift_by="month")
    with pytest.raises(ValueError):
        evaluate([], [LabelledPolicy("k30", K30)], skip_first=-1)
    with pytest.raises(ValueError):
        evaluate([], [])


def test_drift_period_keeps_long_histories_to_500_points():
    """1,000 matches per point up to 500,000 matches; beyond, total / 500 rounded up."""
    assert ev.drift_period(None) == 1000
    assert ev.drift_period(49_520) == 1000
    assert ev.drift_period(1_000_000) == 2000
    assert ev.drift_period(1_000_001) == 2001


def test_json_report_holds_every_policy_and_the_definitions():
    """to_json is JSON-serialisable and carries shares, series and the definitions of the figures."""
    report = evaluate(_three_matches(), [LabelledPolicy("k30", K30)], player="a")
    data = json.loads(json.dumps(report.to_json()))
    p = data["policies"][0]
    assert p["label"] == "k30" and p["floor_share"] == 0.0 and len(p["drift_series"]) == 3
    assert p["distribution"]["players"] == 3 and len(p["player_series"]) == 3
    assert "soft label" in data["definitions"]["log_loss"]
    assert data["first_finished_at"].startswith("2020-06-01")


def test_policy_descriptions_name_k_start_and_options():
    """Constant and banded K, rounding and performance appear in the short description."""
    assert ev.describe_policy(K30) == "K 30 · start 1200"
    from engine import SEDMA_K, SedmaAdjustment

    sedma = RatingPolicy(SEDMA_K, 1000.0, rounding=Rounding.HALF_EVEN, performance=SedmaAdjustment())
    assert ev.describe_policy(sedma) == "K 40/32/24/16 by band · start 1000 · rounding half_even · performance"


# ------------------------------------------------------------------ sources


FOOTBALL_HEADER = "date,home_team,away_team,home_score,away_score,tournament,city,country,neutral\n"


def test_football_rows_map_home_team_to_side_a_with_the_date(tmp_path):
    """Through worker.ops.football's mapping: home = side A, outcome from the score, date at 00:00 UTC."""
    path = tmp_path / "results.csv"
    path.write_text(FOOTBALL_HEADER + "1872-11-30,Scotland,England,0,0,Friendly,Glasgow,Scotland,FALSE\n"
                    "1873-03-08,England,Scotland,4,2,Friendly,London,England,FALSE\n")
    assert ev.is_football_csv(path)
    items = list(ev.football_history(path))
    assert [(i.match.side_a[0].player_id, i.match.side_b[0].player_id, i.match.outcome) for i in items] == [
        ("Scotland", "England", Outcome.DRAW), ("England", "Scotland", Outcome.SIDE_A_WON)]
    assert items[0].finished_at == datetime(1872, 11, 30, tzinfo=UTC)
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    assert not ev.is_football_csv(other)


def _message(match_id: str, ladder: str = "sedma", a: str = "p1", b: str = "p2") -> str:
    return json.dumps({"schema_version": 1, "match_id": match_id, "ladder": ladder,
                       "finished_at": "2026-05-01T12:00:00Z", "side_a": {"players": [{"player_id": a}]},
                       "side_b": {"players": [{"player_id": b}]}, "outcome": "side_a_won"})


def test_jsonl_bad_lines_are_counted_by_reason_and_left_out(tmp_path):
    """Invalid lines (with their line numbers), other ladders and repeated match ids are skipped and counted."""
    path = tmp_path / "m.jsonl"
    lines = [_message("x1"), "{not json", "", _message("x2", ladder="elo"), _message("x1"),
             json.dumps({"schema_version": 1, "match_id": "x3"}), _message("x4", a="p3", b="p1")]
    path.write_text("\n".join(lines) + "\n")
    assert ev.first_ladder(path) == "sedma"
    skipped = ev.SkippedLines()
    items = list(ev.jsonl_history(path, "sedma", skipped))
    assert [i.match.match_id for i in items] == ["x1", "x4"]
    assert items[0].finished_at == datetime(2026, 5, 1, 12, tzinfo=UTC)
    assert dict(skipped.bad) == {"not_json": 1, "missing_field": 1}
    assert [(n, r) for n, r, _ in skipped.examples] == [(2, "not_json"), (6, "missing_field")]
    assert (skipped.other_ladder, skipped.duplicate_ids, skipped.total) == (1, 1, 4)
    assert ev.count_lines(path) == 6


def test_jsonl_matches_of_a_shape_the_ladder_does_not_rate_are_left_out(tmp_path):
    """Given the ladder's declared shapes, a 1v2 line is left out as the worker would refuse it
    (``unsupported_match_shape``); without them it is replayed."""
    from worker.policy.shapes import MatchShapes

    uneven = json.loads(_message("x2"))
    uneven["side_b"]["players"].append({"player_id": "p3"})
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join([_message("x1"), json.dumps(uneven)]) + "\n")
    skipped = ev.SkippedLines()
    items = list(ev.jsonl_history(path, "sedma", skipped, MatchShapes((2, 2), (1, 2))))
    assert [i.match.match_id for i in items] == ["x1"]
    assert dict(skipped.bad) == {"unsupported_match_shape": 1} and "a 1v2 match" in skipped.examples[0][2]
    assert [i.match.match_id for i in ev.jsonl_history(path, "sedma", ev.SkippedLines())] == ["x1", "x2"]


def test_a_jsonl_file_without_a_valid_line_has_no_ladder(tmp_path):
    """first_ladder is None when no line validates."""
    path = tmp_path / "bad.jsonl"
    path.write_text("{}\nnot json\n")
    assert ev.first_ladder(path) is None


# ------------------------------------------------------------------ charts


def test_charts_are_png_files(tmp_path):
    """The drift chart (with the player panel) and the player chart are written as PNG files."""
    report = evaluate(_three_matches(), [LabelledPolicy("k20", RatingPolicy(ConstantK(20))),
                                         LabelledPolicy("k30", K30)], player="a")
    drift, player = tmp_path / "drift.png", tmp_path / "player.png"
    ev.draw_drift_chart(report, drift)
    ev.draw_player_chart(report, player)
    for path in (drift, player):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_a_player_chart_without_the_player_is_refused(tmp_path):
    """No match of the followed player: ValueError, no file."""
    report = evaluate(_three_matches(), [LabelledPolicy("k30", K30)], player="nobody")
    with pytest.raises(ValueError):
        ev.draw_player_chart(report, tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()
