"""``ratings import``, reading: an organiser's match log (CSV or Excel workbook), every row read and checked.

The community-tournament seed keeps one row per match: player A, player B, the result as ``A``
(A won), ``B`` (B won) or ``E`` (empate, a draw), and sometimes a date. :func:`read_log` reads every
row of the file (or refuses the file) and checks each one; :mod:`worker.ops.reconcile` compares the
good rows with the ladder's ledger.
"""

from __future__ import annotations

import csv
import io
import zipfile
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

from schemas import InvalidMessage, MatchFinished, parse_match_finished

RESULTS = {"A": "side_a_won", "B": "side_b_won", "E": "draw"}
"""The seed's result letters: A won, B won, E (empate) a draw."""

LOG_NAME_MAX_LENGTH = 96
"""Longest log name: ``import-<name>-k<16 hex>.<revision>`` stays within a match id's 128 characters."""

ONE_DAY = timedelta(days=1)
MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Columns:
    """Header names of the log's columns (compared without case and surrounding spaces); ``date``
    is optional in the file. Defaults: the seed's layout."""

    player_a: str = "Player A"
    player_b: str = "Player B"
    result: str = "Result"
    date: str = "Date"


Key = tuple[date, tuple[str, str], int]
"""A row's place in a log: (date, the two players sorted by code point, rank among the rows with
the same date and players, from 1); a new match's id is made from it."""


@dataclass(frozen=True)
class RowError:
    """One row that cannot be imported: ``row`` (spreadsheet numbering, header = 1), a
    ``reason_code``, a ``detail`` saying what to change, and the row's raw cells. ``day`` and
    ``players`` are set when the row names both players and has a date: the refused row still holds
    its identity, so its stored match is kept and the rows after it keep theirs."""

    row: int
    reason_code: str
    detail: str
    cells: dict[str, Any] = field(default_factory=dict)
    day: date | None = None
    players: tuple[str, str] | None = None


@dataclass(frozen=True)
class LogRow:
    """One good row: ``row`` number, its ``day``, the players as written (A, B), ``result`` (A, B or E)."""

    row: int
    day: date
    player_a: str
    player_b: str
    result: str

    @property
    def players(self) -> tuple[str, str]:
        """The two players sorted by code point (the identity ignores which column each is in)."""
        return (self.player_a, self.player_b) if self.player_a.encode() <= self.player_b.encode() \
            else (self.player_b, self.player_a)

    @property
    def winner(self) -> str | None:
        """The winner's player id, or ``None`` for a draw."""
        return {"A": self.player_a, "B": self.player_b}.get(self.result)


@dataclass(frozen=True)
class LogFile:
    """Every data row of a log: the good ``rows`` and the refused ones (``errors``), each in file order."""

    rows: list[LogRow]
    errors: list[RowError]


class LogFileError(ValueError):
    """The file as a whole cannot be read as a match log (format, header, a row the reader cannot
    delimit, more sheets than one without ``sheet``); the message says why and what to do."""


