"""The window between taking a message from the Redis queue and recording it as unacknowledged.

kombu's Redis transport pops a message (``BRPOP``) and then records it in the ``unacked`` hash in a
second command: a Redis stopped between the two lost the message (one run in three of the
restart-redis scenario). :mod:`worker.service.transport` moves it atomically into an in-flight list first.
Each test stops the scenario's own Redis (append-only, fsync always) exactly in that window: right
after the pop/move reply, before the unacked bookkeeping.
"""

from __future__ import annotations

import json
import time

import pytest
import redis
from kombu import Connection, Exchange, Queue
from kombu.transport import redis as kombu_redis

from worker.devtools.embedded import EmbeddedServers
from worker.service import transport

pytestmark = [pytest.mark.redis_broker, pytest.mark.faults, pytest.mark.timeout(120)]  # tests the Redis broker itself: not run on the RabbitMQ pass

QUEUE = "ratings-pop-window"


@pytest.fixture
def own(tmp_path):
    servers = EmbeddedServers.start(tmp_path / "own", postgres=False, redis_durable=True)
    yield servers
    servers.stop()


def _publish(url: str, body: dict) -> Queue:
    queue = Queue(QUEUE, Exchange(QUEUE), QUEUE)
    with Connection(url, transport="worker.service.transport:Transport") as conn:
        conn.Producer().publish(body, exchange=queue.exchange, routing_key=QUEUE, declare=[queue])
    return queue


def _consume_with_restart_in_window(own, transport_name, owner, method, monkeypatch, queue) -> None:
    """Consume once; Redis is stopped after the pop reply and before ``owner.method`` records it
    as unacknowledged (kombu: ``QoS.append``; worker.service.transport: the claim script, run by
    ``Channel._claim_and_take_more``)."""
    original = getattr(owner, method)

    def record_after_a_stop(self, *args, **kwargs):
        own.stop_redis()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(owner, method, record_after_a_stop)
    received = []
    with Connection(own.broker_url, transport=transport_name) as conn:
        with conn.Consumer(queue, callbacks=[lambda body, message: received.append(body)]):
            with pytest.raises(conn.connection_errors):
                conn.drain_events(timeout=5)
    monkeypatch.setattr(owner, method, original)
    own.start_redis()
    assert received == []  # the consumer never got it: the bookkeeping failed first


def test_stock_kombu_transport_loses_a_message_popped_just_before_a_redis_stop(own, monkeypatch):
    """The window this module is about, shown on kombu's own transport: nothing holds the message."""
    queue = _publish(own.broker_url, {"n": 1})
    _consume_with_restart_in_window(own, "redis", kombu_redis.QoS, "append", monkeypatch, queue)
    r = redis.Redis.from_url(own.broker_url)
    assert (r.llen(QUEUE), r.hlen("unacked")) == (0, 0)


def test_message_moved_just_before_a_redis_stop_survives_and_is_delivered_once(own, monkeypatch):
    """With worker.service.transport the message is in this process's in-flight list after the restart, and
    the next consumer (a reconnection) pushes it back and receives it, once."""
    queue = _publish(own.broker_url, {"n": 1})
    _consume_with_restart_in_window(own, "worker.service.transport:Transport", transport.Channel,
                                    "_claim_and_take_more", monkeypatch, queue)
    r = redis.Redis.from_url(own.broker_url)
    inflight = r.zrange(transport.INFLIGHT, 0, -1)
    assert len(inflight) == 1 and r.llen(inflight[0]) == 1 and r.llen(QUEUE) == 0
    assert json.loads(r.lindex(inflight[0], 0))["body"]  # the message itself, persisted by the AOF

    received = []
    with Connection(own.broker_url, transport="worker.service.transport:Transport") as conn:
        with conn.Consumer(queue, callbacks=[lambda body, message: (received.append(body), message.ack())]):
            conn.drain_events(timeout=5)
            with pytest.raises(TimeoutError):
                conn.drain_events(timeout=1.5)
    assert received == [{"n": 1}]
    assert (r.llen(inflight[0]), r.llen(QUEUE), r.hlen("unacked"), r.zcard("unacked_index")) == (0, 0, 0, 0)


def test_in_flight_list_of_a_dead_consumer_is_pushed_back_after_the_visibility_timeout(own):
    """A consumer killed between the move and the claim leaves its in-flight list: the unacked
    restore of any live consumer pushes it back once its owner has been silent that long."""
    _publish(own.broker_url, {"n": 2})
    r = redis.Redis.from_url(own.broker_url)
    dead = f"{transport.INFLIGHT}\x06\x16deadhost.1.x\x06\x16{QUEUE}"
    r.lmove(QUEUE, dead, "RIGHT", "LEFT")
    r.zadd(transport.INFLIGHT, {dead: time.time() - 30})
    with Connection(own.broker_url, transport="worker.service.transport:Transport",
                    transport_options={"visibility_timeout": 60}) as conn:
        channel = conn.channel()
        channel.basic_consume(QUEUE, False, lambda message: None, "t")
        channel.qos.restore_visible(num=10, interval=1)
        assert r.llen(QUEUE) == 0 and r.llen(dead) == 1  # silent 30 s < 60 s: maybe still alive
    with Connection(own.broker_url, transport="worker.service.transport:Transport",
                    transport_options={"visibility_timeout": 10}) as conn:
        channel = conn.channel()
        channel.basic_consume(QUEUE, False, lambda message: None, "t")
        channel.qos.restore_visible(num=10, interval=1)
    assert (r.llen(QUEUE), r.llen(dead), r.zscore(transport.INFLIGHT, dead)) == (1, 0, None)


