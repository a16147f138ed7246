"""The read API on ladders rated with uncertainty, against matches rated by real workers.

Real PostgreSQL, Redis, the session's worker processes and a ``ratings api`` process. Matches go
to the shipped ``glicko2`` and ``plackett_luce`` ladders; the API's leaderboard, player states,
history and predictions are checked against the CLI (``ratings leaderboard --json``, ``ratings
predict --json``), against the stored rows read with the test's own SQL, and against
:func:`engine.predict.predict` computed here from those rows.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from urllib.parse import quote

import pytest

from engine.model import PlayerState
from engine.predict import predict
from worker.bootstrap import load_ladder_policies
from worker.settings import get_settings

from ..test_chronological import elo_message
from ..test_uncertainty_ladders import _cli, generated_matches
from .conftest import Client

LADDERS = ("glicko2", "plackett_luce")
AT = "2026-09-01T00:00:00Z"


@pytest.fixture(scope="module")
def uncertain(env, module_publisher, api):
    """40 generated matches on each of the two ladders (1v1 with draws, 2v2, uneven, free-for-all),
    and one Elo match (so that the elo ladder has a policy in force)."""
    with env.connect() as conn:
        from ..conftest import TABLES

        conn.execute(f"TRUNCATE {TABLES}, annulments RESTART IDENTITY CASCADE")
    messages = [m for n, ladder in enumerate(LADDERS) for m in generated_matches(ladder, 40, 70 + n)]
    messages.append(elo_message("unc-elo-1", "e1", "e2", 0, 3))
    for m in messages:
        module_publisher(m)
    counts = env.wait_drained(len(messages), timeout=300)
    assert counts.dead_letters == 0
    return messages


def _stored(env, ladder: str) -> dict[str, PlayerState]:
    with env.connect() as conn:
        return {pid: PlayerState(r, g, None, None, d, v, lp) for pid, r, g, d, v, lp in conn.execute(
            "SELECT player_id, rating, games_played, deviation, volatility, last_played FROM players"
            " WHERE ladder = %s", (ladder,))}


def _walk(api: Client, ladder: str, limit: int) -> tuple[list[dict], str]:
    page = api.get(f"/v1/ladders/{ladder}/leaderboard?limit={limit}")
    assert page.status == 200, page.body
    rows, at = list(page.body["rows"]), page.body["as_of"]
    while page.body["next_cursor"]:
        page = api.get(f"/v1/ladders/{ladder}/leaderboard?limit={limit}&cursor={page.body['next_cursor']}")
        assert page.status == 200, page.body
        assert page.body["as_of"] == at
        rows += page.body["rows"]
    return rows, at


@pytest.mark.parametrize("ladder", LADDERS)
def test_leaderboard_pages_give_the_cli_leaderboard_at_the_same_moment(api, uncertain, ladder):
    """Walking the API's leaderboard 4 rows a page gives, row for row, ``ratings leaderboard --json``
    at the walk's ``as_of``: same order, ranks (null for the unrankable), deviations, conservative
    ratings and marks."""
    rows, at = _walk(api, ladder, 4)
    cli = json.loads(_cli("leaderboard", "--ladder", ladder, "--json", "--top", "1000", "--at", at))
    assert cli["model"] == ladder and len(cli["players"]) == len(rows) == 14
    assert [(r["rank"], r["player_id"], r["rating"], r["deviation"], r["conservative"], r["provisional"],
             r["inactive"], r["games"]) for r in rows] == [
        (c["rank"], c["player_id"], c["rating"], c["deviation"], c["conservative"], c["provisional"], c["inactive"],
         c["games"]) for c in cli["players"]]


def test_player_states_give_the_deviation_grown_to_now_and_the_marks(env, api, uncertain):
    """Batch lookup on the glicko2 ladder: rating and volatility as stored, the deviation between
    the policy's display at the moments before and after the call (it grows with time), the
    conservative rating rating - 2 deviations, provisional at 110 or more, rankable only when
    ranked; the single-player endpoint agrees."""
    policy = load_ladder_policies(get_settings())["glicko2"].policy
    stored = _stored(env, "glicko2")
    before = time.time()
    answer = api.call("POST", "/v1/ladders/glicko2/players", body={"player_ids": sorted(stored) + ["nobody"]})
    after = time.time()
    assert answer.status == 200, answer.body
    assert answer.body["not_found"] == ["nobody"]
    for got in answer.body["players"]:
        state = stored[got["player_id"]]
        low, high = policy.display(state, before).deviation, policy.display(state, after).deviation
        assert (got["rating"], got["volatility"]) == (state.rating, state.volatility)
        assert low <= got["deviation"] <= high
        assert got["conservative"] == pytest.approx(got["rating"] - 2 * got["deviation"], abs=1e-9)
        assert got["provisional"] == (got["deviation"] >= 110)
        assert got["rankable"] == (got["rank"] is not None) == (got["deviation"] <= 75 and not got["inactive"])
    one = api.get(f"/v1/ladders/glicko2/players/{quote(answer.body['players'][0]['player_id'])}")
    assert one.status == 200 and one.body["volatility"] == answer.body["players"][0]["volatility"]


def test_history_carries_deviation_and_volatility_before_and_after(env, api, uncertain):
    """A glicko2 player's history: each row's deviation and volatility before and after are the
    stored history row's; the last row's deviation after is the player's stored deviation."""
    with env.connect() as conn:
        player = conn.execute("SELECT player_id FROM players WHERE ladder = 'glicko2' ORDER BY games_played DESC,"
                              " player_id LIMIT 1").fetchone()[0]
        expected = conn.execute(
            "SELECT match_id, deviation_before, deviation_after, volatility_before, volatility_after"
            " FROM rating_changes WHERE ladder = 'glicko2' AND player_id = %s AND superseded_by IS NULL"
            " ORDER BY sequence", (player,)).fetchall()
        deviation = conn.execute("SELECT deviation FROM players WHERE ladder = 'glicko2' AND player_id = %s",
                                 (player,)).fetchone()[0]
    answer = api.get(f"/v1/ladders/glicko2/history/{quote(player)}")
    assert answer.status == 200, answer.body
    got = [(e["match_id"], e["deviation_before"], e["deviation_after"], e["volatility_before"],
            e["volatility_after"]) for e in answer.body["entries"]]
    assert got == [tuple(r) for r in expected] and got[-1][2] == deviation


