"""Store: rating-changed events and the transactional outbox (event ids, event rows, claim and mark published)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg

from engine import RatingChange

OUTBOX_CHANNEL = "ratings_outbox"


EVENT_NAMESPACE = uuid.UUID("7d1c8f0e-3b7a-5c38-9a51-6f3e2b0d4c11")


REBUILD_EVENT_NAMESPACE = uuid.uuid5(EVENT_NAMESPACE, "rebuild")


def event_id_for(match_id: str, player_id: str) -> uuid.UUID:
    """Deterministic event id of the rating change of ``player_id`` in ``match_id`` (UUIDv5)."""
    return uuid.uuid5(EVENT_NAMESPACE, f"{match_id}\x1f{player_id}")


def rebuild_event_id(rebuild_id: int, player_id: str) -> uuid.UUID:
    """Deterministic event id of the ``rebuild`` event of ``player_id`` in rebuild ``rebuild_id``
    (UUIDv5 in a namespace of its own, so it never equals a match's :func:`event_id_for`)."""
    return uuid.uuid5(REBUILD_EVENT_NAMESPACE, f"{rebuild_id}\x1f{player_id}")


def match_event(event_id: uuid.UUID, match_id: str, ladder: str, change: RatingChange, sequence: int,
                games_played: int, out_of_order: bool, occurred_at: str) -> dict[str, Any]:
    """The RatingChanged v1 event (reason ``match``) of one player's ``change`` in one applied match.

    ``sequence`` is the player's event sequence (games played + rebuild events), ``games_played``
    the player's matches on the ladder including this one; ``occurred_at`` ISO 8601 text.
    """
    return {
        "schema_version": 1,
        "event_id": str(event_id),
        "reason": "match",
        "match_id": match_id,
        "ladder": ladder,
        "player_id": change.player_id,
        "rating_before": change.rating_before,
        "rating_after": change.rating_after,
        "delta": change.delta,
        "expected_score": change.expected_score,
        "actual_score": change.actual_score,
        "k_factor": change.k_factor,
        "sequence": sequence,
        "games_played": games_played,
        "out_of_order": out_of_order,
        "occurred_at": occurred_at,
    }


def event_payloads_json(payload: Any) -> str:
    """Compact JSON text of an outbox payload, as written to the stream."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def claim_unpublished(conn: psycopg.Connection, limit: int) -> list[tuple[int, str, Any]]:
    """Lock up to ``limit`` unpublished outbox rows (``SKIP LOCKED``: relays may run in parallel).

    Must run inside a transaction; returns ``(id, event_id, payload)`` in outbox order.
    """
    return conn.execute(
        """SELECT id, event_id::text, payload FROM outbox WHERE published_at IS NULL
            ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED""",
        (limit,),
    ).fetchall()


def mark_published(conn: psycopg.Connection, ids: Sequence[int]) -> None:
    """Mark outbox rows published (inside the transaction that claimed them)."""
    conn.execute("UPDATE outbox SET published_at = now() WHERE id = ANY(%s)", (list(ids),))
