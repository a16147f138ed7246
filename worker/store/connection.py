"""Store: one database connection for operator commands and tools, and the driver errors their callers catch."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg.errors

DatabaseError = psycopg.Error
"""Any database failure (the driver's base error class)."""

DatabaseUnreachable = psycopg.OperationalError
"""The server cannot be reached or the connection broke (``psycopg.OperationalError``)."""

TRANSIENT_DATABASE_ERRORS: tuple[type[Exception], ...] = (psycopg.OperationalError, psycopg.InterfaceError,
                                                          psycopg.errors.IdleInTransactionSessionTimeout)
"""Errors worth retrying: lost connection, deadlock, serialization failure, lock or pool timeout,
and a session the server ended because its transaction sat idle past
``idle_in_transaction_session_timeout`` (a frozen worker: nothing of it committed)."""

class ConnectionLost(psycopg.OperationalError):
    """The connection broke under an error of another class (through PgBouncer, a server ending the
    session mid-transaction reaches the client as ``InternalError: received 2 results from command
    'COMMIT'``): transient like any lost connection, never a reason to dead-letter a message."""


def raise_if_connection_lost(conn: psycopg.Connection, exc: psycopg.Error) -> None:
    """Raise :class:`ConnectionLost` (from ``exc``) when ``exc`` is not already transient and
    ``conn`` is broken (the connection, not the data, failed); else return."""
    if not isinstance(exc, TRANSIENT_DATABASE_ERRORS) and conn.broken:
        raise ConnectionLost(f"connection lost ({type(exc).__name__}: {str(exc).strip()})") from exc


def scalar(cursor: psycopg.Cursor[Any]) -> Any:
    """The first column of the first row of ``cursor``'s result, for a statement that always returns
    one row (an aggregate, a function call, ``INSERT ... RETURNING`` of one row). Raises
    ``LookupError`` when it returned none (psycopg types every ``fetchone()`` as optional)."""
    row = cursor.fetchone()
    if row is None:
        raise LookupError("the statement returned no row")
    return row[0]


NotMigrated = psycopg.errors.UndefinedTable
"""A table the store needs does not exist yet: run ``ratings migrate``."""

Connection = psycopg.Connection
"""The connection type the store's functions take (``psycopg.Connection``)."""


def connect(database_url: str, *, autocommit: bool = False, connect_timeout: float | None = None) -> psycopg.Connection:
    """Open one connection to ``database_url`` (use it as a context manager: closed on exit, and
    committed on a clean exit unless ``autocommit``). ``connect_timeout`` in seconds (``None``: the
    driver's default). No server-side prepared statements (``prepare_threshold=None``), so the URL
    may point at PgBouncer in transaction mode. Raises :data:`DatabaseUnreachable` when the server
    does not answer."""
    kwargs: dict[str, object] = {"autocommit": autocommit, "prepare_threshold": None}
    if connect_timeout is not None:
        kwargs["connect_timeout"] = int(connect_timeout)
    return psycopg.connect(database_url, **kwargs)  # type: ignore[arg-type]


@contextmanager
def snapshot(conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """One ``REPEATABLE READ`` transaction on ``conn``: every read inside sees the same snapshot while
    workers keep committing (as ``verify`` reads the ledger and the stored ratings). ``conn`` must not
    be inside a transaction; its isolation level is restored on exit."""
    saved = conn.isolation_level
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    try:
        with conn.transaction():
            yield conn
    finally:
        conn.isolation_level = saved


def database_reachable(database_url: str, timeout: float = 3.0) -> str:
    """``"ok"`` when ``SELECT 1`` answers within ``timeout`` seconds, else the error's class name
    (for readiness reports)."""
    try:
        with connect(database_url, connect_timeout=timeout) as conn:
            conn.execute("SELECT 1")
        return "ok"
    except psycopg.Error as exc:
        return type(exc).__name__
