"""The read API against matches rated by real workers: publish through the broker, read back over HTTP.

Real PostgreSQL, Redis, the session's two worker processes and relay, and a ``ratings api``
process. Expected values come from the database read with the test's own SQL, or from the messages
the test sent, never from the API's code.
"""

from __future__ import annotations

import random
import time

import psycopg
import pytest

from worker.producer import producer_app, publish_annulment

from ..test_chronological import elo_message
from .conftest import Client, player_path

PLAYERS = [f"p{i:02}" for i in range(30)]


def _matches(prefix: str, n: int, seed: int, day: int, players=PLAYERS) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.sample(players, 2)
        m = elo_message(f"{prefix}{i:03}", a, b, 0, day)
        m["finished_at"] = f"2026-05-{day:02}T{i // 60:02}:{i % 60:02}:00Z"
        m["outcome"] = rng.choice(["side_a_won", "side_b_won", "draw"])
        out.append(m)
    return out


def _standings(env) -> dict[str, float]:
    with env.connect() as conn:
        return dict(conn.execute("SELECT player_id, rating FROM players WHERE ladder = 'elo'").fetchall())


def _walk(api: Client, limit: int, between=None) -> tuple[list[dict], list[str]]:
    """Every row of the elo leaderboard, page by page; ``between()`` runs after the first page."""
    page = api.get(f"/v1/ladders/elo/leaderboard?limit={limit}")
    assert page.status == 200, page.body
    rows, moments = list(page.body["rows"]), [page.body["as_of"]]
    if between:
        between()
    while page.body["next_cursor"]:
        page = api.get(f"/v1/ladders/elo/leaderboard?limit={limit}&cursor={page.body['next_cursor']}")
        assert page.status == 200, page.body
        rows += page.body["rows"]
        moments.append(page.body["as_of"])
    return rows, moments


def _expected_board(standings: dict[str, float]) -> list[tuple[int, str, float]]:
    """(rank, player, rating) by rating, ties by id; a tie shares the rank of its first row (written out here)."""
    ordered = sorted(standings.items(), key=lambda kv: (-kv[1], kv[0].encode("utf-8")))
    out, rank = [], 0
    for n, (pid, rating) in enumerate(ordered, 1):
        rank = rank if out and out[-1][2] == rating else n
        out.append((rank, pid, rating))
    return out


@pytest.fixture(scope="module")
def rated(env, module_publisher, api):
    """80 Elo matches among 30 players, a duplicate delivery, a conflicting duplicate, a dead
    letter, and an annulment, all through the workers."""
    with env.connect() as conn:
        from ..conftest import TABLES

        conn.execute(f"TRUNCATE {TABLES}, annulments RESTART IDENTITY CASCADE")
    matches = _matches("m", 80, seed=1, day=2)
    for m in matches:
        module_publisher(m)
    env.wait_drained(len(matches))
    module_publisher(matches[0])  # the same payload again: a duplicate delivery
    module_publisher(dict(matches[1], outcome="draw" if matches[1]["outcome"] != "draw" else "side_a_won"))  # conflicting
    bad = elo_message("bad-ladder-1", "p01", "p02", 1, 3)
    bad["ladder"] = "no-such-ladder"
    module_publisher(bad)
    env.wait_drained(len(matches) + 3)
    app = producer_app(env.broker_url)
    publish_annulment(app, [matches[10]["match_id"]], reason="disputed", annulled_by="referee", queue=env.queue)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with env.connect() as conn:
            if conn.execute("SELECT count(*) FROM annulments").fetchone()[0]:
                break
        time.sleep(0.1)
    env.wait_drained(len(matches) + 3)
    return matches


