"""One leaderboard page as both the API and the page show it: the moment, the rows with their ranks,
and the cursor of the next page."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from worker.api.cursor import Cursor
from worker.store import api_reads
from worker.store.standings import board

if TYPE_CHECKING:
    from psycopg import Connection

    from worker.policy.uncertainty import LeaderboardRules


@dataclass(frozen=True, slots=True)
class Row:
    """A ranked leaderboard row: ``rank`` (ties share one; ``None`` when not rankable), ``player_id``,
    ``rating`` (rating points), ``games``; on a ladder rated with uncertainty also ``deviation``
    (grown to the page's moment) and ``conservative`` (rating points), and the ``provisional`` and
    ``inactive`` marks (all ``None`` on an Elo ladder)."""

    rank: int | None
    player_id: str
    rating: float
    games: int
    deviation: float | None = None
    conservative: float | None = None
    provisional: bool | None = None
    inactive: bool | None = None


@dataclass(frozen=True, slots=True)
class Page:
    """A page: the moment it is read as of, its rows, and the cursor of the next page (``None``: the last)."""

    at: datetime
    rows: list[Row]
    next_cursor: str | None


def read_page(conn: Connection, ladder: str, generation: int, start: Cursor | None, limit: int,
              rules: LeaderboardRules | None = None) -> Page:
    """The ``limit`` rows after ``start`` (``None``: the first page, read as of a new moment,
    :func:`worker.store.api_reads.leaderboard_moment`); ranks continue from the cursor: a row rated
    as the one before it shares its rank, else its rank is its position. With ``rules`` (a ladder
    rated with uncertainty) the page is :func:`uncertainty_page`'s."""
    at = start.at if start else api_reads.leaderboard_moment(conn)
    if rules is not None:
        return uncertainty_page(conn, ladder, generation, at, start, limit, rules)
    entries = api_reads.leaderboard_page(conn, ladder, generation, at, limit + 1,
                                         (start.rating, start.player_id) if start else None)
    seen, rank, last = (start.seen, start.rank, start.rating) if start else (0, 0, math.nan)
    rows = []
    for e in entries[:limit]:
        seen += 1
        rank = rank if e.rating == last else seen
        last = e.rating
        rows.append(Row(rank, e.player_id, e.rating, e.games))
    more = len(entries) > limit and rows
    next_cursor = Cursor(at, generation, rows[-1].rating, rows[-1].player_id, seen, rank,
                                  ladder=ladder).encode() if more else None
    return Page(at, rows, next_cursor)


def uncertainty_page(conn: Connection, ladder: str, generation: int, at: datetime, start: Cursor | None,
                     limit: int, rules: LeaderboardRules) -> Page:
    """A page of a ladder rated with uncertainty: the whole leaderboard as of ``at``
    (:func:`worker.store.standings.board` over :func:`worker.store.api_reads.states_as_of`, the
    rules of ``ratings leaderboard``: rankable players by conservative rating, then the others
    unranked), the ``limit`` rows after the cursor's key ``(unranked, conservative, player_id)``.
    Every page of a walk ranks the same states at the same moment, so the pages form one ordering.
    Each page ranks every player of the ladder (one scan of its players)."""
    rows = board(api_reads.states_as_of(conn, ladder, generation, at), rules, at.timestamp())
    skip = 0
    if start is not None:
        key = (bool(start.unranked), -start.rating, start.player_id.encode())
        skip = next((n for n, r in enumerate(rows)
                     if (r.rank is None, -r.conservative, r.player_id.encode()) > key), len(rows))
    chosen = rows[skip:skip + limit]
    page = [Row(r.rank, r.player_id, r.rating, r.games, r.deviation, r.conservative, r.provisional, r.inactive)
            for r in chosen]
    seen = skip + len(page)
    next_cursor = None
    if seen < len(rows) and page:
        last = page[-1]
        next_cursor = Cursor(at, generation, chosen[-1].conservative, last.player_id, seen, seen,
                             last.rank is None, ladder).encode()
    return Page(at, page, next_cursor)
