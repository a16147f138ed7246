"""``ratings import``: an organiser's match log (a workbook written by XlsxWriter, a CSV with
accented names) is the source of truth. Importing it again rates each match once; a re-import of
an edited log (a result changed, a forgotten match inserted, a row removed) makes the ladder equal
the log: the stored ratings equal an independent chronological replay of the final log."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from datetime import UTC, date, datetime, timedelta

import pytest
import xlsxwriter

from ..reference_replay import chronological_replay

pytestmark = pytest.mark.integration


def run_import(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "worker", "import", *args], env=dict(os.environ, COLUMNS="200"),
                          capture_output=True, text=True, timeout=120)


def write_workbook(path, rows) -> None:
    book = xlsxwriter.Workbook(str(path))
    sheet = book.add_worksheet("Partidas")
    dates = book.add_format({"num_format": "yyyy-mm-dd"})
    sheet.write_row(0, 0, ["Player A", "Player B", "Result", "Date"])
    for r, (a, b, result, when) in enumerate(rows, start=1):
        sheet.write_row(r, 0, [a, b, result])
        if when is not None:
            sheet.write_datetime(r, 3, when, dates)
    book.close()


def write_log(path, rows: list[str]) -> None:
    path.write_text("\n".join(["Player A,Player B,Result", *rows]) + "\n", encoding="utf-8")


def ratings(env) -> dict[str, float]:
    with env.connect() as conn:
        return dict(conn.execute("SELECT player_id, rating FROM players WHERE ladder = 'elo'").fetchall())


def standings(env) -> dict[tuple[str, str], tuple[float, int]]:
    with env.connect() as conn:
        return {(lad, pid): (r, g) for lad, pid, r, g in
                conn.execute("SELECT ladder, player_id, rating, games_played FROM players")}


def replay_of(rows: list[str], day: date) -> dict[tuple[str, str], tuple[float, int]]:
    """The final log's matches as messages of this test's own (ids ``ref-<n>``, one second apart in
    file order on ``day``), replayed by the tests' reference (engine fold, no store)."""
    outcome = {"A": "side_a_won", "B": "side_b_won", "E": "draw"}
    start = datetime.combine(day, datetime.min.time(), UTC)
    messages = []
    for n, line in enumerate(rows, start=1):
        a, b, result = line.split(",")
        messages.append({"schema_version": 1, "match_id": f"ref-{n}", "ladder": "elo",
                         "finished_at": (start + timedelta(seconds=n)).isoformat().replace("+00:00", "Z"),
                         "side_a": {"players": [{"player_id": a}]}, "side_b": {"players": [{"player_id": b}]},
                         "outcome": outcome[result]})
    return chronological_replay(messages)


def ledger(env) -> tuple[int, int, int]:
    """(ledger rows, annulled ones, dead letters)."""
    with env.connect() as conn:
        return conn.execute("SELECT (SELECT count(*) FROM ledger), (SELECT count(*) FROM ledger WHERE annulled), "
                            "(SELECT count(*) FROM dead_letters)").fetchone()


LOG = ["ana,bea,A", "cai,dan,B", "ana,cai,A", "bea,dan,E", "bea,cai,B", "ana,dan,B"]
"""Six matches; row 5 (spreadsheet numbering, header = row 1) is a draw."""


def test_importing_the_same_workbook_twice_rates_each_match_once(clean, tmp_path):
    """Two rows, imported twice: 2 applied, the second import publishes nothing. Hand computation
    (K = 30, 1200 start): row 2, Zoë beats José, E = 0.5: Zoë 1215, José 1185; row 3, José v Ana is
    a draw: E(José) = 1 / (1 + 10^((1200 - 1185)/400)) = 0.478427..., José 1185 + 30 x 0.021573 =
    1185.6472, Ana 1200 - 0.6472 = 1199.3528 (in row order whichever worker commits first)."""
    log = tmp_path / "torneo.xlsx"
    write_workbook(log, [("Zoë", "José", "A", datetime(2026, 3, 1)), ("José", "Ana", "E", None)])
    first = run_import("--file", str(log), "--ladder", "elo")
    assert first.returncode == 0 and "added 2" in first.stdout, first.stdout + first.stderr
    clean.wait_drained(2, timeout=60)
    again = run_import("--file", str(log), "--ladder", "elo")
    assert again.returncode == 0 and "added 0" in again.stdout and "unchanged 2" in again.stdout, again.stderr
    counts = clean.wait_drained(2, timeout=60)
    assert (counts.applied, counts.duplicates, counts.dead_letters) == (2, 0, 0)
    got = ratings(clean)
    assert got["Zoë"] == 1215.0
    assert (got["José"], got["Ana"]) == (pytest.approx(1185.6472, abs=1e-3), pytest.approx(1199.3528, abs=1e-3))


