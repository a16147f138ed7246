"""`ratings export` against the session's real servers and workers: CSV and XLSX read back.

An Elo ladder's export has the nine tournament columns; a Glicko-2 ladder's adds Deviation,
Conservative and Status after Rating, checked against the deviation growth the test computes itself
(Glickman's step 6 by :func:`engine.glicko2.rate_period` over the time since each player's stored
last match) and the shipped policy's leaderboard bounds."""

from __future__ import annotations

import csv
import io
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import openpyxl
import pytest

from engine.glicko2 import rate_period
from tests.integration.test_rebuild import classic_elo, cli, publish_one_by_one
from tests.integration.test_worker import match

pytestmark = pytest.mark.integration

ELO_HEADER = "Rank,Name,Wins,Losses,Draws,Win %,Rating,Peak,Games"
GLICKO2_HEADER = ("Rank", "Name", "Wins", "Losses", "Draws", "Win %", "Rating", "Deviation", "Conservative", "Status",
                  "Peak", "Games")
DAY = 86_400.0


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
    lines = [ELO_HEADER] + [  # the whole file, byte for byte: no column of the models with uncertainty
        f"{rank},{name},{expected[name][0]},{expected[name][1]},{expected[name][2]},{100 * expected[name][3]:.1f},"
        f"{ratings[name]:.2f},{peaks[name]:.2f},{expected[name][4]}" for rank, name in enumerate(order, start=1)]
    assert csv_path.read_bytes() == ("\ufeff" + "\r\n".join(lines) + "\r\n").encode()
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
    about = {row[0] for row in openpyxl.load_workbook(xlsx_path)["About"].iter_rows(values_only=True)}
    assert about == {"Ladder", "Players", "Exported at (UTC)", "Win %", "Policy version"}

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


def _glicko2_rules() -> dict[str, float]:
    """The shipped glicko2 ladder's growth and leaderboard parameters: tau, periods_per_day and
    inactive_days from its policy file, the bounds it leaves at the engine's documented defaults
    (deviation cap 500, provisional at or above 110, rankable at or below 75, k = 2)."""
    policy = tomllib.loads((Path(__file__).parents[2] / "worker" / "policies" / "glicko2.toml").read_text())
    assert not {"max_deviation", "provisional_deviation", "rankable_deviation", "conservative_k"} & set(policy)
    return {"tau": policy["tau"], "periods_per_day": policy["periods_per_day"], "inactive_days": policy["inactive_days"],
            "max_deviation": 500.0, "provisional_deviation": 110.0, "rankable_deviation": 75.0, "k": 2.0}


