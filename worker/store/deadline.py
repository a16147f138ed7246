"""Store: a client-side deadline on the calls a long-lived connection makes (the outbox relay's).

A PostgreSQL that freezes (a paused VM, SIGSTOP) keeps its sockets open and its kernel keeps
acknowledging TCP, so neither keepalives nor ``tcp_user_timeout`` fire, and ``statement_timeout``
runs on the frozen server: a call blocks until the server resumes. ``Connection.cancel()`` does not
help either, since it asks the postmaster, which is frozen too.

:class:`CallDeadline` is a watchdog thread: when a watched call outlasts its deadline, it shuts the
connection's socket down (``shutdown(2)``, which wakes a thread blocked on that socket, unlike
``close``, which would free the descriptor for reuse while libpq still holds it). libpq then reads
end-of-file and the call raises ``psycopg.OperationalError`` ("server closed the connection
unexpectedly"), the error of a lost connection that callers already retry by reconnecting.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg.conninfo import conninfo_to_dict

log = logging.getLogger(__name__)


def database_label(database_url: str) -> str:
    """``"<dbname> at <host>:<port>"`` of ``database_url`` for log lines (no user, no password)."""
    params = conninfo_to_dict(database_url)
    host = params.get("host") or params.get("hostaddr") or "localhost"
    return f"{params.get('dbname') or '(default)'} at {host}:{params.get('port') or 5432}"


class CallDeadline:
    """Give up a database call that does not answer within ``seconds`` (seconds, > 0).

    ``with deadline.watching(conn):`` around calls on ``conn``; ``with deadline.suspended():``
    inside it around work of another kind (a Redis pipeline with its own timeout). When a call
    outlasts ``seconds``, its socket is shut down (the call raises ``psycopg.OperationalError``)
    and one WARNING naming ``database`` (a label, see :func:`database_label`), ``who`` and the
    bound is logged; further expiries during the same outage log at DEBUG; the next watched call
    that ends in time logs one INFO that the database answers again. One instance serves one
    thread's calls at a time (the watchdog is a daemon thread started on first use).
    """

    def __init__(self, seconds: float, database: str, who: str = "the relay") -> None:
        if seconds <= 0:
            raise ValueError(f"deadline must be positive, got {seconds!r} s")
        self.seconds = seconds
        self.database = database
        self.who = who
        self.silent = False
        """True from an expiry until a watched call ends in time again (the outage, as seen here)."""
        self._cond = threading.Condition()
        self._sock: socket.socket | None = None
        """A duplicate of the watched connection's socket, held from :meth:`watching`'s start to
        its end: the watchdog shuts this one down, so it never touches a descriptor number that
        libpq closed and another connection of the process reused meanwhile."""
        self._armed = False
        self._expires_at = 0.0
        self._expired = False
        self._thread: threading.Thread | None = None

    @contextmanager
    def watching(self, conn: psycopg.Connection) -> Iterator[CallDeadline]:
        """Watch the calls made on ``conn`` inside the block, each against ``seconds`` from the
        block's start (or from the end of the last :meth:`suspended`). Re-raises what the block
        raises: a call given up raises ``psycopg.OperationalError``."""
        # duplicated here, by the thread that owns the connection; shutdown(2) on the duplicate acts
        # on the socket both descriptors name
        sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
        with self._cond:
            self._sock = sock
        self._arm()
        try:
            yield self
        finally:
            self._disarm()
            with self._cond:
                self._sock = None
            sock.close()
        self._answered()

    @contextmanager
    def suspended(self) -> Iterator[None]:
        """Inside :meth:`watching`: no deadline for the block; the next call gets a fresh one."""
        self._disarm()
        try:
            yield
        finally:
            self._arm()

    def _arm(self) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="database-deadline", daemon=True)
                self._thread.start()
            self._armed, self._expires_at, self._expired = True, time.monotonic() + self.seconds, False
            self._cond.notify()

    def _disarm(self) -> None:
        # Under the lock: once this returns the watchdog no longer gives the call up.
        with self._cond:
            self._armed = False

    def _answered(self) -> None:
        with self._cond:
            back = self.silent and not self._expired
            if back:
                self.silent = False
        if back:
            log.info("the database %s answers %s again", self.database, self.who)

    def _watch(self) -> None:
        with self._cond:
            while True:
                if not self._armed or self._sock is None:
                    self._cond.wait()
                    continue
                remaining = self._expires_at - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                self._give_up(self._sock)
                self._armed, self._expired = False, True

    def _give_up(self, sock: socket.socket) -> None:
        level = logging.DEBUG if self.silent else logging.WARNING
        self.silent = True
        log.log(level, "the database %s did not answer %s within %s s (frozen or cut off?); "
                "giving the connection up and reconnecting with backoff", self.database, self.who, self.seconds)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError as exc:  # already closed by the peer
            log.debug("shutting the database socket down failed: %s", exc)
