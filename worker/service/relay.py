"""The outbox relay: publishes committed rating-changed events to a Redis Stream.

Each round takes a batch of unpublished events in one statement (their ``outbox_pending`` rows
locked ``FOR UPDATE SKIP LOCKED`` and deleted), ``XADD``s them in one pipeline with the event id in
each entry, then commits: the events are marked published by the same commit.

Several relays may run, but only one publishes at a time: each holds out for a PostgreSQL session
advisory lock, and the others wait as hot standbys and take over within ``relay_idle_wait`` seconds
when the active relay's connection ends. Two relays publishing at once would interleave batches and
put one player's events on the stream out of ``sequence`` order. Parallel publishing relays would
publish faster; per-player order on the stream matters more, since consumers detect gaps by
``sequence`` (``docs/decisions/0004-events-at-least-once-with-backfill.md``).
A crash between the ``XADD`` and the commit republishes the batch: delivery
is at least once, and consumers drop duplicates by ``event_id``. The relay sleeps on
``LISTEN ratings_outbox`` (the rating transaction NOTIFYs) and polls every ``relay_idle_wait``
seconds in case a notification was missed. A database call that does not answer within
``relay_database_deadline`` seconds (a frozen PostgreSQL never sends an error) is given up by a
watchdog (:class:`worker.store.deadline.CallDeadline`): the relay says so and reconnects with backoff.
"""

from __future__ import annotations

import logging
import threading

import redis
import stamina

from worker import store as repository
from worker.redis_url import redis_client
from worker.service import observability
from worker.service.environment import Backoff
from worker.service.faults import FaultInjector
from worker.service.heap import freeze_long_lived
from worker.settings import Settings, required_url
from worker.store.connection import Connection, DatabaseUnreachable, connect
from worker.store.deadline import CallDeadline, database_label
from worker.store.events import listen_outbox, try_relay_leadership
from worker.store.outbox_lag import outbox_lag
from worker.store.players import initial_state
from worker.store.schema import ENVIRONMENT_DATABASE_ERRORS

log = logging.getLogger(__name__)



def relay_once(conn: Connection, client: redis.Redis, settings: Settings, deadline: CallDeadline,
               faults: FaultInjector | None = None) -> int:
    """Publish one batch of unpublished events; return how many were published (maybe 0).

    Each database call (BEGIN and the take, the COMMIT) must answer within ``deadline``, else the
    connection is given up and ``DatabaseUnreachable`` raised: nothing committed, the batch stays
    unpublished for the next round (if its ``XADD`` went through, it is published again).
    """
    with deadline.watching(conn), conn.transaction():
        rows = repository.take_unpublished(conn, settings.relay_batch_size)
        if not rows:
            return 0
        with deadline.suspended():  # the XADDs: bounded by the Redis client's own socket timeout
            pipe = client.pipeline(transaction=False)
            for _, event_id, payload in rows:
                pipe.xadd(
                    settings.stream,
                    {"event_id": event_id, "type": "rating-changed.v1",
                     "payload": repository.event_payloads_json(payload)},
                    maxlen=settings.stream_maxlen,
                    approximate=True,
                )
            pipe.execute()
            if faults is not None:
                faults.hit("relay_after_xadd")
    return len(rows)


def serve_relay_http(settings: Settings, policies: dict) -> observability.Heartbeat:
    """Serve the relay's /metrics, /healthz and /readyz; return the heartbeat its loop must touch.

    Liveness: a relay round (or a standby round) within ``3 x relay_idle_wait + 30`` seconds.
    Readiness: database and broker reachable, and the oldest unpublished event younger than
    ``relay_max_lag`` seconds. Raises :class:`worker.settings.SettingNotSet` when the database or
    the events Redis URL is unset.
    """
    heartbeat = observability.Heartbeat(max_age=3 * settings.relay_idle_wait + 30)
    database_url = required_url(settings.database_url, "RATINGS_DATABASE_URL")
    client = redis_client(required_url(settings.events_url, "RATINGS_EVENTS_REDIS_URL"),
                          socket_connect_timeout=3, socket_timeout=3)
    rabbitmq = ((required_url(settings.broker_url, "RATINGS_BROKER_URL"), settings.broker_ca_file)
                if settings.broker_is_rabbitmq else None)
    collector = observability.DatabaseCollector(
        database_url, client, settings.stream, {name: initial_state(p, "").rating for name, p in policies.items()},
        settings.queue, rabbitmq,
    )

    def ready() -> tuple[bool, dict]:
        ok, details = observability.database_and_broker_reachable(database_url, client)
        if ok:
            with connect(database_url, autocommit=True, connect_timeout=3) as conn:
                lag = outbox_lag(conn).oldest_seconds
            details["outbox_lag_seconds"] = round(float(lag), 1)
            ok = float(lag) <= settings.relay_max_lag
        return ok, details

    try:
        observability.serve(settings.relay_metrics_port, observability.registry([collector]), heartbeat.check, ready)
    except OSError as exc:
        log.error("cannot serve metrics and health on port %s: %s", settings.relay_metrics_port, exc)
    return heartbeat


