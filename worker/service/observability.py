"""Metrics (Prometheus), structured logs (structlog) and the health endpoints.

Metrics: Celery's prefork children do the rating work, so counters and histograms use
prometheus_client's multiprocess mode: every process writes its samples to files under
``PROMETHEUS_MULTIPROC_DIR`` (``ratings worker`` sets one up), and the main process serves them
merged. Values that live in the database (outbox lag, stream length, rating pool drift) are read
when scraped by :class:`DatabaseCollector`.

HTTP: :func:`serve` starts a small threaded server in the main process with ``/metrics``,
``/healthz`` (liveness) and ``/readyz`` (readiness). Ports: worker 9100, relay 9101 (settings).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily

from worker.outcome import Outcome
from worker.service.metric_info import MetricInfo, gauge_family

MESSAGES = Counter(
    "ratings_messages_total", "Message deliveries handled, by outcome (" + ", ".join(Outcome) + "); a deferred "
    "match counts once per deferral and once more when it is applied", ["outcome"]
)
"""Labelled by :class:`worker.outcome.Outcome` values (the one outcome type of store, service and metrics)."""
DEAD_LETTERS = Counter("ratings_dead_letters_total", "Dead letters written, by reason code", ["reason"])
ANNULMENT_MESSAGES = Counter("ratings_annulment_messages_total", "ratings.annul_matches messages handled, by "
                             "outcome (annulled, already_annulled, dead_letter)", ["outcome"])
OUT_OF_ORDER = Counter("ratings_out_of_order_total", "Matches applied after a later match of one of their players",
                       ["ladder"])
PLACED_AT_END = Counter("ratings_placed_at_end_total", "Late matches past the correction bound "
                        "(RATINGS_CORRECTION_MAX_MATCHES), applied at the end and flagged", ["ladder"])
MATCHES_RERATED = Counter("ratings_matches_rerated_total", "Stored matches re-rated by corrections (late matches "
                          "placed in their chronological position)", ["ladder"])
MESSAGE_LATENCY_SECONDS = Histogram(
    "ratings_message_latency_seconds", "Seconds from the worker receiving a message to its outcome committed "
    "(applied, duplicate or dead letter), one observation per message of the rating task: with batching, from "
    "the consumer taking it into a batch's buffer, so the wait for company and for a free child counts; with "
    "RATINGS_BATCH_SIZE=1, from its task starting in a worker child. Messages the consumer dead-letters itself "
    "(undecodable, an unknown task) are not observed",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
"""Observed by :func:`worker.service.tasks.record_handled`, once per handled message (a deferred
match is observed when it is finally handled, from its latest delivery)."""
TRANSACTION_LOCK_WAIT_SECONDS = Histogram(
    "ratings_transaction_lock_wait_seconds", "Seconds one rating transaction waited to lock its matches' player "
    "rows (SELECT ... FOR UPDATE), one observation per transaction that applied a match (with batching, one "
    "transaction applies up to RATINGS_BATCH_SIZE matches)",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5),
)
BATCH_SIZE = Histogram(
    "ratings_batch_size", "Matches applied per rating transaction, one observation per transaction that applied "
    "a match", buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500)
)
DEFERRED_MATCHES = Counter(
    "ratings_deferred_matches_total", "Matches deferred because a player's row was held by another transaction "
    "past RATINGS_PLAYER_LOCK_WAIT_MS, by ladder (which players: ratings_player_deferred_matches, the top "
    "players of the last minutes)", ["ladder"],
)
EVENTS_PUBLISHED = Counter("ratings_events_published_total", "Rating-changed events the relay added to the stream")
GC_FROZEN_OBJECTS = Gauge(
    "ratings_gc_frozen_objects", "Objects this process moved out of the garbage collector's full passes at start "
    "(gc.freeze, worker.service.heap), by process", ["process"], multiprocess_mode="liveall",
)


def configure_logging(level: str | int = "INFO", json_lines: bool | None = None) -> None:
    """Route every log record (Celery's too) through structlog.

    JSON lines when ``json_lines`` is true or, by default, when stderr is not a terminal; coloured
    human-readable lines on a terminal. Context bound with ``structlog.contextvars`` (match_id,
    ladder, task_id) appears in every line of the current task.
    """
    if json_lines is None:
        json_lines = not sys.stderr.isatty()
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer = structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer()
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, renderer],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level if isinstance(level, int) else level.upper())
    structlog.configure(
        # filter_by_level first: a line below its logger's effective level is dropped before the
        # chain runs (the per-message "match handled" line at the WARNING of the bench's workers)
        processors=[structlog.stdlib.filter_by_level, *shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


OUTBOX_LAG = MetricInfo("ratings_outbox_lag_seconds", "gauge", "Age of the oldest unpublished outbox row, seconds "
                        "(0 when none)", (), "relay")
OUTBOX_UNPUBLISHED = MetricInfo("ratings_outbox_unpublished", "gauge", "Outbox rows not yet on the stream", (), "relay")
RATING_POOL_DRIFT = MetricInfo("ratings_rating_pool_drift", "gauge", "Sum of a ladder's ratings minus its initial "
                               "rating x players, rating points (inflation when > 0)", ("ladder",), "relay")
STREAM_LENGTH = MetricInfo("ratings_stream_length", "gauge", "Entries in the rating-changed stream", (), "relay")
QUEUE_MESSAGES = MetricInfo("ratings_queue_messages", "gauge", "Messages waiting in the ratings queue (every list "
                            "of it on Redis, priority lists included; ready messages on RabbitMQ)", (), "relay")
CONSUMER_LAG_ENTRIES = MetricInfo("ratings_consumer_lag_entries", "gauge", "Stream entries a consumer group has not "
                                  "received (undelivered) or not acknowledged (pending)", ("group", "state"), "relay")
CONSUMER_OLDEST_PENDING = MetricInfo("ratings_consumer_oldest_pending_seconds", "gauge", "Age of a consumer group's "
                                     "oldest pending entry, seconds", ("group",), "relay")


def metric_catalogue() -> list[MetricInfo]:
    """Every metric the worker and the relay serve, sorted by name: the source of the metrics
    reference page. The client metrics come from their own objects (name, type, help, labels as
    registered), the scrape-time gauges from the :class:`MetricInfo` their collectors are built
    from, so the list cannot drift from what ``/metrics`` serves."""
    from worker.service.lock_metrics import LOCK_GAUGES

    recorded = {MESSAGES: "worker", DEAD_LETTERS: "worker", ANNULMENT_MESSAGES: "worker", OUT_OF_ORDER: "worker",
              PLACED_AT_END: "worker", MATCHES_RERATED: "worker", MESSAGE_LATENCY_SECONDS: "worker",
              TRANSACTION_LOCK_WAIT_SECONDS: "worker", BATCH_SIZE: "worker", DEFERRED_MATCHES: "worker",
              EVENTS_PUBLISHED: "relay", GC_FROZEN_OBJECTS: "worker, relay"}
    client = [MetricInfo(m._name + ("_total" if m._type == "counter" else ""), str(m._type), m._documentation,
                         tuple(m._labelnames), by) for m, by in recorded.items()]
    scraped = [OUTBOX_LAG, OUTBOX_UNPUBLISHED, RATING_POOL_DRIFT, STREAM_LENGTH, QUEUE_MESSAGES,
               CONSUMER_LAG_ENTRIES, CONSUMER_OLDEST_PENDING, *LOCK_GAUGES]
    return sorted(client + scraped, key=lambda m: m.name)


class DatabaseCollector:
    """Gauges read from PostgreSQL and Redis at scrape time (never cached, never stale).

    ``ratings_outbox_lag_seconds``: age of the oldest unpublished outbox row (0 when none);
    ``ratings_outbox_unpublished``; ``ratings_stream_length``; ``ratings_rating_pool_drift`` per
    ladder: sum of ratings minus initial rating × players (rating points; inflation when > 0);
    ``ratings_queue_messages`` (when ``queue`` is given): messages waiting in every list of the
    queue (:func:`worker.service.redis_queue.queue_keys`, priority lists included), or on RabbitMQ
    (``rabbitmq``: broker URL and CA file) the queue's ready messages; the hottest
    player row lock waits (:func:`worker.service.lock_metrics.lock_wait_gauges`).
    """

    def __init__(self, database_url: str, redis_client, stream: str, initial_ratings: dict[str, float],
                 queue: str | None = None, rabbitmq: tuple[str, str | None] | None = None):
        self.queue = queue
        self.rabbitmq = rabbitmq
        """(broker URL, CA file) when the broker is RabbitMQ: the queue's depth is read there."""
        self.database_url = database_url
        self.redis = redis_client
        self.stream = stream
        self.initial_ratings = initial_ratings

    def collect(self):
        from worker.service.lock_metrics import lock_wait_gauges
        from worker.store.connection import DatabaseError, connect
        from worker.store.outbox_lag import outbox_lag
        from worker.store.read_models import rating_sums

        hottest: list[GaugeMetricFamily] = []

        lag, unpublished = gauge_family(OUTBOX_LAG), gauge_family(OUTBOX_UNPUBLISHED)
        drift, stream_len = gauge_family(RATING_POOL_DRIFT), gauge_family(STREAM_LENGTH)
        try:
            with connect(self.database_url, autocommit=True, connect_timeout=3) as conn:
                backlog = outbox_lag(conn)
                lag.add_metric([], backlog.oldest_seconds)
                unpublished.add_metric([], float(backlog.unpublished))
                for ladder, total, players in rating_sums(conn):
                    initial = self.initial_ratings.get(ladder)
                    if initial is not None:
                        drift.add_metric([ladder], float(total) - initial * players)
                hottest = lock_wait_gauges(conn)
        except DatabaseError:
            pass  # an unreachable database shows as missing gauges; /readyz says why
        queued = gauge_family(QUEUE_MESSAGES)
        try:
            stream_len.add_metric([], float(self.redis.xlen(self.stream)))
            if self.queue is not None and self.rabbitmq is not None:
                from worker.service.rabbitmq import rabbitmq_queue_depth

                queued.add_metric([], float(rabbitmq_queue_depth(self.rabbitmq[0], self.queue, self.rabbitmq[1], 3)))
            elif self.queue is not None:
                from worker.service.redis_queue import queue_keys

                queued.add_metric([], float(sum(self.redis.llen(key) for key in queue_keys(self.queue))))
        except Exception:  # noqa: BLE001 - the broker may be down; readiness reports it
            pass
        yield from (lag, unpublished, drift, stream_len, queued, *hottest)
        yield from consumer_lag_gauges(self.redis, self.stream)


def consumer_lag_gauges(client, stream: str) -> list[GaugeMetricFamily]:
    """``ratings_consumer_lag_entries{group, state="undelivered"|"pending"}`` and
    ``ratings_consumer_oldest_pending_seconds{group}`` of every consumer group of ``stream``."""
    from worker.consumer.lag import consumer_lag

    entries, oldest = gauge_family(CONSUMER_LAG_ENTRIES), gauge_family(CONSUMER_OLDEST_PENDING)
    try:
        for g in consumer_lag(client, stream):
            entries.add_metric([g.group, "undelivered"], float(g.undelivered))
            entries.add_metric([g.group, "pending"], float(g.pending))
            oldest.add_metric([g.group], g.oldest_pending_seconds)
    except Exception:  # noqa: BLE001 - the broker may be down; readiness reports it
        pass
    return [entries, oldest]


class MultiProcessCollector(multiprocess.MultiProcessCollector):
    """prometheus_client's merge of the processes' sample files, skipping a file still empty.

    A process creates its file before sizing it (``MmapedDict``), so a scrape in that moment finds
    an empty file, and a worker child killed in it leaves the empty file for good; prometheus_client
    0.26 then fails the whole merge with ``struct.error`` on every scrape, every other process's
    samples lost with it (prometheus/client_python#1199). An empty file holds no sample, so leaving
    it out loses nothing; a file with a header is read as before (a corrupt one still raises).
    """

    def collect(self):
        files = [f for f in glob.glob(os.path.join(self._path, "*.db")) if _has_header(f)]
        return self.merge(files, accumulate=True)


def _has_header(path: str) -> bool:
    """Whether the sample file ``path`` holds at least its 4-byte header (the bytes in use); a file
    removed meanwhile (a dead process's live gauges) has none."""
    try:
        return os.path.getsize(path) >= 4
    except FileNotFoundError:
        return False


def registry(extra_collectors=()) -> CollectorRegistry:
    """A registry with the multiprocess samples (when enabled; :class:`MultiProcessCollector`) and
    ``extra_collectors``."""
    reg = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(reg)
    else:
        from prometheus_client import REGISTRY

        reg = REGISTRY
    for collector in extra_collectors:
        reg.register(collector)
    return reg


Check = Callable[[], tuple[bool, dict]]


def serve(port: int, reg: CollectorRegistry, liveness: Check, readiness: Check) -> ThreadingHTTPServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``port`` (all interfaces) in a daemon thread.

    A check returns ``(ok, details)``; the endpoint answers 200 or 503 with the details as JSON.
    Raises ``OSError`` if the port is taken.
    """

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            if self.path.startswith("/metrics"):
                body, status, ctype = generate_latest(reg), 200, CONTENT_TYPE_LATEST
            elif self.path.startswith("/healthz") or self.path.startswith("/readyz"):
                check = liveness if self.path.startswith("/healthz") else readiness
                try:
                    ok, details = check()
                except Exception as exc:  # noqa: BLE001 - a failing check is a 503, not a crash
                    ok, details = False, {"error": f"{type(exc).__name__}: {exc}"}
                body, status, ctype = json.dumps({"ok": ok, **details}).encode(), 200 if ok else 503, "application/json"
            else:
                body, status, ctype = b"not found\n", 404, "text/plain"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # scrapes and probes are not worth a log line each
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, name=f"http-{port}", daemon=True).start()
    return server


def database_and_broker_reachable(database_url: str, redis_client) -> tuple[bool, dict]:
    """Readiness common to worker and relay: ``SELECT 1`` and ``PING`` answer within 3 s.
    ``redis_client`` ``None`` (a worker on RabbitMQ): the database only; the broker connection is
    the consumer's, reported by the caller."""
    from worker.store.connection import database_reachable

    details = {"database": database_reachable(database_url)}
    if redis_client is None:
        return details["database"] == "ok", details
    try:
        redis_client.ping()
        details["broker"] = "ok"
    except Exception as exc:  # noqa: BLE001
        details["broker"] = type(exc).__name__
    return details["database"] == "ok" and details["broker"] == "ok", details


class Heartbeat:
    """A monotonic timestamp a loop touches each round; alive when touched within ``max_age`` s."""

    def __init__(self, max_age: float):
        self.max_age = max_age
        self.last = time.monotonic()

    def beat(self) -> None:
        self.last = time.monotonic()

    def check(self) -> tuple[bool, dict]:
        age = time.monotonic() - self.last
        return age <= self.max_age, {"last_round_seconds_ago": round(age, 1)}
