"""Leaderboard exports for tournament organisers: CSV and an Excel workbook (XlsxWriter).

One row per player, highest rating first, with the columns a tournament spreadsheet has:
rank, name, wins, losses, draws, win %, rating, peak, games.

**Win %** counts a draw as half a win: ``(wins + draws / 2) / games`` (the score percentage of
chess and Elo tournaments; 100 % only for a player who won every game). The workbook stores it as
a fraction formatted as a percentage (0.625 shows as 62.5 %); the CSV as a percentage number
with one decimal (62.5). Ratings and peaks are in rating points, as stored (the workbook shows one
decimal and keeps the exact value; the CSV rounds to two decimals).

Names are written as text, never as formulas: in the workbook every name is a string cell; in
the CSV a name starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a
leading ``'`` so a spreadsheet program does not evaluate it (OWASP's advice against CSV injection).
The CSV is UTF-8 with a byte order mark, so spreadsheet programs read accented names right.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from worker.extras import require

HEADERS = ("Rank", "Name", "Wins", "Losses", "Draws", "Win %", "Rating", "Peak", "Games")
"""Column headers of both formats, in order."""

FORMATS = ("csv", "xlsx")

WIN_PCT_DEFINITION = "Win % = (wins + draws / 2) / games: a draw counts as half a win."

_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True, slots=True)
class Standing:
    """One leaderboard row: ``rank`` (ties share a rank; ``None`` for a player a ladder rated with
    uncertainty does not rank yet, written blank), ``name`` (player id), counts of games,
    ``win_share`` in [0, 1] (``None`` without games), ``rating`` and ``peak`` in rating points."""

    rank: int | None
    name: str
    wins: int
    losses: int
    draws: int
    win_share: float | None
    rating: float
    peak: float
    games: int


def win_share(wins: int, draws: int, games: int) -> float | None:
    """``(wins + draws / 2) / games`` in [0, 1]; ``None`` when ``games`` is 0."""
    return (wins + draws / 2) / games if games else None


def standings_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[Standing]:
    """:class:`Standing` rows from :func:`worker.store.leaderboard` rows."""
    return [
        Standing(None if r["rank"] is None else int(r["rank"]), r["player_id"], r["wins"], r["losses"], r["draws"],
                 win_share(r["wins"], r["draws"], r["games"]), float(r["rating"]), float(r["peak_rating"]), r["games"])
        for r in rows
    ]


def _csv_text(name: str) -> str:
    return "'" + name if name.startswith(_FORMULA_PREFIXES) else name


def write_csv(standings: Iterable[Standing], out: TextIO) -> int:
    """Write the header and one line per standing to ``out`` (a text stream opened with
    ``newline=""``); return the number of player rows. Win % in percent, one decimal."""
    writer = csv.writer(out)
    writer.writerow(HEADERS)
    n = 0
    for s in standings:
        pct = "" if s.win_share is None else f"{100 * s.win_share:.1f}"
        writer.writerow(["" if s.rank is None else s.rank, _csv_text(s.name), s.wins, s.losses, s.draws, pct,
                         f"{s.rating:.2f}", f"{s.peak:.2f}", s.games])
        n += 1
    return n


def write_csv_file(standings: Iterable[Standing], path: Path) -> int:
    """:func:`write_csv` into the file ``path`` (UTF-8 with a byte order mark); return the row count."""
    with open(path, "w", encoding="utf-8-sig", newline="") as out:
        return write_csv(standings, out)


def csv_text(standings: Iterable[Standing]) -> str:
    """The CSV as a string (no byte order mark)."""
    out = io.StringIO(newline="")
    write_csv(standings, out)
    return out.getvalue()


def write_xlsx(standings: Iterable[Standing], path: Path, ladder: str, about: Mapping[str, Any] | None = None) -> int:
    """Write an Excel workbook to ``path``; return the number of player rows.

    Sheet ``Leaderboard``: the header row (bold, frozen, with filters) and one row per player;
    Win % is a fraction with a percentage format, ratings keep their exact value and show one
    decimal. Sheet ``About``: the ladder, when it was exported, the win % definition and the
    entries of ``about`` (e.g. the policy version). Raises ``OSError`` if ``path`` cannot be written.
    """
    xlsxwriter = require("xlsxwriter", "reports", "ratings export --format xlsx")  # only this command needs it

    rows = list(standings)
    workbook = xlsxwriter.Workbook(str(path), {"strings_to_formulas": False, "strings_to_urls": False})
    try:
        bold = workbook.add_format({"bold": True, "bottom": 1})
        rating = workbook.add_format({"num_format": "0.0"})
        percent = workbook.add_format({"num_format": "0.0%"})
        sheet = workbook.add_worksheet("Leaderboard")
        for col, header in enumerate(HEADERS):
            sheet.write_string(0, col, header, bold)
        for i, s in enumerate(rows, start=1):
            if s.rank is None:
                sheet.write_blank(i, 0, None)
            else:
                sheet.write_number(i, 0, s.rank)
            sheet.write_string(i, 1, s.name)
            sheet.write_number(i, 2, s.wins)
            sheet.write_number(i, 3, s.losses)
            sheet.write_number(i, 4, s.draws)
            if s.win_share is None:
                sheet.write_blank(i, 5, None, percent)
            else:
                sheet.write_number(i, 5, s.win_share, percent)
            sheet.write_number(i, 6, s.rating, rating)
            sheet.write_number(i, 7, s.peak, rating)
            sheet.write_number(i, 8, s.games)
        widths = (6, max([len("Name"), *(len(s.name) for s in rows)]) + 2, 7, 7, 7, 8, 9, 9, 7)
        for col, width in enumerate(widths):
            sheet.set_column(col, col, min(width, 60))
        sheet.freeze_panes(1, 0)
        sheet.autofilter(0, 0, max(len(rows), 1), len(HEADERS) - 1)
        info = workbook.add_worksheet("About")
        entries = {"Ladder": ladder, "Players": len(rows),
                   "Exported at (UTC)": datetime.now(UTC).isoformat(timespec="seconds"),
                   "Win %": WIN_PCT_DEFINITION, **(about or {})}
        for i, (key, value) in enumerate(entries.items()):
            info.write_string(i, 0, str(key), bold)
            if isinstance(value, int | float) and not isinstance(value, bool):
                info.write_number(i, 1, value)
            else:
                info.write_string(i, 1, "" if value is None else str(value))
        info.set_column(0, 0, 20)
        info.set_column(1, 1, 70)
    finally:
        workbook.close()
    return len(rows)