def test_a_batch_lookup_returns_every_known_player_in_the_order_asked_and_names_the_unknown(env, api, rated):
    """POST /v1/ladders/elo/players with 30 known ids (reversed) and 2 unknown ones: the states in the
    order asked with the stored ratings and games, and the two unknown ids in ``not_found``."""
    asked = list(reversed(PLAYERS)) + ["nobody", "p00"]
    answer = api.call("POST", "/v1/ladders/elo/players", body={"player_ids": asked + ["zz-unknown"]})
    assert answer.status == 200, answer.body
    with env.connect() as conn:
        stored = {pid: (rating, games) for pid, rating, games in conn.execute(
            "SELECT player_id, rating, games_played FROM players WHERE ladder = 'elo'")}
    got = answer.body["players"]
    assert [p["player_id"] for p in got] == [p for p in reversed(PLAYERS) if p in stored]
    for p in got:
        assert (p["rating"], p["games"]) == stored[p["player_id"]]
        assert p["rank"] == 1 + sum(r > p["rating"] for r, _ in stored.values())
        assert p["deviation"] is None and p["provisional"] is None
    assert answer.body["not_found"] == ["nobody", "zz-unknown"]
    for pid in PLAYERS[:5]:  # one at a time (ranked by another query than a batch's)
        single = api.get(player_path("elo", pid)).body
        assert single["rank"] == 1 + sum(r > single["rating"] for r, _ in stored.values())


def test_a_batch_of_more_than_1000_players_is_refused_with_a_problem(api, rated):
    """1,001 ids: 422 ``invalid_request`` as application/problem+json."""
    answer = api.call("POST", "/v1/ladders/elo/players", body={"player_ids": [f"x{i}" for i in range(1001)]})
    assert answer.status == 422
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.body["code"] == "invalid_request" and answer.body["status"] == 422


def test_leaderboard_pages_neither_repeat_nor_skip_a_player_while_ratings_change(env, api, publisher, rated):
    """Page 1 (7 rows), then 40 more matches rated (new players among them), then the remaining
    pages: together they are the standings the test read right after page 1, in order, each
    player once, ranks as written out; a new walk afterwards shows the new standings."""
    before: dict[str, float] = {}
    more = _matches("n", 40, seed=2, day=4, players=PLAYERS + ["new1", "new2", "new3"])

    def rate_more() -> None:
        before.update(_standings(env))  # nothing is rated between page 1 and this read
        with env.connect() as conn:
            done = conn.execute("SELECT (SELECT count(*) FROM ledger) + (SELECT count(*) FROM dead_letters)"
                                " + (SELECT count(*) FROM duplicate_deliveries)").fetchone()[0]
        for m in more:
            publisher(m)
        env.wait_drained(done + len(more))

    rows, moments = _walk(api, 7, between=rate_more)
    assert len(set(moments)) == 1
    after = _standings(env)
    assert after != before and set(after) > set(before)
    assert [(r["rank"], r["player_id"], r["rating"]) for r in rows] == _expected_board(before)
    again, _ = _walk(api, 7)
    assert [(r["rank"], r["player_id"], r["rating"]) for r in again] == _expected_board(after)


def test_history_marks_the_annulment_and_the_rows_it_rewrote(env, api, rated):
    """A player of the annulled match: the match is gone from the history entries, an annulment
    correction with ``own_match`` is listed, and the entries after it name that correction."""
    annulled = rated[10]
    player = annulled["side_a"]["players"][0]["player_id"]
    answer = api.get(f"/v1/ladders/elo/history/{player}")
    assert answer.status == 200, answer.body
    entries = answer.body["entries"]
    assert annulled["match_id"] not in [e["match_id"] for e in entries]
    (annulment,) = [c for c in answer.body["corrections"] if c["kind"] == "annulment"]
    assert annulment["own_match"] and annulment["annulled"] == [annulled["match_id"]]
    assert annulment["reason"] == "disputed" and annulment["annulled_by"] == "referee"
    mine = [m["match_id"] for m in rated if player in (m["side_a"]["players"][0]["player_id"],
                                                        m["side_b"]["players"][0]["player_id"])]
    later = mine[mine.index(annulled["match_id"]) + 1:]
    assert later, "the annulled match was the player's last: pick another seed"
    rewritten = {e["match_id"] for e in entries if e["corrected_by"] == annulment["id"]}
    assert rewritten == set(later)
    with env.connect() as conn:
        rating = conn.execute("SELECT rating FROM players WHERE ladder = 'elo' AND player_id = %s",
                              (player,)).fetchone()[0]
    assert entries[-1]["rating_after"] == rating


