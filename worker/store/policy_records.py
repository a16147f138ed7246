"""Store: recorded policy contents and the ledger's matches per policy version (for ``ratings policy``)."""

from __future__ import annotations

from typing import Any

import psycopg


def policy_content(conn: psycopg.Connection, version: str) -> dict[str, Any] | None:
    """The policy content (the ``policies.content`` JSON object) recorded under ``version``, or ``None``."""
    row = conn.execute("SELECT content FROM policies WHERE version = %s LIMIT 1", (version,)).fetchone()
    return None if row is None else row[0]


def policy_version_in_force(conn: psycopg.Connection, ladder: str) -> str | None:
    """The policy version of the ladder's ``ladders`` row, or ``None`` when none is recorded yet."""
    row = conn.execute("SELECT policy_version FROM ladders WHERE ladder = %s", (ladder,)).fetchone()
    return row[0] if row else None


def ledger_matches_by_policy_version(conn: psycopg.Connection, ladder: str) -> list[tuple[str | None, int]]:
    """``[(policy_version, matches), ...]`` of the ladder's ledger, in the order each version was first
    used (``None``: rows written before policies had versions)."""
    return conn.execute(
        "SELECT policy_version, count(*) FROM ledger WHERE ladder = %s GROUP BY 1 ORDER BY min(seq)",
        (ladder,),
    ).fetchall()
