"""``ratings bench`` part: publishers that are not the benchmark's bottleneck.

Game servers publish from many processes. The benchmark does the same: each message is encoded
once, before the clock starts, into the exact kombu envelope a Celery producer pushes on the
queue's Redis list (:func:`envelope`), and ``publishers`` processes (forked) push their share of
the envelopes with ``LPUSH`` in pipelines of ``chunk`` messages, one round trip per chunk. Each
publisher reports the wall-clock time at which each chunk was sent (each message's publish time,
for the latency figures) and its own CPU seconds (``time.process_time()``, its own counter), so
the publishers' capacity is a figure of its own, not a hidden ceiling of the service's.

Why not ``Celery.send_task`` in a loop (what the benchmark did before): one Python process
building, serialising and sending one message per round trip published 1,000 to 1,900 messages
per second on 2 cores, less as workers took the CPU, and the end-to-end figure measured that.
"""

from __future__ import annotations

import base64
import json
import multiprocessing
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from worker.producer import EMBED, task_headers


def envelope(task: str, argument: bytes, queue: str, task_id: str | None = None) -> bytes:
    """The kombu message envelope (JSON bytes, as kombu's Redis transport ``LPUSH``-es it) of one
    Celery protocol 2 message for ``task`` whose single positional argument is the JSON text
    ``argument``, published through the default exchange to ``queue`` at priority 0.

    The body is ``[[<argument>],{},<embed>]`` base64-encoded (kombu's ``body_encoding``), the
    headers are those of :func:`worker.producer.task_headers` with ``task`` set, and the delivery
    tag a fresh UUID: the same fields ``worker.producer.publish_body`` makes kombu write.
    """
    task_id = task_id or str(uuid.uuid4())
    headers = task_headers(task_id, argument)
    headers["task"] = task
    body = b"[[" + argument + b"],{}," + EMBED + b"]"
    return json.dumps({
        "body": base64.b64encode(body).decode("ascii"),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": {
            "correlation_id": task_id, "reply_to": "", "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue}, "priority": 0,
            "body_encoding": "base64", "delivery_tag": str(uuid.uuid4()),
        },
    }, separators=(",", ":")).encode("utf-8")


def encode_all(task: str, bodies: Sequence[Any], queue: str) -> list[bytes]:
    """One :func:`envelope` per body (each body a JSON-serialisable match, or any JSON value)."""
    return [envelope(task, json.dumps(b, separators=(",", ":")).encode("utf-8"), queue) for b in bodies]


@dataclass
class Published:
    """What the publishers did: each message's publish time (``time.time()`` just before its
    chunk was sent, in the order of the envelopes given), when the first and the last chunk went,
    and the publishers' own CPU seconds (summed)."""

    times: list[float]
    first: float
    last: float
    cpu_seconds: float
    publishers: int

    @property
    def per_s(self) -> float:
        """Messages per second from the first chunk sent to the last chunk acknowledged by Redis."""
        return len(self.times) / max(self.last - self.first, 1e-9)


def _publish_share(broker_url: str, queue: str, envelopes: list[bytes], chunk: int, rate: float | None,
                   start_at: float, conn, wait_replicas: int = 0, barrier=None, rounds: int = 0) -> None:
    """One publisher process: wait for ``start_at``, push ``envelopes`` in pipelines of ``chunk``
    (paced at ``rate`` messages per second when given), send back (chunk times, end, CPU seconds).
    ``wait_replicas``: each pipeline ends with ``WAIT wait_replicas 1000``, as the producer's
    ``wait_replicas`` does after each publish; a chunk fewer replicas acknowledged raises.
    ``barrier``: a ``multiprocessing.Barrier`` of every publisher, waited for before each chunk and
    ``rounds`` times in all (the most chunks of any publisher), so one with a chunk fewer still
    meets the others."""
    try:
        client = redis.Redis.from_url(broker_url)
        client.ping()  # connected before the clock starts
        cpu0 = time.process_time()
        delay = start_at - time.time()
        if delay > 0:
            time.sleep(delay)
        sent: list[float] = []
        for i in range(0, len(envelopes), chunk):
            if barrier is not None:
                barrier.wait(timeout=60)
                rounds -= 1
            if rate:
                wait = start_at + i / rate - time.time()
                if wait > 0:
                    time.sleep(wait)
            sent.append(time.time())
            part = envelopes[i:i + chunk]
            if len(part) == 1 and not wait_replicas:
                client.lpush(queue, part[0])
            else:
                with client.pipeline(transaction=False) as pipe:
                    for item in part:
                        pipe.lpush(queue, item)
                    if wait_replicas:
                        pipe.execute_command("WAIT", wait_replicas, 1000)
                    replies = pipe.execute()
                if wait_replicas and replies[-1] < wait_replicas:
                    raise RuntimeError(f"WAIT: {replies[-1]} of {wait_replicas} replica(s) acknowledged")
        while barrier is not None and rounds > 0:  # the others' last chunk
            barrier.wait(timeout=60)
            rounds -= 1
    except BaseException:
        if barrier is not None:
            barrier.abort()  # the others stop at once instead of waiting out the barrier's timeout
        raise
    conn.send((sent, time.time(), time.process_time() - cpu0))
    conn.close()


