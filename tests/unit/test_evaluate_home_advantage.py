"""The home advantage the model comparison gives Glicko-2 and Weng-Lin: the home side's ratings
raised for the match, exactly as if those players had been rated that much higher."""

from __future__ import annotations

import dataclasses

import pytest

from engine import Match, Outcome, Participant
from engine.replay import Standing
from worker.ops.evaluate.home import HomeAdvantage
from worker.ops.evaluate.tuning import side_a_expected


def policies():
    from engine.glicko2 import Glicko2Policy
    from engine.weng_lin import WengLinPolicy

    return [Glicko2Policy(), WengLinPolicy(model="plackett_luce"), WengLinPolicy(model="thurstone_mosteller_full")]


def _match(home: str | None, outcome: Outcome = Outcome.SIDE_B_WON) -> Match:
    return Match("m", (Participant("h1"), Participant("h2")), (Participant("a1"), Participant("a2")), outcome,
                 home=home, played_at=86400.0 * 30)


def _states(policy) -> dict:
    base = {pid: policy.initial_state(pid) for pid in ("h1", "h2", "a1", "a2")}
    return {pid: dataclasses.replace(s, rating=s.rating + 3.0 * i, last_played=0.0)
            for i, (pid, s) in enumerate(base.items())}


@pytest.mark.parametrize("index", range(3))
def test_the_home_side_is_rated_as_if_its_ratings_were_raised_by_the_advantage(index):
    """Rating (h1, h2) at home with +h equals the inner policy rating them at r + h, then − h;
    the away side's changes are the inner policy's for that same match."""
    inner = policies()[index]
    h = 40.0 if inner.model == "glicko2" else 1.5
    states = _states(inner)
    raised = {pid: dataclasses.replace(s, rating=s.rating + h) if pid in ("h1", "h2") else s
              for pid, s in states.items()}
    ours = HomeAdvantage(inner, h).rate(_match("side_a"), states)
    theirs = inner.rate(_match("side_a"), raised)
    for mine, reference in zip(ours, theirs):
        if mine.player_id in ("h1", "h2"):
            assert mine.rating_before == reference.rating_before - h
            assert mine.rating_after == reference.rating_after - h
            assert mine._replace(rating_before=0, rating_after=0) == reference._replace(rating_before=0,
                                                                                        rating_after=0)
        else:
            assert mine == reference


@pytest.mark.parametrize("index", range(3))
def test_a_neutral_match_or_no_advantage_is_the_inner_policy_unchanged(index):
    inner = policies()[index]
    states = _states(inner)
    assert HomeAdvantage(inner, 50.0).rate(_match(None), states) == inner.rate(_match(None), states)
    assert HomeAdvantage(inner, 0.0).rate(_match("side_b"), states) == inner.rate(_match("side_b"), states)


@pytest.mark.parametrize("index", range(3))
def test_the_prediction_raises_the_home_side_too(index):
    """side A at home: its expected score is the inner prediction with side A's ratings raised,
    and it is higher than on neutral ground."""
    inner = policies()[index]
    h = 40.0 if inner.model == "glicko2" else 1.5
    states = _states(inner)
    standings = {pid: Standing(s.rating, 1, s.rating, None, s.deviation, s.volatility, s.last_played)
                 for pid, s in states.items()}
    at_home = side_a_expected(HomeAdvantage(inner, h), _match("side_a"), standings)
    neutral = side_a_expected(inner, _match(None), standings)
    raised = inner.predict([[dataclasses.replace(states[p], rating=states[p].rating + h) for p in ("h1", "h2")],
                            [states["a1"], states["a2"]]], 86400.0 * 30)
    assert at_home > neutral
    assert at_home == pytest.approx(raised.win_probabilities[0] + (
        raised.draw_probability / 2 if raised.draw_probability is not None
        and abs(sum(raised.win_probabilities) + raised.draw_probability - 1) < 1e-9 else 0.0), abs=0)
