"""Store: the connection pool of a worker process, without session state (runs behind PgBouncer, transaction mode)."""

from __future__ import annotations

import threading
import time
import weakref

import psycopg
from psycopg_pool import ConnectionPool

from worker.settings import Settings


def open_pool(settings: Settings) -> ConnectionPool:
    """A psycopg connection pool for the rating path (autocommit connections).

    Server-side prepared statements when ``settings.database_prepared_statements`` (off by
    default): psycopg prepares each statement at its first execution (``prepare_threshold=0``), and
    the rating transaction runs them with generic plans
    (:data:`worker.store.transaction.GENERIC_PLANS`), so a transaction that commits neither parses
    nor plans. Else none (``prepare_threshold=None``: every statement parsed and planned with its
    parameters, the unnamed statement of the extended protocol), as PgBouncer in transaction
    pooling mode before 1.22 needs (a prepared statement lives in one server session, which
    PgBouncer hands to other clients between transactions). Either way no startup ``options``
    (PgBouncer refuses them) and no session settings: the store's rating transaction applies
    ``lock_timeout``, ``statement_timeout``, ``idle_in_transaction_session_timeout`` and the
    server's TCP keepalives with ``SET LOCAL`` (:func:`worker.store.rating.apply_batch`). TCP
    keepalives on the client side come from :func:`keepalive_kwargs`, the bounds on a server that
    stops answering from :func:`silent_server_kwargs`.

    Opened per process (after fork in Celery children), never at import. Raises ``RuntimeError``
    when ``RATINGS_DATABASE_URL`` is not set.
    """
    if not settings.database_url:
        raise RuntimeError("RATINGS_DATABASE_URL is not set")
    return RatingsPool(
        settings.database_url,
        min_size=1,
        max_size=settings.pool_max_size,
        kwargs={"autocommit": True, "prepare_threshold": 0 if settings.database_prepared_statements else None,
                **keepalive_kwargs(settings), **silent_server_kwargs(settings)},
        open=True,
        name="ratings",
    )


def keepalive_kwargs(settings: Settings) -> dict[str, int]:
    """libpq's TCP keepalive parameters from the settings (``keepalives``, ``keepalives_idle``,
    ``keepalives_interval``, ``keepalives_count``; seconds, seconds, probes): a client-side socket
    option, so PgBouncer is no obstacle. A zero setting leaves the system's default."""
    out = {"keepalives": 1}
    for name, value in (("keepalives_idle", settings.db_keepalives_idle),
                        ("keepalives_interval", settings.db_keepalives_interval),
                        ("keepalives_count", settings.db_keepalives_count)):
        if value:
            out[name] = int(value)
    return out


def silent_server_kwargs(settings: Settings) -> dict[str, int]:
    """libpq parameters that bound the wait on a database that stopped answering without closing
    the connection: ``connect_timeout`` (seconds; a frozen server's kernel accepts the connection,
    the startup never completes) and, when set, ``tcp_user_timeout`` (milliseconds of sent data
    left unacknowledged: a vanished host or a cut network mid-query). Client-side, so PgBouncer is
    no obstacle. A frozen server process on a live host acknowledges at the TCP level and is bounded
    by the task time limit instead."""
    out = {"connect_timeout": int(settings.db_connect_timeout)}
    if settings.db_tcp_user_timeout_ms:
        out["tcp_user_timeout"] = int(settings.db_tcp_user_timeout_ms)
    return out


class StaleConnection(Exception):
    """A pooled connection opened before :meth:`RatingsPool.retire_connections` (discarded)."""


RECENTLY_RETURNED_SECONDS = 1.0
"""A pooled connection returned idle (no transaction open) this recently is handed out without the empty-query
check (:meth:`RatingsPool._check`)."""


class RatingsPool(ConnectionPool):
    """A :class:`psycopg_pool.ConnectionPool` that can retire every connection it holds.

    After an error of the environment (a read-only or unmigrated database...), a pooled
    connection may keep stale session state: the ``default_transaction_read_only`` a database
    had when the session started stays for the session's life. :meth:`retire_connections` makes
    the pool discard, when next handed out, every connection opened before the call.
    """

    def __init__(self, *args, **kwargs):
        self._epoch = 0
        self._born: weakref.WeakKeyDictionary[psycopg.Connection, int] = weakref.WeakKeyDictionary()
        self._returned: weakref.WeakKeyDictionary[psycopg.Connection, float] = weakref.WeakKeyDictionary()
        self._epoch_lock = threading.Lock()
        super().__init__(*args, configure=self._stamp, check=self._check, **kwargs)

    def putconn(self, conn: psycopg.Connection) -> None:
        """Return ``conn`` to the pool (as :meth:`psycopg_pool.ConnectionPool.putconn`), noting when."""
        if conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            self._returned[conn] = time.monotonic()
        else:  # in a transaction, or broken: checked when next handed out (if the pool keeps it)
            self._returned.pop(conn, None)
        super().putconn(conn)

    def _stamp(self, conn: psycopg.Connection) -> None:
        with self._epoch_lock:
            self._born[conn] = self._epoch

    def _check(self, conn: psycopg.Connection) -> None:
        with self._epoch_lock:
            stale = self._born.get(conn, -1) != self._epoch
        if stale:  # closed, so the pool drops it (a connection failing the check only goes back otherwise)
            conn.close()
            raise StaleConnection("opened before the last error of the environment")
        # A connection that came back idle (no transaction open) within RECENTLY_RETURNED_SECONDS is handed out as
        # it is: under load a child takes its connection for every batch, and the empty query was
        # one round trip of the dozen a transaction of a few matches makes. If it broke meanwhile
        # (the server restarted), the transaction fails with a lost connection and is retried on a
        # new one (a transient error).
        if time.monotonic() - self._returned.get(conn, float("-inf")) < RECENTLY_RETURNED_SECONDS:
            return
        # ConnectionPool.check_connection's empty query, never prepared (prepare_threshold=0 would
        # prepare it): where prepared statements fail (PgBouncer before 1.22), the rating
        # transaction is the one to report it, as an error of the environment that says what to do
        conn.execute("", prepare=False)

    def retire_connections(self) -> None:
        """Discard every connection opened before now (each when next taken from the pool)."""
        with self._epoch_lock:
            self._epoch += 1


def open_read_pool(database_url: str, max_size: int, connect_timeout: float) -> ConnectionPool:
    """A pool of read-only connections for the read API (``ratings api``): every transaction
    begins ``READ ONLY`` (psycopg's ``read_only``, no session state, so a transaction-mode pooler
    is fine), READ COMMITTED, no server-side prepared statements. ``connect_timeout`` in seconds.
    Opened by the API process at start, never at import; its role's grants are what keeps it from
    writing (the read-only transactions are a second guard)."""

    def configure(conn: psycopg.Connection) -> None:
        conn.read_only = True

    return ConnectionPool(
        database_url, min_size=1, max_size=max_size, open=True, name="ratings-api", configure=configure,
        kwargs={"autocommit": False, "prepare_threshold": None, "connect_timeout": int(connect_timeout)},
    )
