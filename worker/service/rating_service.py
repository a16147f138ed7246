"""The worker's own logic for one message: validate, route to a ladder, apply or dead-letter.

Every message ends in exactly one of: applied, duplicate, dead letter (DESIGN.md invariant 3).
"""

from __future__ import annotations

import hashlib
import json
import logging
import traceback
from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
import stamina
from celery.exceptions import SoftTimeLimitExceeded
from psycopg_pool import ConnectionPool

from engine import RatingPolicy, UnratableMatch
from schemas import InvalidMessage, parse_match_finished
from worker import store as repository
from worker.service.faults import FaultInjector
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


def bad_arguments_detail(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The dead-letter detail of a ``bad_task_arguments`` call."""
    return (f"ratings.apply_match takes exactly one positional argument (the MatchFinished message); got "
            f"{len(args)} positional and keyword arguments {sorted(kwargs)}")


def unknown_ladder_detail(ladder: str, policies: Mapping[str, Any]) -> str:
    """The dead-letter detail of an ``unknown_ladder`` message."""
    known = ", ".join(sorted(policies)) or "none"
    return (f"ladder {ladder!r} is not configured (configured ladders: {known}); "
            "add it to the ladders file or fix the message's `ladder`")


def _handled(entry, result) -> "Handled":
    """The :class:`Handled` of one entry of a batch from its :data:`repository.BatchResult`."""
    if isinstance(entry, repository.BatchDeadLetter):
        match_id, ladder = entry.match_id, None
    else:
        match_id, ladder = entry.payload["match_id"], entry.payload["ladder"]
    if isinstance(result, repository.Applied):
        return Handled("applied", None, match_id, ladder, result.out_of_order)
    if isinstance(result, repository.Duplicate):
        return Handled("duplicate", None, match_id, ladder)
    if isinstance(result, repository.DeadLettered):
        return Handled("dead_letter", result.reason_code, match_id, ladder)
    return Handled("redelivered", None, match_id, ladder)


@dataclass(frozen=True, slots=True)
class Handled:
    """What became of one message: ``outcome`` is ``applied``, ``duplicate`` or ``dead_letter``."""

    outcome: str
    reason_code: str | None = None
    match_id: str | None = None
    ladder: str | None = None
    out_of_order: bool = False
    lock_wait_seconds: float | None = None


class RatingService:
    """Applies match-finished messages to the ladders in ``policies`` through ``pool``.

    ``policies`` maps each configured ladder to its policy in the ladders file and ``contents`` to
    that policy's canonical content (:func:`worker.policy.stored.ladder_contents`), which is recorded as
    the ladder's policy in force the first time a match of the ladder is rated. A match is rated
    under the policy in force (:func:`worker.store.policy_in_force`), which a rebuild switches.
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

    def handle_call(self, args: Sequence[Any], kwargs: Mapping[str, Any], task_id: str | None) -> Handled:
        """Handle one ``ratings.apply_match`` call: its single positional argument is the message;
        any other call shape is kept as a ``bad_task_arguments`` dead letter. Raises as :meth:`handle`."""
        if len(args) != 1 or kwargs:
            return self.dead_letter("bad_task_arguments", bad_arguments_detail(args, kwargs),
                                    {"args": list(args), "kwargs": dict(kwargs)}, None, task_id)
        return self.handle(args[0], task_id)

    def _batch_entry(self, args: Sequence[Any], kwargs: Mapping[str, Any], task_id: str | None) -> repository.BatchEntry:
        """Validate one call of a batch (no I/O): a match to apply, or the dead letter it becomes."""
        if len(args) != 1 or kwargs:
            return repository.BatchDeadLetter("bad_task_arguments", bad_arguments_detail(args, kwargs),
                                              raw_text({"args": list(args), "kwargs": dict(kwargs)}), None, task_id)
        raw = args[0]
        try:
            match = parse_match_finished(raw)
        except InvalidMessage as exc:
            body = raw if isinstance(raw, bytes | bytearray) else raw_text(raw)
            return repository.BatchDeadLetter(exc.reason_code, exc.detail, body, exc.match_id, task_id)
        policy = self.policies.get(match.ladder)
        if policy is None:
            return repository.BatchDeadLetter("unknown_ladder", unknown_ladder_detail(match.ladder, self.policies),
                                              raw_text(raw), match.match_id, task_id)
        canonical = match.canonical_json()  # once: payload_hash() would serialize it again
        return repository.BatchMatch(json.loads(canonical), hashlib.sha256(canonical).hexdigest(), match.finished_at,
                                     policy, task_id, raw_text(raw), canonical.decode("utf-8"),
                                     self.contents.get(match.ladder))

    def handle_batch(self, calls: Sequence[tuple[str | None, Sequence[Any], Mapping[str, Any]]],
                     handled: list[Handled | None]) -> float | None:
        """Handle a batch of ``(task_id, args, kwargs)`` calls in queue order, in one transaction.

        ``handled`` (as long as ``calls``) is filled in place as outcomes are committed: an entry
        left ``None`` was not handled and its message must be requeued. Every call is validated
        first (a bad one becomes a dead letter in the batch's transaction, on its own); the batch
        is then applied by :func:`repository.apply_batch`, retrying transient errors with backoff.
        If the batch transaction fails for a permanent reason (a bug, or data the engine rejects),
        the calls are handled one by one (:meth:`handle_call`), so only the culprit becomes an
        ``internal_error`` dead letter. Returns the lock wait of the batch in seconds (None when
        nothing was applied in one transaction).

        Raises ``psycopg.OperationalError``/``InterfaceError`` when transient errors outlast the
        retries, and ``SoftTimeLimitExceeded``; entries filled before stay valid.
        """
        entries = [self._batch_entry(args, kwargs, task_id) for task_id, args, kwargs in calls]
        try:
            for attempt in self._retrying():
                with attempt, self.pool.connection() as conn:
                    results, lock_wait = self._apply_batch_once(conn, entries)
        except (*TRANSIENT_ERRORS, SoftTimeLimitExceeded):
            raise
        except Exception:  # a permanent error: find the culprit by applying the calls one by one
            log.exception("batch of %d failed for a permanent reason; applying its messages one by one", len(calls))
            for i, (task_id, args, kwargs) in enumerate(calls):
                handled[i] = self.handle_call(args, kwargs, task_id)
            return None
        for i, (entry, result) in enumerate(zip(entries, results)):
            handled[i] = _handled(entry, result)
            if isinstance(result, repository.DeadLettered):
                log.warning("dead letter %s (match_id=%s)", result.reason_code,
                            entry.match_id if isinstance(entry, repository.BatchDeadLetter) else entry.payload["match_id"])
        self.faults.hit("after_commit")
        return lock_wait

    def _apply_batch_once(self, conn, entries):
        """One try of the batch transaction; a lost race on a match id (:class:`repository.LedgerRace`)
        is classified again at once, up to 5 times."""
        for _ in range(5):
            try:
                return repository.apply_batch(conn, entries, before_commit=self._before_commit)
            except repository.LedgerRace as exc:
                log.info("batch lost a race on a match id (%s); classifying it again", exc)
        raise RuntimeError("the batch lost the race on a match id 5 times in a row")

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
            return self.dead_letter(
                "unknown_ladder",
                unknown_ladder_detail(match.ladder, self.policies),
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
                repository.conflict_detail(match.match_id, result.stored_hash, payload_hash),
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
