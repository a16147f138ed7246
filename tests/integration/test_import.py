"""``ratings import``: an organiser's match log (a workbook written by XlsxWriter, a CSV with
accented names) is published once per match, however often it is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import date

import pytest
import xlsxwriter

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


def ratings(env) -> dict[str, float]:
    with env.connect() as conn:
        return dict(conn.execute("SELECT player_id, rating FROM players WHERE ladder = 'elo'").fetchall())


def test_importing_the_same_workbook_twice_rates_each_match_once(clean, tmp_path):
    """Two rows, imported twice: 2 applied, 2 duplicates. Hand computation (K = 30, 1200 start):
    row 2, Zoë beats José, E = 0.5: Zoë 1215, José 1185; row 3, José v Ana is a draw:
    E(José) = 1 / (1 + 10^((1200 - 1185)/400)) = 0.478427..., José 1185 + 30 x 0.021573 = 1185.6472,
    Ana 1200 - 0.6472 = 1199.3528."""
    from datetime import datetime
    log = tmp_path / "torneo.xlsx"
    write_workbook(log, [("Zoë", "José", "A", datetime(2026, 3, 1)), ("José", "Ana", "E", None)])
    for _ in range(2):
        done = run_import("--file", str(log), "--ladder", "elo")
        assert done.returncode == 0 and "published 2 match(es)" in done.stdout, done.stderr
    counts = clean.wait_drained(4, timeout=60)
    assert (counts.applied, counts.duplicates, counts.dead_letters) == (2, 2, 0)
    got = ratings(clean)
    assert got["Zoë"] == 1215.0
    # Two worker nodes may commit the two matches in either order (ratings follow the apply order
    # until chronological ordering lands): the draw applied first leaves José and Ana at 1200
    # (E = 0.5), then Zoë beats José: José 1185, Ana 1200.
    in_row_order = (pytest.approx(1185.6472, abs=1e-3), pytest.approx(1199.3528, abs=1e-3))
    draw_first = (1185.0, 1200.0)
    assert (got["José"], got["Ana"]) in (in_row_order, draw_first), got


def test_a_log_with_rows_added_at_the_end_rates_only_the_new_rows(clean, tmp_path):
    """A CSV (semicolon-separated, accents, BOM as Excel writes it) imported, then again with one
    more row: three matches applied, two counted duplicates."""
    log = tmp_path / "liga.csv"
    lines = ["Player A;Player B;Result", "Ñandú;Chloé;B", "Chloé;Łukasz;E"]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8-sig")
    assert run_import("--file", str(log), "--ladder", "elo", "--date", "2026-02-01").returncode == 0
    log.write_text("\n".join(lines + ["Łukasz;Ñandú;a"]) + "\n", encoding="utf-8-sig")
    done = run_import("--file", str(log), "--ladder", "elo", "--date", "2026-02-01")
    assert done.returncode == 0, done.stderr
    counts = clean.wait_drained(5, timeout=60)
    assert (counts.applied, counts.duplicates, counts.dead_letters) == (3, 2, 0)
    assert set(ratings(clean)) == {"Ñandú", "Chloé", "Łukasz"}


def test_a_bad_row_stops_the_import_unless_good_rows_only(clean, tmp_path):
    """Row 3's result is X and row 4 names one player: both reported with their row number and
    nothing is published; with --good-rows-only the good row is."""
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
    assert done.returncode == 0 and "published 1 match(es)" in done.stdout
    counts = clean.wait_drained(1, timeout=60)
    assert (counts.applied, counts.dead_letters) == (1, 0)
    with clean.connect() as conn:
        assert conn.execute("SELECT finished_at::date FROM ledger").fetchone()[0] == date(2026, 1, 10)
