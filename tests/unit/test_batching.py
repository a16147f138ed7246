"""The consumer side of batching (worker.service.batching.Batcher) without a server: when a batch is sent to
the pool, and how each message of a batch is acknowledged or requeued. The pool, timer and
requests are stand-ins that record what the batcher did; the transaction side is tested against a
real PostgreSQL in tests/integration/test_batches.py."""

from __future__ import annotations

import pytest
from celery import bootsteps

from worker.bootstrap import RATING_TASK, create_app
from worker.service import batching
from worker.settings import Settings


class FakeRequest:
    """A buffered message: records whether it was acknowledged or requeued."""

    def __init__(self, n: int):
        self.id = f"task-{n}"
        self.args = [{"n": n}]
        self.kwargs = {}
        self.settled: str | None = None
        self.message = None
        self.acknowledged = False

    def acknowledge(self):
        self.settled = "ack"

    def reject(self, requeue=False):
        self.settled = "requeue" if requeue else "drop"


class FakePool:
    """Records each batch sent, with its callbacks, instead of running it."""

    def __init__(self, limit: int):
        self.limit = limit
        self.jobs: list[dict] = []

    def apply_async(self, target, args, callback, error_callback, **options):
        self.jobs.append({"target": target, "calls": args[0], "done": callback, "failed": error_callback, **options})


class FakeTimer:
    def __init__(self):
        self.pending = []

    def call_after(self, secs, fun):
        self.pending.append((secs, fun))
        return object()

    def fire(self):
        pending, self.pending = self.pending, []
        for _, fun in pending:
            fun()


class FakeConsumer:
    def __init__(self, limit: int):
        self.pool = FakePool(limit)
        self.timer = FakeTimer()
        self.hostname = "test@host"
        self.event_dispatcher = None
        self.connection_errors = ()

        class Blueprint:
            state = bootsteps.RUN

        self.blueprint = Blueprint()


@pytest.fixture
def make_batcher():
    def make(batch_size=3, flush_interval=0.002, children=1):
        consumer = FakeConsumer(children)
        settings = Settings(batch_size=batch_size, batch_flush_interval=flush_interval)
        app = create_app(settings)
        return batching.Batcher(app.tasks[RATING_TASK], app, consumer, settings), consumer

    return make


def test_a_full_batch_goes_to_the_pool_at_once_with_the_calls_in_queue_order(make_batcher):
    """batch_size messages with a free child: one pool job at once (no timer), calls in queue order,
    the task's time limits on the job."""
    batcher, consumer = make_batcher(batch_size=3)
    for n in range(3):
        batcher.add(FakeRequest(n))
    [job] = consumer.pool.jobs
    assert job["target"] is batching.apply_batch_in_child
    assert [c[0] for c in job["calls"]] == ["task-0", "task-1", "task-2"]
    assert job["calls"][1] == ("task-1", [{"n": 1}], {})
    assert job["timeout"] and job["soft_timeout"] and job["soft_timeout"] < job["timeout"]


def test_with_a_free_child_a_lone_message_waits_only_the_flush_interval(make_batcher):
    """Fewer than batch_size messages and a free child: nothing is sent until the flush timer fires
    (flush_interval seconds), then everything buffered goes in one batch."""
    batcher, consumer = make_batcher(batch_size=100, flush_interval=0.002)
    batcher.add(FakeRequest(0))
    batcher.add(FakeRequest(1))
    assert consumer.pool.jobs == []
    assert [secs for secs, _ in consumer.timer.pending] == [0.002]  # one timer for the buffer, not one each
    consumer.timer.fire()
    assert [len(j["calls"]) for j in consumer.pool.jobs] == [2]


def test_while_every_child_is_busy_messages_wait_and_the_finished_batch_flushes_them(make_batcher):
    """One child busy with a batch: later messages are buffered (no second job, even when a full
    batch is waiting); when the batch returns, the next one leaves at once, at most batch_size."""
    batcher, consumer = make_batcher(batch_size=2, children=1)
    first = [FakeRequest(n) for n in range(2)]
    for r in first:
        batcher.add(r)
    later = [FakeRequest(n) for n in range(2, 7)]
    for r in later:
        batcher.add(r)
    consumer.timer.fire()
    assert len(consumer.pool.jobs) == 1
    consumer.pool.jobs[0]["done"](["ack", "ack"])
    assert [len(j["calls"]) for j in consumer.pool.jobs] == [2, 2]
    assert len(batcher.buffer) == 3


def test_each_message_is_acknowledged_or_requeued_by_its_own_verdict(make_batcher):
    """The child's verdicts: 'ack' for a committed outcome, 'requeue' for one that did not commit."""
    batcher, consumer = make_batcher(batch_size=3)
    requests = [FakeRequest(n) for n in range(3)]
    for r in requests:
        batcher.add(r)
    consumer.pool.jobs[0]["done"](["ack", "requeue", "ack"])
    assert [r.settled for r in requests] == ["ack", "requeue", "ack"]
    assert batcher.in_flight == 0


