"""The `ratings` commands a user runs, against the session's real servers and workers."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.integration.test_worker import match, run_cli

pytestmark = pytest.mark.integration


def test_import_football_then_leaderboard_history_and_verify(clean):
    """import-football publishes real matches; leaderboard, history and verify read what was applied."""
    result = run_cli(clean, "import-football", "--limit", "60")
    assert result.returncode == 0, result.stderr
    counts = clean.wait_drained(60)
    assert (counts.applied, counts.dead_letters) == (60, 0)

    board = run_cli(clean, "leaderboard", "--ladder", "elo", "--top", "5", "--csv")
    rows = list(csv.DictReader(io.StringIO(board.stdout)))
    assert list(rows[0]) == ["rank", "player", "rating", "games", "wins", "draws", "losses", "win %"]
    assert len(rows) == 5 and rows[0]["rank"] == "1"
    ratings = [float(r["rating"]) for r in rows]
    assert ratings == sorted(ratings, reverse=True)
    for r in rows:
        assert int(r["wins"]) + int(r["draws"]) + int(r["losses"]) == int(r["games"])

    # The first match in the file: Scotland 0-0 England, 1872-11-30.
    history = run_cli(clean, "history", "Scotland", "--ladder", "elo", "--csv")
    assert history.returncode == 0, history.stderr
    rows = list(csv.DictReader(io.StringIO(history.stdout)))
    # Two workers may apply Scotland's matches in another order than the file's; whatever the
    # order, the history starts from the initial rating, chains, and holds the 1872 match.
    assert [int(r["sequence"]) for r in rows] == list(range(1, len(rows) + 1))
    assert float(rows[0]["rating_before"]) == 1200.0
    assert all(a["rating_after"] == b["rating_before"] for a, b in zip(rows, rows[1:]))
    first = next(r for r in rows if r["match_id"] == "football:1872-11-30:Scotland:England")
    assert first["result"] == "draw"
    assert run_cli(clean, "verify", "--ladder", "elo").returncode == 0


def test_publish_a_jsonl_file_and_list_dead_letters(clean, tmp_path):
    """`ratings publish FILE` sends each line; a bad line shows up in `ratings dead-letters` with its reason."""
    path = tmp_path / "matches.jsonl"
    path.write_text(json.dumps(match("f-1", "a", "b")) + "\n" + "{not json\n" + json.dumps(match("f-2", "b", "a")) + "\n")
    assert run_cli(clean, "publish", "--send-invalid", str(path)).returncode == 0
    counts = clean.wait_drained(3)
    assert (counts.applied, counts.dead_letters) == (2, 1)
    listing = run_cli(clean, "dead-letters")
    assert "not_json=1" in listing.stdout


def test_publish_takes_a_json_lines_file_saved_with_a_byte_order_mark(clean, tmp_path):
    """A file saved by an editor that writes a UTF-8 BOM: its first line is a match like the others
    (it was reported as not a JSON object, left out, exit 1)."""
    path = tmp_path / "matches.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (json.dumps(match("bom-1", "a", "b")) + "\n"
                                          + json.dumps(match("bom-2", "b", "a")) + "\n").encode())
    result = run_cli(clean, "publish", str(path))
    assert result.returncode == 0, result.stderr
    assert "published 2 messages" in result.stdout
    counts = clean.wait_drained(2)
    assert (counts.applied, counts.dead_letters) == (2, 0)


def test_publish_counts_and_leaves_out_lines_that_are_not_json_objects(clean, tmp_path):
    """A CSV published by mistake: its lines are counted, not sent, and the command exits 1."""
    path = tmp_path / "results.csv"
    path.write_text("date,home_team,away_team\n1872-11-30,Scotland,England\n" + json.dumps(match("c-1", "a", "b"))
                    + "\n")
    result = run_cli(clean, "publish", str(path))
    assert result.returncode == 1
    assert "2 of 3 line(s) of results.csv are not JSON objects" in result.stderr
    assert "published 1 message\n" in result.stdout
    counts = clean.wait_drained(1)
    assert (counts.applied, counts.dead_letters) == (1, 0)


def test_generate_writes_valid_seeded_matches(clean):
    """`ratings generate` prints JSON Lines that validate, the same for the same seed."""
    from schemas import parse_match_finished

    first = run_cli(clean, "generate", "--matches", "20", "--seed", "5").stdout.splitlines()
    again = run_cli(clean, "generate", "--matches", "20", "--seed", "5").stdout.splitlines()
    assert first == again and len(first) == 20
    sizes = {len(parse_match_finished(line).side_a.players) for line in first}
    assert sizes <= {1, 2}


def test_the_demo_runs_the_whole_path_and_reports_verify(clean):
    """`ratings demo --limit 100 --sedma 50` applies everything, puts two events per football match on the stream, and verifies."""
    result = run_cli(clean, "demo", "--limit", "100", "--sedma", "50")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "of ladder elo      │   200" in result.stdout
    assert "verify elo:" in result.stdout and "verify sedma:" in result.stdout
    assert "all good" in result.stdout
