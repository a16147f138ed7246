"""Metrics of player row lock waits: the hottest waits, read at scrape time, so that an operator sees
which player's held row defers matches (``docs/decisions/0006-defer-matches-of-held-players.md``).

The rating transaction appends one ``player_lock_waits`` row per player row it found held by
another transaction (:func:`worker.store.locking.record_lock_waits`). At each scrape the worker
reports the players with the most deferred matches (then the longest waits) over the last
:data:`WINDOW_SECONDS`: at most :data:`TOP` label sets, so a player id never becomes an unbounded
label. Every worker and the relay read the same table: in Prometheus take ``max by (ladder, player_id)``.
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from worker.service.metric_info import MetricInfo, gauge_family
from worker.store.connection import Connection
from worker.store.locking import hottest_lock_waits

WINDOW_SECONDS = 600.0
"""The window of the hottest-waits gauges, seconds."""
TOP = 5
"""How many players the hottest-waits gauges show."""


LOCK_GAUGES = (
    MetricInfo("ratings_player_lock_wait_seconds", "gauge", "Seconds rating transactions waited for this player's "
               f"row in the last {WINDOW_SECONDS:g} s (top {TOP} players)", ("ladder", "player_id"), "relay"),
    MetricInfo("ratings_player_deferred_matches", "gauge", "Matches deferred because this player's row was held by "
               f"another transaction, last {WINDOW_SECONDS:g} s (top {TOP} players)", ("ladder", "player_id"), "relay"),
    MetricInfo("ratings_player_lock_waits", "gauge", "Rating transactions that found this player's row held, last "
               f"{WINDOW_SECONDS:g} s (top {TOP} players)", ("ladder", "player_id"), "relay"),
)
"""The hottest-waits gauges, as :func:`worker.service.observability.metric_catalogue` lists them."""


def lock_wait_gauges(conn: Connection) -> list[GaugeMetricFamily]:
    """``ratings_player_lock_wait_seconds`` (seconds spent waiting for the player's row in the
    window), ``ratings_player_deferred_matches`` (matches deferred for it) and
    ``ratings_player_lock_waits`` (transactions that found it held), labelled ``ladder`` and
    ``player_id``, for the :data:`TOP` hottest players of the last :data:`WINDOW_SECONDS`."""
    waited, deferred, waits = (gauge_family(info) for info in LOCK_GAUGES)
    for hot in hottest_lock_waits(conn, WINDOW_SECONDS, TOP):
        waited.add_metric([hot.ladder, hot.player_id], hot.waited_seconds)
        deferred.add_metric([hot.ladder, hot.player_id], float(hot.deferred_matches))
        waits.add_metric([hot.ladder, hot.player_id], float(hot.waits))
    return [waited, deferred, waits]
