"""One leaderboard page as both the API and the page show it: the moment, the rows with their ranks,
and the cursor of the next page."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from worker.api.cursor import Cursor
from worker.store import api_reads

if TYPE_CHECKING:
    from psycopg import Connection


@dataclass(frozen=True, slots=True)
class Row:
    """A ranked leaderboard row: ``rank`` (ties share one), ``player_id``, ``rating`` (rating points), ``games``."""

    rank: int
    player_id: str
    rating: float
    games: int


@dataclass(frozen=True, slots=True)
class Page:
    """A page: the moment it is read as of, its rows, and the cursor of the next page (``None``: the last)."""

    at: datetime
    rows: list[Row]
    next_cursor: str | None


def read_page(conn: Connection, ladder: str, generation: int, start: Cursor | None, limit: int) -> Page:
    """The ``limit`` rows after ``start`` (``None``: the first page, read as of a new moment,
    :func:`worker.store.api_reads.leaderboard_moment`); ranks continue from the cursor: a row rated
    as the one before it shares its rank, else its rank is its position."""
    at = start.at if start else api_reads.leaderboard_moment(conn)
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
    next_cursor = Cursor(at, generation, rows[-1].rating, rows[-1].player_id, seen, rank).encode() if more else None
    return Page(at, rows, next_cursor)
