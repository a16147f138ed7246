"""`ratings export` against the session's real servers and workers: CSV and XLSX read back."""

from __future__ import annotations

import csv
import io

import openpyxl
import pytest

from tests.integration.test_rebuild import classic_elo, cli, publish_one_by_one
from tests.integration.test_worker import match

pytestmark = pytest.mark.integration


def test_export_writes_the_leaderboard_as_csv_and_xlsx_for_organisers(clean, publisher, tmp_path):
    """Four matches with known results: wins, losses, draws, win % (a draw counts half), rating,
    peak and games in both files equal the hand-computed values; rows ordered by rating."""
    messages = [match("ex-1", "alice", "bob"), match("ex-2", "alice", "carol", outcome="draw"),
                match("ex-3", "bob", "carol"), match("ex-4", "alice", "carol")]
    publish_one_by_one(clean, publisher, messages)
    ratings = classic_elo(messages, 30)
    peaks = {p: max(1200.0, *(classic_elo(messages[:i], 30).get(p, 1200.0) for i in range(1, 5))) for p in ratings}
    expected = {  # name: wins, losses, draws, win %, games
        "alice": (2, 0, 1, 2.5 / 3, 3), "bob": (1, 1, 0, 0.5, 2), "carol": (0, 2, 1, 0.5 / 3, 3),
    }
    order = sorted(ratings, key=ratings.get, reverse=True)
    assert order == ["alice", "bob", "carol"]

    csv_path, xlsx_path = tmp_path / "elo.csv", tmp_path / "elo.xlsx"
    assert cli("export", "--ladder", "elo", "--output", str(csv_path)).returncode == 0
    result = cli("export", "--ladder", "elo", "--format", "xlsx", "--output", str(xlsx_path))
    assert result.returncode == 0 and "wrote 3 player(s)" in result.stderr

    rows = list(csv.DictReader(io.StringIO(csv_path.read_text(encoding="utf-8-sig"))))
    assert [r["Name"] for r in rows] == order and [r["Rank"] for r in rows] == ["1", "2", "3"]
    for r in rows:
        wins, losses, draws, share, games = expected[r["Name"]]
        assert (int(r["Wins"]), int(r["Losses"]), int(r["Draws"]), int(r["Games"])) == (wins, losses, draws, games)
        assert r["Win %"] == f"{100 * share:.1f}"
        assert float(r["Rating"]) == pytest.approx(ratings[r["Name"]], abs=0.005)
        assert float(r["Peak"]) == pytest.approx(peaks[r["Name"]], abs=0.005)

    sheet = openpyxl.load_workbook(xlsx_path)["Leaderboard"]
    values = list(sheet.iter_rows(values_only=True))
    assert values[0] == ("Rank", "Name", "Wins", "Losses", "Draws", "Win %", "Rating", "Peak", "Games")
    for rank, (_, name, wins, losses, draws, share, rating, peak, games) in enumerate(values[1:], start=1):
        assert name == order[rank - 1]
        assert (wins, losses, draws, games) == (expected[name][0], expected[name][1], expected[name][2], expected[name][4])
        assert share == pytest.approx(expected[name][3])
        assert rating == pytest.approx(ratings[name], abs=1e-9) and peak == pytest.approx(peaks[name], abs=1e-9)

    board = cli("leaderboard", "--ladder", "elo", "--csv")  # the same win % definition
    assert [r["win %"] for r in csv.DictReader(io.StringIO(board.stdout))] == ["83.3", "50.0", "16.7"]
    top = cli("export", "--ladder", "elo", "--output", "-", "--top", "1")
    assert top.stdout.splitlines()[1].startswith("1,alice,2,0,1,83.3,")


def test_export_refuses_bad_requests_with_a_clear_message(clean, tmp_path):
    """Unknown ladder, a suffix that names no format, xlsx to standard output, a missing folder: exit 2."""
    cases = [
        (["--ladder", "chess", "--output", str(tmp_path / "a.csv")], "unknown ladder"),
        (["--ladder", "elo", "--output", str(tmp_path / "a.txt")], "--format csv or --format xlsx"),
        (["--ladder", "elo", "--output", "-", "--format", "xlsx"], "standard output"),
        (["--ladder", "elo", "--output", str(tmp_path / "no" / "a.csv")], "does not exist"),
        (["--ladder", "elo", "--output", str(tmp_path / "a.csv"), "--format", "pdf"], "pdf"),
    ]
    for args, message in cases:
        result = cli("export", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
