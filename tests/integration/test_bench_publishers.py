"""The benchmark's publishers: pre-encoded messages are the envelopes kombu itself writes, and every
one is pushed once, from several processes, with a publish time each.

The reference envelope is the one ``worker.producer.publish_body`` makes kombu push on a real Redis
list (not built by the code under test); no timing is asserted.
"""

from __future__ import annotations

import base64
import json
import uuid

import pytest
import redis

from worker.devtools.bench.publishers import encode_all, envelope, publish
from worker.producer import TASK_NAME, producer_app, publish_body

pytestmark = pytest.mark.integration


def test_a_pre_encoded_envelope_has_every_field_kombu_writes_with_the_same_values(servers) -> None:
    _, broker_url = servers
    client = redis.Redis.from_url(broker_url)
    queue = f"bench-envelope-{uuid.uuid4().hex[:8]}"
    argument = b'{"match_id":"m-1","x":[1,2.5,"\xc3\xa9"]}'
    try:
        task_id = publish_body(producer_app(broker_url, check_broker=False), argument, queue=queue)
        kombu_made = json.loads(client.rpop(queue))
    finally:
        client.delete(queue)
    ours = json.loads(envelope(TASK_NAME, argument, queue, task_id=task_id))

    assert set(ours) == set(kombu_made)
    assert set(ours["properties"]) == set(kombu_made["properties"])
    for key in ("content-encoding", "content-type"):
        assert ours[key] == kombu_made[key]
    assert base64.b64decode(ours["body"]) == base64.b64decode(kombu_made["body"])
    for key in ("correlation_id", "reply_to", "delivery_mode", "delivery_info", "priority", "body_encoding"):
        assert ours["properties"][key] == kombu_made["properties"][key], key
    assert isinstance(ours["properties"]["delivery_tag"], str)
    skip = {"origin"}  # the publishing process's pid@host
    assert {k: v for k, v in ours["headers"].items() if k not in skip} == \
           {k: v for k, v in kombu_made["headers"].items() if k not in skip}


def test_several_publishers_push_every_message_once_each_with_a_publish_time(servers) -> None:
    _, broker_url = servers
    client = redis.Redis.from_url(broker_url)
    queue = f"bench-publish-{uuid.uuid4().hex[:8]}"
    bodies = [{"n": i} for i in range(103)]
    try:
        out = publish(broker_url, queue, encode_all("ratings.noop", bodies, queue), publishers=3, chunk=10)
        items = client.lrange(queue, 0, -1)
    finally:
        client.delete(queue)
    assert out.publishers == 3
    args = sorted(json.loads(base64.b64decode(json.loads(i)["body"]))[0][0]["n"] for i in items)
    assert args == list(range(103))
    assert len(out.times) == 103 and all(out.first <= t <= out.last for t in out.times)
    assert out.cpu_seconds > 0


@pytest.mark.parametrize("count", [2000, 1981])  # 1981: shares of 661 / 660 / 660, 67 / 66 / 66 chunks
def test_publishers_in_lockstep_keep_the_queue_near_the_given_order(servers, count) -> None:
    """With ``lockstep`` the publishers wait for one another before each chunk: a message is
    popped (kombu's Redis transport pops the oldest first) within ``publishers x chunk`` places of
    where the given order puts it, so the bench's matches reach the workers in about finish order."""
    _, broker_url = servers
    client = redis.Redis.from_url(broker_url)
    queue = f"bench-lockstep-{uuid.uuid4().hex[:8]}"
    bodies = [{"n": i} for i in range(count)]
    try:
        publish(broker_url, queue, encode_all("ratings.noop", bodies, queue), publishers=3, chunk=10, lockstep=True)
        items = client.lrange(queue, 0, -1)[::-1]  # LPUSH: the oldest is last
    finally:
        client.delete(queue)
    order = [json.loads(base64.b64decode(json.loads(i)["body"]))[0][0]["n"] for i in items]
    assert sorted(order) == list(range(count))
    assert max(abs(place - n) for place, n in enumerate(order)) < 3 * 10


@pytest.mark.timeout(40)  # without the barrier's abort the others would wait out its 60 s timeout
def test_a_publisher_that_fails_in_lockstep_fails_the_publish_at_once(servers) -> None:
    _, broker_url = servers
    queue = f"bench-lockstep-fail-{uuid.uuid4().hex[:8]}"
    envelopes = encode_all("ratings.noop", [{"n": i} for i in range(300)], queue)
    envelopes[150] = None  # type: ignore[call-overload]  # redis-py refuses to send None (DataError) in that publisher's chunk
    try:
        with pytest.raises(RuntimeError, match="publisher process failed"):
            publish(broker_url, queue, envelopes, publishers=3, chunk=10, lockstep=True)
    finally:
        redis.Redis.from_url(broker_url).delete(queue)
