"""``ratings import``, reconciling: the organiser's log (:mod:`worker.ops.importer`) made the ladder's truth.

The community-tournament seed keeps one row per match: player A, player B, the result as ``A``
(A won), ``B`` (B won) or ``E`` (empate, a draw), and sometimes a date. The log is the source of
truth: :func:`read_log` reads every row of the file (or refuses the file) and checks each one;
:func:`reconcile` compares the good rows with what the ladder's ledger holds of the log and says
what makes the ladder equal the log: rows to add (rated in their place), rows whose result changed
or that moved (their stored match annulled, the new one rated in its place), stored matches no
longer in the log (annulled only when the organiser asks), and the rest unchanged.

A row's identity (``docs/game-backends/organisers.md``): the log's name, the row's date
(its own, the last one above it, or the import's default date) and the unordered pair of players.
When several rows share a date and players, they are paired with the stored matches of that date
and players as a line diff pairs lines: equal results in order first, the rest in order as edited
results. So a row survives edits of its result and rows added or removed elsewhere in the file; a
row whose date or player changed is another match (the old one is removed from the log, the new
one added). A stored match's date, players and result are read from its payload, so matches
imported under any earlier id scheme are recognised too.

Order: a ladder replays its matches by ``finished_at``. A new row's ``finished_at`` is its date
plus its rank among the log's rows of that date in seconds when that lies between the stored
neighbours it must follow and precede; otherwise the rows are spread evenly in that interval
(within their date): rows keep the file's order within a date, and dates order the rows.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from schemas import MatchFinished
from schemas._types import is_valid_id
from worker.ops.importer import (
    LOG_NAME_MAX_LENGTH,
    MICROSECOND,
    ONE_DAY,
    Key,
    LogFile,
    LogFileError,
    LogRow,
    RowError,
    match_message,
    midnight,
)
from worker.store.import_log import StoredLogMatch


@dataclass(frozen=True)
class Change:
    """One match the reconciliation publishes: ``kind`` ``added`` (a row the ladder lacks),
    ``changed`` (its result differs from the stored match's) or ``moved`` (its place among the
    log's rows changed); ``replaces``: the stored match annulled first (``None`` for ``added``);
    ``was``: the stored result in the row's terms (``A``, ``B``, ``E``), for ``changed``."""

    kind: str
    row: LogRow
    match: MatchFinished
    replaces: str | None = None
    was: str | None = None


@dataclass(frozen=True)
class Reconciliation:
    """What makes the ladder equal the log (:func:`reconcile`): the ``changes`` to publish in the
    replay order, the stored matches ``removed`` from the log, the number of rows ``unchanged``, the
    stored matches ``held`` by a refused row (left as they are), and the refused rows (``errors``:
    the log's own plus rows that cannot be placed, ``cannot_place``)."""

    changes: list[Change]
    removed: list[StoredLogMatch]
    unchanged: int
    held: list[tuple[RowError, StoredLogMatch]]
    errors: list[RowError]

    def count(self, kind: str) -> int:
        """Number of changes of ``kind`` (``added``, ``changed``, ``moved``)."""
        return sum(1 for c in self.changes if c.kind == kind)


def check_log_name(log_name: str) -> None:
    """Raise :class:`LogFileError` unless ``log_name`` can start a match id (1 to 96 characters, no
    control or invisible characters)."""
    if len(log_name) > LOG_NAME_MAX_LENGTH or not is_valid_id(log_name):
        raise LogFileError(f"log name {log_name!r}: 1 to {LOG_NAME_MAX_LENGTH} printable characters; "
                           "pass a shorter --log-name")


def id_prefix(log_name: str) -> str:
    """The start every match id of the log shares: ``import-<log name>-``."""
    return f"import-{log_name}-"


def _own_id(log_name: str) -> re.Pattern[str]:
    # this scheme's ids, and the earlier scheme's (row number and a hash of the cells)
    return re.compile(rf"import-{re.escape(log_name)}-(?:k[0-9a-f]{{16}}(?:\.[0-9]+)?|r[0-9]+-[0-9a-f]{{12}})\Z")


def base_match_id(log_name: str, ladder: str, key: Key) -> str:
    """``import-<log name>-k<16 hex>``: a SHA-256 of the ladder and the row's identity ``key``."""
    day, players, occurrence = key
    digest = hashlib.sha256(json.dumps([ladder, day.isoformat(), list(players), occurrence],
                                       ensure_ascii=False).encode()).hexdigest()[:16]
    return f"{id_prefix(log_name)}k{digest}"


def _stored_identity(stored: StoredLogMatch) -> tuple[date, tuple[str, str], str | None] | None:
    """(date, sorted players, winner or None) of a stored 1 v 1 match; None for another shape."""
    payload = stored.payload
    try:
        a = [p["player_id"] for p in payload["side_a"]["players"]]
        b = [p["player_id"] for p in payload["side_b"]["players"]]
        finished = datetime.fromisoformat(payload["finished_at"].replace("Z", "+00:00")).astimezone(UTC)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if len(a) != 1 or len(b) != 1:
        return None
    winner = {"side_a_won": a[0], "side_b_won": b[0]}.get(payload.get("outcome", ""))
    players = (a[0], b[0]) if a[0].encode() <= b[0].encode() else (b[0], a[0])
    return finished.date(), players, winner


def _longest_increasing(keys: Sequence[tuple[datetime, bytes]]) -> set[int]:
    """Indexes of one longest strictly increasing subsequence of ``keys`` (patience sorting)."""
    tails: list[int] = []
    before: list[int | None] = [None] * len(keys)
    for i, key in enumerate(keys):
        lo, hi = 0, len(tails)
        while lo < hi:
            mid = (lo + hi) // 2
            if keys[tails[mid]] < key:
                lo = mid + 1
            else:
                hi = mid
        before[i] = tails[lo - 1] if lo else None
        if lo == len(tails):
            tails.append(i)
        else:
            tails[lo] = i
    chain: set[int] = set()
    at = tails[-1] if tails else None
    while at is not None:
        chain.add(at)
        at = before[at]
    return chain


def _place(group: list[LogRow], ranks: dict[int, int], after: datetime | None,
           before: datetime | None) -> list[datetime] | None:
    """``finished_at`` of rows of one date to publish between two stored neighbours (exclusive):
    the date plus each row's rank in seconds when they fit, else spread evenly; None if no room."""
    start = midnight(group[0].day)
    lo = max(after, start) if after is not None else start
    hi = min(before, start + ONE_DAY) if before is not None else start + ONE_DAY
    natural = [start + timedelta(seconds=ranks[r.row]) for r in group]
    if lo < natural[0] and natural[-1] < hi:
        return natural
    step = (hi - lo) / (len(group) + 1)
    spread = [lo + (step * j) // MICROSECOND * MICROSECOND for j in range(1, len(group) + 1)]
    points = [lo, *spread, hi]
    return spread if all(x < y for x, y in zip(points, points[1:])) else None


def _align(rows: Sequence[object], stored: Sequence[object]) -> list[tuple[int | None, int | None]]:
    """Pairs (row index, stored index) of two sequences of results, as a line diff pairs lines: a
    longest common subsequence of equal results first, then, between two such anchors, the rest
    paired in order (edited results); a row or stored entry left alone is paired with None."""
    n, m = len(rows), len(stored)
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            best[i][j] = best[i + 1][j + 1] + 1 if rows[i] == stored[j] else max(best[i + 1][j], best[i][j + 1])
    pairs: list[tuple[int | None, int | None]] = []
    gap_rows: list[int] = []
    gap_stored: list[int] = []

    def close_gap() -> None:
        for k in range(max(len(gap_rows), len(gap_stored))):
            pairs.append((gap_rows[k] if k < len(gap_rows) else None, gap_stored[k] if k < len(gap_stored) else None))
        gap_rows.clear()
        gap_stored.clear()

    i = j = 0
    while i < n or j < m:
        if i < n and j < m and rows[i] == stored[j]:
            close_gap()
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif j < m and (i == n or best[i][j + 1] >= best[i + 1][j]):
            gap_stored.append(j)
            j += 1
        else:
            gap_rows.append(i)
            i += 1
    close_gap()
    return pairs


@dataclass
class _Matching:
    """Rows matched to stored matches: the good rows in replay order, each with its identity key and
    its stored match or None; stored matches held by refused rows; stored matches removed."""

    rows: list[LogRow] = field(default_factory=list)
    keys: list[Key] = field(default_factory=list)
    stored: list[StoredLogMatch | None] = field(default_factory=list)
    held: list[tuple[RowError, StoredLogMatch]] = field(default_factory=list)
    removed: list[StoredLogMatch] = field(default_factory=list)


def _match_rows(log: LogFile, own: list[StoredLogMatch]) -> _Matching:
    """Pair the log's rows with the live stored matches of the same date and players (:func:`_align`)."""
    groups: dict[tuple[date, tuple[str, str]], list[tuple[StoredLogMatch, str | None]]] = defaultdict(list)
    matching = _Matching()
    for s in own:
        if s.annulled:
            continue
        identity = _stored_identity(s)
        if identity is None:
            matching.removed.append(s)  # a shape the import never writes: not a row of the log
        else:
            groups[identity[:2]].append((s, identity[2]))
    entries: list[LogRow | RowError] = [*log.rows, *(e for e in log.errors if e.day and e.players)]
    entries.sort(key=lambda e: (e.day, e.row))
    by_group: dict[tuple[date, tuple[str, str]], list[LogRow | RowError]] = defaultdict(list)
    for entry in entries:
        assert entry.day is not None and entry.players is not None  # refused rows without them left out above
        by_group[(entry.day, entry.players)].append(entry)
    found: dict[int, tuple[Key, StoredLogMatch | None]] = {}
    for group, items in by_group.items():
        stored = groups.pop(group, [])
        # a refused row's result is unknown: it pairs with a stored match only as an edit
        results = [item.winner if isinstance(item, LogRow) else object() for item in items]
        for i, j in _align(results, [w for _, w in stored]):
            if i is None:
                assert j is not None
                matching.removed.append(stored[j][0])
                continue
            item, match = items[i], stored[j][0] if j is not None else None
            if isinstance(item, RowError):
                if match is not None:
                    matching.held.append((item, match))
            else:
                found[item.row] = ((group[0], group[1], i + 1), match)
    for rest in groups.values():
        matching.removed.extend(s for s, _ in rest)
    for row in sorted(log.rows, key=lambda r: (r.day, r.row)):
        key, match = found[row.row]
        matching.rows.append(row)
        matching.keys.append(key)
        matching.stored.append(match)
    matching.removed.sort(key=lambda s: (s.order_at, s.match_id.encode()))
    return matching


def reconcile(log: LogFile, stored: Sequence[StoredLogMatch], ladder: str, log_name: str) -> Reconciliation:
    """What makes ``ladder`` equal the log (the module docstring gives the rules).

    ``stored``: the ladder's ledger rows with the log's id prefix (:func:`worker.store.import_log.log_matches`),
    annulled ones included, in the replay order; rows of another log whose name starts the same
    way are left out here. Each row matched to a stored match with the same result and an order
    consistent with the other kept rows (a longest increasing run of stored order keys) is
    unchanged; a changed result keeps the stored match's ``finished_at``; added and moved rows are
    placed between their kept neighbours. A new match's id is :func:`base_match_id`, or with a
    revision suffix ``.2``, ``.3``, ... when the ledger already holds that id. A row with no room
    left between its neighbours (a microsecond) is refused as ``cannot_place``.
    """
    pattern = _own_id(log_name)
    own = [s for s in stored if pattern.match(s.match_id)]
    taken = {s.match_id for s in own}
    matching = _match_rows(log, own)
    found = [i for i, s in enumerate(matching.stored) if s is not None]
    in_order = _longest_increasing([(s.order_at, s.match_id.encode()) for s in matching.stored if s is not None])
    kept_in_place = {found[j] for j in in_order}
    ranks: dict[int, int] = {}
    per_day: Counter[date] = Counter()
    for row in matching.rows:
        per_day[row.day] += 1
        ranks[row.row] = per_day[row.day]

    def new_id(key: Key) -> str:
        base = base_match_id(log_name, ladder, key)
        candidate, revision = base, 1
        while candidate in taken:
            revision += 1
            candidate = f"{base}.{revision}"
        taken.add(candidate)
        return candidate

    changes: list[Change] = []
    errors = list(log.errors)
    unchanged = 0
    pending: list[int] = []  # rows to place before the next kept one

    def flush(before: datetime | None, after: datetime | None) -> None:
        by_day: dict[date, list[int]] = defaultdict(list)
        for i in pending:
            by_day[matching.rows[i].day].append(i)
        for day in sorted(by_day):
            group = [matching.rows[i] for i in by_day[day]]
            times = _place(group, ranks, after, before)
            if times is None:
                errors.extend(RowError(r.row, "cannot_place", "no room left (a microsecond) between the stored "
                                       "matches around it: delete the rows just above and below it, import with "
                                       "--annul-removed, then put them back and import again", day=r.day,
                                       players=r.players) for r in group)
                continue
            for i, at in zip(by_day[day], times):
                old = matching.stored[i]
                changes.append(Change("added" if old is None else "moved", matching.rows[i],
                                      match_message(matching.rows[i], ladder, new_id(matching.keys[i]), at),
                                      old.match_id if old else None))
            after = times[-1]
        pending.clear()

    last: datetime | None = None
    for i, (row, old) in enumerate(zip(matching.rows, matching.stored)):
        if old is None or i not in kept_in_place:
            pending.append(i)
            continue
        flush(old.order_at, last)
        last = old.order_at
        identity = _stored_identity(old)
        if identity is not None and identity[2] == row.winner:
            unchanged += 1
            continue
        was = "E" if identity is None or identity[2] is None else ("A" if identity[2] == row.player_a else "B")
        at = datetime.fromisoformat(old.payload["finished_at"].replace("Z", "+00:00"))
        message = match_message(row, ladder, new_id(matching.keys[i]), at)
        changes.append(Change("changed", row, message, old.match_id, was))
    flush(None, last)
    changes.sort(key=lambda c: (c.match.finished_at, c.match.match_id.encode()))
    errors.sort(key=lambda e: e.row)
    return Reconciliation(changes, matching.removed, unchanged, matching.held, errors)


def needs_chronological_order(plan: Reconciliation, stored: Sequence[StoredLogMatch], annul_removed: bool) -> bool:
    """True when carrying ``plan`` out needs a chronologically ordered ladder: it replaces or annuls
    a stored match, or adds one before a live stored match of the log. A ladder rated in arrival
    order would rate such a match at the end (and refuses annulments)."""
    last = max((s.order_at for s in stored if not s.annulled), default=None)
    return (any(c.replaces for c in plan.changes) or (annul_removed and bool(plan.removed))
            or (last is not None and any(c.match.finished_at < last for c in plan.changes)))

def describe(row: LogRow) -> str:
    """``<date> <player A> v <player B> <result>`` of a row, for the import's report."""
    return f"{row.day.isoformat()} {row.player_a} v {row.player_b} {row.result}"


def describe_stored(stored: StoredLogMatch) -> str:
    """The same description of a stored match (its match id for a shape the import never writes;
    ``?`` for an outcome it does not know)."""
    identity = _stored_identity(stored)
    if identity is None:
        return stored.match_id
    a = stored.payload["side_a"]["players"][0]["player_id"]
    b = stored.payload["side_b"]["players"][0]["player_id"]
    result = {"side_a_won": "A", "side_b_won": "B", "draw": "E"}.get(str(stored.payload.get("outcome")), "?")
    return f"{identity[0].isoformat()} {a} v {b} {result}"
