"""Store: the consumer gate's dead-letter writer, one autocommit connection of the worker's main
process, opened on first use, reopened after a failure and retried with jittered backoff."""

from __future__ import annotations

from typing import Any

import psycopg
import stamina

from worker.store.dead_letters import insert_dead_letter


class DeadLetterWriter:
    """Writes the dead letters of messages Celery's consumer would drop (an undecodable body, a
    refused content type, an unknown task...), in the worker's main process.

    ``database_url`` is the database to write to; nothing is opened until :meth:`write`. A lost
    connection (``psycopg.OperationalError``) is reopened and the write retried, up to
    ``attempts`` tries within ``timeout`` seconds, with stamina's jittered exponential backoff.
    """

    def __init__(self, database_url: str, *, attempts: int = 5, timeout: float = 30.0) -> None:
        self._url = database_url
        self._attempts = attempts
        self._timeout = timeout
        self._conn: psycopg.Connection | None = None

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self._url, autocommit=True, prepare_threshold=None)
        return self._conn

    def write(self, reason_code: str, detail: str, raw_body: str | bytes, task_id: str | None,
              content_type: str | None, headers: dict[str, Any] | None) -> str | None:
        """Record one dead letter (:func:`worker.store.dead_letters.insert_dead_letter`, no match id).

        Returns ``None`` once it is recorded (or was already, for a redelivered task id), else the
        reason it could not be (the driver's message: the database stayed unreachable through every
        attempt); the caller then leaves the message unacknowledged for the broker to redeliver.
        """
        try:
            for attempt in stamina.retry_context(on=psycopg.OperationalError, attempts=self._attempts,
                                                 timeout=self._timeout):
                with attempt:
                    try:
                        insert_dead_letter(self._connection(), reason_code, detail, raw_body, None, task_id,
                                           content_type, headers)
                    except psycopg.OperationalError:
                        self._conn = None
                        raise
        except psycopg.OperationalError as exc:
            return str(exc).strip() or type(exc).__name__
        return None
