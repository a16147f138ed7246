"""The leaderboard's keyset cursor: an opaque, URL-safe token for "the page after this one"."""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


class InvalidCursor(ValueError):
    """The cursor is not one this API issued (reason code ``invalid_cursor``)."""


#: Bounds of what this API issues: a cursor's moment is a reading of the database's clock (no
#: earlier than this service's first release, no later than a day ahead of this host's clock, for
#: clock skew), a position counts rows of one ladder (at most PostgreSQL's 32-bit row numbers here),
#: a generation is a PostgreSQL bigint, a player id is at most 200 characters and a ladder 64.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
AHEAD = timedelta(days=1)
MAX_POSITION = 2**31 - 1
MAX_GENERATION = 2**63 - 1
MAX_PLAYER_ID = 200
MAX_LADDER = 64
_REFUSED = "the cursor is not one this API issued: start again without it"


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where the next page starts: the reading's moment ``at`` (every page of one walk is read as
    of it), the ladder's history ``generation`` then, the last row's ``rating`` (rating points) and
    ``player_id``, and ``seen`` (rows before the next page) and ``rank`` (the last row's rank), so
    ranks continue across pages; ``unranked`` on a ladder rated with uncertainty (whether the last
    row was unranked), and the ``ladder`` the walk is of, so a cursor is refused on another ladder."""

    at: datetime
    generation: int
    rating: float
    player_id: str
    seen: int
    rank: int
    unranked: bool | None = None
    ladder: str | None = None

    def encode(self) -> str:
        """The cursor as base64url JSON (no padding)."""
        fields: list[object] = [self.at.isoformat(), self.generation, self.rating, self.player_id, self.seen,
                                self.rank]
        if self.unranked is not None or self.ladder is not None:
            fields.append(self.unranked)
        if self.ladder is not None:
            fields.append(self.ladder)
        text = json.dumps(fields, separators=(",", ":"))
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str, ladder: str | None = None) -> Cursor:
        """The cursor of ``token``; raises :class:`InvalidCursor` when it is not one :meth:`encode`
        made: malformed, out of the bounds above (a moment before 2000 or more than a day ahead, a
        position past 2**31 - 1, a rating that is not finite), or, with ``ladder``, a cursor of
        another ladder or of none."""
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            at, generation, rating, player_id, seen, rank, *rest = json.loads(raw)
            unranked, of = (rest + [None, None])[:2]
            if len(rest) > 2 or not (unranked is None or isinstance(unranked, bool)) \
                    or not (of is None or isinstance(of, str)):
                raise ValueError("unexpected fields")
            if not all(type(v) is int for v in (generation, seen, rank)) or type(rating) not in (int, float) \
                    or not isinstance(player_id, str) or not isinstance(at, str):
                raise TypeError("a field of the wrong type")
            cursor = cls(datetime.fromisoformat(at), generation, float(rating), player_id, seen, rank, unranked, of)
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise InvalidCursor(_REFUSED) from exc
        if not cursor.within_bounds() or (ladder is not None and cursor.ladder != ladder):
            raise InvalidCursor(_REFUSED)
        return cursor

    def within_bounds(self) -> bool:
        """Whether every field is within what this API issues (the bounds above)."""
        if self.at.tzinfo is None or not EARLIEST <= self.at <= datetime.now(UTC) + AHEAD:
            return False
        return (1 <= self.rank <= self.seen <= MAX_POSITION and 0 <= self.generation <= MAX_GENERATION
                and math.isfinite(self.rating) and 1 <= len(self.player_id) <= MAX_PLAYER_ID
                and (self.ladder is None or 1 <= len(self.ladder) <= MAX_LADDER))