@pytest.mark.parametrize("ladder", LADDERS)
def test_a_prediction_is_the_engines_from_the_stored_states_and_the_clis(env, api, uncertain, ladder):
    """POST predictions at a fixed moment with a player the ladder has never seen: the engine's
    prediction from the stored states (the unknown player from the initial state), the CLI's, and
    the unknown player named."""
    policy = load_ladder_policies(get_settings())[ladder].policy
    stored = _stored(env, ladder)
    p = ladder[:2]
    sides = [[f"{p}-p00", f"{p}-p01"], [f"{p}-p02", "newcomer"]]
    answer = api.call("POST", f"/v1/ladders/{ladder}/predictions", body={"sides": sides, "at": AT})
    assert answer.status == 200, answer.body
    at = datetime.fromisoformat(AT).timestamp()
    expected = predict([[stored[x] if x in stored else policy.initial_state(x) for x in side] for side in sides],
                       policy, at)
    assert answer.body["win_probabilities"] == list(expected.win_probabilities)
    assert (answer.body["draw_probability"], answer.body["quality"]) == (expected.draw_probability, expected.quality)
    assert answer.body["unknown_players"] == ["newcomer"] and answer.body["model"] == ladder
    cli = json.loads(_cli("predict", ladder, "--side", ",".join(sides[0]), "--side", ",".join(sides[1]),
                          "--at", AT, "--json"))
    assert (cli["win_probabilities"], cli["draw_probability"], cli["quality"]) == (
        answer.body["win_probabilities"], answer.body["draw_probability"], answer.body["quality"])
    if ladder == "plackett_luce":
        assert 0 < answer.body["draw_probability"] < 1


