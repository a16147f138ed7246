"""Every route and body a producer can legally use for the ratings queue ends applied, duplicate or
dead letter: kombu priority lists, raw list items, kombu's JSON type markers, requeue byte for byte.

Real Redis, PostgreSQL and the session's two Celery worker processes.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
import redis
from kombu import Connection

from worker.ops.doctor import queue_depth
from worker.producer import producer_app, publish_body, publish_match

pytestmark = [pytest.mark.integration, pytest.mark.redis_broker]  # tests the Redis broker itself: not run on the RabbitMQ pass


def match(match_id: str, a: str, b: str, outcome: str = "side_a_won", ladder: str = "elo",
          finished_at: str = "2026-05-01T12:00:00Z") -> dict:
    """A MatchFinished v1 message as a game server would send it."""
    return {"schema_version": 1, "match_id": match_id, "ladder": ladder, "finished_at": finished_at,
            "side_a": {"players": [{"player_id": a}]}, "side_b": {"players": [{"player_id": b}]}, "outcome": outcome}


def ended(conn) -> dict[str, str]:
    """match id -> where its message ended (applied, or the dead letter's reason code)."""
    rows = conn.execute("SELECT match_id, 'applied' FROM ledger UNION ALL "
                        "SELECT coalesce(match_id, task_id), reason_code FROM dead_letters").fetchall()
    return dict(rows)


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "worker", *args], env=dict(os.environ, COLUMNS="200", **env),
                          capture_output=True, text=True, timeout=120)


def test_celery_send_task_with_each_priority_0_to_9_is_applied(clean):
    """The issue's reproduction: ``send_task(..., priority=p)`` for p = 0..9 with kombu's default
    priority steps [0, 3, 6, 9]; 3..9 used to sit for ever in ``ratings\\x06\\x163`` and the like."""
    app = producer_app(clean.broker_url)
    for p in range(10):
        app.send_task("ratings.apply_match", args=[match(f"prio-{p}", f"a{p}", f"b{p}")], queue=clean.queue, priority=p)
    counts = clean.wait_drained(10, timeout=60)
    assert (counts.applied, counts.dead_letters) == (10, 0)


def test_priorities_with_celerys_documented_separator_and_ten_steps_are_applied(clean):
    """Celery's docs suggest ``{"sep": ":", "priority_steps": list(range(10))}``: lists ``ratings:1`` .. ``ratings:9``."""
    app = producer_app(clean.broker_url)
    app.conf.broker_transport_options = {"sep": ":", "priority_steps": list(range(10))}
    for p in range(10):
        app.send_task("ratings.apply_match", args=[match(f"colon-{p}", f"c{p}", f"d{p}")], queue=clean.queue, priority=p)
    counts = clean.wait_drained(10, timeout=60)
    assert (counts.applied, counts.dead_letters) == (10, 0)


def test_doctor_and_the_metric_count_messages_waiting_in_every_priority_list(clean):
    """On a queue no worker consumes: one message per priority 0..9 with kombu's default steps
    (lists: plain x3, \\x06\\x163 x3, \\x06\\x166 x3, \\x06\\x169 x1) and one per priority with ``sep=":"``
    and ten steps: ``queue_depth`` (doctor) and ``ratings_queue_messages`` count all 20."""
    queue = f"ratings-idle-{uuid.uuid4().hex[:8]}"
    r = redis.Redis.from_url(clean.broker_url)
    try:
        default_app, colon_app = producer_app(clean.broker_url), producer_app(clean.broker_url)
        colon_app.conf.broker_transport_options = {"sep": ":", "priority_steps": list(range(10))}
        for p in range(10):
            publish_match(default_app, match(f"idle-{p}", "x", "y"), queue=queue, priority=p)
            publish_match(colon_app, match(f"idle-c{p}", "x", "y"), queue=queue, priority=p)
        assert [r.llen(queue + "\x06\x16" + s) for s in "369"] == [3, 3, 1] and r.llen(queue) == 3 + 1
        assert queue_depth(r, queue) == (20, 0)
        doctor = run_cli("doctor", "--skip-verify", RATINGS_QUEUE=queue)
        assert "20 queued" in doctor.stdout, doctor.stdout

        from worker.service.observability import DatabaseCollector
        samples = {m.name: m.samples for m in DatabaseCollector(clean.database_url, r, clean.stream, {}, queue).collect()}
        assert samples["ratings_queue_messages"][0].value == 20
    finally:
        for key in r.scan_iter(f"{queue}*"):
            r.delete(key)


