"""Store: what the ledger holds of one organiser's match log (``ratings import`` reconciles with it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row


@dataclass(frozen=True, slots=True)
class StoredLogMatch:
    """One ledger row of an imported log: its ``match_id``, the stored ``payload`` (the canonical
    MatchFinished as a dict), ``order_at`` (its place in the ladder's chronological replay, UTC) and
    whether it is ``annulled``."""

    match_id: str
    payload: dict[str, Any]
    order_at: datetime
    annulled: bool


def log_matches(conn: psycopg.Connection, ladder: str, id_prefix: str) -> list[StoredLogMatch]:
    """The ladder's ledger rows whose ``match_id`` starts with ``id_prefix`` (taken literally: ``%``
    and ``_`` are not wildcards), annulled ones included, in the replay order (``order_at``, then
    ``match_id`` by code point). The caller tells a log's ids from those of a log whose name merely
    starts the same way."""
    pattern = id_prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    with conn.cursor(row_factory=class_row(StoredLogMatch)) as cur:
        return cur.execute(
            'SELECT match_id, payload, order_at, annulled FROM ledger WHERE ladder = %s AND match_id LIKE %s '
            'ORDER BY order_at, match_id COLLATE "C"', (ladder, pattern)).fetchall()
