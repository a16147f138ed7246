"""``leaderboard --json``/``--csv``, ``export`` and ``history --json`` of a ladder rated with
uncertainty (Glicko-2), from the real CLI against the session's servers and workers: every output
gives the table's ranking (by rating - 2 x deviation at the moment shown), the deviation and the marks;
an --at before the stored state, a predicted shape the ladder does not rate and an unknown ladder
given to ``events`` exit 2; a dead letter with a repeated key or NaN keeps its match id."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from tests.integration.test_worker import match, run_cli

pytestmark = pytest.mark.integration

AT = "2026-06-01T00:00:00+00:00"


@pytest.fixture
def glicko2_players(clean, publisher):
    """On glicko2: ann beat bob once (a high rating, a wide deviation); cy drew dee six times and
    beat her once (a lower rating, a narrower deviation)."""
    messages = [match("g-1", "ann", "bob", ladder="glicko2", finished_at="2026-05-01T12:00:00Z")]
    for i in range(7):
        messages.append(match(f"g-{i + 2}", "cy", "dee", ladder="glicko2", outcome="draw" if i else "side_a_won",
                              finished_at=f"2026-05-{i + 2:02}T12:00:00Z"))
    for m in messages:
        publisher(m)
    counts = clean.wait_drained(len(messages))
    assert counts.applied == len(messages)
    return clean


def _table_ranks(text: str) -> dict[str, str]:
    """player -> rank cell of the rich table ``leaderboard`` prints."""
    ranks = {}
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line)]
        if len(cells) > 3 and cells[2] in ("ann", "bob", "cy", "dee"):
            ranks[cells[2]] = cells[1]
    return ranks


def test_json_csv_and_table_give_one_ranking_with_deviation_and_marks(glicko2_players):
    env = glicko2_players
    done = run_cli(env, "leaderboard", "--ladder", "glicko2", "--json", "--at", AT)
    assert done.returncode == 0, done.stderr
    board = json.loads(done.stdout)
    assert (board["ladder"], board["model"], board["at"]) == ("glicko2", "glicko2", AT)
    players = board["players"]
    assert {p["player_id"] for p in players} == {"ann", "bob", "cy", "dee"}
    for p in players:
        assert p["conservative"] == pytest.approx(p["rating"] - 2 * p["deviation"], abs=1e-9)
        assert p["rankable"] == (p["rank"] is not None)
    rankable = [p for p in players if p["rankable"]]
    assert [p["player_id"] for p in rankable] == [p["player_id"] for p in sorted(
        rankable, key=lambda p: -(p["rating"] - 2 * p["deviation"]))]
    assert players[: len(rankable)] == rankable  # players not rankable come last
    by_id = {p["player_id"]: p for p in players}
    # the example that was wrong: ann's raw rating is the highest, her conservative rating is not
    assert by_id["ann"]["rating"] > by_id["cy"]["rating"]
    assert by_id["ann"]["conservative"] < by_id["cy"]["conservative"]
    assert players[0]["player_id"] != "ann"
    assert (by_id["cy"]["wins"], by_id["cy"]["draws"], by_id["cy"]["losses"], by_id["cy"]["games"]) == (1, 6, 0, 7)

    table = run_cli(env, "leaderboard", "--ladder", "glicko2", "--at", AT)
    assert _table_ranks(table.stdout) == {p["player_id"]: "-" if p["rank"] is None else str(p["rank"])
                                          for p in players}, table.stdout

    as_csv = run_cli(env, "leaderboard", "--ladder", "glicko2", "--csv", "--at", AT)
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [(r["player"], r["rank"], r["provisional"], r["inactive"]) for r in rows] == [
        (p["player_id"], "" if p["rank"] is None else str(p["rank"]), str(p["provisional"]).lower(),
         str(p["inactive"]).lower()) for p in players]
    assert [float(r["deviation"]) for r in rows] == [p["deviation"] for p in players]

    later = json.loads(run_cli(env, "leaderboard", "--ladder", "glicko2", "--json",
                               "--at", "2027-06-01T00:00:00Z").stdout)
    grown = {p["player_id"]: p["deviation"] for p in later["players"]}
    assert all(grown[pid] > by_id[pid]["deviation"] for pid in by_id)  # --at is honoured with --json


def test_export_ranks_as_the_leaderboard_and_history_json_has_the_deviation(glicko2_players):
    env = glicko2_players
    now = json.loads(run_cli(env, "leaderboard", "--ladder", "glicko2", "--json").stdout)["players"]
    exported = run_cli(env, "export", "--ladder", "glicko2", "--output", "-")
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert [(r["Name"], r["Rank"]) for r in rows] == [
        (p["player_id"], "" if p["rank"] is None else str(p["rank"])) for p in now]

    history = json.loads(run_cli(env, "history", "cy", "--ladder", "glicko2", "--json").stdout)["history"]
    assert len(history) == 7
    assert history[0]["deviation_before"] == 500.0  # initial_deviation of the shipped policies/glicko2.toml
    for before, after in zip(history, history[1:]):
        assert after["deviation_before"] >= before["deviation_after"]  # grown between matches, never shrunk
        assert after["volatility_before"] == before["volatility_after"]
    assert all(r["deviation_after"] < r["deviation_before"] for r in history)
    elo = json.loads(run_cli(env, "history", "cy", "--ladder", "elo", "--json").stdout)
    assert elo["history"] == []


def test_an_at_before_a_shown_players_latest_match_is_refused(glicko2_players):
    """cy and dee last played 2026-05-08 12:00 UTC: an --at before it would show today's ratings
    as if they were that moment's, so leaderboard and predict refuse it; at or after it they answer."""
    env = glicko2_players
    for args in (["leaderboard", "--ladder", "glicko2", "--json"], ["leaderboard", "--ladder", "glicko2"],
                 ["predict", "glicko2", "--side", "cy", "--side", "ann"]):
        early = run_cli(env, *args, "--at", "2026-05-08T11:59:59Z")
        assert early.returncode == 2, early.stdout
        assert "at_before_latest_match" in early.stderr and "2026-05-08T12:00:00+00:00" in early.stderr, early.stderr
        assert run_cli(env, *args, "--at", "2026-05-08T12:00:00Z").returncode == 0
    # ann and bob last played 2026-05-01: a prediction of theirs only may be asked as of 2026-05-02
    assert run_cli(env, "predict", "glicko2", "--side", "ann", "--side", "bob", "--at", "2026-05-02T00:00:00Z"
                   ).returncode == 0