def test_kombu_consumer_on_the_worker_transport_takes_the_most_urgent_list_first(clean):
    """kombu's order on Redis is priority 0 first: the worker's transport takes 0, then 3, 6, 9."""
    queue = f"ratings-order-{uuid.uuid4().hex[:8]}"
    app = producer_app(clean.broker_url)
    for p in (9, 6, 3, 0):
        publish_match(app, match(f"order-{p}", "x", "y"), queue=queue, priority=p)
    got = []
    from kombu import Queue
    with Connection(clean.broker_url, transport="worker.service.transport:Transport") as conn:
        with conn.Consumer(Queue(queue), callbacks=[lambda body, message: (got.append(body), message.ack())],
                           prefetch_count=1):
            while len(got) < 4:
                conn.drain_events(timeout=10)
    args = [body[0][0] if isinstance(body[0][0], dict) else json.loads(body[0][0]) for body in got]
    assert [arg["match_id"] for arg in args] == ["order-0", "order-3", "order-6", "order-9"]


def test_a_bare_match_pushed_on_the_list_is_a_dead_letter_with_its_exact_bytes(clean):
    """``LPUSH ratings '{"schema_version": 1, ...}'`` (no kombu envelope) is kept, not lost nor looping."""
    raw = json.dumps(match("bare-1", "a", "b"), indent=1).encode()
    clean.redis.lpush(clean.queue, raw)
    counts = clean.wait_drained(1, timeout=60)
    assert (counts.applied, counts.dead_letters) == (0, 1)
    with clean.connect() as conn:
        reason, body = conn.execute("SELECT reason_code, raw_body FROM dead_letters").fetchone()
    assert reason == "not_a_task_message" and body.encode() == raw


def test_a_kombu_datetime_marker_is_refused_as_the_same_document_in_plain_json_is(clean):
    """kombu's encoder turns a datetime ``player_id`` into ``{"__type__": "datetime", ...}``: it is
    ``wrong_type`` whether Celery encoded it or a producer wrote the marker object itself."""
    marker = {"__type__": "datetime", "__value__": "2026-01-01T00:00:00"}
    app = producer_app(clean.broker_url)
    by_kombu = match("marker-kombu", "a", "b")
    by_kombu["side_a"]["players"][0]["player_id"] = datetime(2026, 1, 1)
    app.send_task("ratings.apply_match", args=[by_kombu], queue=clean.queue)
    plain = match("marker-plain", "a", "b")
    plain["side_a"]["players"][0]["player_id"] = marker
    publish_match(app, plain, queue=clean.queue, validate=False)
    kombu_ts = match("marker-ts", "a", "b")
    kombu_ts["finished_at"] = datetime(2026, 1, 1, tzinfo=UTC)
    app.send_task("ratings.apply_match", args=[kombu_ts], queue=clean.queue)
    clean.wait_drained(3, timeout=60)
    with clean.connect() as conn:
        assert ended(conn) == {"marker-kombu": "wrong_type", "marker-plain": "wrong_type", "marker-ts": "wrong_type"}
        assert not conn.execute("SELECT 1 FROM players WHERE player_id LIKE '2026%'").fetchall()


