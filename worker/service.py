"""The worker's own logic for one message: validate, route to a ladder, apply or dead-letter.

Every message ends in exactly one of: applied, duplicate, dead letter (DESIGN.md invariant 3).
"""

from __future__ import annotations

import json
import logging
import traceback
from dataclasses import dataclass
from typing import Any

import psycopg
import stamina
from celery.exceptions import SoftTimeLimitExceeded
from psycopg_pool import ConnectionPool

from engine import RatingPolicy, UnratableMatch
from schemas import InvalidMessage, parse_match_finished
from worker import repository
from worker.faults import FaultInjector
from worker.settings import Settings

log = logging.getLogger(__name__)

TRANSIENT_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)
"""Lost connection, deadlock, serialization failure, lock timeout, pool timeout: all
``psycopg.OperationalError`` subclasses, retried with jittered exponential backoff."""


def _log_retry(details: stamina.instrumentation.RetryDetails) -> None:
    exc = details.caused_by
    log.warning("transient error (%s: %s); retry %d in %.2f s", type(exc).__name__, str(exc).strip(),
                details.retry_num, details.wait_for)


def raw_text(raw: Any) -> str:
    """The message body as text, kept verbatim in a dead letter (JSON text for decoded bodies)."""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bytes | bytearray):
        return raw.decode("utf-8", errors="backslashreplace")
    try:
        return json.dumps(raw, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(raw)


@dataclass(frozen=True, slots=True)
class Handled:
    """What became of one message: ``outcome`` is ``applied``, ``duplicate`` or ``dead_letter``."""

    outcome: str
    reason_code: str | None = None
    match_id: str | None = None
    ladder: str | None = None
    out_of_order: bool = False
    lock_wait_seconds: float | None = None


def open_pool(settings: Settings) -> ConnectionPool:
    """A psycopg connection pool with the worker's session settings (autocommit, timeouts).

    Opened per process (after fork in Celery children), never at import.
    """
    if not settings.database_url:
        raise RuntimeError("RATINGS_DATABASE_URL is not set")
    # force_custom_plan: psycopg prepares repeated statements, and a generic plan made while
    # `players` was small (a sequential scan for the row locks) would otherwise stay in use until an
    # ANALYZE; with autovacuum off that never comes and throughput collapses (seen in the benchmark).
    options = (f"-c lock_timeout={settings.lock_timeout_ms} -c statement_timeout={settings.statement_timeout_ms}"
               " -c plan_cache_mode=force_custom_plan")
    return ConnectionPool(
        settings.database_url,
        min_size=1,
        max_size=settings.pool_max_size,
        kwargs={"autocommit": True, "options": options},
        check=ConnectionPool.check_connection,
        open=True,
        name="ratings",
    )


class RatingService:
    """Applies match-finished messages to the ladders in ``policies`` through ``pool``.

    ``policies`` maps each configured ladder to its policy in the ladders file and ``contents`` to
    that policy's canonical content (:func:`worker.policies.ladder_contents`), which is recorded as
    the ladder's policy in force the first time a match of the ladder is rated. A match is rated
    under the policy in force (:func:`worker.repository.policy_in_force`), which a rebuild switches.
    """

    def __init__(self, pool: ConnectionPool, policies: dict[str, RatingPolicy], settings: Settings,
                 contents: dict[str, dict[str, Any]] | None = None):
        self.pool = pool
        self.policies = policies
        self.contents = contents or {}
        self.settings = settings
        self.faults = FaultInjector(settings.fault_injection)
        stamina.instrumentation.set_on_retry_hooks([_log_retry])

    def _retrying(self):
        return stamina.retry_context(
            on=TRANSIENT_ERRORS,
            attempts=self.settings.max_retries,
            wait_initial=0.05,
            wait_max=2.0,
            wait_jitter=0.1,
            timeout=min(60.0, self.settings.task_time_limit / 2),  # below the soft time limit (80 %)
        )

    def dead_letter(
        self,
        reason_code: str,
        detail: str,
        raw: Any,
        match_id: str | None,
        task_id: str | None,
        content_type: str | None = None,
        headers: dict[str, Any] | None = None,
    ) -> Handled:
        """Record ``raw`` as a dead letter (retrying transient errors); never raises for bad input.

        Returns outcome ``redelivered`` when this task id was dead-lettered before.
        """
        body = raw if isinstance(raw, bytes | bytearray) else raw_text(raw)
        for attempt in self._retrying():
            with attempt, self.pool.connection() as conn:
                new_id = repository.insert_dead_letter(
                    conn, reason_code, detail, body, match_id, task_id, content_type, headers
                )
        if new_id is None:
            return Handled("redelivered", reason_code, match_id)
        log.warning("dead letter %s: %s (match_id=%s)", reason_code, detail, match_id)
        return Handled("dead_letter", reason_code, match_id)

    def handle(self, raw: Any, task_id: str | None = None) -> Handled:
        """Validate and apply one message; see the module docstring for the outcomes.

        Raises ``psycopg.OperationalError`` only when transient database errors outlast the
        retries (the caller then requeues the message).
        """
        try:
            match = parse_match_finished(raw)
        except InvalidMessage as exc:
            return self.dead_letter(exc.reason_code, exc.detail, raw, exc.match_id, task_id)
        policy = self.policies.get(match.ladder)
        if policy is None:
            known = ", ".join(sorted(self.policies)) or "none"
            return self.dead_letter(
                "unknown_ladder",
                f"ladder {match.ladder!r} is not configured (configured ladders: {known}); "
                "add it to the ladders file or fix the message's `ladder`",
                raw,
                match.match_id,
                task_id,
            )
        payload = json.loads(match.canonical_json())
        payload_hash = match.payload_hash()
        try:
            for attempt in self._retrying():
                with attempt, self.pool.connection() as conn:
                    result = repository.apply_match(
                        conn, payload, payload_hash, match.finished_at, policy, task_id,
                        before_commit=self._before_commit, content=self.contents.get(match.ladder),
                    )
        except (*TRANSIENT_ERRORS, SoftTimeLimitExceeded):
            raise
        except UnratableMatch as exc:  # valid message, but this ladder's policy cannot rate it
            return self.dead_letter(exc.reason_code, exc.detail, raw, match.match_id, task_id)
        except Exception as exc:  # a permanent error: keep the message, never retry it
            return self.dead_letter(
                "internal_error",
                f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}",
                raw,
                match.match_id,
                task_id,
            )
        if isinstance(result, repository.Conflict):
            return self.dead_letter(
                "conflicting_duplicate",
                f"match_id {match.match_id!r} was already applied with another payload "
                f"(stored sha256 {result.stored_hash}, this one {payload_hash}); "
                "a match id must never be reused for a different match",
                raw,
                match.match_id,
                task_id,
            )
        if isinstance(result, repository.Duplicate):
            return Handled("duplicate", None, match.match_id)
        if isinstance(result, repository.Redelivered):
            return Handled("redelivered", None, match.match_id)
        self.faults.hit("after_commit")
        return Handled("applied", None, match.match_id, match.ladder, result.out_of_order, result.lock_wait_seconds)

    def _before_commit(self) -> None:
        self.faults.hit("in_transaction")
