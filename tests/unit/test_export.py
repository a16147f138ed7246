"""Leaderboard exports (worker/export.py): CSV text and an Excel workbook read back with openpyxl."""

from __future__ import annotations

import csv
import io

import openpyxl
import pytest

from worker.ops.export import (
    HEADERS,
    UNCERTAINTY_HEADERS,
    Standing,
    csv_text,
    standings_from_board,
    standings_from_rows,
    win_share,
    write_csv_file,
    write_xlsx,
)
from worker.store.standings import BoardRow

ROWS = [  # as worker.store.leaderboard returns them
    {"rank": 1, "player_id": "alice", "rating": 1225.5, "games": 4, "wins": 2, "draws": 1, "losses": 1,
     "win_pct": None, "peak_rating": 1230.25},
    {"rank": 2, "player_id": "=HYPERLINK(\"x\")", "rating": 1200.0, "games": 2, "wins": 0, "draws": 2, "losses": 0,
     "win_pct": None, "peak_rating": 1200.0},
    {"rank": 3, "player_id": "Côte d'Ivoire", "rating": 1174.5, "games": 2, "wins": 0, "draws": 0, "losses": 2,
     "win_pct": None, "peak_rating": 1200.0},
]


def test_win_share_counts_a_draw_as_half_a_win():
    """2 wins, 1 draw, 1 loss in 4 games: (2 + 0.5) / 4 = 62.5 %; no games: no share."""
    assert win_share(2, 1, 4) == 0.625
    assert win_share(0, 2, 2) == 0.5
    assert win_share(0, 0, 0) is None


def test_csv_has_the_tournament_columns_and_percentages_with_one_decimal():
    """Header in the documented order; win % as a percentage; ratings with two decimals."""
    rows = list(csv.reader(io.StringIO(csv_text(standings_from_rows(ROWS)))))
    assert tuple(rows[0]) == HEADERS == ("Rank", "Name", "Wins", "Losses", "Draws", "Win %", "Rating", "Peak", "Games")
    assert rows[1] == ["1", "alice", "2", "1", "1", "62.5", "1225.50", "1230.25", "4"]
    assert rows[3] == ["3", "Côte d'Ivoire", "0", "2", "0", "0.0", "1174.50", "1200.00", "2"]


def test_csv_names_that_a_spreadsheet_would_evaluate_get_a_leading_quote():
    """A name starting with '=' (or +, -, @) is written as text: a leading apostrophe (OWASP)."""
    rows = list(csv.reader(io.StringIO(csv_text(standings_from_rows(ROWS)))))
    assert rows[2][1] == "'=HYPERLINK(\"x\")"


def test_the_csv_file_starts_with_a_byte_order_mark_for_spreadsheet_programs(tmp_path):
    """UTF-8 with BOM, so accented names open right; the rows read back the same."""
    path = tmp_path / "board.csv"
    assert write_csv_file(standings_from_rows(ROWS), path) == 3
    raw = path.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")
    assert "Côte d'Ivoire" in raw.decode("utf-8-sig")


def test_the_workbook_reads_back_with_numbers_formats_and_text_names(tmp_path):
    """Read with openpyxl (not the writer's library): header, numbers as numbers, win % a fraction
    with a percentage format, a formula-like name as a plain string, the About sheet."""
    path = tmp_path / "board.xlsx"
    assert write_xlsx(standings_from_rows(ROWS), path, "elo", {"Policy version": "abc123"}) == 3
    book = openpyxl.load_workbook(path)
    assert book.sheetnames == ["Leaderboard", "About"]
    sheet = book["Leaderboard"]
    values = list(sheet.iter_rows(values_only=True))
    assert values[0] == HEADERS
    assert values[1] == (1, "alice", 2, 1, 1, 0.625, 1225.5, 1230.25, 4)
    assert values[2][1] == "=HYPERLINK(\"x\")" and sheet["B3"].data_type == "s"
    assert sheet["F2"].number_format == "0.0%" and sheet["G2"].number_format == "0.0"
    assert sheet.freeze_panes == "A2" and sheet.auto_filter.ref == "A1:I4"
    about = {row[0]: row[1] for row in book["About"].iter_rows(values_only=True)}
    assert about["Ladder"] == "elo" and about["Players"] == 3 and about["Policy version"] == "abc123"
    assert "draws / 2" in about["Win %"]


