"""Store: dead letters (insert with the raw body kept byte for byte, look up, resolve, count)."""

from __future__ import annotations

import base64
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb


def _dead_letter_text(raw_body: str | bytes) -> tuple[str, str]:
    """``raw_body`` as stored: (text, ``utf-8`` or ``base64``)."""
    if isinstance(raw_body, bytes | bytearray):
        try:
            text, encoding = bytes(raw_body).decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(raw_body).decode("ascii"), "base64"
    else:
        text, encoding = raw_body, "utf-8"
    if "\x00" in text:  # PostgreSQL text cannot hold NUL: keep the exact bytes as base64
        text, encoding = base64.b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii"), "base64"
    return text, encoding


def insert_dead_letter(
    conn: psycopg.Connection,
    reason_code: str,
    detail: str,
    raw_body: str | bytes,
    match_id: str | None = None,
    task_id: str | None = None,
    content_type: str | None = None,
    headers: dict[str, Any] | None = None,
) -> int | None:
    """Record a message that will not be applied; return its id, or ``None`` when this task id
    was dead-lettered before (a redelivery: nothing new is recorded).

    ``raw_body`` is kept verbatim: text as is, bytes as UTF-8 text when they decode, else base64
    (``raw_encoding`` says which).
    """
    text, encoding = _dead_letter_text(raw_body)
    with conn.transaction():
        row = conn.execute(
            """
            INSERT INTO dead_letters (reason_code, detail, match_id, raw_body, raw_encoding, task_id,
                                      content_type, headers)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (task_id) WHERE task_id IS NOT NULL DO NOTHING RETURNING id
            """,
            (reason_code, detail.replace("\x00", "\\x00"), match_id, text, encoding, task_id, content_type,
             Jsonb(headers) if headers is not None else None),
        ).fetchone()
    return row[0] if row else None


def dead_letter(conn: psycopg.Connection, dead_letter_id: int) -> dict[str, Any] | None:
    """One dead letter with every column, or ``None``."""
    return conn.cursor(row_factory=dict_row).execute(
        "SELECT * FROM dead_letters WHERE id = %s", (dead_letter_id,)
    ).fetchone()


def resolve_dead_letter(
    conn: psycopg.Connection, dead_letter_id: int, status: str, by: str, requeue_task_id: str | None = None
) -> bool:
    """Mark an open dead letter ``requeued`` or ``discarded`` by ``by`` now; False if not open."""
    row = conn.execute(
        """UPDATE dead_letters SET status = %s, resolved_at = now(), resolved_by = %s, requeue_task_id = %s
            WHERE id = %s AND status = 'open' RETURNING id""",
        (status, by, requeue_task_id, dead_letter_id),
    ).fetchone()
    return row is not None


def dead_letters(
    conn: psycopg.Connection, limit: int = 100, status: str | None = "open", reason_code: str | None = None
) -> list[dict[str, Any]]:
    """Dead letters, newest first, filtered by ``status`` (None: any) and ``reason_code``."""
    return conn.cursor(row_factory=dict_row).execute(
        """SELECT id, received_at, reason_code, status, match_id, detail, raw_body, raw_encoding,
                  resolved_at, resolved_by
             FROM dead_letters
            WHERE (%(status)s::text IS NULL OR status = %(status)s)
              AND (%(reason)s::text IS NULL OR reason_code = %(reason)s)
            ORDER BY id DESC LIMIT %(limit)s""",
        {"status": status, "reason": reason_code, "limit": limit},
    ).fetchall()


def dead_letter_counts(conn: psycopg.Connection, status: str = "open") -> dict[str, int]:
    """Dead letters of ``status`` by reason code."""
    return dict(
        conn.execute(
            "SELECT reason_code, count(*) FROM dead_letters WHERE status = %s GROUP BY 1 ORDER BY 1", (status,)
        ).fetchall()
    )