def test_a_log_with_rows_added_at_the_end_rates_only_the_new_rows(clean, tmp_path):
    """A CSV (semicolon-separated, accents, BOM as Excel writes it) imported, then again with one
    more row: three matches applied, the second import adds one and leaves two unchanged."""
    log = tmp_path / "liga.csv"
    lines = ["Player A;Player B;Result", "Ñandú;Chloé;B", "Chloé;Łukasz;E"]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8-sig")
    assert run_import("--file", str(log), "--ladder", "elo", "--date", "2026-02-01").returncode == 0
    clean.wait_drained(2, timeout=60)
    log.write_text("\n".join(lines + ["Łukasz;Ñandú;a"]) + "\n", encoding="utf-8-sig")
    done = run_import("--file", str(log), "--ladder", "elo", "--date", "2026-02-01")
    assert done.returncode == 0 and "added 1" in done.stdout and "unchanged 2" in done.stdout, done.stderr
    counts = clean.wait_drained(3, timeout=60)
    assert (counts.applied, counts.duplicates, counts.dead_letters) == (3, 0, 0)
    assert set(ratings(clean)) == {"Ñandú", "Chloé", "Łukasz"}


def test_a_bad_row_stops_the_import_and_good_rows_only_still_exits_1(clean, tmp_path):
    """Row 3's result is X and row 4 names one player: both reported with their row number and
    nothing is published (exit 1); with --good-rows-only the good row is, and the import still
    exits 1: rows were refused."""
    log = tmp_path / "copa.csv"
    log.write_text("Jugador A,Jugador B,Resultado,Fecha\nAna,Bea,A,2026-01-10\nAna,Bea,X,2026-01-11\nAna,,B,\n",
                   encoding="utf-8")
    columns = ["--player-a-column", "Jugador A", "--player-b-column", "Jugador B", "--result-column", "Resultado",
               "--date-column", "Fecha"]
    refused = run_import("--file", str(log), "--ladder", "elo", *columns)
    assert refused.returncode == 1
    assert "row 3: invalid_result" in refused.stderr and "row 4: missing_player" in refused.stderr
    assert "nothing published" in refused.stderr
    done = run_import("--file", str(log), "--ladder", "elo", *columns, "--good-rows-only")
    assert done.returncode == 1 and "added 1" in done.stdout and "refused 2 row(s)" in done.stdout
    counts = clean.wait_drained(1, timeout=60)
    assert (counts.applied, counts.dead_letters) == (1, 0)
    with clean.connect() as conn:
        assert conn.execute("SELECT finished_at::date FROM ledger").fetchone()[0] == date(2026, 1, 10)


def test_a_corrected_result_replaces_the_old_one_and_counts_once(clean, tmp_path):
    """The organiser changes row 5 from E (a draw) to A and imports again: exit 0, the import says
    it changed one row and left five; the draw is annulled (kept in the ledger, flagged, on record
    with its reason), the win rated in its place; no dead letter. Games played: each player 3 (six
    matches, four players, each in three), and the ratings equal the replay of the final log."""
    log = tmp_path / "liga.csv"
    write_log(log, LOG)
    assert run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01").returncode == 0
    clean.wait_drained(6, timeout=60)
    corrected = LOG[:3] + ["bea,dan,A"] + LOG[4:]
    write_log(log, corrected)
    done = run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "row 5: result changed from E to A" in done.stdout
    assert "added 0, changed 1, annulled 0 (removed from the log), unchanged 5" in done.stdout
    clean.wait_drained(7, timeout=60)
    assert ledger(clean) == (7, 1, 0)
    assert {pid: g for (_, pid), (_, g) in standings(clean).items()} == {"ana": 3, "bea": 3, "cai": 3, "dan": 3}
    assert standings(clean) == replay_of(corrected, date(2026, 3, 1))
    with clean.connect() as conn:
        [(reason,)] = conn.execute("SELECT reason FROM annulments").fetchall()
    assert "result changed" in reason
    again = run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01")
    assert again.returncode == 0 and "unchanged 6" in again.stdout and "changed 0" in again.stdout


