"""``ratings bench`` part: the hot-player run again with one hot player's row locked for 10 s.

It measures what one stuck player costs the others (``docs/decisions/0006-defer-matches-of-held-players.md``).

The same matches as the hot-player run (same seed, other match ids), so the run without the lock
is the baseline of the same bench. In the middle of the run (once half the matches are in the
ledger) another session locks ``hot00``'s row ``FOR UPDATE`` and holds it for ``hold_seconds``,
as a stuck operator session or a frozen worker would; the workers defer that player's matches
(and the later matches of their players in a batch) and keep applying the rest.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from worker.devtools.bench.sql import applied_with_prefix, hold_player_rows, lock_waits_of
from worker.store.connection import connect

HOT_PLAYER = "hot00"
"""The hot player whose row is locked (``service_matches`` names hot players ``hot00``, ``hot01``...)."""


class _Locker(threading.Thread):
    """Waits until half of ``count`` matches of ``prefix`` are applied, then holds the hot player's
    rows ``FOR UPDATE`` for ``hold_seconds`` in one transaction; notes what was applied meanwhile."""

    def __init__(self, database_url: str, prefix: str, count: int, hold_seconds: float):
        super().__init__(daemon=True)
        self.database_url, self.prefix, self.count, self.hold_seconds = database_url, prefix, count, hold_seconds
        self.stop = threading.Event()
        self.figures: dict[str, Any] = {}

    def run(self) -> None:
        with connect(self.database_url, autocommit=True) as watch:
            while not self.stop.is_set() and applied_with_prefix(watch, self.prefix) < self.count // 2:
                time.sleep(0.2)
            if self.stop.is_set():
                return
            with connect(self.database_url) as holder:  # one transaction, committed (released) on exit
                rows = hold_player_rows(holder, HOT_PLAYER)
                started, before = time.monotonic(), applied_with_prefix(watch, self.prefix)
                self.stop.wait(self.hold_seconds)
                held, after = time.monotonic() - started, applied_with_prefix(watch, self.prefix)
            deferred = lock_waits_of(watch, HOT_PLAYER)
        self.figures = {"rows_locked": rows, "held_seconds": round(held, 2), "applied_before_lock": before,
                        "applied_while_locked": after - before,
                        "per_s_while_locked": round((after - before) / held, 1) if held else None,
                        "deferrals_recorded": deferred[0], "lock_waits_recorded": deferred[1]}


def hot_lock_run(cluster, matches: list[dict[str, Any]], timeout: float, baseline: dict[str, Any],
                 hold_seconds: float = 10.0) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run ``matches`` on ``cluster`` (:meth:`worker.devtools.bench.cluster.Cluster.run_matches`)
    with ``hot00``'s row locked for ``hold_seconds`` in the middle; return the run and a summary
    beside ``baseline`` (the hot-player run without the lock): throughput (matches per second,
    first publish to last event), p99 publish → event, and what was applied while the row was held."""
    prefix = matches[0]["match_id"].rsplit("-", 1)[0] + "-"  # ids are <prefix>-<seed>-<n>
    locker = _Locker(cluster.database_url, prefix, len(matches), hold_seconds)
    cluster.reset()  # run_matches resets too; done first so the locker never counts a previous run
    locker.start()
    try:
        run = cluster.run_matches(f"hot_players_row_locked_{hold_seconds:g}s", matches, timeout + hold_seconds)
    finally:
        locker.stop.set()
        locker.join()
    summary = {"locked_player": HOT_PLAYER, "hold_seconds": hold_seconds, "per_s": run["per_s"],
               "unlocked_per_s": baseline["per_s"], "share_of_unlocked": round(run["per_s"] / baseline["per_s"], 3),
               "p99_publish_to_event_ms": run["latency_publish_to_event"]["p99_ms"],
               "unlocked_p99_publish_to_event_ms": baseline["latency_publish_to_event"]["p99_ms"],
               **locker.figures}
    return run, summary