def _csv_rows(path: Path, encoding: str) -> list[tuple[int, list[Any]]]:
    try:
        text = path.read_text(encoding=encoding)
    except UnicodeDecodeError as exc:
        raise LogFileError(f"{path.name} is not {encoding} text ({exc}); pass --encoding (e.g. cp1252)") from exc
    try:
        dialect: Any = csv.Sniffer().sniff(text[:4096], delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    # strict: a quote left open would otherwise swallow every line after it into one cell
    reader = csv.reader(io.StringIO(text, newline=""), dialect, strict=True)
    rows: list[tuple[int, list[Any]]] = []
    try:
        for number, cells in enumerate(reader, start=1):
            rows.append((number, cells))
    except csv.Error as exc:
        raise LogFileError(f"{path.name}, line {reader.line_num}: {exc} (e.g. a quote left open, a stray quote "
                           "after a quoted cell, a NUL byte); fix the line: no row of the log was read") from exc
    return rows


def _sheet_has_data(ws: Any) -> bool:
    return any(any(c not in (None, "") for c in cells)
               for cells in ws.iter_rows(min_row=1, min_col=1, values_only=True))


def _workbook_rows(path: Path, sheet: str | None) -> list[tuple[int, list[Any]]]:
    try:
        import openpyxl
    except ImportError as exc:
        raise LogFileError("reading workbooks needs openpyxl: pip install 'match-rating-worker[import]'") from exc
    try:
        workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise LogFileError(f"{path.name} is not a readable .xlsx workbook ({exc})") from exc
    try:
        try:
            ws = workbook[sheet] if sheet else workbook.worksheets[0]
        except KeyError as exc:
            raise LogFileError(f"no sheet {sheet!r} in {path.name}; sheets: {', '.join(workbook.sheetnames)}") from exc
        for other in workbook.worksheets:
            other.reset_dimensions()  # the <dimension> a writer declared may be smaller than the sheet
        if sheet is None:
            with_data = [w.title for w in workbook.worksheets if w is not ws and _sheet_has_data(w)]
            if with_data:
                raise LogFileError(f"{path.name} has more sheets with data than the first ({', '.join(with_data)}): "
                                   "name the one holding the log with --sheet (each sheet is imported on its own)")
        return [(n, list(cells)) for n, cells in
                enumerate(ws.iter_rows(min_row=1, min_col=1, values_only=True), start=1)]
    finally:
        workbook.close()


def read_rows(path: Path, sheet: str | None = None,
              encoding: str = "utf-8-sig") -> tuple[list[str], list[tuple[int, list[Any]]]]:
    """(header, [(row number, cells)]) of every row of a ``.csv`` (delimiter ``,``, ``;`` or tab
    sniffed; UTF-8 with or without BOM by default; quoted cells may hold line breaks) or ``.xlsx``
    file (the first sheet, or ``sheet``; read with openpyxl, the ``import`` extra, to the sheet's
    last row whatever size its ``<dimension>`` element declares). Empty rows are skipped.

    Raises :class:`LogFileError` for an unreadable file, a CSV line the reader cannot delimit (a
    quote left open), and a workbook with data on other sheets than the first when ``sheet`` is
    not given: the file is refused rather than read in part.
    """
    suffix = path.suffix.lower()
    if suffix == ".csv":
        rows = _csv_rows(path, encoding)
    elif suffix in (".xlsx", ".xlsm"):
        rows = _workbook_rows(path, sheet)
    else:
        raise LogFileError(f"{path.name}: expected a .csv or .xlsx file")
    rows = [(n, cells) for n, cells in rows if any(c not in (None, "") and str(c).strip() for c in cells)]
    if not rows:
        raise LogFileError(f"{path.name} is empty")
    (_, header), data = rows[0], rows[1:]
    return [str(h).strip() if h is not None else "" for h in header], data


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _date(value: Any) -> date | None:
    """A cell as a date: a workbook date/datetime, or text ``YYYY-MM-DD``, ``DD/MM/YYYY`` or ``DD.MM.YYYY``."""
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    text = _text(value)
    if not text:
        return None
    for fmt in ("%Y-%m-%d", "%d/%m/%Y", "%d.%m.%Y"):
        try:
            return datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    raise ValueError(f"date {text!r} is not YYYY-MM-DD or DD/MM/YYYY")


def _column_index(header: list[str], columns: Columns, path: Path) -> dict[str, int | None]:
    lowered = [h.lower() for h in header]
    index: dict[str, int | None] = {}
    for name in ("player_a", "player_b", "result", "date"):
        wanted = getattr(columns, name).strip().lower()
        index[name] = lowered.index(wanted) if wanted in lowered else None
    missing = [getattr(columns, n) for n in ("player_a", "player_b", "result") if index[n] is None]
    if missing:
        raise LogFileError(f"{path.name}: no column {', '.join(repr(m) for m in missing)} in the header "
                           f"{header}; name the columns with --player-a-column, --player-b-column, --result-column")
    return index


def _no_date_detail(refused_date_row: int | None) -> str:
    """Why a row has no date: none above it, or the date above it was refused (at that row)."""
    if refused_date_row is None:
        return "no date on this row or above it; pass --date YYYY-MM-DD"
    return f"the date above this row (row {refused_date_row}) was refused; fix it or date this row"


def read_log(path: Path, columns: Columns = Columns(), default_date: date | None = None, sheet: str | None = None,
             encoding: str = "utf-8-sig") -> LogFile:
    """Read and check every row of the log (:func:`read_rows`); nothing is published here.

    ``default_date``: the date of rows without one before the first dated row. Row reason codes:
    ``missing_player``, ``invalid_result``, ``invalid_date``, ``no_date``, ``same_player`` (a player
    against themself). Raises :class:`LogFileError` when the file cannot be read whole or a column
    is missing.
    """
    header, data = read_rows(path, sheet, encoding)
    index = _column_index(header, columns, path)
    rows: list[LogRow] = []
    errors: list[RowError] = []
    current_date = default_date
    refused_date_row: int | None = None
    for number, cells in data:
        def cell(name: str, cells: list[Any] = cells) -> Any:
            i = index[name]
            return cells[i] if i is not None and i < len(cells) else None

        raw = {getattr(columns, n): (cell(n) if not isinstance(cell(n), (date, datetime)) else cell(n).isoformat())
               for n in ("player_a", "player_b", "result", "date") if index[n] is not None}
        a, b, result = _text(cell("player_a")), _text(cell("player_b")), _text(cell("result")).upper()
        try:
            current_date = _date(cell("date")) or current_date
        except ValueError as exc:
            errors.append(RowError(number, "invalid_date", str(exc), raw))
            # the undated rows below belong to the refused date, not to the one above it
            current_date, refused_date_row = None, number
            continue
        players = (a, b) if a.encode() <= b.encode() else (b, a)
        held: dict[str, Any] = {"day": current_date, "players": players} if a and b and current_date else {}
        if not a or not b:
            errors.append(RowError(number, "missing_player", "both players must be named", raw))
        elif result not in RESULTS:
            errors.append(RowError(number, "invalid_result", f"result {_text(cell('result'))!r} is not A (A won), "
                                   "B (B won) or E (empate, a draw)", raw, **held))
        elif current_date is None:
            errors.append(RowError(number, "no_date", _no_date_detail(refused_date_row), raw))
        else:
            row = LogRow(number, current_date, a, b, result)
            try:  # the contract's own checks (a player against themself, an id too long, a date out of range)
                match_message(row, "import-check", "import-check", midnight(current_date) + timedelta(seconds=1))
            except InvalidMessage as exc:
                errors.append(RowError(number, exc.reason_code, exc.detail, raw, **held))
                continue
            rows.append(row)
    return LogFile(rows, errors)


def midnight(day: date) -> datetime:
    """The start of ``day`` in UTC."""
    return datetime.combine(day, time(), UTC)


def match_message(row: LogRow, ladder: str, match_id: str, finished_at: datetime) -> MatchFinished:
    """The match message of ``row`` on ``ladder``. Raises :class:`schemas.InvalidMessage` when the
    contract refuses it (a player against themself, an id too long, a date out of range)."""
    return parse_match_finished({
        "schema_version": 1, "match_id": match_id, "ladder": ladder,
        "finished_at": finished_at.isoformat().replace("+00:00", "Z"),
        "side_a": {"players": [{"player_id": row.player_a}]}, "side_b": {"players": [{"player_id": row.player_b}]},
        "outcome": RESULTS[row.result]})
