"""``ratings import`` without servers: every row of a file is read or the file is refused, and a
re-imported log is compared with what the ledger holds of it (rows added, changed, moved, removed).

The ledger is stood in for by the stored form of the matches an earlier reconciliation published
(their canonical payload, ``finished_at`` as the replay position), as the worker stores them."""

from __future__ import annotations

import json
import zipfile
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
import xlsxwriter

from worker.ops.importer import LogFileError, read_log, read_rows
from worker.ops.reconcile import _align, base_match_id, reconcile
from worker.store.import_log import StoredLogMatch

DAY = date(2026, 3, 1)
MIDNIGHT = datetime(2026, 3, 1, tzinfo=UTC)


def write_csv(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(["Player A,Player B,Result", *rows]) + "\n", encoding="utf-8")
    return path


def stored_from(changes, annulled: frozenset[str] = frozenset()) -> list[StoredLogMatch]:
    """The ledger rows the worker writes for published matches (replay order)."""
    rows = [StoredLogMatch(c.match.match_id, json.loads(c.match.canonical_json()), c.match.finished_at,
                           c.match.match_id in annulled) for c in changes]
    return sorted(rows, key=lambda s: (s.order_at, s.match_id.encode()))


def first_import(tmp_path: Path, rows: list[str], name: str = "liga"):
    plan = reconcile(read_log(write_csv(tmp_path / f"{name}.csv", rows), default_date=DAY), [], "elo", name)
    assert plan.errors == [] and plan.count("added") == len(rows)
    return plan


LOG = ["ana,bea,E", "cai,dan,B", "ana,cai,A", "bea,dan,E", "bea,cai,B", "ana,dan,B"]


def test_a_fresh_log_is_added_in_file_order_one_second_apart(tmp_path):
    """Six undated rows on --date 2026-03-01: finished_at 00:00:01 to 00:00:06 in file order, six
    distinct ids of the form import-liga-k<16 hex>."""
    plan = first_import(tmp_path, LOG)
    assert [c.match.finished_at for c in plan.changes] == [MIDNIGHT + timedelta(seconds=s) for s in range(1, 7)]
    assert [c.row.row for c in plan.changes] == [2, 3, 4, 5, 6, 7]
    assert len({c.match.match_id for c in plan.changes}) == 6
    assert all(c.match.match_id.startswith("import-liga-k") and len(c.match.match_id) == 29 for c in plan.changes)


def test_the_same_log_again_changes_nothing(tmp_path):
    plan = first_import(tmp_path, LOG)
    again = reconcile(read_log(tmp_path / "liga.csv", default_date=DAY), stored_from(plan.changes), "elo", "liga")
    assert (again.changes, again.removed, again.unchanged) == ([], [], 6)


def test_a_changed_result_annuls_the_stored_match_and_rates_the_new_one_in_its_place(tmp_path):
    """Row 4 (ana v cai) goes from A to E: one change, replacing the stored match, at its
    finished_at (00:00:03), under the same id with the revision suffix .2; five rows unchanged."""
    plan = first_import(tmp_path, LOG)
    old = plan.changes[2].match
    edited = LOG[:2] + ["ana,cai,E"] + LOG[3:]
    again = reconcile(read_log(write_csv(tmp_path / "liga.csv", edited), default_date=DAY),
                      stored_from(plan.changes), "elo", "liga")
    assert again.unchanged == 5 and again.removed == []
    [change] = again.changes
    assert (change.kind, change.row.row, change.was, change.replaces) == ("changed", 4, "A", old.match_id)
    assert change.match.match_id == old.match_id + ".2"
    assert change.match.finished_at == old.finished_at == MIDNIGHT + timedelta(seconds=3)
    assert change.match.outcome == "draw"
    # changed back: .2 is replaced by .3 (the first id stays annulled in the ledger)
    stored = stored_from([*plan.changes, change], annulled=frozenset({old.match_id}))
    back = reconcile(read_log(write_csv(tmp_path / "liga.csv", LOG), default_date=DAY), stored, "elo", "liga")
    [change] = back.changes
    assert (change.replaces, change.match.match_id) == (old.match_id + ".2", old.match_id + ".3")


def test_columns_swapped_with_the_result_is_the_same_match(tmp_path):
    """'cai,dan,B' written as 'dan,cai,A' names the same winner: unchanged."""
    plan = first_import(tmp_path, LOG)
    swapped = [LOG[0], "dan,cai,A", *LOG[2:]]
    again = reconcile(read_log(write_csv(tmp_path / "liga.csv", swapped), default_date=DAY),
                      stored_from(plan.changes), "elo", "liga")
    assert (again.changes, again.unchanged) == ([], 6)


