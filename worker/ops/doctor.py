"""``ratings doctor``: the health checks behind the command."""

from __future__ import annotations

import json
from dataclasses import dataclass

import redis

from engine.policy import AnyPolicy
from worker import store as repository
from worker.broker_durability import broker_durability
from worker.consumer.lag import consumer_lag
from worker.ops.verify import verify_ladder
from worker.redis_url import redis_client, short_error
from worker.service.redis_queue import queue_keys
from worker.settings import Settings
from worker.store.connection import Connection, DatabaseError, connect
from worker.store.locking import hottest_lock_waits
from worker.store.outbox_lag import outbox_lag as read_outbox_lag
from worker.store.schema import schema_status


@dataclass(frozen=True)
class Finding:
    """One check: its name, whether it passed, and what was seen."""

    check: str
    ok: bool
    detail: str


def queue_depth(client: redis.Redis, queue: str) -> tuple[int, int]:
    """(queued, reserved-but-unacknowledged) messages of ``queue`` on the Redis broker; queued
    counts every list a producer can fill for the queue, priority lists included
    (:func:`worker.service.redis_queue.queue_keys`)."""
    with client.pipeline(transaction=False) as pipe:
        for key in queue_keys(queue):
            pipe.llen(key)
        queued = sum(pipe.execute())
    reserved = 0
    for value in client.hvals("unacked"):
        try:
            if json.loads(value)[2] == queue:
                reserved += 1
        except (ValueError, IndexError, TypeError):
            continue
    return queued, reserved


def run_checks(
    settings: Settings,
    policies: dict[str, AnyPolicy],
    outbox_lag: float,
    max_queue_depth: int | None,
    verify: bool,
) -> list[Finding]:
    """Run every check; a check that cannot run (server down) is itself a failed finding."""
    findings: list[Finding] = []
    if not settings.database_url:
        return [Finding("database reachable", False, "RATINGS_DATABASE_URL is not set")]
    try:
        conn = connect(settings.database_url, autocommit=True, connect_timeout=5)
    except DatabaseError as exc:
        return [Finding("database reachable", False, type(exc).__name__ + ": " + str(exc).splitlines()[0])]
    with conn:
        findings.append(Finding("database reachable", True, "connected"))
        status = schema_status(conn)
        findings.append(Finding("schema version", status.ok, status.problem()
                                or f"{len(status.applied)} migration(s) applied, as shipped"))
        if not status.ok:  # the checks below read tables that may not exist
            return findings + _broker_findings(settings, max_queue_depth)
        lag = read_outbox_lag(conn, outbox_lag)
        stale, oldest = lag.older_than_limit, (lag.oldest_seconds if lag.unpublished else None)
        findings.append(Finding(
            "outbox published", stale == 0,
            f"{stale} event(s) unpublished for more than {outbox_lag:g} s; oldest unpublished: "
            + (f"{oldest:.1f} s" if oldest is not None else "none"),
        ))
        by_reason = repository.dead_letter_counts(conn)
        listed = ", ".join(f"{k}={v}" for k, v in by_reason.items())
        findings.append(Finding(
            "no open dead letters", not by_reason,
            f"{listed} (see `ratings dead-letters list`)" if by_reason else "none",
        ))
        findings.append(lock_wait_finding(conn, settings))
        findings.append(chronology_finding(conn))
        if verify:
            for ladder, policy in sorted(policies.items()):
                result = verify_ladder(conn, ladder, policy)
                findings.append(Finding(
                    f"verify {ladder}", result.ok,
                    f"{result.matches} matches, {result.players} players, {len(result.differences)} difference(s)",
                ))
    return findings + _broker_findings(settings, max_queue_depth)


def chronology_finding(conn: Connection) -> Finding:
    """"chronological order": fails naming each ladder with matches placed at the end past the
    correction bound (``RATINGS_CORRECTION_MAX_MATCHES``) and the command that puts them back in
    place; passes with the corrections made so far."""
    placed = repository.placed_at_end_counts(conn)
    if placed:
        named = "; ".join(f"{ladder}: {n} match(es) placed at the end, run `ratings rebuild --ladder {ladder} "
                          "--order finished-at`" for ladder, n in sorted(placed.items()))
        return Finding("chronological order", False, named)
    made, rerated = repository.correction_totals(conn)
    return Finding("chronological order", True, f"in order; {made} correction(s) so far, {rerated} match(es) re-rated")


