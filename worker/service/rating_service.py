"""The rating use case: validate each message, apply them in the store in one transaction, record the outcome.

Every message ends in exactly one of: applied, duplicate, dead letter (nothing lost).
One path for one message and for a batch: a single message is a batch of one, and so is each
message of a batch retried alone after a permanent failure. No Celery here: the caller (the task
or the batching job) says which exceptions interrupt the work (``interrupts``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

import stamina

from engine import UnratableMatch
from schemas import InvalidMessage, parse_annul_matches, parse_match_finished
from worker import store as repository
from worker.outcome import Handled, Outcome
from worker.policy.shapes import REASON_CODE as SHAPE_REASON_CODE
from worker.policy.shapes import match_side_sizes
from worker.service.environment import EnvironmentNotReady, environment_reason
from worker.service.faults import FaultInjector
from worker.settings import Settings
from worker.store.connection import TRANSIENT_DATABASE_ERRORS
from worker.store.ladders import LadderPolicy
from worker.store.pool import ConnectionPool
from worker.store.schema import ENVIRONMENT_DATABASE_ERRORS, environment_detail

log = logging.getLogger(__name__)

TRANSIENT_ERRORS = TRANSIENT_DATABASE_ERRORS
"""Lost connection, deadlock, serialization failure, lock timeout, pool timeout: all
``psycopg.OperationalError`` subclasses, retried with jittered exponential backoff."""

Call = tuple[str | None, Sequence[Any], Mapping[str, Any]]
"""One ``ratings.apply_match`` call as the worker received it: ``(task_id, args, kwargs)``."""


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


def raw_body(raw: Any) -> str | bytes:
    """What a dead letter keeps of ``raw``: bytes as they came, anything else as :func:`raw_text`."""
    return bytes(raw) if isinstance(raw, bytes | bytearray) else raw_text(raw)


ANNUL_TASK = "ratings.annul_matches"
"""The task name of an annulment message (what game backends send, :func:`worker.producer.publish_annulment`)."""


def bad_arguments_detail(args: Sequence[Any], kwargs: Mapping[str, Any], task: str = "ratings.apply_match",
                         message: str = "MatchFinished") -> str:
    """The dead-letter detail of a ``bad_task_arguments`` call."""
    return (f"{task} takes exactly one positional argument (the {message} message); got "
            f"{len(args)} positional and keyword arguments {sorted(kwargs)}")


def unknown_ladder_detail(ladder: str, policies: Mapping[str, Any]) -> str:
    """The dead-letter detail of an ``unknown_ladder`` message."""
    known = ", ".join(sorted(policies)) or "none"
    return (f"ladder {ladder!r} is not configured (configured ladders: {known}); "
            "add it to the ladders file or fix the message's `ladder`")


class RatingService:
    """Applies ``ratings.apply_match`` calls to the configured ladders through ``pool``.

    ``ladders`` maps each configured ladder to its :class:`worker.store.ladders.LadderPolicy`
    (policy, canonical content, version), loaded once by the composition root. A match is rated
    under the ladder's policy in force (:func:`worker.store.policy_in_force`), which a rebuild
    switches. ``interrupts``: exception types that must stop the work and reach the caller
    untouched (the task's soft time limit), never becoming a dead letter.
    """

    def __init__(self, pool: ConnectionPool, ladders: Mapping[str, LadderPolicy], settings: Settings,
                 interrupts: tuple[type[BaseException], ...] = ()):
        self.pool = pool
        self.ladders = dict(ladders)
        self.settings = settings
        self.interrupts = interrupts
        self.faults = FaultInjector(settings.fault_injection)
        self._environment_failed = False
        self.timeouts = repository.TransactionTimeouts(
            settings.lock_timeout_ms, settings.statement_timeout_ms, settings.player_lock_wait_ms,
            settings.idle_in_transaction_timeout_ms, settings.db_keepalives_idle, settings.db_keepalives_interval,
            settings.db_keepalives_count, settings.correction_max_matches)
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

    def rate(self, calls: Sequence[Call], handled: list[Handled | None] | None = None) -> float | None:
        """Rate ``calls`` (queue order) in one transaction: validate, apply in the store, record outcomes.

        ``handled`` (as long as ``calls``; a fresh list if omitted) is filled in place as outcomes
        commit: an entry left ``None`` was not handled and its message must be requeued. A call
        that fails validation becomes a dead letter in the same transaction. Transient database
        errors are retried with jittered backoff. If the transaction fails for a permanent reason
        (a bug, data the engine rejects), each call is rated again alone, a batch of one, so only
        the culprit becomes a dead letter (``internal_error``, or the engine's reason code for an
        :class:`engine.UnratableMatch`). Returns the seconds the transaction waited for player row
        locks (None when no match was applied in one transaction).

        Raises ``psycopg.OperationalError``/``InterfaceError`` when transient errors outlast the
        retries, :class:`worker.service.environment.EnvironmentNotReady` for an error of the
        environment (not migrated, read-only, no privilege: never a dead letter, nothing
        committed), and any of ``interrupts``; entries filled before stay valid.
        """
        if handled is None:
            handled = [None] * len(calls)
        entries = [self.validate(task_id, args, kwargs) for task_id, args, kwargs in calls]
        try:
            results, lock_wait = self._apply(entries)
        except (*TRANSIENT_ERRORS, *self.interrupts, EnvironmentNotReady):  # type: ignore[misc]  # exception types
            raise
        except Exception as exc:  # a permanent error
            if len(entries) > 1:  # find the culprit: each message alone
                log.exception("batch of %d failed for a permanent reason; applying its messages one by one",
                              len(calls))
                for i, call in enumerate(calls):
                    one: list[Handled | None] = [None]
                    self.rate([call], one)
                    handled[i] = one[0]
                return None
            results, lock_wait = self._apply([self._failed(entries[0], exc)])
        for i, result in enumerate(results):
            handled[i] = result
            if result.outcome is Outcome.DEAD_LETTER:
                log.warning("dead letter %s (match_id=%s)", result.reason_code, result.match_id)
        deferred = [r for r in results if r.outcome is Outcome.DEFERRED]
        if deferred:
            rows = sorted({p for r in deferred for p in r.blocked_players})
            log.warning("deferred %d of %d match(es): player row(s) %s held by another transaction past "
                        "player_lock_wait_ms; retried with backoff", len(deferred), len(results), ", ".join(rows))
        self.faults.hit("after_commit")
        return lock_wait

    def validate(self, task_id: str | None, args: Sequence[Any], kwargs: Mapping[str, Any]) -> repository.BatchEntry:
        """Validate one call (no I/O): the match to apply, or the dead letter it becomes (reason code
        and the raw input kept)."""
        if len(args) != 1 or kwargs:
            return repository.BatchDeadLetter("bad_task_arguments", bad_arguments_detail(args, kwargs),
                                              raw_text({"args": list(args), "kwargs": dict(kwargs)}), None, task_id)
        raw = args[0]
        try:
            match = parse_match_finished(raw)
        except InvalidMessage as exc:
            return repository.BatchDeadLetter(exc.reason_code, exc.detail, raw_body(raw), exc.match_id, task_id)
        ladder = self.ladders.get(match.ladder)
        if ladder is None:
            return repository.BatchDeadLetter("unknown_ladder", unknown_ladder_detail(match.ladder, self.ladders),
                                              raw_body(raw), match.match_id, task_id)
        shape_refused = ladder.shapes and ladder.shapes.refusal(match_side_sizes(match), match.ladder)
        if shape_refused:  # a shape the ladder does not rate (worker.policy.shapes)
            return repository.BatchDeadLetter(SHAPE_REASON_CODE, shape_refused, raw_body(raw), match.match_id, task_id)
        payload, canonical = match.canonical()  # once: payload_hash() would serialize it again
        return repository.BatchMatch(payload, hashlib.sha256(canonical).hexdigest(), match.finished_at,
                                     ladder, task_id, raw_body(raw), canonical.decode("utf-8"))

    def annul(self, task_id: str | None, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, str | None]:
        """Run one ``ratings.annul_matches`` call (one AnnulMatches message) through
        :func:`worker.store.annul_matches`, the transaction ``ratings annul`` runs; returns
        (outcome, reason code): ``("annulled", None)`` when a match was annulled now,
        ``("already_annulled", None)`` when every one was already (a no-op, as a redelivery is), or
        ``("dead_letter", code)``. Dead letters keep the raw message and its task name (so a
        requeue sends it to this task again): ``bad_task_arguments``, the parser's reason codes
        (:func:`schemas.parse_annul_matches`), ``annulment_refused`` (a ladder in arrival order or
        not configured here), ``unknown_match`` (ids not applied yet: the others are annulled;
        requeue the dead letter once the matches are applied), ``internal_error`` (the annulment
        failed for a permanent reason, a bug: nothing written, the message kept).

        Raises :class:`worker.store.AnnulmentBusy` (a rebuild of the ladder runs: requeue later),
        ``psycopg.OperationalError`` when transient errors outlast the retries, and
        :class:`worker.service.environment.EnvironmentNotReady`; nothing is written then.
        """
        if len(args) != 1 or kwargs:
            return self._annulment_dead_letter(
                task_id, "bad_task_arguments", bad_arguments_detail(args, kwargs, ANNUL_TASK, "AnnulMatches"),
                raw_text({"args": list(args), "kwargs": dict(kwargs)}))
        raw = args[0]
        try:
            request = parse_annul_matches(raw)
        except InvalidMessage as exc:
            return self._annulment_dead_letter(task_id, exc.reason_code, exc.detail, raw_body(raw))
        try:
            for attempt in self._retrying():
                with attempt, self.pool.connection() as conn:
                    result = repository.annul_matches(conn, request.match_ids, request.reason, request.annulled_by,
                                                      self.ladders, self.timeouts)
        except repository.AnnulmentBusy:
            raise
        except repository.AnnulmentRefused as exc:
            return self._annulment_dead_letter(task_id, "annulment_refused", str(exc), raw_body(raw))
        except ENVIRONMENT_DATABASE_ERRORS as exc:
            raise EnvironmentNotReady(environment_reason(exc), environment_detail(exc)) from exc
        except (*TRANSIENT_ERRORS, *self.interrupts):  # type: ignore[misc]  # exception types
            raise
        except Exception as exc:  # a permanent error (a bug): kept as a dead letter, never dropped
            log.exception("annulment failed for a permanent reason; kept as an internal_error dead letter")
            return self._annulment_dead_letter(task_id, "internal_error",
                                               f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}",
                                               raw_body(raw))
        log.info("annulment by %s: %d annulled, %d already annulled, %d unknown (matches re-rated: %s)",
                 request.annulled_by, len(result.annulled), len(result.already), len(result.unknown), result.rerated)
        if result.unknown:
            shown = ", ".join(repr(m) for m in result.unknown[:10]) + (" ..." if len(result.unknown) > 10 else "")
            return self._annulment_dead_letter(
                task_id, "unknown_match",
                f"{len(result.unknown)} match id(s) not in the ledger: {shown}; the {len(result.annulled)} other(s) "
                "were annulled now and the rest were already. Requeue this dead letter once those matches are "
                "applied (annulling again is a no-op for the others), or discard it", raw_body(raw))
        return ("annulled" if result.annulled else "already_annulled"), None

    def _annulment_dead_letter(self, task_id: str | None, code: str, detail: str,
                               raw: str | bytes) -> tuple[str, str | None]:
        for attempt in self._retrying():
            with attempt, self.pool.connection() as conn:
                repository.insert_dead_letter(conn, code, detail, raw, None, task_id, "application/json",
                                              {"task": ANNUL_TASK})
        log.warning("dead letter %s (annulment): %s", code, detail)
        return "dead_letter", code

    @staticmethod
    def _failed(entry: repository.BatchEntry, exc: Exception) -> repository.BatchDeadLetter:
        """The dead letter a message becomes when rating it alone failed for a permanent reason."""
        if isinstance(entry, repository.BatchDeadLetter):
            raise exc  # recording the dead letter itself failed: let the caller keep the message
        match_id = entry.payload["match_id"]
        raw = entry.raw_body if entry.raw_body is not None else entry.payload_json or json.dumps(entry.payload)
        if isinstance(exc, UnratableMatch):  # valid message, but this ladder's policy cannot rate it
            return repository.BatchDeadLetter(exc.reason_code, exc.detail, raw, match_id, entry.task_id)
        return repository.BatchDeadLetter("internal_error",
                                          f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}",
                                          raw, match_id, entry.task_id)

    def _apply(self, entries: Sequence[repository.BatchEntry]) -> tuple[list[Handled], float | None]:
        """The store's one rating transaction, retrying transient errors with backoff; a lost race on
        a match id (:class:`repository.LedgerRace`) is classified again at once, up to 5 times."""
        retire = getattr(self.pool, "retire_connections", None)
        for attempt in self._retrying():
            if self._environment_failed and retire is not None:
                retire()  # after an error of the environment, every attempt starts a fresh session
            with attempt, self.pool.connection() as conn:
                for _ in range(5):
                    try:
                        result = repository.apply_batch(conn, entries, before_commit=self._before_commit,
                                                        timeouts=self.timeouts,
                                                        before_correction_commit=self._before_correction_commit)
                        self._environment_failed = False
                        return result
                    except repository.LedgerRace as exc:
                        log.info("batch lost a race on a match id (%s); classifying it again", exc)
                    except ENVIRONMENT_DATABASE_ERRORS as exc:
                        # stale session state (e.g. a read-only default) must not outlive the error
                        self._environment_failed = True
                        conn.close()
                        raise EnvironmentNotReady(environment_reason(exc), environment_detail(exc)) from exc
                raise RuntimeError("the batch lost the race on a match id 5 times in a row")
        raise AssertionError("unreachable: stamina retries or raises")

    def _before_commit(self) -> None:
        self.faults.hit("in_transaction")

    def _before_correction_commit(self) -> None:
        self.faults.hit("in_correction")