def test_publish_match_turns_datetime_and_decimal_into_the_canonical_message(clean):
    """What a Python caller naturally passes is published as the contract's JSON and applied."""
    message = match("natural-1", "a", "b")
    message["finished_at"] = datetime(2026, 5, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    message["score"] = {"side_a": Decimal("3"), "side_b": Decimal("1.5")}
    publish_match(producer_app(clean.broker_url), message, queue=clean.queue)
    counts = clean.wait_drained(1, timeout=60)
    assert (counts.applied, counts.dead_letters) == (1, 0)
    with clean.connect() as conn:
        finished = conn.execute("SELECT finished_at FROM ledger WHERE match_id = 'natural-1'").fetchone()[0]
    assert finished == datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def test_requeue_publishes_the_dead_letters_message_again_byte_for_byte(clean):
    """A dead letter keeps the argument's exact bytes (odd spacing, key order, escapes); ``ratings
    dead-letters requeue`` publishes a message whose body is byte for byte the original one."""
    argument = (b'{ "match_id":"rq-1" ,"schema_version": 1, "ladder":"chess", "finished_at":"2026-05-01T12:00:00Z",'
                b'\n "side_a":{"players":[{"player_id":"caf\\u00e9"}]},"side_b":{"players":[{"player_id":"b"}]},'
                b'"outcome":"draw"}')
    app = producer_app(clean.broker_url)
    publish_body(app, argument, queue=clean.queue)
    clean.wait_drained(1, timeout=60)
    with clean.connect() as conn:
        dead_id, reason, raw = conn.execute("SELECT id, reason_code, raw_body FROM dead_letters").fetchone()
    assert reason == "unknown_ladder" and raw.encode() == argument

    idle = f"ratings-requeue-{uuid.uuid4().hex[:8]}"  # no worker consumes it: the message stays to be read
    r = redis.Redis.from_url(clean.broker_url)
    try:
        done = run_cli("dead-letters", "requeue", str(dead_id), RATINGS_QUEUE=idle)
        assert done.returncode == 0, done.stderr
        envelope = json.loads(r.lindex(idle, 0))
        body = base64.b64decode(envelope["body"])
        assert body == b"[[" + argument + b'],{},{"callbacks":null,"errbacks":null,"chain":null,"chord":null}]'
        assert envelope["headers"]["task"] == "ratings.apply_match"
    finally:
        r.delete(idle)


def test_a_string_argument_holding_json_text_still_validates_its_content(clean):
    """The older form: the argument is a JSON string whose content is the match's JSON text."""
    app = producer_app(clean.broker_url)
    app.send_task("ratings.apply_match", args=[json.dumps(match("as-text-1", "a", "b"))], queue=clean.queue)
    counts = clean.wait_drained(1, timeout=60)
    assert (counts.applied, counts.dead_letters) == (1, 0)


def test_publish_match_refuses_a_naive_datetime_before_publishing(clean):
    """A naive ``finished_at`` means no instant: refused with a clear error, nothing published."""
    message = match("naive-1", "a", "b")
    message["finished_at"] = datetime(2026, 5, 1, 12, 0)
    with pytest.raises(ValueError, match="naive datetime"):
        publish_match(producer_app(clean.broker_url), message, queue=clean.queue)
    time.sleep(0.5)
    with clean.connect() as conn:
        assert conn.execute("SELECT count(*) FROM dead_letters").fetchone()[0] == 0


def test_bytes_that_are_not_json_pushed_on_the_list_are_kept_as_they_came(clean):
    """``LPUSH ratings <not UTF-8, not JSON>``: an ``undecodable_body`` dead letter holding those bytes."""
    raw = b"\xff\xfe not json at all \x00"
    clean.redis.lpush(clean.queue, raw)
    counts = clean.wait_drained(1, timeout=60)
    assert (counts.applied, counts.dead_letters) == (0, 1)
    with clean.connect() as conn:
        reason, body, encoding = conn.execute("SELECT reason_code, raw_body, raw_encoding FROM dead_letters").fetchone()
    assert reason == "undecodable_body" and encoding == "base64" and base64.b64decode(body) == raw