def test_an_elo_prediction_of_two_newcomers_is_even(api, uncertain):
    """On the Elo ladder two players without a rating start equal: 0.5 each, no draw probability."""
    answer = api.call("POST", "/v1/ladders/elo/predictions", body={"sides": [["new-a"], ["new-b"]]})
    assert answer.status == 200, answer.body
    assert answer.body["win_probabilities"] == [0.5, 0.5] and answer.body["draw_probability"] is None
    assert answer.body["unknown_players"] == ["new-a", "new-b"] and answer.body["model"] == "elo"


def test_bad_proposed_matches_are_problems_with_reason_codes(api, uncertain):
    """A player on two sides: 422 ``invalid_sides``; one side only: 422 ``invalid_request``; an
    unknown ladder: 404 ``unknown_ladder``; a player id with NUL (which the database cannot hold):
    422 ``invalid_request``; all as problem details."""
    twice = api.call("POST", "/v1/ladders/glicko2/predictions", body={"sides": [["gl-p00"], ["gl-p00"]]})
    assert (twice.status, twice.body["code"]) == (422, "invalid_sides"), twice.body
    assert twice.headers["content-type"].startswith("application/problem+json")
    single = api.call("POST", "/v1/ladders/glicko2/predictions", body={"sides": [["gl-p00"]]})
    assert (single.status, single.body["code"]) == (422, "invalid_request"), single.body
    nowhere = api.call("POST", "/v1/ladders/nope/predictions", body={"sides": [["a"], ["b"]]})
    assert (nowhere.status, nowhere.body["code"]) == (404, "unknown_ladder"), nowhere.body
    nul = api.call("POST", "/v1/ladders/glicko2/players", body={"player_ids": ["a\u0000b"]})
    assert (nul.status, nul.body["code"]) == (422, "invalid_request"), nul.body  # not a database error


def test_the_leaderboard_page_shows_rating_plus_minus_deviation_and_marks(api, uncertain):
    """The HTML leaderboard of the glicko2 ladder shows "±" deviations and the conservative column,
    and a player's page its rating ± deviation and conservative rating."""
    page = api.get("/ladders/glicko2")
    assert page.status == 200
    assert "±" in page.body and "Conservative" in page.body and "gl-p00" in page.body
    player = api.get("/ladders/glicko2/players/gl-p00")
    assert player.status == 200 and "±" in player.body and "conservative" in player.body


def test_a_walk_is_the_leaderboard_of_its_first_moment_while_matches_are_rated(env, api, uncertain, publisher):
    """First page of the glicko2 leaderboard (3 rows), then the CLI's leaderboard at the page's
    ``as_of`` (the expected walk), then 20 more matches rated through the workers (they move
    deviations, ratings and ranks, some of them late), then the rest of the walk: every row equals
    the CLI's at the first moment, so no player is repeated or skipped."""
    first = api.get("/v1/ladders/glicko2/leaderboard?limit=3")
    assert first.status == 200, first.body
    at = first.body["as_of"]
    expected = json.loads(_cli("leaderboard", "--ladder", "glicko2", "--json", "--top", "1000", "--at", at))
    more = generated_matches("glicko2", 60, 99)[40:]
    for m in more:
        m["match_id"] += "-more"
    with env.connect() as conn:
        done = conn.execute("SELECT count(*) FROM ledger").fetchone()[0]
    for m in more:
        publisher(m)
    env.wait_drained(done + len(more), timeout=300)
    rows, page = list(first.body["rows"]), first.body
    while page["next_cursor"]:
        page = api.get(f"/v1/ladders/glicko2/leaderboard?limit=3&cursor={page['next_cursor']}").body
        assert page["as_of"] == at, page
        rows += page["rows"]
    key = ("rank", "player_id", "rating", "deviation", "conservative", "provisional", "inactive", "games")
    assert [tuple(r[k] for k in key) for r in rows] == [tuple(c[k] for k in key) for c in expected["players"]]
    now = json.loads(_cli("leaderboard", "--ladder", "glicko2", "--json", "--top", "1000", "--at", at))
    assert now["players"] != expected["players"]  # the matches between pages did change the ladder
