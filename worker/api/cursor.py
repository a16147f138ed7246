"""The leaderboard's keyset cursor: an opaque, URL-safe token for "the page after this one"."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime


class InvalidCursor(ValueError):
    """The cursor is not one this API issued (reason code ``invalid_cursor``)."""


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where the next page starts: the reading's moment ``at`` (every page of one walk is read as
    of it), the ladder's history ``generation`` then, the last row's ``rating`` (rating points) and
    ``player_id``, and ``seen`` (rows before the next page) and ``rank`` (the last row's rank), so
    ranks continue across pages."""

    at: datetime
    generation: int
    rating: float
    player_id: str
    seen: int
    rank: int
    unranked: bool | None = None

    def encode(self) -> str:
        """The cursor as base64url JSON (no padding)."""
        fields = [self.at.isoformat(), self.generation, self.rating, self.player_id, self.seen, self.rank]
        if self.unranked is not None:
            fields.append(self.unranked)
        text = json.dumps(fields, separators=(",", ":"))
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str) -> Cursor:
        """The cursor of ``token``; raises :class:`InvalidCursor` when it is not one :meth:`encode` made."""
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            at, generation, rating, player_id, seen, rank, *rest = json.loads(raw)
            if len(rest) > 1 or (rest and not isinstance(rest[0], bool)):
                raise ValueError("too many fields")
            cursor = cls(datetime.fromisoformat(at), int(generation), float(rating), str(player_id), int(seen),
                         int(rank), rest[0] if rest else None)
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise InvalidCursor("the cursor is not one this API issued: start again without it") from exc
        if cursor.at.tzinfo is None or cursor.seen < 1 or cursor.rank < 1 or cursor.rank > cursor.seen:
            raise InvalidCursor("the cursor is not one this API issued: start again without it")
        return cursor