def test_a_forgotten_match_inserted_first_is_added_before_the_rest_and_nothing_else_changes(tmp_path):
    """'ana,dan,A' inserted as the first data row: ana and dan also play row 7 (B). The stored
    ana v dan (B) pairs with the row of equal result; the new row is added before every stored row:
    its natural time 00:00:01 is taken by the first stored row, so it goes halfway between
    midnight and that row, 00:00:00.5."""
    plan = first_import(tmp_path, LOG)
    again = reconcile(read_log(write_csv(tmp_path / "liga.csv", ["ana,dan,A", *LOG]), default_date=DAY),
                      stored_from(plan.changes), "elo", "liga")
    assert again.unchanged == 6 and again.removed == []
    [change] = again.changes
    assert (change.kind, change.row.row, change.replaces) == ("added", 2, None)
    assert change.match.finished_at == MIDNIGHT + timedelta(milliseconds=500)


def test_rows_inserted_between_two_stored_rows_are_spread_between_them(tmp_path):
    """Two rows inserted between stored rows at 00:00:01 and 00:00:02: 1 + 1/3 s and 1 + 2/3 s
    (to the microsecond, truncated)."""
    plan = first_import(tmp_path, LOG[:2])
    rows = [LOG[0], "ana,dan,A", "bea,cai,E", LOG[1]]
    again = reconcile(read_log(write_csv(tmp_path / "liga.csv", rows), default_date=DAY),
                      stored_from(plan.changes), "elo", "liga")
    assert [c.match.finished_at for c in again.changes] == [
        MIDNIGHT + timedelta(seconds=1, microseconds=333333), MIDNIGHT + timedelta(seconds=1, microseconds=666666)]


def test_a_dated_row_appended_at_the_end_is_placed_by_its_date(tmp_path):
    """A row dated 2026-02-10 appended below rows of 2026-03-01: placed on its date, at 00:00:01."""
    path = tmp_path / "copa.csv"
    path.write_text("Player A,Player B,Result,Date\nana,bea,A,2026-03-01\ncai,dan,B,2026-03-01\n", encoding="utf-8")
    plan = reconcile(read_log(path), [], "elo", "copa")
    path.write_text(path.read_text() + "ana,cai,E,2026-02-10\n", encoding="utf-8")
    again = reconcile(read_log(path), stored_from(plan.changes), "elo", "copa")
    [change] = again.changes
    assert change.match.finished_at == datetime(2026, 2, 10, 0, 0, 1, tzinfo=UTC)


def test_a_removed_row_is_reported_and_the_rest_unchanged(tmp_path):
    plan = first_import(tmp_path, LOG)
    again = reconcile(read_log(write_csv(tmp_path / "liga.csv", LOG[:3] + LOG[4:]), default_date=DAY),
                      stored_from(plan.changes), "elo", "liga")
    assert again.changes == [] and again.unchanged == 5
    assert [s.match_id for s in again.removed] == [plan.changes[3].match.match_id]


def test_two_rows_swapped_within_a_date_move_one_of_them(tmp_path):
    """Rows 3 and 4 swapped (no dates: the file's order is the order played): one of the two is
    re-placed (annulled and rated anew after the other), the other five rows unchanged."""
    plan = first_import(tmp_path, LOG)
    swapped = [LOG[0], LOG[2], LOG[1], *LOG[3:]]
    again = reconcile(read_log(write_csv(tmp_path / "liga.csv", swapped), default_date=DAY),
                      stored_from(plan.changes), "elo", "liga")
    assert again.unchanged == 5 and again.removed == []
    [change] = again.changes
    assert change.kind == "moved" and change.replaces in {plan.changes[1].match.match_id,
                                                         plan.changes[2].match.match_id}
    if change.row.row == 3:  # ana v cai moved before cai v dan (stored at 00:00:02)
        assert MIDNIGHT + timedelta(seconds=1) < change.match.finished_at < MIDNIGHT + timedelta(seconds=2)
    else:  # cai v dan moved after ana v cai (stored at 00:00:03)
        assert MIDNIGHT + timedelta(seconds=3) < change.match.finished_at < MIDNIGHT + timedelta(seconds=4)


