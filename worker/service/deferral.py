"""Backoff of deferred messages: a match whose player's row another transaction holds.

The rating transaction defers such a match (:data:`worker.outcome.Outcome.DEFERRED`) and applies
the rest of its batch. The worker's main process (:class:`worker.service.batching.Batcher`) keeps
the deferred message, still reserved and unacknowledged, for a backoff delay, then puts it back
at the head of its buffer: no broker round trip, and the message keeps its place before newer
messages of the same players. While it waits, the consumer's prefetch is raised by one (as Celery
does for a message with an ETA), so held messages never stop the worker taking new ones.

A message is held in all at most a quarter of the visibility timeout (Redis would redeliver a
message reserved longer); past that it is requeued to the broker instead, and starts again.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass


@dataclass(slots=True)
class _Deferred:
    count: int
    first: float


class Deferrals:
    """Per-message deferral counts and the delay before each retry.

    ``initial`` and ``maximum`` in seconds: the n-th deferral of a message waits
    ``min(maximum, initial * 2 ** (n - 1))`` scaled by a random factor in [0.5, 1] (jitter, so
    the messages held behind one lock do not all come back at once); ``hold_limit``: the most
    seconds a message may be held in all before it goes back to the broker.
    """

    def __init__(self, initial: float, maximum: float, hold_limit: float):
        self.initial = initial
        self.maximum = maximum
        self.hold_limit = hold_limit
        self._seen: dict[str, _Deferred] = {}

    def next_delay(self, task_id: str) -> float | None:
        """Note one more deferral of ``task_id``; the seconds to hold it, or None to requeue it to
        the broker (held ``hold_limit`` seconds in all)."""
        now = time.monotonic()
        entry = self._seen.get(task_id)
        if entry is None:
            if len(self._seen) > 100_000:  # messages that ended elsewhere: forget the oldest half
                for key in list(self._seen)[:50_000]:
                    del self._seen[key]
            entry = self._seen[task_id] = _Deferred(0, now)
        entry.count += 1
        delay = min(self.maximum, self.initial * 2 ** (entry.count - 1)) * random.uniform(0.5, 1.0)  # noqa: S311
        if now - entry.first + delay > self.hold_limit:
            del self._seen[task_id]
            return None
        return delay

    def forget(self, task_id: str | None) -> None:
        """``task_id`` ended (acknowledged or requeued to the broker): drop its count."""
        if task_id is not None:
            self._seen.pop(task_id, None)

    def count(self, task_id: str) -> int:
        """Deferrals of ``task_id`` so far (0 if none or forgotten)."""
        entry = self._seen.get(task_id)
        return entry.count if entry is not None else 0