def test_an_empty_ladder_exports_just_the_header(tmp_path):
    """No players: a header row in both formats, nothing else."""
    assert csv_text([]).splitlines() == [",".join(HEADERS)]
    path = tmp_path / "empty.xlsx"
    assert write_xlsx([], path, "elo") == 0
    assert list(openpyxl.load_workbook(path)["Leaderboard"].iter_rows(values_only=True)) == [HEADERS]


def test_a_standing_without_games_leaves_win_pct_empty(tmp_path):
    """win_share None (no games) is an empty cell, not 0 %."""
    s = Standing(1, "new", 0, 0, 0, None, 1200.0, 1200.0, 0)
    assert list(csv.reader(io.StringIO(csv_text([s]))))[1][5] == ""
    path = tmp_path / "new.xlsx"
    write_xlsx([s], path, "elo")
    assert openpyxl.load_workbook(path)["Leaderboard"]["F2"].value is None


@pytest.mark.parametrize("name", ["+1", "-dash", "@at", "\ttab"])
def test_every_formula_prefix_is_neutralised(name):
    """Each character a spreadsheet treats as the start of a formula gets the leading quote."""
    row = {**ROWS[0], "player_id": name}
    assert list(csv.reader(io.StringIO(csv_text(standings_from_rows([row])))))[1][1] == "'" + name


BOARD = [  # as worker.store.standings.board gives them: rank, player, conservative, rating, deviation, games, marks
    BoardRow(1, "alice", 1075.5, 1225.5, 75.0, 4, False, False),
    BoardRow(None, "Côte d'Ivoire", 874.5, 1174.5, 150.0, 2, True, True),
    BoardRow(None, "=HYPERLINK(\"x\")", 1000.0, 1200.0, 100.0, 2, False, False),
]


def test_a_ladder_with_uncertainty_has_deviation_conservative_and_status_after_rating():
    """The board's order, ranks and marks; deviation and conservative rating with two decimals;
    Status the marks that apply, as `ratings leaderboard` names them; counts from the store's rows."""
    rows = list(csv.reader(io.StringIO(csv_text(standings_from_board(BOARD, ROWS), uncertainty=True))))
    assert tuple(rows[0]) == UNCERTAINTY_HEADERS == (*HEADERS[:7], "Deviation", "Conservative", "Status", *HEADERS[7:])
    assert rows[1] == ["1", "alice", "2", "1", "1", "62.5", "1225.50", "75.00", "1075.50", "rankable", "1230.25", "4"]
    assert rows[2] == ["", "Côte d'Ivoire", "0", "2", "0", "0.0", "1174.50", "150.00", "874.50",
                       "provisional, inactive", "1200.00", "2"]
    assert rows[3][:2] == ["", "'=HYPERLINK(\"x\")"] and rows[3][9] == ""
    assert csv_text([], uncertainty=True).splitlines() == [",".join(UNCERTAINTY_HEADERS)]


def test_a_ladder_with_uncertainty_in_the_workbook_formats_deviations_as_ratings(tmp_path):
    """Deviation and Conservative exact with the Rating column's number format; Status as text."""
    path = tmp_path / "board.xlsx"
    assert write_xlsx(standings_from_board(BOARD, ROWS), path, "glicko2", uncertainty=True) == 3
    sheet = openpyxl.load_workbook(path)["Leaderboard"]
    values = list(sheet.iter_rows(values_only=True))
    assert values[0] == UNCERTAINTY_HEADERS
    assert values[1] == (1, "alice", 2, 1, 1, 0.625, 1225.5, 75.0, 1075.5, "rankable", 1230.25, 4)
    assert values[2][0] is None and values[2][9] == "provisional, inactive"
    assert sheet["G2"].number_format == sheet["H2"].number_format == sheet["I2"].number_format == "0.0"
    assert sheet["J3"].data_type == "s" and sheet.auto_filter.ref == "A1:L4"