def test_match_status_tells_applied_duplicate_dead_letter_annulled_and_unknown(env, api, rated):
    """An applied match with its changes and its duplicate delivery; a conflicting duplicate listed
    on its applied match; a dead letter with its reason code; an annulled match; 404 for a match
    never sent."""
    first = api.get(f"/v1/matches/{rated[0]['match_id']}")
    assert first.status == 200 and first.body["status"] == "applied"
    assert len(first.body["duplicate_deliveries"]) == 1 and first.body["dead_letters"] == []
    with env.connect() as conn:
        changes = {pid: (before, after) for pid, before, after in conn.execute(
            "SELECT player_id, rating_before, rating_after FROM rating_changes WHERE match_id = %s"
            " AND superseded_by IS NULL", (rated[0]["match_id"],))}
    assert {c["player_id"]: (c["rating_before"], c["rating_after"]) for c in first.body["changes"]} == changes

    conflicted = api.get(f"/v1/matches/{rated[1]['match_id']}").body
    assert conflicted["status"] == "applied"
    assert [d["reason_code"] for d in conflicted["dead_letters"]] == ["conflicting_duplicate"]

    dead = api.get("/v1/matches/bad-ladder-1")
    assert dead.status == 200 and dead.body["status"] == "dead_letter", dead.body
    assert [d["reason_code"] for d in dead.body["dead_letters"]] == ["unknown_ladder"]
    assert "no-such-ladder" in dead.body["dead_letters"][0]["detail"]
    assert dead.body["changes"] == [] and dead.body["ladder"] is None

    annulled = api.get(f"/v1/matches/{rated[10]['match_id']}").body
    assert annulled["status"] == "annulled" and annulled["annulment"]["reason"] == "disputed"

    unknown = api.get("/v1/matches/never-sent")
    assert unknown.status == 404 and unknown.body["code"] == "unknown_match"
    assert unknown.headers["content-type"] == "application/problem+json"


def test_a_player_state_carries_an_etag_and_a_repeat_with_it_is_answered_304(api, rated):
    """GET a player twice, the second time with If-None-Match: 304 with the same ETag, no body."""
    first = api.get(player_path("elo", "p03"))
    assert first.status == 200 and first.headers["etag"]
    again = api.get(player_path("elo", "p03"), headers={"If-None-Match": first.headers["etag"]})
    assert again.status == 304 and again.headers["etag"] == first.headers["etag"] and not again.body


def test_ladders_name_the_policy_in_force(env, api, rated):
    """GET /v1/ladders: the elo ladder with the policy version recorded in ``ladders``."""
    with env.connect() as conn:
        version = conn.execute("SELECT policy_version FROM ladders WHERE ladder = 'elo'").fetchone()[0]
    (elo,) = [x for x in api.get("/v1/ladders").body["ladders"] if x["name"] == "elo"]
    assert elo["policy_version"] == version and elo["model"] == "elo" and elo["players"] >= 30


def test_unknown_ladder_and_player_are_problems_with_the_cli_reason_codes(api, rated):
    """404 ``unknown_ladder`` and ``unknown_player``, as problem details."""
    ladder = api.get("/v1/ladders/nope/leaderboard")
    player = api.get(player_path("elo", "nobody"))
    assert (ladder.status, ladder.body["code"]) == (404, "unknown_ladder")
    assert (player.status, player.body["code"]) == (404, "unknown_player")
    assert api.get("/v1/ladders/elo/leaderboard?cursor=not-a-cursor").body["code"] == "invalid_cursor"


def test_a_cursor_of_one_ladder_is_invalid_on_another(env, api, publisher, rated):
    """The next_cursor of an elo walk, given to the glicko2 ladder's leaderboard: 400 invalid_cursor,
    where on elo it gives the next page."""
    publisher(dict(elo_message("gl-cursor-1", "p01", "p02", 0, 4), ladder="glicko2"))
    deadline = time.monotonic() + 60
    while api.get("/v1/ladders/glicko2/leaderboard").status != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    cursor = api.get("/v1/ladders/elo/leaderboard?limit=5").body["next_cursor"]
    assert api.get(f"/v1/ladders/elo/leaderboard?limit=5&cursor={cursor}").status == 200
    other = api.get(f"/v1/ladders/glicko2/leaderboard?limit=5&cursor={cursor}")
    assert (other.status, other.body["code"]) == (400, "invalid_cursor")


