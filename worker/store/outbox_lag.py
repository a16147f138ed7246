"""Store: how far the outbox relay is behind (age and count of unpublished events), one query for every caller."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg


@dataclass(frozen=True, slots=True)
class OutboxLag:
    """Unpublished outbox rows: ``unpublished`` (count), ``oldest_seconds`` (age of the oldest one in
    seconds, 0.0 when none), ``older_than_limit`` (count of those older than the limit asked for)."""

    unpublished: int
    oldest_seconds: float
    older_than_limit: int


def outbox_lag(conn: psycopg.Connection, limit_seconds: float = 0.0) -> OutboxLag:
    """The outbox's lag now: events not yet published (``outbox_pending``), the age of the oldest (seconds, from
    ``created_at``; 0.0 when the outbox is drained) and how many are older than ``limit_seconds``.

    Used by the relay's lag gauge, the worker's metrics and ``ratings doctor``.
    """
    row = conn.execute(
        """SELECT count(*),
                  coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8,
                  count(*) FILTER (WHERE created_at < now() - make_interval(secs => %s))
             FROM outbox_pending p JOIN outbox o ON o.id = p.id""",
        (limit_seconds,),
    ).fetchone()
    assert row is not None  # an aggregate always returns one row
    return OutboxLag(unpublished=row[0], oldest_seconds=float(row[1]), older_than_limit=row[2])
