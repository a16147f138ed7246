"""Errors of the environment (not migrated, read-only, no privilege): back off, keep the messages, log once per wait."""

from __future__ import annotations

import logging
import threading
import time

from worker.store.schema import environment_reason

log = logging.getLogger(__name__)


class EnvironmentNotReady(Exception):
    """The database cannot take the rating transaction for a reason no message causes: an error of
    the environment is never a dead letter (the decision record
    ``docs/decisions/0005-errors-of-the-environment.md``). ``reason``: ``not_migrated``,
    ``read_only``, ``no_privilege``, ``prepared_statements``, ``unreachable`` or ``database_error``;
    the driver's error is the ``__cause__``."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class Backoff:
    """Exponential backoff of one process while its environment fails: the first wait is ``initial``
    seconds, each next one doubles, up to ``cap``; a success resets it. One log line per wait (so
    one per interval, never a tight loop).
    """

    def __init__(self, initial: float = 1.0, cap: float = 10.0):
        self.initial = initial
        self.cap = cap
        self._next = initial
        self._failures = 0
        self._lock = threading.Lock()

    def wait(self, exc: BaseException, keep: str = "requeueing the message(s)") -> float:
        """Log why (one line) and sleep the current interval; return the seconds slept."""
        delay = self.next_delay(exc, keep)
        time.sleep(delay)
        return delay

    def next_delay(self, exc: BaseException, keep: str) -> float:
        """Log why (one line) and return the interval to wait now (for callers that wait on an event)."""
        with self._lock:
            delay = self._next
            self._next = min(self.cap, self._next * 2)
            self._failures += 1
            failures = self._failures
        reason = exc.reason if isinstance(exc, EnvironmentNotReady) else environment_reason(exc)
        text = (exc.detail if isinstance(exc, EnvironmentNotReady) else str(exc)).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        log.error("database not ready (%s: %s); %s, next attempt in %.0f s (failure %d in a row)",
                  reason, first, keep, delay, failures)
        return delay

    def reset(self) -> None:
        """The environment works again: the next failure waits ``initial`` seconds."""
        with self._lock:
            if self._failures:
                log.info("database ready again after %d failure(s)", self._failures)
            self._next = self.initial
            self._failures = 0


BACKOFF = Backoff()
"""This process's backoff (a worker child applies one batch at a time)."""


def backoff_cap(soft_time_limit: float | None) -> float:
    """The longest wait that keeps a task well inside its soft time limit (seconds; 10 at most, so
    the service resumes within seconds once the database is fixed)."""
    if not soft_time_limit:
        return 10.0
    return max(0.5, min(10.0, soft_time_limit / 3))