def test_matches_imported_under_the_earlier_row_number_ids_are_recognised(tmp_path):
    """Ids ``import-liga-r<row>-<12 hex>`` with finished_at = date + row number in seconds (the
    earlier scheme): the same log is unchanged; an edited row replaces its old-scheme match."""
    old = [StoredLogMatch(f"import-liga-r{n}-{n:012x}", {
        "schema_version": 1, "match_id": f"import-liga-r{n}-{n:012x}", "ladder": "elo",
        "finished_at": (MIDNIGHT + timedelta(seconds=n)).isoformat().replace("+00:00", "Z"),
        "side_a": {"players": [{"player_id": a, "stats": None}]}, "side_b": {"players": [{"player_id": b, "stats": None}]},
        "outcome": {"A": "side_a_won", "B": "side_b_won", "E": "draw"}[r]}, MIDNIGHT + timedelta(seconds=n), False)
        for n, (a, b, r) in enumerate((line.split(",") for line in LOG), start=2)]
    same = reconcile(read_log(write_csv(tmp_path / "liga.csv", LOG), default_date=DAY), old, "elo", "liga")
    assert (same.changes, same.removed, same.unchanged) == ([], [], 6)
    edited = reconcile(read_log(write_csv(tmp_path / "liga.csv", LOG[:5] + ["ana,dan,E"]), default_date=DAY),
                       old, "elo", "liga")
    [change] = edited.changes
    assert change.replaces == "import-liga-r7-000000000007" and change.match.match_id.startswith("import-liga-k")


def test_another_log_whose_name_starts_the_same_is_not_this_log(tmp_path):
    """Matches of log 'liga-2' are neither unchanged rows nor removed rows of log 'liga'."""
    other = first_import(tmp_path, LOG, name="liga-2")
    plan = reconcile(read_log(write_csv(tmp_path / "liga.csv", LOG[:1]), default_date=DAY),
                     stored_from(other.changes), "elo", "liga")
    assert (plan.count("added"), plan.removed, plan.unchanged) == (1, [], 0)


def test_a_refused_row_keeps_its_stored_match_and_removes_nothing(tmp_path):
    """Row 4's result becomes 'X': refused (invalid_result); its stored match is held, not removed."""
    plan = first_import(tmp_path, LOG)
    again = reconcile(read_log(write_csv(tmp_path / "liga.csv", LOG[:2] + ["ana,cai,X"] + LOG[3:]), default_date=DAY),
                      stored_from(plan.changes), "elo", "liga")
    assert [(e.row, e.reason_code) for e in again.errors] == [(4, "invalid_result")]
    assert [s.match_id for _, s in again.held] == [plan.changes[2].match.match_id]
    assert (again.changes, again.removed, again.unchanged) == ([], [], 5)


def test_a_player_against_themself_keeps_the_contract_reason_code(tmp_path):
    log = read_log(write_csv(tmp_path / "x.csv", ["ana,ana,A"]), default_date=DAY)
    assert [(e.row, e.reason_code) for e in log.errors] == [(2, "duplicate_player")]


@pytest.mark.parametrize(("rows", "stored", "pairs"), [
    (["A"], ["E"], [(0, 0)]),                              # an edited result
    (["A", "B"], ["B"], [(0, None), (1, 0)]),              # a rematch inserted before
    (["B"], ["A", "B"], [(None, 0), (0, 1)]),              # the first of two removed
    (["E", "B"], ["A", "B"], [(0, 0), (1, 1)]),            # the first of two edited
])
def test_rows_of_one_date_and_pair_pair_with_stored_matches_as_a_diff_pairs_lines(rows, stored, pairs):
    assert _align(rows, stored) == pairs