def _glicko2_matches(now: float) -> list[dict]:
    """olga and otto: one match 400 days ago (inactive); ann beat bob 100 days ago (provisional);
    cy and dee: 32 matches three days ago (rankable); eve and fay: 20 five days ago (neither mark)."""
    def at(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")

    def outcome(i: int) -> str:
        return ("side_a_won", "draw", "side_b_won", "draw", "side_a_won")[i % 5]

    messages = [match("gx-old", "olga", "otto", ladder="glicko2", finished_at=at(now - 400 * DAY)),
                match("gx-ab", "ann", "bob", ladder="glicko2", finished_at=at(now - 100 * DAY))]
    messages += [match(f"gx-cd-{i}", "cy", "dee", outcome(i), "glicko2", at(now - 3 * DAY + 60 * i)) for i in range(32)]
    messages += [match(f"gx-ef-{i}", "eve", "fay", outcome(i + 1), "glicko2", at(now - 5 * DAY + 60 * i))
                 for i in range(20)]
    return messages


def _shown_at(state: tuple[float, float, float, float], at: float, rules: dict[str, float]) -> tuple[float, float, str]:
    """(deviation, conservative, status) of a stored Glicko-2 ``state`` (rating, deviation,
    volatility, last match in seconds since the epoch) at ``at``: the deviation grown over the
    rating periods since the last match by an empty rating period (the paper's step 6), capped."""
    rating, deviation, volatility, last = state
    periods = (at - last) / DAY * rules["periods_per_day"]
    grown = min(rate_period(rating, deviation, volatility, [], rules["tau"], periods=periods)[1], rules["max_deviation"])
    inactive = at - last > rules["inactive_days"] * DAY
    marks = {"provisional": grown >= rules["provisional_deviation"],
             "rankable": not inactive and grown <= rules["rankable_deviation"], "inactive": inactive}
    return grown, rating - rules["k"] * grown, ", ".join(m for m, on in marks.items() if on)


def _expected_board(env, since: float, until: float) -> dict[str, tuple[tuple[float, float, str], ...]]:
    """player -> what the board shows of it at ``since`` and at ``until`` (the export ran between:
    the deviation grows, the conservative rating falls with time), from the stored states."""
    rules = _glicko2_rules()
    with env.connect() as conn:
        states = conn.execute("SELECT player_id, rating, deviation, volatility, last_played FROM players "
                              "WHERE ladder = 'glicko2'").fetchall()
    return {pid: (_shown_at(state, since, rules), _shown_at(state, until, rules)) for pid, *state in states}


def test_a_glicko2_export_adds_deviation_conservative_rating_and_status(clean, publisher, tmp_path):
    """Glicko-2: Deviation is the stored one grown to the moment of the export, Conservative rating - 2 x
    Deviation, Status the marks that apply; rankable players ranked by Conservative, the others last,
    Rank blank. CSV with two decimals, the workbook exact with the Rating column's format. The Elo
    ladder's export keeps its header."""
    messages = _glicko2_matches(time.time())
    for m in messages:
        publisher(m)
    assert clean.wait_drained(len(messages)).applied == len(messages)
    csv_path, xlsx_path, elo_path = tmp_path / "g.csv", tmp_path / "g.xlsx", tmp_path / "elo.csv"
    since = time.time()
    assert cli("export", "--ladder", "glicko2", "--output", str(csv_path)).returncode == 0
    assert cli("export", "--ladder", "glicko2", "--output", str(xlsx_path)).returncode == 0
    expected = _expected_board(clean, since, time.time())
    assert {e[0][2] for e in expected.values()} == {"provisional, inactive", "provisional", "rankable", ""}
    assert all(early[2] == late[2] for early, late in expected.values())
    rankable = {p for p, (shown, _) in expected.items() if "rankable" in shown[2].split(", ")}
    order = sorted(expected, key=lambda p: (p not in rankable, -expected[p][0][1], p))
    ranked = len(rankable)

    raw = csv_path.read_text(encoding="utf-8-sig")
    assert raw.splitlines()[0] == ",".join(GLICKO2_HEADER)
    rows = list(csv.DictReader(io.StringIO(raw)))
    assert [r["Name"] for r in rows] == order
    assert [r["Rank"] for r in rows] == [str(n) for n in range(1, ranked + 1)] + [""] * (len(order) - ranked)
    for r in rows:
        (dev0, cons0, status), (dev1, cons1, _) = expected[r["Name"]]
        assert dev0 - 0.005 <= float(r["Deviation"]) <= dev1 + 0.005 and r["Deviation"] == f"{float(r['Deviation']):.2f}"
        assert cons1 - 0.005 <= float(r["Conservative"]) <= cons0 + 0.005
        assert r["Status"] == status

    book = openpyxl.load_workbook(xlsx_path)
    sheet = book["Leaderboard"]
    values = list(sheet.iter_rows(values_only=True))
    assert values[0] == GLICKO2_HEADER and [v[1] for v in values[1:]] == order
    for i, (_, name, *_, rating, deviation, conservative, status, _, _) in enumerate(values[1:], start=2):
        (dev0, cons0, want), (dev1, cons1, _) = expected[name]
        assert dev0 - 1e-9 <= deviation <= dev1 + 1e-9 and cons1 - 1e-9 <= conservative <= cons0 + 1e-9
        assert conservative == pytest.approx(rating - 2 * deviation, abs=1e-9)
        assert (status or "") == want
        assert sheet[f"H{i}"].number_format == sheet[f"I{i}"].number_format == sheet[f"G{i}"].number_format == "0.0"
    assert sheet.auto_filter.ref == f"A1:L{len(order) + 1}"
    about = {row[0]: row[1] for row in book["About"].iter_rows(values_only=True)}
    assert about["Ranked by"] == "Conservative = rating - 2 × deviation (glicko2)"
    assert since - 1 <= datetime.fromisoformat(about["Deviations as of (UTC)"]).timestamp() <= time.time()

    assert cli("export", "--ladder", "elo", "--output", str(elo_path)).returncode == 0  # no player on elo here
    assert elo_path.read_bytes() == ("\ufeff" + ELO_HEADER + "\r\n").encode()
