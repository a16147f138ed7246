"""``ratings import``: an organiser's match log (CSV or Excel workbook) turned into match messages.

The community-tournament seed keeps one row per match: player A, player B, the result as ``A``
(A won), ``B`` (B won) or ``E`` (empate, a draw), and sometimes a date. :func:`plan_import` reads
the whole file and checks every row before anything is published: each good row becomes a
:class:`schemas.MatchFinished`, each bad row a :class:`RowError` with its row number (as the
spreadsheet shows it: the header is row 1) and a reason code.

Idempotency: a row's ``match_id`` is derived from the log's name, the row number and the row's
content (:func:`match_id`), and its ``finished_at`` from the row's date (or the last date above it,
or ``default_date``) plus the row number in seconds, so rows keep their file order within a day.
Importing the same log again, or the log with rows added at the end, publishes the same messages
for the old rows: the worker counts them as duplicates and rates each match once. A row edited in
place gets a new id (so does every row below an inserted row): logs are append-only.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

from schemas import InvalidMessage, MatchFinished, parse_match_finished

RESULTS = {"A": "side_a_won", "B": "side_b_won", "E": "draw"}
"""The seed's result letters: A won, B won, E (empate) a draw."""


@dataclass(frozen=True)
class Columns:
    """Header names of the log's columns (compared without case and surrounding spaces); ``date``
    is optional in the file. Defaults: the seed's layout."""

    player_a: str = "Player A"
    player_b: str = "Player B"
    result: str = "Result"
    date: str = "Date"


@dataclass(frozen=True)
class RowError:
    """One row that cannot be imported: ``row`` (spreadsheet numbering, header = 1), a
    ``reason_code``, a ``detail`` saying what to change, and the row's raw cells."""

    row: int
    reason_code: str
    detail: str
    cells: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ImportPlan:
    """What an import would publish: ``matches`` as (row number, match), and the ``errors``."""

    matches: list[tuple[int, MatchFinished]]
    errors: list[RowError]


class LogFileError(ValueError):
    """The file as a whole cannot be read as a match log (format, header); the message says why."""


def read_rows(path: Path, sheet: str | None = None,
              encoding: str = "utf-8-sig") -> tuple[list[str], list[tuple[int, list[Any]]]]:
    """(header, [(row number, cells)]) of a ``.csv`` (delimiter ``,`` or ``;`` sniffed; UTF-8 with
    or without BOM by default) or ``.xlsx`` file (the first sheet, or ``sheet``; read with openpyxl,
    the ``import`` extra). Empty rows are skipped. Raises :class:`LogFileError`."""
    suffix = path.suffix.lower()
    rows: list[tuple[int, list[Any]]]  # a CSV's cells are text, a workbook's any cell value
    if suffix == ".csv":
        try:
            text = path.read_text(encoding=encoding)
        except UnicodeDecodeError as exc:
            raise LogFileError(f"{path.name} is not {encoding} text ({exc}); pass --encoding (e.g. cp1252)") from exc
        try:
            dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t")
        except csv.Error:
            dialect = csv.excel
        rows = [(n, cells) for n, cells in enumerate(csv.reader(text.splitlines(), dialect), start=1)]
    elif suffix in (".xlsx", ".xlsm"):
        try:
            import openpyxl
        except ImportError as exc:
            raise LogFileError("reading workbooks needs openpyxl: pip install 'match-rating-worker[import]'") from exc
        workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
        try:
            ws = workbook[sheet] if sheet else workbook.worksheets[0]
        except KeyError as exc:
            raise LogFileError(f"no sheet {sheet!r} in {path.name}; sheets: {', '.join(workbook.sheetnames)}") from exc
        rows = [(n, list(cells)) for n, cells in enumerate(ws.iter_rows(values_only=True), start=1)]
        workbook.close()
    else:
        raise LogFileError(f"{path.name}: expected a .csv or .xlsx file")
    rows = [(n, cells) for n, cells in rows if any(c not in (None, "") and str(c).strip() for c in cells)]
    if not rows:
        raise LogFileError(f"{path.name} is empty")
    (_, header), data = rows[0], rows[1:]
    return [str(h).strip() if h is not None else "" for h in header], data


