"""Leaderboard exports for tournament organisers: CSV and an Excel workbook (XlsxWriter).

One row per player, highest rating first, with the columns a tournament spreadsheet has:
rank, name, wins, losses, draws, win %, rating, peak, games (:data:`HEADERS`).

A ladder rated by a model with uncertainty (Glicko-2, Weng-Lin) is exported in the order and with
the ranks of ``ratings leaderboard`` at the moment of the export (by the conservative rating;
players not rankable last, rank blank), and has three more columns after Rating
(:data:`UNCERTAINTY_HEADERS`): **Deviation**, the deviation grown since the player's last match
to that moment (rating points; Weng-Lin: sigma), **Conservative**, the rating the ladder ranks by
(rating - k × deviation, rating points), and **Status**, the leaderboard's marks that apply
(``provisional``, ``rankable``, ``inactive``, comma-separated; empty when none does). They come
from the leaderboard's own rows (:func:`standings_from_board`); an Elo ladder's export has none
of them.

**Win %** counts a draw as half a win: ``(wins + draws / 2) / games`` (the score percentage of
chess and Elo tournaments; 100 % only for a player who won every game). The workbook stores it as
a fraction formatted as a percentage (0.625 shows as 62.5 %); the CSV as a percentage number
with one decimal (62.5). Ratings and peaks are in rating points, as stored (the workbook shows one
decimal and keeps the exact value; the CSV rounds to two decimals); deviations and conservative
ratings likewise.

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
from worker.store.standings import BoardRow, status

HEADERS = ("Rank", "Name", "Wins", "Losses", "Draws", "Win %", "Rating", "Peak", "Games")
"""Column headers of both formats, in order (a ladder rated by Elo)."""

UNCERTAINTY_HEADERS = (*HEADERS[:7], "Deviation", "Conservative", "Status", *HEADERS[7:])
"""Column headers of a ladder rated by a model with uncertainty: :data:`HEADERS` with Deviation,
Conservative and Status after Rating."""

FORMATS = ("csv", "xlsx")

WIN_PCT_DEFINITION = "Win % = (wins + draws / 2) / games: a draw counts as half a win."

_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True, slots=True)
class Uncertainty:
    """What a leaderboard of a model with uncertainty shows of a player at a moment: the
    ``deviation`` grown to it and the ``conservative`` rating the ladder ranks by (rating points;
    Weng-Lin: sigma and mu - k sigma), and the ``status``, the marks that apply as
    :func:`worker.store.standings.status` words them (``"rankable"``, ``"provisional, inactive"``, ``""``)."""

    deviation: float
    conservative: float
    status: str


@dataclass(frozen=True, slots=True)
class Standing:
    """One leaderboard row: ``rank`` (ties share a rank; ``None`` for a player a ladder rated with
    uncertainty does not rank yet, written blank), ``name`` (player id), counts of games,
    ``win_share`` in [0, 1] (``None`` without games), ``rating`` and ``peak`` in rating points, and
    on a ladder rated with uncertainty its :class:`Uncertainty` (``None`` on an Elo ladder)."""

    rank: int | None
    name: str
    wins: int
    losses: int
    draws: int
    win_share: float | None
    rating: float
    peak: float
    games: int
    uncertainty: Uncertainty | None = None


def headers(uncertainty: bool) -> tuple[str, ...]:
    """The header row: :data:`UNCERTAINTY_HEADERS` for a ladder rated with uncertainty, else :data:`HEADERS`."""
    return UNCERTAINTY_HEADERS if uncertainty else HEADERS


def win_share(wins: int, draws: int, games: int) -> float | None:
    """``(wins + draws / 2) / games`` in [0, 1]; ``None`` when ``games`` is 0."""
    return (wins + draws / 2) / games if games else None


def _standing(r: Mapping[str, Any], uncertainty: Uncertainty | None = None) -> Standing:
    """The :class:`Standing` of one :func:`worker.store.leaderboard` row."""
    return Standing(None if r["rank"] is None else int(r["rank"]), r["player_id"], r["wins"], r["losses"], r["draws"],
                    win_share(r["wins"], r["draws"], r["games"]), float(r["rating"]), float(r["peak_rating"]),
                    r["games"], uncertainty)


def standings_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[Standing]:
    """:class:`Standing` rows from :func:`worker.store.leaderboard` rows."""
    return [_standing(r) for r in rows]


def standings_from_board(board: Iterable[BoardRow], rows: Iterable[Mapping[str, Any]]) -> list[Standing]:
    """:class:`Standing` rows of a ladder rated with uncertainty: the leaderboard's rows ``board``
    (:func:`worker.store.standings.board`, at the moment exported) in their order, each with its
    rank, deviation, conservative rating and status, and the counts, rating and peak of the
    player's row in ``rows`` (:func:`worker.store.leaderboard`; a player without one is left out)."""
    counts = {r["player_id"]: r for r in rows}
    return [_standing({**counts[b.player_id], "rank": b.rank}, Uncertainty(b.deviation, b.conservative, status(b)))
            for b in board if b.player_id in counts]


def _csv_text(name: str) -> str:
    return "'" + name if name.startswith(_FORMULA_PREFIXES) else name


