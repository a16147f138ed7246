"""Optional backfill straight from PostgreSQL (psycopg; use a read-only role: ``docs/downstream/backfill.md``)."""

from __future__ import annotations

from typing import Any

from worker.store.connection import connect
from worker.store.event_log import read_events, read_snapshot


class DatabaseBackfill:
    """:class:`worker.consumer.Backfill` by direct read-only queries on ``database_url``
    (one connection per call). Raises :class:`psycopg.OperationalError` when unreachable."""

    def __init__(self, database_url: str):
        self.database_url = database_url
        self.calls = 0

    def events(self, ladder: str | None = None, player_id: str | None = None,
               after_sequence: int = 0) -> list[dict[str, Any]]:
        self.calls += 1
        with connect(self.database_url, autocommit=True) as conn:
            return list(read_events(conn, ladder, player_id, after_sequence))

    def snapshot(self, ladder: str | None = None, player_id: str | None = None) -> list[dict[str, Any]]:
        self.calls += 1
        with connect(self.database_url, autocommit=True) as conn:
            return read_snapshot(conn, ladder, player_id)