def match_id(log_name: str, row: int, cells: dict[str, Any]) -> str:
    """``import-<log name>-r<row>-<12 hex>``: the row number and a SHA-256 of the log name and the
    row's cells (as JSON), so the same row of the same log always gets the same id."""
    digest = hashlib.sha256(json.dumps([log_name, row, cells], ensure_ascii=False, sort_keys=True,
                                       default=str).encode()).hexdigest()[:12]
    return f"import-{log_name}-r{row}-{digest}"[-128:]


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _date(value: Any) -> date | None:
    """A cell as a date: a workbook date/datetime, or text ``YYYY-MM-DD`` or ``DD/MM/YYYY``."""
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


def plan_import(path: Path, ladder: str, columns: Columns = Columns(), log_name: str | None = None,
                default_date: date | None = None, sheet: str | None = None, encoding: str = "utf-8-sig") -> ImportPlan:
    """Read and check the whole log; nothing is published here.

    ``log_name`` (default: the file name without extension) is part of every match id: keep it
    when the file is renamed. ``default_date``: the date of rows without one before the first dated
    row. Row reason codes: ``missing_player``, ``invalid_result``, ``invalid_date``, ``no_date``,
    and any reason code of :func:`schemas.parse_match_finished` (e.g. ``duplicate_player`` for a
    player against themself, ``invalid_id``). Raises :class:`LogFileError` when a column is missing.
    """
    header, rows = read_rows(path, sheet, encoding)
    lowered = [h.lower() for h in header]
    index: dict[str, int | None] = {}
    for name in ("player_a", "player_b", "result", "date"):
        wanted = getattr(columns, name).strip().lower()
        index[name] = lowered.index(wanted) if wanted in lowered else None
    missing = [getattr(columns, n) for n in ("player_a", "player_b", "result") if index[n] is None]
    if missing:
        raise LogFileError(f"{path.name}: no column {', '.join(repr(m) for m in missing)} in the header "
                           f"{header}; name the columns with --player-a-column, --player-b-column, --result-column")
    log_name = log_name or path.stem
    matches: list[tuple[int, MatchFinished]] = []
    errors: list[RowError] = []
    current_date = default_date
    for number, cells in rows:
        def cell(name: str, cells: list[Any] = cells) -> Any:
            i = index[name]
            return cells[i] if i is not None and i < len(cells) else None

        raw = {getattr(columns, n): (cell(n) if not isinstance(cell(n), (date, datetime)) else cell(n).isoformat())
               for n in ("player_a", "player_b", "result", "date") if index[n] is not None}
        a, b, result = _text(cell("player_a")), _text(cell("player_b")), _text(cell("result")).upper()
        if not a or not b:
            errors.append(RowError(number, "missing_player", "both players must be named", raw))
            continue
        if result not in RESULTS:
            errors.append(RowError(number, "invalid_result",
                                   f"result {_text(cell('result'))!r} is not A (A won), B (B won) "
                                   "or E (empate, a draw)", raw))
            continue
        try:
            current_date = _date(cell("date")) or current_date
        except ValueError as exc:
            errors.append(RowError(number, "invalid_date", str(exc), raw))
            continue
        if current_date is None:
            errors.append(RowError(number, "no_date", "no date on this row or above it; pass --date YYYY-MM-DD", raw))
            continue
        finished_at = datetime.combine(current_date, time(), UTC) + timedelta(seconds=number)
        message = {"schema_version": 1, "match_id": match_id(log_name, number, raw), "ladder": ladder,
                   "finished_at": finished_at.isoformat().replace("+00:00", "Z"),
                   "side_a": {"players": [{"player_id": a}]}, "side_b": {"players": [{"player_id": b}]},
                   "outcome": RESULTS[result]}
        try:
            matches.append((number, parse_match_finished(message)))
        except InvalidMessage as exc:
            errors.append(RowError(number, exc.reason_code, exc.detail, raw))
    return ImportPlan(matches, errors)