def test_the_api_role_cannot_write(api_role_url):
    """A login role granted ratings_api reads the players and is refused any write."""
    with psycopg.connect(api_role_url, autocommit=True) as conn:
        conn.execute("SELECT count(*) FROM players").fetchone()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE players SET rating = rating + 1")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO dead_letters (reason_code, detail, raw_body) VALUES ('x', 'x', 'x')")


def test_with_tokens_configured_v1_asks_for_one_and_health_does_not(env, api_role_url, rated):
    """An API process on the read-only role with RATINGS_API_TOKENS: /v1 without a token is 401
    ``unauthorized`` (WWW-Authenticate: Bearer), with a wrong one too, with a right one 200; /health 200."""
    from worker.devtools.runtime import wait_until

    env.procs.start_api("api-tokens", env={"RATINGS_API_DATABASE_URL": api_role_url,
                                           "RATINGS_API_TOKENS": "first-token, second-token"})
    try:
        base = f"http://127.0.0.1:{env.procs.ports['api-tokens']}"
        open_client = Client(base)
        wait_until(lambda: open_client.get("/health").status == 200, "the second API", timeout=60)
        refused = open_client.get("/v1/ladders")
        assert refused.status == 401 and refused.body["code"] == "unauthorized"
        assert refused.headers["www-authenticate"] == "Bearer"
        assert Client(base, token="wrong").get("/v1/ladders").status == 401
        answer = Client(base, token="second-token").get("/v1/ladders/elo/leaderboard?limit=3")
        assert answer.status == 200 and len(answer.body["rows"]) == 3
    finally:
        env.procs.stop("api-tokens")


def test_a_transaction_open_at_the_first_page_cannot_move_a_player_across_pages(env, api, rated):
    """A transaction that raised the 10th player's rating by 1,000 is still open when page 1 (5 rows)
    is read and commits before the next pages: the walk still shows every player once, at the
    ratings committed before the first page (without the moment taken from the open transaction,
    that player would jump above the cursor and be skipped)."""
    before = _standings(env)
    tenth = _expected_board(before)[9][1]
    writer = psycopg.connect(env.database_url)
    try:
        writer.execute("UPDATE players SET rating = rating + 1000, updated_at = now()"
                       " WHERE ladder = 'elo' AND player_id = %s", (tenth,))
        first = api.get("/v1/ladders/elo/leaderboard?limit=5")
        writer.commit()
        rows, cursor = list(first.body["rows"]), first.body["next_cursor"]
        while cursor:
            page = api.get(f"/v1/ladders/elo/leaderboard?limit=5&cursor={cursor}").body
            rows += page["rows"]
            cursor = page["next_cursor"]
        assert [(r["rank"], r["player_id"], r["rating"]) for r in rows] == _expected_board(before)
        assert _standings(env)[tenth] == before[tenth] + 1000
    finally:
        writer.rollback()
        writer.execute("UPDATE players SET rating = %s WHERE ladder = 'elo' AND player_id = %s",
                       (before[tenth], tenth))
        writer.commit()
        writer.close()


def test_a_rebuild_between_pages_ends_the_walk_with_stale_cursor(api, rated):
    """Page 1, then `ratings rebuild --ladder elo` (a new history generation), then page 2: 409
    ``stale_cursor``; a new walk from the top works."""
    from ..test_chronological import run_cli

    first = api.get("/v1/ladders/elo/leaderboard?limit=5")
    assert first.status == 200 and first.body["next_cursor"]
    done = run_cli("rebuild", "--ladder", "elo", "--by", "api-test")
    assert done.returncode == 0, done.stdout + done.stderr
    second = api.get(f"/v1/ladders/elo/leaderboard?limit=5&cursor={first.body['next_cursor']}")
    assert second.status == 409 and second.body["code"] == "stale_cursor"
    assert api.get("/v1/ladders/elo/leaderboard?limit=5").status == 200


def test_health_and_metrics_answer_without_a_token(api, rated):
    """/health is ok with the database; /metrics counts the requests answered, by route template."""
    assert api.get("/health").body == {"status": "ok", "database": "ok"}
    api.get(player_path("elo", "p01"))
    metrics = api.get("/metrics")
    assert metrics.status == 200
    assert 'ratings_api_requests_total{method="GET",route="/v1/ladders/{ladder}/players/{player_id:path}",status="200"}' \
        in metrics.body