def lock_wait_finding(conn: Connection, settings: Settings) -> Finding:
    """"player row lock waits": fails naming each player (``ladder/player_id``) whose row, held by
    another transaction, deferred at least ``lock_deferrals_threshold`` matches within the last
    ``lock_deferrals_window`` seconds; passes naming the hottest wait otherwise."""
    hot = hottest_lock_waits(conn, settings.lock_deferrals_window, limit=5)
    stuck = [h for h in hot if h.deferred_matches >= settings.lock_deferrals_threshold]
    window = f"last {settings.lock_deferrals_window:g} s"
    if stuck:
        named = "; ".join(f"{h.ladder}/{h.player_id}: {h.deferred_matches} match(es) deferred, "
                          f"{h.waited_seconds:.1f} s waited, last {h.last}" for h in stuck)
        return Finding("player row lock waits", False,
                       f"{named} ({window}): another session holds the row; find it with pg_stat_activity / "
                       "pg_locks (see docs/operators/runbook.md, 'A player whose matches keep being deferred')")
    if hot:
        top = hot[0]
        return Finding("player row lock waits", True, f"hottest {top.ladder}/{top.player_id}: {top.waits} wait(s), "
                       f"{top.waited_seconds:.2f} s, {top.deferred_matches} deferred ({window})")
    return Finding("player row lock waits", True, f"none ({window})")


def _broker_findings(settings: Settings, max_queue_depth: int | None) -> list[Finding]:
    """Broker reachable, its eviction policy and persistence (Redis), the queue depth, and the
    consumer groups of the event stream (on the events Redis)."""
    if settings.broker_is_rabbitmq:
        return _rabbitmq_findings(settings, max_queue_depth) + _consumer_group_findings(settings)
    findings: list[Finding] = []
    if not settings.broker_url:
        return [Finding("broker reachable", False, "RATINGS_BROKER_URL is not set")]
    try:
        client = redis_client(settings.broker_url, socket_connect_timeout=settings.redis_socket_timeout,
                              socket_timeout=settings.redis_socket_timeout)
        queued, reserved = queue_depth(client, settings.queue)
        durability = broker_durability(client)
    except redis.RedisError as exc:
        return [Finding("broker reachable", False, f"RATINGS_BROKER_URL: {type(exc).__name__}: {short_error(exc)}")]
    findings.append(Finding("broker reachable", True, "connected"))
    findings.append(Finding(
        "broker keeps the queue (no eviction)", not durability.evicting,
        durability.problems()[0] if durability.evicting else f"maxmemory-policy {durability.maxmemory_policy}",
    ))
    # Persistence off is a warning, not a failure: a test or CI Redis runs without it.
    findings.append(Finding(
        "broker persistence", True,
        ("WARNING: " + durability.problems()[-1]) if durability.persistence_off
        else f"save {durability.rdb_save!r}, appendonly {durability.appendonly}",
    ))
    ok = max_queue_depth is None or queued <= max_queue_depth
    findings.append(Finding("queue depth", ok, f"{queued} queued, {reserved} reserved (unacknowledged)"
                            + ("" if max_queue_depth is None else f"; limit {max_queue_depth}")))
    return findings + _consumer_group_findings(settings)


def _rabbitmq_findings(settings: Settings, max_queue_depth: int | None) -> list[Finding]:
    """RabbitMQ reachable and the rating queue's ready messages (unacknowledged ones are not
    visible over AMQP)."""
    from worker.service.rabbitmq import rabbitmq_queue_depth

    try:
        queued = rabbitmq_queue_depth(settings.broker_url or "", settings.queue, settings.broker_ca_file)
    except Exception as exc:  # noqa: BLE001 - any connection or TLS failure is the finding
        return [Finding("broker reachable", False, f"RATINGS_BROKER_URL: {type(exc).__name__}: {short_error(exc)}")]
    ok = max_queue_depth is None or queued <= max_queue_depth
    return [Finding("broker reachable", True, "connected (RabbitMQ)"),
            Finding("queue depth", ok, f"{queued} queued (quorum queue; reserved messages are not visible over AMQP)"
                    + ("" if max_queue_depth is None else f"; limit {max_queue_depth}"))]


def _consumer_group_findings(settings: Settings) -> list[Finding]:
    """One finding per consumer group of the rating-changed stream (on the events Redis)."""
    events_url = settings.events_url  # a property: bound once so the check below narrows it
    if not events_url:
        return [Finding("event stream reachable", False,
                        "RATINGS_EVENTS_REDIS_URL is not set (required when the broker is RabbitMQ)")]
    findings: list[Finding] = []
    try:
        client = redis_client(events_url, socket_connect_timeout=settings.redis_socket_timeout,
                              socket_timeout=settings.redis_socket_timeout)
        groups = consumer_lag(client, settings.stream)
    except redis.RedisError as exc:
        setting = "RATINGS_EVENTS_REDIS_URL" if settings.events_redis_url else "RATINGS_BROKER_URL"
        return [Finding("event stream reachable", False, f"{setting}: {type(exc).__name__}: {short_error(exc)}")]
    for group in groups:  # consumer groups of the rating-changed stream
        ok = (group.undelivered + group.pending <= settings.consumer_lag_threshold
              and group.oldest_pending_seconds <= settings.consumer_pending_max_age)
        findings.append(Finding(
            f"consumer group {group.group}", ok,
            f"{group.undelivered} undelivered, {group.pending} pending (limit {settings.consumer_lag_threshold}); "
            f"oldest pending {group.oldest_pending_seconds:.1f} s (limit {settings.consumer_pending_max_age:g} s)",
        ))
    return findings