def publish(broker_url: str, queue: str, envelopes: Sequence[bytes], publishers: int = 2, chunk: int = 20,
            rate: float | None = None, wait_replicas: int = 0, lockstep: bool = False) -> Published:
    """Push ``envelopes`` onto ``queue`` from ``publishers`` forked processes (message ``i`` goes to
    publisher ``i mod publishers``), in pipelines of ``chunk`` messages; with ``rate`` (messages per
    second in all), paced, one message per round trip; with ``wait_replicas``, each pipeline
    followed by Redis ``WAIT`` (see :func:`_publish_share`). Returns when every publisher is done.

    ``lockstep`` (unpaced only): the publishers wait for one another before each chunk, so the
    queue's order stays within ``publishers x chunk`` messages of the given (finish) order, as it
    does when game servers publish matches as they finish. Without it, unpaced publishers drift
    apart by thousands of messages over a run of 20,000 (one is scheduled more than the other), so
    many matches reach the workers after a later match of one of their players: a chronological
    ladder corrects them, and the bench measured that cost instead of the service's steady state
    (847 late matches of 20,000 at 2 worker processes, queue filled first; CPU per match about
    twice that of runs with few late matches).

    Raises ``RuntimeError`` if a publisher process fails (e.g. Redis unreachable).
    """
    publishers = max(1, min(publishers, len(envelopes)))
    if rate:
        chunk = 1
    ctx = multiprocessing.get_context("fork")
    start_at = time.time() + 0.3  # every process forked and connected before the first push
    shares = [list(envelopes[p::publishers]) for p in range(publishers)]
    barrier = ctx.Barrier(publishers) if lockstep and not rate and publishers > 1 else None
    procs, pipes = [], []
    for share in shares:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_publish_share, daemon=True,
                           args=(broker_url, queue, share, chunk, rate / publishers if rate else None, start_at, child,
                                 wait_replicas, barrier, max(-(-len(s) // chunk) for s in shares)))
        proc.start()
        child.close()
        procs.append(proc)
        pipes.append(parent)
    results = []
    for proc, pipe in zip(procs, pipes):
        try:
            results.append(pipe.recv())
        except EOFError:
            proc.join()
            raise RuntimeError(f"a bench publisher process failed (exit code {proc.exitcode})") from None
        proc.join()
    times = [0.0] * len(envelopes)
    for p, (sent, _, _) in enumerate(results):
        for j in range(len(shares[p])):
            times[p + j * publishers] = sent[j // chunk]
    return Published(times=times, first=min(r[0][0] for r in results), last=max(r[1] for r in results),
                     cpu_seconds=sum(r[2] for r in results), publishers=publishers)


DURABILITY_MODES = (
    ("appendfsync everysec (default, production setting)", "everysec", 0),
    ("appendfsync always", "always", 0),
    ("appendfsync everysec + WAIT 1 replica", "everysec", 1),
)
"""The Redis durability settings :func:`durability_rates` compares: (label, ``appendfsync``, replicas
``WAIT``-ed for after each publish)."""


def durability_rates(envelopes: Sequence[bytes], state_dir, publishers: int = 2, rounds: int = 3) -> dict[str, Any]:
    """Publishes per second for each of :data:`DURABILITY_MODES`, in one run on one replicated
    Redis of the bench's own (a primary with one replica, append-only, on spare loopback ports:
    :class:`worker.devtools.sentinel.ReplicatedRedis`): each mode pushes the same ``envelopes``
    from ``publishers`` processes, **one publish per round trip** (what a game server's
    ``publish_match`` does), ``appendfsync`` set on the primary with ``CONFIG SET`` before it.
    The modes take turns ``rounds`` times (so a burst of other load on a shared machine does not
    fall on one mode only); each mode's figure is the median of its rounds, with the lowest and
    highest beside it.

    Returns ``{"modes": [{"mode", "appendfsync", "wait_replicas", "per_s", "per_s_min", "per_s_max",
    "messages"}], ...}``; ``{"skipped": reason}`` when ``redis-server`` is not installed. Raises
    ``RuntimeError`` when a mode's queue does not hold every publish.
    """
    import shutil
    import statistics

    from worker.devtools.sentinel import ReplicatedRedis

    if shutil.which("redis-server") is None:
        return {"skipped": "redis-server is not installed"}
    rr = ReplicatedRedis.start(state_dir, replicas=1, sentinels=0)
    try:
        primary = rr.client(rr.primary_port)
        rates: dict[str, list[float]] = {label: [] for label, _, _ in DURABILITY_MODES}
        for _ in range(max(1, rounds)):
            for label, appendfsync, wait in DURABILITY_MODES:
                primary.config_set("appendfsync", appendfsync)
                queue = f"bench-durability-{uuid.uuid4().hex[:8]}"
                done = publish(rr.primary_url(), queue, envelopes, publishers=publishers, chunk=1, wait_replicas=wait)
                if primary.llen(queue) != len(envelopes):
                    raise RuntimeError(f"durability bench, {label}: {primary.llen(queue)} of {len(envelopes)} "
                                       "publishes on the queue")
                primary.delete(queue)
                rates[label].append(done.per_s)
        rows = [{"mode": label, "appendfsync": appendfsync, "wait_replicas": wait,
                 "per_s": round(statistics.median(rates[label]), 1), "per_s_min": round(min(rates[label]), 1),
                 "per_s_max": round(max(rates[label]), 1), "messages": len(envelopes)}
                for label, appendfsync, wait in DURABILITY_MODES]
        return {"modes": rows, "publishers": publishers, "replicas": 1, "rounds": max(1, rounds),
                "redis": primary.info("server").get("redis_version")}
    finally:
        rr.stop()


def producer_helper_rate(broker_url: str, matches: Sequence[Any], confirms: bool = True, wait_replicas: int = 0,
                         setting: str | None = None) -> dict[str, Any]:
    """Publishes per second of the producer helper itself (:func:`worker.producer.publish_match`,
    what game servers call): one process, one connection, one message per call, each call
    returning once the broker took the message (Redis: the ``LPUSH`` reply; RabbitMQ: the
    publisher confirm, a majority of the quorum queue's nodes holding it). ``confirms=False`` on
    RabbitMQ: the same calls without confirms (the call returns once the frame is written), the
    baseline of what confirms cost. ``wait_replicas`` (Redis): each call also waits for that many
    replicas' acknowledgement (``WAIT``, :func:`worker.producer.producer_app`). ``setting``: what the
    row measures, for the report. Publishes into a queue of its own, removed at the end.

    ``matches``: validated match dicts; the first is published before the clock starts (connection,
    queue declaration). Returns broker, confirms, messages, seconds, per_s and the publisher's CPU
    milliseconds per publish.
    """
    from worker.broker import is_rabbitmq
    from worker.producer import producer_app, publish_match

    queue = f"ratings-bench-producer-{uuid.uuid4().hex[:8]}"
    rabbit = is_rabbitmq(broker_url)
    app = producer_app(broker_url, check_broker=False, wait_replicas=wait_replicas)
    if rabbit and not confirms:
        app.conf.broker_transport_options = {}
    try:
        with app.producer_or_acquire() as producer:
            publish_match(app, matches[0], queue=queue, producer=producer)
            cpu0, start = time.process_time(), time.perf_counter()
            for match in matches[1:]:
                publish_match(app, match, queue=queue, producer=producer)
            seconds = time.perf_counter() - start
            cpu = time.process_time() - cpu0
            producer.channel.queue_delete(queue)
    finally:
        app.close()
    n = len(matches) - 1
    return {"broker": "rabbitmq" if rabbit else "redis", "confirms": confirms or not rabbit, "messages": n,
            "wait_replicas": wait_replicas, "setting": setting,
            "seconds": round(seconds, 3), "per_s": round(n / max(seconds, 1e-9), 1),
            "cpu_ms_per_publish": round(1000 * cpu / max(n, 1), 3)}
