"""Store: rating-changed events and the transactional outbox (event ids, event rows, claim and mark published)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
import psycopg
from pydantic import TypeAdapter

from engine import RatingChange
from schemas import RatingChanged

OUTBOX_CHANNEL = "ratings_outbox"

log = logging.getLogger(__name__)


EVENT_NAMESPACE = uuid.UUID("7d1c8f0e-3b7a-5c38-9a51-6f3e2b0d4c11")


REBUILD_EVENT_NAMESPACE = uuid.uuid5(EVENT_NAMESPACE, "rebuild")


def event_id_for(match_id: str, player_id: str) -> uuid.UUID:
    """Deterministic event id of the rating change of ``player_id`` in ``match_id`` (UUIDv5)."""
    return uuid.uuid5(EVENT_NAMESPACE, f"{match_id}\x1f{player_id}")


def rebuild_event_id(rebuild_id: int, player_id: str) -> uuid.UUID:
    """Deterministic event id of the ``rebuild`` event of ``player_id`` in rebuild ``rebuild_id``
    (UUIDv5 in a namespace of its own, so it never equals a match's :func:`event_id_for`)."""
    return uuid.uuid5(REBUILD_EVENT_NAMESPACE, f"{rebuild_id}\x1f{player_id}")


CORRECTION_EVENT_NAMESPACE = uuid.uuid5(EVENT_NAMESPACE, "correction")


def correction_event_id(correction_id: int, player_id: str) -> uuid.UUID:
    """Deterministic event id of the ``correction`` event of ``player_id`` in correction
    ``correction_id`` (UUIDv5 in a namespace of its own)."""
    return uuid.uuid5(CORRECTION_EVENT_NAMESPACE, f"{correction_id}\x1f{player_id}")


RATING_CHANGED_EVENTS = TypeAdapter(list[RatingChanged])
"""Validates many :class:`schemas.RatingChanged` events in one call (cheaper than one by one)."""


def rating_changed_json(events: list[dict[str, Any]]) -> list[str]:
    """Validate ``events`` (field dicts of :class:`schemas.RatingChanged`, ``event_id`` a UUID or its
    text, ``occurred_at`` ISO 8601 text with offset) as the contract, all at once; return each
    event's compact JSON text, the outbox payload, in the same order.

    The text written is that of the validated fields as given (so ``occurred_at`` keeps its
    ``+00:00`` offset, where pydantic's own serializer would write ``Z``): the same JSON as before
    the events were typed. Raises :class:`pydantic.ValidationError` when one event breaks the
    contract (the rating transaction then rolls back).

    Written by orjson (compact, UTF-8 as is, floats in their shortest round-trip form, which may
    write an exponent other than Python's ``repr``: ``0.00001`` for ``1e-05``; the outbox stores
    the value as ``jsonb``, so only the value counts). Validation comes first, so no NaN reaches
    orjson (which would write ``null``). A value orjson cannot write as the JSON type the contract
    gives (a ``float`` subclass such as ``numpy.float64``, a ``Decimal``, an integer beyond 64
    bits) raises ``orjson.JSONEncodeError`` (a ``TypeError``) rather than being written as a
    string.
    """
    RATING_CHANGED_EVENTS.validate_python(events)
    dumps = orjson.dumps
    return [dumps(e).decode() for e in events]


def _event_row(reason: str, event_id: Any, match_id: str, ladder: str, player_id: str, rating_before: float,
               rating_after: float, change: RatingChange, sequence: int, games_played: int, out_of_order: bool,
               occurred: str) -> dict[str, Any]:
    """The field dict of one RatingChanged v1 event (``change`` gives expected score, actual score
    and K-factor; the ratings are given, as a correction's differ from the change's), with the
    deviation and volatility before and after of a model with uncertainty (:func:`model_fields`)."""
    row = {
        "schema_version": 1, "event_id": str(event_id), "reason": reason, "match_id": match_id, "ladder": ladder,
        "player_id": player_id, "rating_before": rating_before, "rating_after": rating_after,
        "delta": rating_after - rating_before, "expected_score": change.expected_score,
        "actual_score": change.actual_score, "k_factor": change.k_factor, "sequence": sequence,
        "games_played": games_played, "out_of_order": out_of_order, "occurred_at": occurred,
    }
    if change.deviation_after is not None:
        row.update(model_fields(change))
    return row


MODEL_FIELDS = ("deviation_before", "deviation_after", "volatility_before", "volatility_after")
"""The optional fields of a RatingChanged event on a ladder of a model with uncertainty."""


def model_fields(change: RatingChange) -> dict[str, float]:
    """The :data:`MODEL_FIELDS` of ``change`` that are not ``None``: an Elo change has none, so an
    Elo event has exactly the fields it had before these existed."""
    return {name: value for name in MODEL_FIELDS if (value := getattr(change, name)) is not None}


def match_events_json(events: Sequence[dict[str, Any]], occurred_at: datetime) -> list[str]:
    """The RatingChanged v1 events (reason ``match``) of a rating transaction, validated, as JSON text.

    Each item of ``events`` has ``event_id`` (UUID), ``match_id``, ``ladder``, ``change`` (an
    :class:`engine.RatingChange`, ratings in rating points), ``sequence`` (the player's event
    sequence: games played + rebuild events), ``games_played`` (the player's matches on the ladder
    including this one) and ``out_of_order``; ``occurred_at`` is the transaction's time (aware).
    Raises :class:`pydantic.ValidationError` as :func:`rating_changed_json`.
    """
    occurred = occurred_at.isoformat()
    return rating_changed_json([
        _event_row("match", e["event_id"], e["match_id"], e["ladder"], e["change"].player_id,
                   e["change"].rating_before, e["change"].rating_after, e["change"], e["sequence"],
                   e["games_played"], e["out_of_order"], occurred)
        for e in events])


def correction_events_json(events: Sequence[dict[str, Any]], occurred_at: datetime) -> list[str]:
    """The RatingChanged v1 events (reason ``correction``) of a rating transaction that placed a late
    match: one per player whose stored rating the correction changed, validated, as JSON text.

    Each item has ``event_id``, ``match_id`` (the player's last re-rated match), ``ladder``,
    ``player_id``, ``rating_before`` (the rating last announced to consumers), ``rating_after`` (the
    stored rating now), ``change`` (the :class:`engine.RatingChange` of that last re-rated match:
    expected score, actual score, K-factor), ``sequence`` and ``games_played``.
    Raises :class:`pydantic.ValidationError` as :func:`rating_changed_json`.
    """
    occurred = occurred_at.isoformat()
    rows = [_correction_row(e, occurred) for e in events]
    return rating_changed_json(rows) if rows else []


def _correction_row(e: dict[str, Any], occurred: str) -> dict[str, Any]:
    """A correction event's field dict. On a ladder of a model with uncertainty it carries the
    player's stored state after the correction (``deviation_after``, ``volatility_after``, from the
    item's ``standing``), not the last re-rated change's: like ``rating_after``, it is what the
    player holds now. The before fields are left out: no earlier event's state is kept to state them."""
    row = _event_row("correction", e["event_id"], e["match_id"], e["ladder"], e["player_id"], e["rating_before"],
                     e["rating_after"], e["change"], e["sequence"], e["games_played"], False, occurred)
    for name in MODEL_FIELDS:
        row.pop(name, None)
    standing = e.get("standing")
    if standing is not None and standing.deviation is not None:
        row["deviation_after"] = standing.deviation
        if standing.volatility is not None:
            row["volatility_after"] = standing.volatility
    return row


def event_payloads_json(payload: str) -> str:
    """The stream's text of an outbox payload, from its ``jsonb`` text (``payload::text``): made
    compact by orjson (decoded and written again, as :func:`rating_changed_json` writes; a fifth of
    the standard library's time to decode). A text orjson cannot take (a number beyond the float
    range, such as ``1e400``, which ``jsonb`` returns as a 401-digit integer; nesting deeper than
    orjson's 254 levels) goes as it is, ``jsonb``'s own valid JSON, so that no row stops the relay,
    with a warning logged (no writer of the service makes such a row). Integers outside
    [-2**63, 2**64) are written as floats (no field of the contract holds one: its integers are
    counts)."""
    try:
        return orjson.dumps(orjson.loads(payload)).decode()
    except (orjson.JSONDecodeError, orjson.JSONEncodeError) as exc:
        log.warning("an outbox payload orjson cannot take (%s) goes to the stream as its jsonb text: %.200s",
                    exc, payload)
        return payload


def take_unpublished(conn: psycopg.Connection, limit: int) -> list[tuple[int, str, str]]:
    """Take up to ``limit`` unpublished outbox events, in one statement: lock their rows of
    ``outbox_pending`` (``SKIP LOCKED``: relays may run in parallel), delete them, and return the
    events ``(id, event_id, payload)`` in outbox order; the outbox rows themselves are only read.

    Must run inside a transaction, committed once the events are on the stream: a relay that
    fails before the commit rolls the delete back, and the events are taken again (at least once).
    Each part goes by index, whatever the size of the outbox and the dead rows of ``outbox_pending``:
    the ids are taken as an array (``= ANY(ARRAY(...))``, not ``IN``, which planned a hash join over
    the whole pending table) and each event is read by its id (the claim before this one
    merge-joined from the outbox's first row, a cost growing with the outbox until it was pruned).
    Each payload comes as its ``jsonb`` text, for :func:`event_payloads_json`.
    """
    return conn.execute(
        """WITH taken AS (DELETE FROM outbox_pending
                           WHERE id = ANY(ARRAY(SELECT id FROM outbox_pending ORDER BY id LIMIT %s
                                                   FOR UPDATE SKIP LOCKED))
                          RETURNING id)
           SELECT o.id, o.event_id::text, o.payload::text FROM taken JOIN outbox o ON o.id = taken.id ORDER BY o.id""",
        (limit,),
    ).fetchall()


RELAY_LOCK_KEY = 0x5241_5449_4E47  # "RATING"
"""Key of the session advisory lock the active relay holds (``pg_try_advisory_lock``): one active relay,
the others on standby."""


def try_relay_leadership(conn: psycopg.Connection) -> bool:
    """Take the active relay's session advisory lock on ``conn``; False when another relay holds it."""
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (RELAY_LOCK_KEY,)).fetchone()
    return bool(row and row[0])


def listen_outbox(conn: psycopg.Connection) -> None:
    """``LISTEN`` on the channel the rating transaction notifies after writing outbox rows."""
    conn.execute(f"LISTEN {OUTBOX_CHANNEL}")
