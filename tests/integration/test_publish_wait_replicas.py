"""The producer's strongest Redis setting: ``wait_replicas`` (Redis ``WAIT`` after each publish, on
the connection that wrote). A Redis without replicas cannot acknowledge: the publish raises a clear
error with its reason code, and the message is on the primary all the same (a repeat is safe).
The failover scenario with a replica that does acknowledge: tests/faults/test_redis_failover.py."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from worker.producer import BrokerUnavailable, ReplicasNotAcknowledged, producer_app, publish_match

pytestmark = pytest.mark.integration

MATCH = {"schema_version": 1, "match_id": "wait-1", "ladder": "elo", "finished_at": "2026-05-01T12:00:00Z",
         "side_a": {"players": [{"player_id": "a"}]}, "side_b": {"players": [{"player_id": "b"}]},
         "outcome": "draw"}


def test_a_publish_no_replica_acknowledged_raises_replicas_not_acknowledged_after_the_timeout(servers):
    """The run's Redis has no replica: ``wait_replicas=1`` waits its 200 ms, then raises
    ReplicasNotAcknowledged (a BrokerUnavailable, reason ``replicas_not_acknowledged``) naming the
    task id, 0 of 1 acknowledged; the message itself was pushed on the queue."""
    _, broker_url = servers
    client = redis.Redis.from_url(broker_url)
    if client.info("replication")["connected_slaves"]:
        pytest.skip("this Redis has replicas: WAIT would succeed")
    queue = f"ratings-test-wait-{uuid.uuid4().hex[:8]}"
    app = producer_app(broker_url, wait_replicas=1, wait_timeout_ms=200)
    started = time.monotonic()
    try:
        with pytest.raises(ReplicasNotAcknowledged) as caught:
            publish_match(app, MATCH, queue=queue)
        waited = time.monotonic() - started
        error = caught.value
        assert isinstance(error, BrokerUnavailable)
        assert (error.reason, error.acknowledged, error.required) == ("replicas_not_acknowledged", 0, 1)
        assert error.task_id and error.task_id in str(error)
        assert "replicas_not_acknowledged" in str(error) and "publish it again later" in str(error)
        assert waited >= 0.2  # WAIT's own timeout, not an immediate refusal
        assert client.llen(queue) == 1  # on the primary: not lost, not confirmed either
    finally:
        client.delete(queue, f"_kombu.binding.{queue}")


def test_without_wait_replicas_the_same_redis_acknowledges_at_once(servers):
    """The default (``wait_replicas=0``) issues no WAIT: the same publish returns its task id."""
    _, broker_url = servers
    queue = f"ratings-test-wait-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(broker_url)
    try:
        assert publish_match(producer_app(broker_url), MATCH, queue=queue)
        assert client.llen(queue) == 1
    finally:
        client.delete(queue, f"_kombu.binding.{queue}")