def run_relay(settings: Settings, stop: threading.Event | None = None,
              heartbeat: observability.Heartbeat | None = None) -> None:
    """Relay events until ``stop`` is set (forever if ``None``).

    Transient PostgreSQL and Redis errors are retried with jittered backoff, reconnecting. A
    PostgreSQL that stops answering (frozen: no error ever comes) is given up after
    ``relay_database_deadline`` seconds of a call, and said so once per outage (:class:`CallDeadline`).
    Raises :class:`worker.settings.SettingNotSet` when the events Redis URL is unset.
    """
    stop = stop or threading.Event()
    # explicit: redis-py before 8.0 has no socket timeout by default, and a frozen Redis then holds
    # the relay's XADD for ever (the database deadline is suspended around it)
    client = redis_client(required_url(settings.events_url, "RATINGS_EVENTS_REDIS_URL"),
                          socket_connect_timeout=settings.redis_socket_timeout,
                          socket_timeout=settings.redis_socket_timeout)
    backoff = Backoff()
    database = required_url(settings.session_database_url, "RATINGS_DATABASE_URL")
    deadline = CallDeadline(settings.relay_database_deadline, database_label(database))
    freeze_long_lived("relay")  # its start-up objects out of the collector's full passes (worker.service.heap)
    while not stop.is_set():
        try:
            for attempt in stamina.retry_context(
                on=(DatabaseUnreachable, redis.ConnectionError, redis.TimeoutError),
                attempts=None,
                timeout=None,
                wait_max=5.0,
            ):
                with attempt:
                    _relay_loop(settings, client, stop, heartbeat or observability.Heartbeat(1e9), backoff,
                                deadline)
            return
        except ENVIRONMENT_DATABASE_ERRORS as exc:  # read-only, not migrated...: one line per wait
            stop.wait(backoff.next_delay(exc, "the relay retries"))
        except Exception:  # pragma: no cover - logged and restarted
            log.exception("relay loop failed; restarting in 1 s")
            stop.wait(1.0)


def _relay_loop(settings: Settings, client: redis.Redis, stop: threading.Event,
                heartbeat: observability.Heartbeat, backoff: Backoff, deadline: CallDeadline) -> None:
    # Session state (a session advisory lock for the leadership, LISTEN): a direct connection, not
    # PgBouncer in transaction mode (RATINGS_DIRECT_DATABASE_URL). A frozen server accepts the TCP
    # connection and never answers the startup: the connect timeout bounds that.
    url = required_url(settings.session_database_url, "RATINGS_DATABASE_URL")
    timeout = settings.relay_database_deadline
    with connect(url, autocommit=True, connect_timeout=timeout) as conn, \
            connect(url, autocommit=True, connect_timeout=timeout) as listen_conn:
        while not _leader(conn, deadline):
            heartbeat.beat()
            if stop.wait(settings.relay_idle_wait):  # standby: another relay is active
                return
        log.info("this relay is the active one")
        with deadline.watching(listen_conn):
            listen_outbox(listen_conn)
        faults = FaultInjector(settings.fault_injection)
        while not stop.is_set():
            heartbeat.beat()
            published = relay_once(conn, client, settings, deadline, faults)
            backoff.reset()
            if published:
                observability.EVENTS_PUBLISHED.inc(published)
                log.debug("published %d events", published)
            if published < settings.relay_batch_size:
                for _ in listen_conn.notifies(timeout=settings.relay_idle_wait, stop_after=1):
                    pass


def _leader(conn: Connection, deadline: CallDeadline) -> bool:
    with deadline.watching(conn):
        return try_relay_leadership(conn)
