"""What ``publish_match`` does while Redis is stopped or restarting: bounded retries with backoff,
then a clear exception; a publish during a short restart goes through.

Each test runs its own Redis server on a spare loopback port (embedded redis-server), stopped and
started for real."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from worker.devtools.embedded import EmbeddedServers
from worker.producer import PUBLISH_RETRY_POLICY, BrokerUnavailable, producer_app, publish_match

pytestmark = pytest.mark.integration

MATCH = {"schema_version": 1, "match_id": "down-1", "ladder": "elo", "finished_at": "2026-05-01T12:00:00Z",
         "side_a": {"players": [{"player_id": "a"}]}, "side_b": {"players": [{"player_id": "b"}]},
         "outcome": "draw"}


@pytest.fixture
def own(tmp_path):
    servers = EmbeddedServers.start(tmp_path / "own", postgres=False, redis_durable=True)
    yield servers
    servers.stop()


def test_publish_with_redis_stopped_retries_then_raises_broker_unavailable(own):
    """Redis stopped: the publish gives up after the retry policy with BrokerUnavailable, which
    names the task id and tells the caller to keep the match and publish it again later."""
    app = producer_app(own.broker_url)
    own.stop_redis()
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable) as caught:
        publish_match(app, MATCH, queue="ratings")
    print(f"gave up after {time.monotonic() - started:.1f} s ({PUBLISH_RETRY_POLICY})")
    assert caught.value.task_id and "publish it again later" in str(caught.value)


def test_publish_during_a_redis_restart_goes_through_once_redis_is_back(own):
    """Redis stopped, started again a second later while the publish is retrying: one message queued."""
    app = producer_app(own.broker_url)
    publish_match(app, {**MATCH, "match_id": "before"}, queue="ratings")  # an open connection to lose
    own.stop_redis()
    restart = threading.Timer(1.0, own.start_redis)
    restart.start()
    try:
        publish_match(app, MATCH, queue="ratings")
    finally:
        restart.join()
    assert redis.Redis.from_url(own.broker_url).llen("ratings") == 2


def test_republishing_after_broker_unavailable_is_the_same_message(own):
    """The match refused while Redis was down is published later with the same canonical body:
    the worker's idempotency key (match_id + payload hash) makes a second copy a duplicate."""
    app = producer_app(own.broker_url)
    own.stop_redis()
    with pytest.raises(BrokerUnavailable):
        publish_match(app, MATCH, queue="ratings")
    own.start_redis()
    publish_match(app, MATCH, queue="ratings")
    publish_match(app, MATCH, queue="ratings")
    import base64
    import json
    r = redis.Redis.from_url(own.broker_url)
    bodies = {base64.b64decode(json.loads(item)["body"]) for item in r.lrange("ratings", 0, -1)}
    assert r.llen("ratings") == 2 and len(bodies) == 1