def test_acknowledgements_of_a_batch_go_to_the_broker_together_when_the_channel_can(make_batcher):
    """On the project's Redis transport (a channel with basic_ack_many) the acknowledged messages of
    a batch cost one broker round trip; requeued ones are rejected one by one."""
    batcher, consumer = make_batcher(batch_size=3)

    class Channel:
        def __init__(self):
            self.bulk = []

        def basic_ack_many(self, tags):
            self.bulk.append(list(tags))

    class Message:
        def __init__(self, channel, tag):
            self.channel, self.delivery_tag, self._state = channel, tag, "RECEIVED"

        @property
        def acknowledged(self):
            return self._state == "ACK"

    channel = Channel()
    requests = [FakeRequest(n) for n in range(3)]
    for n, r in enumerate(requests):
        r.message = Message(channel, f"tag-{n}")
        batcher.add(r)
    consumer.pool.jobs[0]["done"](["ack", "requeue", "ack"])
    assert channel.bulk == [["tag-0", "tag-2"]]
    assert [r.acknowledged for r in requests] == [True, False, True]
    assert [r.message.acknowledged for r in requests] == [True, False, True]
    assert requests[1].settled == "requeue"


def test_a_lost_child_requeues_every_message_of_its_batch(make_batcher):
    """A pool job that fails (child SIGKILLed, hard time limit) acknowledges nothing: all requeued."""
    batcher, consumer = make_batcher(batch_size=2)
    requests = [FakeRequest(n) for n in range(2)]
    for r in requests:
        batcher.add(r)
    consumer.pool.jobs[0]["failed"](RuntimeError("worker lost"))
    assert [r.settled for r in requests] == ["requeue", "requeue"]
    assert batcher.in_flight == 0


def test_a_retired_batcher_drops_its_buffer_and_acknowledges_nothing_on_the_closed_channel(make_batcher):
    """After a lost broker connection the consumer is replaced: buffered messages are dropped and a
    batch finishing later is neither acknowledged nor requeued (the broker redelivers them all)."""
    batcher, consumer = make_batcher(batch_size=2)
    in_pool = [FakeRequest(n) for n in range(2)]
    for r in in_pool:
        batcher.add(r)
    batcher.add(FakeRequest(2))
    batcher.retire()
    assert batcher.buffer == []
    consumer.pool.jobs[0]["done"](["ack", "ack"])
    assert [r.settled for r in in_pool] == [None, None]
    assert len(consumer.pool.jobs) == 1


def test_an_acknowledgement_that_fails_is_logged_and_the_rest_still_settle(make_batcher):
    """An ack raising (a closed channel) does not stop the worker or the other messages' acks."""
    batcher, consumer = make_batcher(batch_size=2)

    class Broken(FakeRequest):
        def acknowledge(self):
            raise AttributeError("'NoneType' object has no attribute 'client'")

    requests = [Broken(0), FakeRequest(1)]
    for r in requests:
        batcher.add(r)
    consumer.pool.jobs[0]["done"](["ack", "ack"])
    assert requests[1].settled == "ack"


def test_a_consumer_restart_retires_the_previous_batcher(monkeypatch):
    """The strategy is built again when the consumer restarts; the old batcher is retired then."""
    monkeypatch.setattr(batching, "_current", {})
    app = create_app(Settings(batch_size=10))
    first = batching.strategy(app.tasks[RATING_TASK], app, FakeConsumer(1)).__self__
    second = batching.strategy(app.tasks[RATING_TASK], app, FakeConsumer(1)).__self__
    assert first.retired and not second.retired


def test_batch_size_one_uses_celerys_default_strategy(monkeypatch):
    """RATINGS_BATCH_SIZE=1 keeps one task per message: Celery's own strategy, no batcher."""
    from celery.worker import strategy as celery_strategy

    seen = []
    app = create_app(Settings(batch_size=1))
    monkeypatch.setattr(batching, "default_strategy", lambda *a, **k: seen.append(a) or "default")
    assert batching.strategy(app.tasks[RATING_TASK], app, FakeConsumer(1)) == "default"
    assert seen and celery_strategy.default is not None


@pytest.mark.parametrize(("batch_size", "prefetch", "reserved"), [(1, 4, 4), (100, 4, 200), (2, 8, 8)])
def test_each_child_reserves_two_batches_when_batching(batch_size, prefetch, reserved):
    """Reserved messages per child: the prefetch multiplier without batching, else 2 x batch_size
    (one batch applied while the next fills), never fewer than the prefetch multiplier."""
    assert Settings(batch_size=batch_size, prefetch_multiplier=prefetch).reserved_per_child == reserved


def test_batching_needs_a_visibility_timeout_above_two_time_limits():
    """A buffered message waits for one batch, then its own: the visibility timeout must exceed
    2 x the time limit plus the flush interval, or Redis redelivers it while it waits."""
    Settings(batch_size=1, visibility_timeout=20, task_time_limit=15)
    Settings(batch_size=100, visibility_timeout=20, task_time_limit=9)
    with pytest.raises(ValueError, match="twice"):
        Settings(batch_size=100, visibility_timeout=20, task_time_limit=15)


@pytest.mark.parametrize("field", [{"batch_size": 0}, {"batch_size": 1001}, {"batch_flush_interval": -1},
                                   {"batch_flush_interval": 2}, {"poll_linger": -0.01}, {"poll_linger": 0.6}])
def test_batch_settings_out_of_range_are_refused(field):
    """Batch size 1 to 1000, flush interval 0 to 1 s, poll linger 0 to 0.5 s."""
    with pytest.raises(ValueError):
        Settings(**field)


def test_batch_defaults_are_pinned():
    """Defaults: up to 100 matches per transaction, 2 ms linger in the buffer, 25 ms before the
    next poll once a poll emptied the queue; the linger reaches the Redis transport's options."""
    s = Settings()
    assert (s.batch_size, s.batch_flush_interval, s.poll_linger) == (100, 0.002, 0.025)
    from celery import Celery

    from worker.service.celery_app import configure
    assert configure(Celery(), s).conf.broker_transport_options["poll_linger"] == 0.025