def test_a_forgotten_match_inserted_as_the_second_row_is_rated_in_its_place(clean, tmp_path):
    """The six-match log gets a forgotten match, ana beat dan, inserted as spreadsheet row 2 (ana
    and dan meet again in the last row): one match added, six unchanged, seven ledger rows; games
    played ana 4, bea 3, cai 3, dan 4 (counted from the final log by hand: ana rows 2, 3, 5, 8; bea
    3, 6, 7; cai 4, 5, 7; dan 2, 4, 6, 8); the ratings equal the replay of the final log, where the
    forgotten match comes first."""
    log = tmp_path / "liga.csv"
    write_log(log, LOG)
    assert run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01").returncode == 0
    clean.wait_drained(6, timeout=60)
    final = ["ana,dan,A", *LOG]
    write_log(log, final)
    done = run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "row 2: added" in done.stdout and "added 1, changed 0" in done.stdout and "unchanged 6" in done.stdout
    clean.wait_drained(7, timeout=60)
    assert ledger(clean) == (7, 0, 0)
    assert {pid: g for (_, pid), (_, g) in standings(clean).items()} == {"ana": 4, "bea": 3, "cai": 3, "dan": 4}
    assert standings(clean) == replay_of(final, date(2026, 3, 1))


def test_a_dry_run_prints_the_changes_and_changes_nothing(clean, tmp_path):
    """--dry-run on a log with a result changed, a row inserted and a row removed: each printed,
    the counts said as "would be", exit 1 (a removed row would stay rated); ledger and ratings as
    before."""
    log = tmp_path / "liga.csv"
    write_log(log, LOG)
    assert run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01").returncode == 0
    clean.wait_drained(6, timeout=60)
    before = standings(clean)
    write_log(log, [LOG[0], "ana,eva,E", LOG[1], "ana,cai,B", *LOG[3:5]])
    done = run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01", "--dry-run")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "row 3: added: 2026-03-01 ana v eva E: would publish" in done.stdout
    assert "row 5: result changed from A to B" in done.stdout
    assert "removed from the log: 2026-03-01 ana v dan B" in done.stderr
    assert "would be added 1, would be changed 1, would be annulled 0" in done.stdout
    assert ledger(clean) == (6, 0, 0) and standings(clean) == before


def test_a_removed_row_is_annulled_only_when_asked(clean, tmp_path):
    """Row 3 (cai v dan) deleted from the log: without --annul-removed it stays rated and the import
    exits 1; with it, it is annulled (exit 0) and the ratings equal the replay of the five rows."""
    log = tmp_path / "liga.csv"
    write_log(log, LOG)
    assert run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01").returncode == 0
    clean.wait_drained(6, timeout=60)
    final = [LOG[0], *LOG[2:]]
    write_log(log, final)
    kept = run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01")
    assert kept.returncode == 1 and "pass --annul-removed" in kept.stderr
    assert ledger(clean) == (6, 0, 0)
    done = run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01", "--annul-removed")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "annulled 1 (removed from the log), unchanged 5" in done.stdout
    clean.wait_drained(6, timeout=60)
    assert ledger(clean) == (6, 1, 0)
    assert standings(clean) == replay_of(final, date(2026, 3, 1))


def test_a_file_that_cannot_be_read_whole_is_refused_and_nothing_published(clean, tmp_path):
    """A quote left open in row 3 would hide every later row inside one cell: exit 2, nothing published."""
    log = tmp_path / "liga.csv"
    write_log(log, [LOG[0], '"cai,dan,B', *LOG[2:]])
    done = run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01")
    assert done.returncode == 2 and "no row of the log was read" in done.stderr
    assert ledger(clean) == (0, 0, 0)


