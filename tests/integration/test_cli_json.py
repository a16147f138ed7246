"""``--json`` of doctor, verify, leaderboard, history and the dead-letter list, and their exit codes,
from the real CLI against the session's servers and workers. Ratings are hand-computed Elo on the
``elo`` ladder (K = 30, 1200 start): the winner of a first match between newcomers has 1215
(E = 0.5, 1200 + 30 x 0.5), the loser 1185."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_worker import match, run_cli

pytestmark = pytest.mark.integration


def as_json(result) -> dict:
    """The one JSON object a ``--json`` command printed on standard output."""
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout + result.stderr
    return json.loads(lines[0])


@pytest.fixture
def one_match_and_a_dead_letter(clean, publisher):
    """ann beat bob on elo; one message that is not JSON is a dead letter."""
    publisher(match("json-1", "ann", "bob"))
    publisher("not json")
    counts = clean.wait_drained(2)
    assert (counts.applied, counts.dead_letters) == (1, 1)
    return clean


def test_leaderboard_json_lists_the_players_with_their_standings(one_match_and_a_dead_letter):
    env = one_match_and_a_dead_letter
    done = run_cli(env, "leaderboard", "--ladder", "elo", "--json")
    assert done.returncode == 0, done.stderr
    board = as_json(done)
    assert board["ladder"] == "elo"
    assert [{k: p[k] for k in ("rank", "player_id", "rating", "games", "wins", "draws", "losses", "win_pct")}
            for p in board["players"]] == [
        {"rank": 1, "player_id": "ann", "rating": 1215.0, "games": 1, "wins": 1, "draws": 0, "losses": 0, "win_pct": 100.0},
        {"rank": 2, "player_id": "bob", "rating": 1185.0, "games": 1, "wins": 0, "draws": 0, "losses": 1, "win_pct": 0.0},
    ]
    assert board["players"][0]["peak_rating"] == 1215.0


def test_history_json_gives_each_rating_change_and_exit_1_for_a_player_without_history(one_match_and_a_dead_letter):
    env = one_match_and_a_dead_letter
    done = run_cli(env, "history", "ann", "--ladder", "elo", "--json")
    assert done.returncode == 0, done.stderr
    history = as_json(done)
    assert (history["ladder"], history["player_id"], history["corrections"]) == ("elo", "ann", [])
    [row] = history["history"]
    assert row == {"sequence": 1, "match_id": "json-1", "finished_at": "2026-05-01T12:00:00+00:00", "result": "win",
                   "rating_before": 1200.0, "rating_after": 1215.0, "delta": 15.0, "expected_score": 0.5,
                   "actual_score": 1.0, "k_factor": 30.0}
    nobody = run_cli(env, "history", "nobody", "--ladder", "elo", "--json")
    assert nobody.returncode == 1
    assert as_json(nobody) == {"ladder": "elo", "player_id": "nobody", "history": [], "corrections": []}


def test_dead_letters_json_keeps_the_reason_and_the_raw_body(one_match_and_a_dead_letter):
    env = one_match_and_a_dead_letter
    done = run_cli(env, "dead-letters", "list", "--json")
    assert done.returncode == 0, done.stderr
    listing = as_json(done)
    assert listing["open_by_reason"] == {"not_json": 1}
    [letter] = listing["dead_letters"]
    assert (letter["reason_code"], letter["status"], letter["raw_body"], letter["match_id"]) == (
        "not_json", "open", "not json", None)
    assert set(letter) >= {"id", "received_at", "detail", "resolved_at", "resolved_by"}


def test_verify_json_reports_each_ladder_and_exits_1_with_the_differences(one_match_and_a_dead_letter):
    env = one_match_and_a_dead_letter
    done = run_cli(env, "verify", "--ladder", "elo", "--json")
    assert done.returncode == 0, done.stderr
    [ladder] = as_json(done)["ladders"]
    assert (ladder["ladder"], ladder["ok"], ladder["matches"], ladder["players"], ladder["differences"]) == (
        "elo", True, 1, 2, [])
    assert ladder["policy_version"] and ladder["apply_order"] in ("applied", "finished-at")
    with env.connect() as conn:
        conn.execute("UPDATE players SET rating = 1300 WHERE ladder = 'elo' AND player_id = 'ann'")
    tampered = run_cli(env, "verify", "--json")
    assert tampered.returncode == 1
    report = as_json(tampered)
    assert report["ok"] is False
    elo = next(r for r in report["ladders"] if r["ladder"] == "elo")
    assert elo["differences"] == [{"player_id": "ann", "stored": {"rating": 1300.0, "games": 1},
                                   "replayed": {"rating": 1215.0, "games": 1}}]


def test_doctor_json_lists_every_check_and_exits_1_on_an_open_dead_letter(one_match_and_a_dead_letter):
    env = one_match_and_a_dead_letter
    done = run_cli(env, "doctor", "--json", "--skip-verify")
    assert done.returncode == 1, done.stdout + done.stderr
    report = as_json(done)
    checks = {c["check"]: c for c in report["checks"]}
    assert report["ok"] is False
    assert checks["no open dead letters"]["ok"] is False and "not_json=1" in checks["no open dead letters"]["detail"]
    assert checks["database reachable"]["ok"] is True and checks["schema version"]["ok"] is True
    assert all(set(c) == {"check", "ok", "detail"} for c in report["checks"])
    assert run_cli(env, "dead-letters", "discard", "1").returncode == 0
    healthy = run_cli(env, "doctor", "--json")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert as_json(healthy)["ok"] is True and "verify elo" in {c["check"] for c in as_json(healthy)["checks"]}