def test_a_workbook_whose_dimension_element_understates_its_size_is_read_to_its_last_row(tmp_path):
    """XlsxWriter writes <dimension ref="A1:D9"> for 8 data rows; rewritten to "A1:C3" (as a tool
    that appends rows without updating it leaves it), every row and the date column are still read."""
    path = tmp_path / "torneo.xlsx"
    book = xlsxwriter.Workbook(str(path))
    sheet = book.add_worksheet()
    sheet.write_row(0, 0, ["Player A", "Player B", "Result", "Date"])
    for r in range(1, 9):
        sheet.write_row(r, 0, [f"p{r}", f"q{r}", "A", f"2026-03-0{r}"])
    book.close()
    lying = tmp_path / "lying.xlsx"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(lying, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "xl/worksheets/sheet1.xml":
                assert b'<dimension ref="A1:D9"/>' in data
                data = data.replace(b'<dimension ref="A1:D9"/>', b'<dimension ref="A1:C3"/>')
            dst.writestr(item, data)
    import openpyxl
    book = openpyxl.load_workbook(lying, read_only=True)
    assert book.worksheets[0].max_row == 3  # what the file claims
    book.close()
    header, rows = read_rows(lying)
    assert header == ["Player A", "Player B", "Result", "Date"]
    assert [n for n, _ in rows] == list(range(2, 10))
    log = read_log(lying)
    assert log.errors == [] and [r.day for r in log.rows] == [date(2026, 3, d) for d in range(1, 9)]


def test_a_workbook_with_data_on_another_sheet_is_refused_unless_the_sheet_is_named(tmp_path):
    path = tmp_path / "rondas.xlsx"
    book = xlsxwriter.Workbook(str(path))
    for name in ("Ronda 1", "Ronda 2"):
        sheet = book.add_worksheet(name)
        sheet.write_row(0, 0, ["Player A", "Player B", "Result"])
        sheet.write_row(1, 0, ["ana", "bea", "A"])
    book.add_worksheet("Empty")
    book.close()
    with pytest.raises(LogFileError, match="Ronda 2"):
        read_rows(path)
    assert len(read_rows(path, sheet="Ronda 2")[1]) == 1


def test_a_csv_with_a_quote_left_open_is_refused_not_read_in_part(tmp_path):
    """Row 3's first cell opens a quote that never closes: the csv module would read every line
    after it into that cell; the file is refused, naming the line."""
    path = write_csv(tmp_path / "liga.csv", ["ana,bea,A", '"cai,dan,B', "bea,dan,E", "ana,dan,B"])
    with pytest.raises(LogFileError, match="line 5"):
        read_rows(path)


def test_a_quoted_cell_may_hold_a_line_break(tmp_path):
    path = write_csv(tmp_path / "liga.csv", ['"Ana\nMaría",bea,A', "cai,dan,B"])
    _, rows = read_rows(path)
    assert [cells[0] for _, cells in rows] == ["Ana\nMaría", "cai"]


def test_the_match_id_depends_on_the_ladder_and_the_rows_place():
    key = (DAY, ("ana", "bea"), 1)
    assert base_match_id("liga", "elo", key) != base_match_id("liga", "sedma", key)
    assert base_match_id("liga", "elo", key) != base_match_id("liga", "elo", (DAY, ("ana", "bea"), 2))


def test_a_row_with_no_room_between_its_neighbours_is_refused(tmp_path):
    """Stored rows one microsecond apart: a row inserted between them cannot be placed (cannot_place)."""
    plan = first_import(tmp_path, LOG[:2])
    first, second = stored_from(plan.changes)
    squeezed = [first, StoredLogMatch(second.match_id, {**second.payload, "finished_at": "2026-03-01T00:00:01.000001Z"},
                                      first.order_at + timedelta(microseconds=1), False)]
    again = reconcile(read_log(write_csv(tmp_path / "liga.csv", [LOG[0], "ana,dan,A", LOG[1]]), default_date=DAY),
                      squeezed, "elo", "liga")
    assert [(e.row, e.reason_code) for e in again.errors] == [(3, "cannot_place")]
    assert again.changes == [] and again.unchanged == 2


def test_a_row_whose_date_is_edited_is_another_match(tmp_path):
    """The identity holds the date: a row moved from 2026-03-01 to 2026-03-02 is one match removed
    from the log and one added (on its new date, at 00:00:01)."""
    path = tmp_path / "copa.csv"
    path.write_text("Player A,Player B,Result,Date\nana,bea,A,2026-03-01\ncai,dan,B,2026-03-01\n", encoding="utf-8")
    plan = reconcile(read_log(path), [], "elo", "copa")
    path.write_text("Player A,Player B,Result,Date\nana,bea,A,2026-03-01\ncai,dan,B,2026-03-02\n", encoding="utf-8")
    again = reconcile(read_log(path), stored_from(plan.changes), "elo", "copa")
    assert [s.match_id for s in again.removed] == [plan.changes[1].match.match_id]
    [change] = again.changes
    assert (change.kind, change.replaces) == ("added", None)
    assert change.match.finished_at == datetime(2026, 3, 2, 0, 0, 1, tzinfo=UTC)
    assert again.unchanged == 1


def test_rows_below_a_refused_date_are_refused_too_not_dated_by_the_row_above(tmp_path):
    """Row 3's date is refused: the undated row 4 below it belonged to that date, so it is refused
    (no_date, naming row 3) instead of being rated on row 2's date as another match."""
    path = tmp_path / "dated.csv"
    path.write_text("Date,Player A,Player B,Result\n2026-03-01,ana,bea,A\n2026-13-45,cai,dan,B\n,ana,cai,E\n"
                    "2026-03-03,bea,dan,E\n", encoding="utf-8")
    log = read_log(path)
    assert [(e.row, e.reason_code) for e in log.errors] == [(3, "invalid_date"), (4, "no_date")]
    assert "row 3" in log.errors[1].detail
    assert [(r.row, r.day) for r in log.rows] == [(2, date(2026, 3, 1)), (5, date(2026, 3, 3))]
