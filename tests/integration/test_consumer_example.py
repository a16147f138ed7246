"""The README's consumer-group example, run against the real stream the relay fills."""

from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.test_worker import match

pytestmark = pytest.mark.integration


def load_example():
    spec = importlib.util.spec_from_file_location("consumer_example", REPO_ROOT / "examples" / "consumer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_consumer_example_handles_each_event_once_and_drops_redelivered_ones(clean, publisher):
    """Every event is handled once and acknowledged; an entry republished with the same event id is dropped."""
    example = load_example()
    for n in range(10):
        publisher(match(f"cons-{n}", "amy", "bea" if n % 2 else "cid"))
    clean.wait_drained(10)
    clean.wait_stream(20)
    handled = []
    consumer = example.RatingEventConsumer(clean.redis, handled.append, stream=clean.stream, group="test-group")
    while consumer.poll(count=7, block_ms=200):
        pass
    assert len(handled) == 20
    assert len({e["event_id"] for e in handled}) == 20
    # The relay may publish an event twice (crash between XADD and marking the row): simulate it.
    _, fields = clean.redis.xrange(clean.stream, count=1)[0]
    clean.redis.xadd(clean.stream, fields)
    assert consumer.poll(block_ms=200) == 1
    assert consumer.duplicates == 1 and len(handled) == 20
    assert consumer.gaps == []
    assert clean.redis.xpending(clean.stream, "test-group")["pending"] == 0
    clean.redis.delete(consumer.seen_key, consumer.sequence_key)


def test_an_event_whose_handler_fails_is_handled_again_on_the_next_poll(clean, publisher):
    """A handler that raises leaves its event unacknowledged and unseen; the next poll retries it."""
    example = load_example()
    publisher(match("retry-1", "amy", "bea"))
    clean.wait_drained(1)
    clean.wait_stream(2)
    handled, failures = [], []

    def flaky(event):
        if not failures:
            failures.append(event["event_id"])
            raise RuntimeError("downstream database down")
        handled.append(event)

    consumer = example.RatingEventConsumer(clean.redis, flaky, stream=clean.stream, group="flaky-group")
    with pytest.raises(RuntimeError):
        consumer.poll(block_ms=200)
    while consumer.poll(block_ms=200):
        pass
    assert sorted(e["event_id"] for e in handled) == sorted(
        f["event_id"] for _, f in clean.redis.xrange(clean.stream))
    assert failures[0] in {e["event_id"] for e in handled}
    clean.redis.delete(consumer.seen_key, consumer.sequence_key)
