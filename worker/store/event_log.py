"""Store: the read path consumers backfill from (events kept in the outbox, current ratings) and outbox retention."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.rows import dict_row


def read_events(conn: psycopg.Connection, ladder: str | None = None, player_id: str | None = None,
                after_sequence: int = 0, batch: int = 5000) -> Iterator[dict[str, Any]]:
    """Yield the RatingChanged events the outbox keeps (published or not), as dicts exactly as the
    relay publishes them, filtered by ``ladder`` and ``player_id`` when given, with ``sequence >
    after_sequence``; ordered by ladder, player, sequence (each player's events in order).

    Events older than the retention (``ratings outbox prune``) are gone: a consumer that finds the
    first returned sequence above ``after_sequence + 1`` takes :func:`read_snapshot` instead.
    Read-only (works under the read-only backfill role); streams with a server-side cursor.
    """
    sql = ["SELECT payload FROM outbox WHERE (payload->>'sequence')::int > %s"]
    params: list[Any] = [after_sequence]
    if ladder is not None:
        sql.append("AND payload->>'ladder' = %s")
        params.append(ladder)
    if player_id is not None:
        sql.append("AND payload->>'player_id' = %s")
        params.append(player_id)
    sql.append("ORDER BY payload->>'ladder', payload->>'player_id', (payload->>'sequence')::int, id")
    with conn.transaction(), conn.cursor(name="read_events") as cur:
        cur.itersize = batch
        cur.execute(" ".join(sql), params)
        yield from (row[0] for row in cur)


def read_snapshot(conn: psycopg.Connection, ladder: str | None = None,
                  player_id: str | None = None) -> list[dict[str, Any]]:
    """Each player's current state: ``ladder``, ``player_id``, ``rating`` (rating points),
    ``games_played`` and ``sequence`` (the sequence of the player's last event: games played plus
    rebuild events), filtered by ``ladder`` and ``player_id`` when given, ordered by ladder, player.
    """
    sql = ["SELECT ladder, player_id, rating, games_played, games_played + rebuild_events AS sequence "
           "FROM players WHERE games_played + rebuild_events > 0"]
    params: list[Any] = []
    if ladder is not None:
        sql.append("AND ladder = %s")
        params.append(ladder)
    if player_id is not None:
        sql.append("AND player_id = %s")
        params.append(player_id)
    sql.append("ORDER BY ladder, player_id")
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(" ".join(sql), params).fetchall()


def prune_outbox(conn: psycopg.Connection, older_than_seconds: float) -> int:
    """Delete published outbox events written more than ``older_than_seconds`` ago (``created_at``;
    the relay publishes an event moments after it is written); return how many. Unpublished events
    (a row in ``outbox_pending``) are never deleted: the relay still has to publish them."""
    cur = conn.execute(
        """DELETE FROM outbox o
            WHERE o.created_at < now() - make_interval(secs => %s)
              AND NOT EXISTS (SELECT 1 FROM outbox_pending p WHERE p.id = o.id)""",
        (older_than_seconds,),
    )
    return cur.rowcount


def oldest_kept_event(conn: psycopg.Connection) -> Any:
    """``created_at`` of the oldest event the outbox keeps (None when empty): how far back a backfill reaches."""
    row = conn.execute("SELECT min(created_at) FROM outbox").fetchone()
    return row[0] if row else None
