"""``ratings evaluate``: history sources (the ledger, the international football CSV, JSON Lines)."""

from __future__ import annotations

import codecs
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from worker.mapping import to_engine_match
from worker.ops.evaluate.accumulate import HistoryItem
from worker.policy.shapes import REASON_CODE as SHAPE_REASON_CODE
from worker.policy.shapes import MatchShapes, match_side_sizes

# ------------------------------------------------------------------------------------------------
# History sources
# ------------------------------------------------------------------------------------------------


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        return datetime.fromisoformat(value)
    return None


def ledger_history(conn, ladder: str) -> Iterator[HistoryItem]:
    """The ladder's ledger in its replay order (chronological unless the ladder chose arrival order),
    streamed (:func:`worker.store.iter_ledger`) and mapped with :func:`worker.mapping.to_engine_match`.
    Run it inside the caller's transaction (one snapshot).
    """
    from worker import store as repository

    for payload in repository.iter_ledger(conn, ladder):
        yield HistoryItem(to_engine_match(payload), _parse_time(payload.get("finished_at")))


@dataclass
class SkippedLines:
    """What a file source left out: bad lines by reason code (and the first few in full), messages of
    another ladder, and repeated match ids (the worker would not apply a match id twice)."""

    bad: Counter = field(default_factory=Counter)
    examples: list[tuple[int, str, str]] = field(default_factory=list)
    other_ladder: int = 0
    duplicate_ids: int = 0
    max_examples: int = 10

    def bad_line(self, line_number: int, reason: str, detail: str) -> None:
        """Count one bad line (1-based ``line_number``) with its reason code and message."""
        self.bad[reason] += 1
        if len(self.examples) < self.max_examples:
            self.examples.append((line_number, reason, detail))

    @property
    def total(self) -> int:
        """Every line or row left out."""
        return sum(self.bad.values()) + self.other_ladder + self.duplicate_ids

    def to_json(self) -> dict[str, Any]:
        """Counts as a JSON-ready dict."""
        return {
            "bad_lines": dict(self.bad), "other_ladder": self.other_ladder, "duplicate_match_ids": self.duplicate_ids,
            "examples": [{"line": n, "reason": r, "detail": d} for n, r, d in self.examples],
        }


def count_lines(path: Path) -> int:
    """Number of non-empty lines in ``path`` (for a progress bar's total)."""
    n = 0
    with open(path, "rb") as f:
        for line in f:
            n += bool(line.strip())
    return n


def is_football_csv(path: Path) -> bool:
    """True when ``path`` is a CSV whose header holds the international football columns."""
    if path.suffix.lower() != ".csv":
        return False
    with open(path, encoding="utf-8-sig") as f:
        header = f.readline()
    return {"date", "home_team", "away_team", "home_score", "away_score"} <= set(header.strip().split(","))


def football_history(path: Path, ladder: str = "elo") -> Iterator[HistoryItem]:
    """The international football results as a history: :func:`worker.ops.football.football_matches`
    (home team = side A, date at 00:00 UTC), each message mapped with :func:`to_engine_match`.
    Raises ``ValueError`` on a malformed row."""
    from worker.ops.football import football_matches

    for message in football_matches(path, ladder):
        yield HistoryItem(to_engine_match(message.model_dump(mode="json")), message.finished_at)


def first_ladder(path: Path) -> str | None:
    """The ladder of the first valid MatchFinished line of a JSON Lines file, or ``None``."""
    from schemas import InvalidMessage, parse_match_finished

    with open(path, encoding="utf-8-sig", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                return parse_match_finished(line).ladder
            except InvalidMessage:
                continue
    return None


def jsonl_history(path: Path, ladder: str, skipped: SkippedLines,
                  shapes: MatchShapes | None = None) -> Iterator[HistoryItem]:
    """Valid MatchFinished messages of ``ladder`` from a JSON Lines file, in file order.

    Each line is validated by :func:`schemas.parse_match_finished`; a bad line is counted in
    ``skipped`` with its reason code and left out, as is a message of another ladder and a repeated
    match id (the worker applies a match id once), and, when the ladder's ``shapes`` are given, a
    match of a shape it does not rate (``unsupported_match_shape``, as the worker would refuse it).
    Empty lines are ignored, and a UTF-8 byte order mark at the start of the file (an editor's, not
    the first message's).
    """
    from schemas import InvalidMessage, parse_match_finished

    seen: set[str] = set()
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if number == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            if not raw.strip():
                continue
            try:
                message = parse_match_finished(raw.rstrip(b"\r\n"))
            except InvalidMessage as exc:
                skipped.bad_line(number, exc.reason_code, exc.detail)
                continue
            if message.ladder != ladder:
                skipped.other_ladder += 1
                continue
            if message.match_id in seen:
                skipped.duplicate_ids += 1
                continue
            refused = shapes.refusal(match_side_sizes(message), ladder) if shapes is not None else None
            if refused:
                skipped.bad_line(number, SHAPE_REASON_CODE, refused)
                continue
            seen.add(message.match_id)
            yield HistoryItem(to_engine_match(json.loads(message.canonical_json())), message.finished_at)


