"""The documented consumer example (examples/consumer.py, a thin use of worker.consumer), run against the real
stream the relay fills."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.test_worker import match, ratings
from worker.consumer import CliBackfill

pytestmark = pytest.mark.integration


def load_example():
    spec = importlib.util.spec_from_file_location("consumer_example", REPO_ROOT / "examples" / "consumer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_consumer_example_ends_with_every_players_rating_and_drops_redelivered_events(clean, publish_in_order):
    """Every event handled once and acknowledged, the ratings equal the database's; an entry republished
    with the same event id is dropped."""
    example = load_example()
    publish_in_order([match(f"cons-{n}", "amy", "bea" if n % 2 else "cid") for n in range(10)])
    clean.wait_stream(20)
    held: dict = {}
    consumer = example.leaderboard_consumer(clean.redis, held, stream=clean.stream, group="test-group")
    report = consumer.run_until_idle(count=7)
    assert report.handled == 20 and report.gaps == []
    assert held == {key: rating for key, (rating, _) in ratings(clean).items()}
    # The relay may publish an event twice (crash between XADD and marking the row): simulate it.
    _, fields = clean.redis.xrange(clean.stream, count=1)[0]
    clean.redis.xadd(clean.stream, fields)
    consumer.run_until_idle()
    assert consumer.report.duplicates == 1 and consumer.report.handled == 20
    assert clean.redis.xpending(clean.stream, "test-group")["pending"] == 0
    consumer.state.clear()


def test_the_example_backfills_through_the_cli_after_the_stream_lost_events(clean, publish_in_order):
    """The stream is emptied after the first 4 events (as if trimmed): the example's consumer takes the rest
    from `ratings events read` (JSON Lines) and ends with the database's ratings."""
    example = load_example()
    publish_in_order([match(f"lost-{n}", "amy", "bea") for n in range(6)])
    clean.wait_stream(12)
    entries = clean.redis.xrange(clean.stream)
    held: dict = {}
    backfill = CliBackfill([sys.executable, "-m", "worker"], env={"RATINGS_DATABASE_URL": clean.database_url})
    consumer = example.leaderboard_consumer(clean.redis, held, stream=clean.stream, group="lost-group",
                                            backfill=backfill)
    clean.redis.xtrim(clean.stream, maxlen=len(entries) - 4, approximate=False)  # lose the first 4 entries
    consumer.run_until_idle()
    assert held == {key: rating for key, (rating, _) in ratings(clean).items()}
    assert consumer.report.backfilled >= 4 and backfill.calls >= 1
    consumer.state.clear()
