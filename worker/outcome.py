"""What became of one message: the one outcome type of the store, the service and the metrics.

Every message ends in exactly one of applied, duplicate or dead letter (nothing lost);
a message that already ended once (the same Celery task id delivered again) is ``redelivered``
and counted nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from engine import RatingChange


class Outcome(StrEnum):
    """The outcome of one message; the value is the ``outcome`` label of the metrics and logs."""

    APPLIED = "applied"
    """The match was rated and its changes committed."""
    DUPLICATE = "duplicate"
    """The match id was applied before with the same canonical payload: a counted no-op."""
    DEAD_LETTER = "dead_letter"
    """The message is kept in ``dead_letters`` with ``reason_code`` and its raw body."""
    REDELIVERED = "redelivered"
    """This very message (same task id) already ended in one of the above: nothing counted again."""
    DEFERRED = "deferred"
    """Not ended yet: a player's row was held by another transaction past the wait allowed (or an
    earlier deferred match of the batch shares a player with it); the message is retried later
    with backoff, never dead-lettered for it."""


@dataclass(frozen=True, slots=True)
class Handled:
    """The result of one message.

    ``reason_code`` is set for a dead letter; ``match_id``/``ladder`` when known (the ladder for a
    match that was rated, a duplicate or a redelivery); ``out_of_order`` is true when an applied
    match finished before the last applied match of one of its players; ``seq`` is an applied
    match's place in the ledger and ``changes`` its per-player changes (ratings in rating points);
    a deferred match has ``reason_code`` ``player_locked``.
    """

    outcome: Outcome
    reason_code: str | None = None
    match_id: str | None = None
    ladder: str | None = None
    out_of_order: bool = False
    seq: int | None = None
    changes: tuple[RatingChange, ...] = ()
    blocked_players: tuple[str, ...] = ()
    placed_at_end: bool = False
    """A late match past the correction bound: applied at the end of its players' histories, flagged."""
    rerated: int = 0
    """Stored matches the correction this late match caused re-rated (the earliest late match of its
    ladder in the transaction carries the count)."""
    """A deferred match's players whose rows were held by another transaction (``ladder/player_id``)."""
