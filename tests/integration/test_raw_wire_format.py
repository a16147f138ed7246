"""The raw wire format (``docs/game-backends/wire-format.md``), pushed with a plain Redis
client and no Celery or kombu: the bytes a game server in any language can send."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.redis_broker]  # tests the Redis broker itself: not run on the RabbitMQ pass

# The match as the game server writes it: any spacing, any key order.
MATCH = ('{"schema_version": 1, "match_id": "raw-1", "ladder": "elo", "finished_at": "2026-05-01T12:00:00Z", '
         '"side_a": {"players": [{"player_id": "Zoë"}]}, "side_b": {"players": [{"player_id": "Ana"}]}, '
         '"outcome": "side_a_won"}')


def envelope(body: bytes, task_id: str, queue: str) -> bytes:
    """The list item, written out field by field as the documentation gives it."""
    return json.dumps({
        "body": base64.b64encode(body).decode("ascii"),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {"lang": "go", "task": "ratings.apply_match", "id": task_id},
        "properties": {
            "correlation_id": task_id,
            "delivery_tag": str(uuid.uuid4()),
            "body_encoding": "base64",
            "delivery_info": {"exchange": "", "routing_key": queue},
            "delivery_mode": 2,
            "priority": 0,
        },
    }).encode()


def test_a_match_pushed_with_lpush_in_the_documented_envelope_is_applied(clean):
    """LPUSH of the documented envelope: applied; 1200 vs 1200 at K=30: Zoë 1215, Ana 1185 (E = 0.5)."""
    body = b"[[" + MATCH.encode() + b"], {}, {}]"
    clean.redis.lpush(clean.queue, envelope(body, str(uuid.uuid4()), clean.queue))
    counts = clean.wait_drained(1, timeout=60)
    assert (counts.applied, counts.dead_letters) == (1, 0)
    with clean.connect() as conn:
        rows = dict(conn.execute("SELECT player_id, rating FROM players").fetchall())
    assert rows == {"Zoë": 1215.0, "Ana": 1185.0}


def test_a_raw_message_at_priority_9_is_applied(clean):
    """The same envelope on kombu's priority-9 list (``<queue>\\x06\\x169``) is consumed too."""
    body = b"[[" + MATCH.replace("raw-1", "raw-9").encode() + b"],{},{}]"
    clean.redis.lpush(clean.queue + "\x06\x169", envelope(body, str(uuid.uuid4()), clean.queue))
    counts = clean.wait_drained(1, timeout=60)
    assert (counts.applied, counts.dead_letters) == (1, 0)


def test_an_invalid_raw_match_keeps_its_exact_bytes_in_the_dead_letter(clean):
    """A bad match (naive finished_at) is dead-lettered with the very bytes the server sent."""
    bad = MATCH.replace("raw-1", "raw-bad").replace("12:00:00Z", "12:00:00")
    body = b"[[" + bad.encode() + b"],{},{}]"
    clean.redis.lpush(clean.queue, envelope(body, str(uuid.uuid4()), clean.queue))
    clean.wait_drained(1, timeout=60)
    with clean.connect() as conn:
        reason, raw = conn.execute("SELECT reason_code, raw_body FROM dead_letters").fetchone()
    assert reason == "naive_timestamp" and raw.encode() == bad.encode()
