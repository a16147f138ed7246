"""Wire contracts of the match rating service (pydantic v2).

- :class:`MatchFinished` (in): one finished match, validated by :func:`parse_match_finished`,
  which raises :class:`InvalidMessage` with a reason code for the dead letters.
- :class:`AnnulMatches` (in): matches to annul, validated by :func:`parse_annul_matches` (the
  same reason codes).
- :class:`RatingChanged` (out): one rating change per player per applied match.

JSON Schema files for each live in ``schemas/json/`` and are regenerated with
``python -m schemas.generate`` (``--check`` fails when they are stale).
This package imports pydantic and the standard library only.
"""

from .annul_matches import AnnulMatches
from .match_finished import (
    MAX_MESSAGE_BYTES,
    InvalidMessage,
    MatchFinished,
    PlayerResult,
    SedmaStats,
    Side,
    parse_match_finished,
)
from .parsing import parse_annul_matches
from .rating_changed import RatingChanged

__all__ = [
    "MAX_MESSAGE_BYTES",
    "AnnulMatches",
    "InvalidMessage",
    "MatchFinished",
    "PlayerResult",
    "RatingChanged",
    "SedmaStats",
    "Side",
    "parse_annul_matches",
    "parse_match_finished",
]