@pytest.mark.parametrize(("ladder", "sides"), [
    ("sedma", ["a,b", "c"]),  # sedma rates 1v1 and 2v2, all sides the same size
    ("sedma", ["a", "b", "c"]),  # and two sides only
    ("elo", ["a,b", "c"]),  # elo declares nothing: 1v1 only
])
def test_predict_refuses_a_shape_the_ladder_does_not_rate(clean, ladder, sides):
    args = [a for s in sides for a in ("--side", s)]
    done = run_cli(clean, "predict", ladder, *args)
    assert done.returncode == 2, done.stdout
    assert "unsupported_match_shape" in done.stderr and "v".join(str(len(s.split(","))) for s in sides) in done.stderr
    assert run_cli(clean, "predict", "sedma", "--side", "a,b", "--side", "c,d").returncode == 0


@pytest.mark.parametrize("command", ["read", "snapshot"])
def test_events_of_an_unknown_ladder_exit_2_like_verify(clean, command):
    done = run_cli(clean, "events", command, "--ladder", "chess")
    assert done.returncode == 2 and "unknown ladder 'chess'" in done.stderr, done.stderr
    assert run_cli(clean, "events", command, "--ladder", "elo").returncode == 0


def test_a_dead_letter_with_a_repeated_key_or_nan_keeps_its_match_id(clean, publisher):
    """Through the workers: both bodies are dead letters filed under their match id."""
    body = json.dumps(match("dup-key-1", "ann", "bob"))
    publisher(body[:-1] + ', "ladder": "elo"}')
    publisher(body.replace("dup-key-1", "nan-1")[:-1] + ', "weight": NaN}')
    assert clean.wait_drained(2).dead_letters == 2
    with clean.connect() as conn:
        rows = conn.execute("SELECT reason_code, match_id FROM dead_letters ORDER BY id").fetchall()
    assert sorted(rows) == [("not_json", "nan-1"), ("schema_violation", "dup-key-1")]


def test_verify_names_the_fields_of_a_difference(glicko2_players):
    """A tampered deviation: verify's text line names rating, games, deviation, volatility and the
    last match (UTC), never a Python repr."""
    env = glicko2_players
    with env.connect() as conn:
        conn.execute("UPDATE players SET deviation = 123.5 WHERE ladder = 'glicko2' AND player_id = 'bob'")
    done = run_cli(env, "verify", "--ladder", "glicko2")
    assert done.returncode == 1
    [line] = [x for x in done.stdout.splitlines() if x.strip().startswith("bob:")]
    assert "StoredState" not in line and "(" not in line, line
    stored, replayed = line.split(": stored ", 1)[1].split("; replayed ")
    assert stored.startswith("rating ") and ", games 1, deviation 123.5, volatility " in stored, line
    assert stored.endswith("last_played 2026-05-01T12:00:00+00:00"), line
    assert "deviation 123.5" not in replayed and replayed.endswith("last_played 2026-05-01T12:00:00+00:00"), line
