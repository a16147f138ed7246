"""Wire contracts of the match rating service (pydantic v2).

- :class:`MatchFinished` (in): one finished match, validated by :func:`parse_match_finished`,
  which raises :class:`InvalidMessage` with a reason code for the dead letters.
- :class:`RatingChanged` (out): one rating change per player per applied match.

JSON Schema files for both live in ``schemas/json/`` and are regenerated with
``python -m schemas.generate`` (``--check`` fails when they are stale).
This package imports pydantic and the standard library only.
"""

from .match_finished import (
    MAX_MESSAGE_BYTES,
    InvalidMessage,
    MatchFinished,
    PlayerResult,
    SedmaStats,
    Side,
    parse_match_finished,
)
from .rating_changed import RatingChanged

__all__ = [
    "MAX_MESSAGE_BYTES",
    "InvalidMessage",
    "MatchFinished",
    "PlayerResult",
    "RatingChanged",
    "SedmaStats",
    "Side",
    "parse_match_finished",
]
