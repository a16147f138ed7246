"""What ``publish_match`` does while Redis is stopped or restarting: bounded retries with backoff,
then a clear exception; a publish during a short restart goes through.

Each test runs its own Redis server on a spare loopback port (embedded redis-server), stopped and
started for real."""

from __future__ import annotations

import logging
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


def _retry_waits(caplog, broker_url: str) -> list[float]:
    """The waits (seconds) a publish to ``broker_url`` logged before it raised BrokerUnavailable."""
    caplog.clear()
    app = producer_app(broker_url, check_broker=False)
    with caplog.at_level(logging.DEBUG, logger="worker.producer"), pytest.raises(BrokerUnavailable):
        publish_match(app, MATCH, queue="ratings")
    return [float(r.args[2]) for r in caplog.records if r.getMessage().startswith("broker unreachable")]


@pytest.mark.parametrize("scheme", ["sentinel", "amqp"])
def test_a_url_naming_three_hosts_retries_as_long_as_one_naming_one(caplog, scheme):
    """kombu counts each host of a ``;``-separated URL (three Sentinels, three RabbitMQ nodes) as a
    retry and waits only after trying them all: the plain retry policy gave up after one wait of
    0.5 s (a Sentinel failover of 2.4 s refused publishes). None of the hosts answers here (closed
    ports): the publish waits as long, in the same steps, as one to a single unreachable Redis."""
    from worker.devtools.runtime import _free_port

    single = _retry_waits(caplog, f"redis://127.0.0.1:{_free_port()}/0")
    ports = [_free_port() for _ in range(3)]
    if scheme == "sentinel":
        url = f"sentinel://127.0.0.1:{ports[0]}/0?master_name=ratings;" + ";".join(
            f"sentinel://127.0.0.1:{p}" for p in ports[1:])
    else:
        url = ";".join(f"amqp://guest:guest@127.0.0.1:{p}//" for p in ports)
    several = _retry_waits(caplog, url)
    print(f"waits: one host {single}, three hosts ({scheme}) {several}")
    assert len(single) >= 3 and several == single


def test_a_rabbitmq_login_the_broker_refuses_is_broker_unavailable():
    """A wrong password on the machine's RabbitMQ: the producer raises BrokerUnavailable (what a game
    backend catches), naming AccessRefused, not amqp's own exception."""
    import socket

    try:
        socket.create_connection(("127.0.0.1", 5672), 2).close()
    except OSError:
        pytest.skip("no RabbitMQ on 127.0.0.1:5672 (.ci/run starts one)")
    app = producer_app("amqp://guest:wrong-password@127.0.0.1:5672//", check_broker=False)
    with pytest.raises(BrokerUnavailable, match="AccessRefused"):
        publish_match(app, MATCH, queue="ratings-test-access-refused")