def _csv_row(s: Standing, uncertainty: bool) -> list[Any]:
    """One player's CSV line: win % in percent with one decimal, rating points with two; with
    ``uncertainty`` the deviation, conservative rating and status after the rating (blank when
    ``s`` has none)."""
    pct = "" if s.win_share is None else f"{100 * s.win_share:.1f}"
    extra: list[Any] = []
    if uncertainty:
        u = s.uncertainty
        extra = ["", "", ""] if u is None else [f"{u.deviation:.2f}", f"{u.conservative:.2f}", u.status]
    return ["" if s.rank is None else s.rank, _csv_text(s.name), s.wins, s.losses, s.draws, pct,
            f"{s.rating:.2f}", *extra, f"{s.peak:.2f}", s.games]


def write_csv(standings: Iterable[Standing], out: TextIO, *, uncertainty: bool = False) -> int:
    """Write the header and one line per standing to ``out`` (a text stream opened with
    ``newline=""``); return the number of player rows. Win % in percent, one decimal. With
    ``uncertainty`` (a ladder rated with uncertainty): :data:`UNCERTAINTY_HEADERS`, the Deviation,
    Conservative and Status columns included."""
    writer = csv.writer(out)
    writer.writerow(headers(uncertainty))
    n = 0
    for s in standings:
        writer.writerow(_csv_row(s, uncertainty))
        n += 1
    return n


def write_csv_file(standings: Iterable[Standing], path: Path, *, uncertainty: bool = False) -> int:
    """:func:`write_csv` into the file ``path`` (UTF-8 with a byte order mark); return the row count."""
    with open(path, "w", encoding="utf-8-sig", newline="") as out:
        return write_csv(standings, out, uncertainty=uncertainty)


def csv_text(standings: Iterable[Standing], *, uncertainty: bool = False) -> str:
    """The CSV as a string (no byte order mark); ``uncertainty`` as for :func:`write_csv`."""
    out = io.StringIO(newline="")
    write_csv(standings, out, uncertainty=uncertainty)
    return out.getvalue()


_Cell = tuple[int | float | str | None, str | None]
"""A workbook cell: its value (a number, a string, ``None`` for a blank) and its format's name."""


def _xlsx_cells(s: Standing, uncertainty: bool) -> list[_Cell]:
    """One player's workbook row: Win % a fraction (format ``percent``), rating points exact (format
    ``rating``, one decimal shown); with ``uncertainty`` the deviation and conservative rating as
    ratings are and the status as text after the rating."""
    extra: list[_Cell] = []
    if uncertainty:
        u = s.uncertainty
        extra = [(None, "rating"), (None, "rating"), (None, None)] if u is None else [
            (u.deviation, "rating"), (u.conservative, "rating"), (u.status, None)]
    return [(s.rank, None), (s.name, None), (s.wins, None), (s.losses, None), (s.draws, None),
            (s.win_share, "percent"), (s.rating, "rating"), *extra, (s.peak, "rating"), (s.games, None)]


def _column_widths(rows: list[Standing], uncertainty: bool) -> list[int]:
    """Widths of the Leaderboard sheet's columns, in characters (at most 60)."""
    widths = [6, max([len("Name"), *(len(s.name) for s in rows)]) + 2, 7, 7, 7, 8, 9, 9, 7]
    if uncertainty:
        longest = max([len("Status"), *(len(s.uncertainty.status) for s in rows if s.uncertainty)])
        widths[7:7] = [10, 13, longest + 2]
    return [min(w, 60) for w in widths]


def write_xlsx(standings: Iterable[Standing], path: Path, ladder: str, about: Mapping[str, Any] | None = None,
               *, uncertainty: bool = False) -> int:
    """Write an Excel workbook to ``path``; return the number of player rows.

    Sheet ``Leaderboard``: the header row (bold, frozen, with filters) and one row per player;
    Win % is a fraction with a percentage format, ratings keep their exact value and show one
    decimal. With ``uncertainty`` (a ladder rated with uncertainty): :data:`UNCERTAINTY_HEADERS`,
    deviation and conservative rating formatted as ratings, status as text. Sheet ``About``: the
    ladder, when it was exported, the win % definition and the entries of ``about`` (e.g. the
    policy version). Raises ``OSError`` if ``path`` cannot be written.
    """
    xlsxwriter = require("xlsxwriter", "reports", "ratings export --format xlsx")  # only this command needs it

    rows = list(standings)
    workbook = xlsxwriter.Workbook(str(path), {"strings_to_formulas": False, "strings_to_urls": False})
    try:
        bold = workbook.add_format({"bold": True, "bottom": 1})
        formats = {"rating": workbook.add_format({"num_format": "0.0"}),
                   "percent": workbook.add_format({"num_format": "0.0%"}), None: None}
        sheet = workbook.add_worksheet("Leaderboard")
        columns = headers(uncertainty)
        for col, header in enumerate(columns):
            sheet.write_string(0, col, header, bold)
        for i, s in enumerate(rows, start=1):
            for col, (value, style) in enumerate(_xlsx_cells(s, uncertainty)):
                if value is None:
                    sheet.write_blank(i, col, None, formats[style])
                elif isinstance(value, str):
                    sheet.write_string(i, col, value, formats[style])
                else:
                    sheet.write_number(i, col, value, formats[style])
        for col, width in enumerate(_column_widths(rows, uncertainty)):
            sheet.set_column(col, col, width)
        sheet.freeze_panes(1, 0)
        sheet.autofilter(0, 0, max(len(rows), 1), len(columns) - 1)
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