def test_a_message_pushed_back_meanwhile_is_not_claimed_twice(own):
    """A recovery racing the claim wins or loses atomically: the claim of a message that is no
    longer in the in-flight list records nothing and delivers nothing (it is on the queue again)."""
    queue = _publish(own.broker_url, {"n": 3})
    r = redis.Redis.from_url(own.broker_url)
    with Connection(own.broker_url, transport="worker.service.transport:Transport") as conn:
        channel = conn.channel()
        channel.basic_consume(QUEUE, False, lambda message: None, "t")
        payload = channel._get(QUEUE)  # moved into the in-flight list, not yet claimed
        assert channel.recover_inflight() == 1  # a recovery pushes it back first
        message = channel.Message(payload, channel=channel)
        with pytest.raises(transport.Empty):
            channel.qos.append(message, message.delivery_tag)
        channel._pending = None
    assert (r.llen(QUEUE), r.hlen("unacked")) == (1, 0)
    assert queue.name == QUEUE


def _evals(r: redis.Redis) -> int:
    """Scripts run since the last CONFIG RESETSTAT (by text or by SHA-1)."""
    stats = r.info("commandstats")
    return sum(int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_eval", "cmdstat_evalsha"))


def test_a_backlog_and_the_claim_of_the_first_message_take_two_round_trips(own):
    """Five waiting messages: one script moves the first (TAKE_FIRST), one more records it and
    takes the four others (CLAIM_AND_TAKE_MORE); each delivered once, recorded as unacknowledged
    until acknowledged, nothing left in any list. Before the merge it took three scripts."""
    for n in range(5):
        queue = _publish(own.broker_url, {"n": n})
    r = redis.Redis.from_url(own.broker_url)
    r.config_resetstat()
    received = []
    with Connection(own.broker_url, transport="worker.service.transport:Transport") as conn:
        with conn.Consumer(queue, callbacks=[lambda body, message: received.append((body, message))]):
            conn.drain_events(timeout=5)
            assert _evals(r) == 2
            while len(received) < 5:
                conn.drain_events(timeout=5)
            assert [body for body, _ in received] == [{"n": n} for n in range(5)]
            assert (r.hlen("unacked"), r.zcard("unacked_index"), r.llen(QUEUE)) == (5, 5, 0)
            for _, message in received:
                message.ack()
    inflight = r.zrange(transport.INFLIGHT, 0, -1)
    assert (r.hlen("unacked"), r.zcard("unacked_index"), r.llen(QUEUE)) == (0, 0, 0)
    assert all(r.llen(key) == 0 for key in inflight)


def test_a_message_pushed_back_before_the_merged_claim_is_not_delivered(own):
    """A recovery wins the race with CLAIM_AND_TAKE_MORE: the claim records and delivers nothing
    (the message is on the queue again), and the same script's take delivers it once, from the queue."""
    queue = _publish(own.broker_url, {"n": 4})
    _publish(own.broker_url, {"n": 5})
    r = redis.Redis.from_url(own.broker_url)
    received = []
    with Connection(own.broker_url, transport="worker.service.transport:Transport") as conn:
        channel = conn.channel()
        channel.basic_consume(QUEUE, False, lambda message: received.append(message), "t")
        inflight = channel._inflight(QUEUE)
        item = r.lmove(QUEUE, inflight, "RIGHT", "LEFT")  # the first message, moved ({"n": 4})
        assert channel.recover_inflight() == 1  # a recovery pushes it back first (oldest again)
        assert channel._claim_and_take_more(inflight, item, QUEUE) is True
        # {"n": 4} once (taken anew from the queue, not claimed from the in-flight list), then {"n": 5}
        assert [m.decode() for m in received] == [{"n": 4}, {"n": 5}]
        assert (r.hlen("unacked"), r.llen(QUEUE), r.llen(inflight)) == (2, 0, 0)
    assert queue.name == QUEUE


def test_a_script_cache_flushed_under_an_idle_consumer_costs_one_empty_poll_and_no_message(own):
    """The poll sends TAKE_FIRST by its SHA-1 (EVALSHA): after SCRIPT FLUSH the server answers
    NOSCRIPT once, the channel loads the scripts again, and the next poll takes the message, which
    is delivered once and recorded as unacknowledged."""
    r = redis.Redis.from_url(own.broker_url)
    queue = Queue(QUEUE, Exchange(QUEUE), QUEUE)
    received = []
    with Connection(own.broker_url, transport="worker.service.transport:Transport") as conn:
        with conn.Consumer(queue, callbacks=[lambda body, message: received.append(body)]):
            r.script_flush()
            r.config_resetstat()
            _publish(own.broker_url, {"n": 6})
            conn.drain_events(timeout=5)
            assert received == [{"n": 6}]
            assert r.info("errorstats").get("errorstat_NOSCRIPT", {}).get("count") == 1
            assert (r.hlen("unacked"), r.llen(QUEUE)) == (1, 0)