def test_a_workbook_whose_dimension_understates_its_rows_is_imported_whole(clean, tmp_path):
    """XlsxWriter's <dimension ref="A1:D9"> rewritten to "A1:D3": all eight rows are still rated."""
    path = tmp_path / "torneo.xlsx"
    write_workbook(path, [(f"p{n}", f"q{n}", "A", datetime(2026, 3, n)) for n in range(1, 9)])
    lying = tmp_path / "lying.xlsx"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(lying, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "xl/worksheets/sheet1.xml":
                assert b'<dimension ref="A1:D9"/>' in data
                data = data.replace(b'<dimension ref="A1:D9"/>', b'<dimension ref="A1:D3"/>')
            dst.writestr(item, data)
    done = run_import("--file", str(lying), "--ladder", "elo")
    assert done.returncode == 0 and "added 8" in done.stdout, done.stdout + done.stderr
    counts = clean.wait_drained(8, timeout=60)
    assert (counts.applied, counts.dead_letters) == (8, 0)


def test_a_ladder_that_counted_a_log_twice_under_row_number_ids_is_repaired(clean, publisher, tmp_path):
    """The damage the row-number ids did, rebuilt by publishing what they published: the six-match
    log (ids ``import-liga-r<row>-<hex>``, finished_at = date + row seconds), then the log with a
    match inserted as row 2 (every row renumbered: seven more ids). 13 ledger rows. Importing the
    final log once with --annul-removed leaves seven live matches, games ana 4, bea 3, cai 3, dan 4,
    and the ratings of the replay of the final log."""
    import hashlib

    outcome = {"A": "side_a_won", "B": "side_b_won", "E": "draw"}
    final = ["ana,dan,A", *LOG]
    for rows in (LOG, final):
        for n, line in enumerate(rows, start=2):
            a, b, result = line.split(",")
            digest = hashlib.sha256(f"{n}:{line}".encode()).hexdigest()[:12]
            publisher({"schema_version": 1, "match_id": f"import-liga-r{n}-{digest}", "ladder": "elo",
                       "finished_at": f"2026-03-01T00:00:{n:02d}Z", "side_a": {"players": [{"player_id": a}]},
                       "side_b": {"players": [{"player_id": b}]}, "outcome": outcome[result]})
    clean.wait_drained(13, timeout=60)
    assert {pid: g for (_, pid), (_, g) in standings(clean).items()} == {"ana": 7, "bea": 6, "cai": 6, "dan": 7}
    log = tmp_path / "liga.csv"
    write_log(log, final)
    done = run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01", "--annul-removed")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "annulled 6 (removed from the log)" in done.stdout
    added, changed = (int(x) for x in re.search(r"added (\d+), changed (\d+)", done.stdout).groups())
    clean.wait_drained(13 + added + changed, timeout=60)
    with clean.connect() as conn:
        assert conn.execute("SELECT count(*) FROM ledger WHERE NOT annulled").fetchone()[0] == 7
    assert {pid: g for (_, pid), (_, g) in standings(clean).items()} == {"ana": 4, "bea": 3, "cai": 3, "dan": 4}
    assert standings(clean) == replay_of(final, date(2026, 3, 1))


def test_with_the_broker_down_nothing_is_annulled(clean, tmp_path):
    """A changed row while the broker cannot be reached: the import exits 3 (environment not ready) before annulling the
    stored match, so the ladder keeps the old result rather than losing the match."""
    log = tmp_path / "liga.csv"
    write_log(log, LOG)
    assert run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01").returncode == 0
    clean.wait_drained(6, timeout=60)
    write_log(log, LOG[:3] + ["bea,dan,A"] + LOG[4:])
    done = subprocess.run([sys.executable, "-m", "worker", "import", "--file", str(log), "--ladder", "elo",
                           "--date", "2026-03-01"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, COLUMNS="200", RATINGS_BROKER_URL="redis://127.0.0.1:1/0"))
    assert done.returncode == 3 and "unreachable" in done.stderr, done.stdout + done.stderr
    assert ledger(clean) == (6, 0, 0)


def test_a_ladder_in_arrival_order_refuses_an_insertion_it_could_not_place(clean, tmp_path):
    """After `ratings rebuild --order applied`, a forgotten match inserted at the top would be rated
    after the others: refused (exit 1, arrival_order), nothing published; a row appended at the
    end is still imported."""
    log = tmp_path / "liga.csv"
    write_log(log, LOG)
    assert run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01").returncode == 0
    clean.wait_drained(6, timeout=60)
    rebuilt = subprocess.run([sys.executable, "-m", "worker", "rebuild", "--ladder", "elo", "--order", "applied"],
                             env=dict(os.environ, COLUMNS="200"), capture_output=True, text=True, timeout=120)
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    write_log(log, ["ana,dan,A", *LOG])
    refused = run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01")
    assert refused.returncode == 1 and "arrival_order" in refused.stderr, refused.stdout + refused.stderr
    assert ledger(clean) == (6, 0, 0)
    write_log(log, [*LOG, "ana,dan,A"])
    appended = run_import("--file", str(log), "--ladder", "elo", "--date", "2026-03-01")
    assert appended.returncode == 0 and "added 1" in appended.stdout, appended.stdout + appended.stderr
    clean.wait_drained(7, timeout=60)
