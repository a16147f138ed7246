"""Deferred matches without a server: which matches of a batch are deferred, how the
batcher holds and retries them (backoff, prefetch, the visibility-timeout bound), the SIGSTOP fault
hook, and the connection settings that bound a frozen worker's locks. The transaction side runs
against a real PostgreSQL in tests/integration/test_player_locks.py."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import psutil
import pytest

from engine.chronology import deferred_matches
from worker.service import batching
from worker.service.deferral import Deferrals
from worker.service.faults import FaultInjector
from worker.settings import Settings
from worker.store.pool import keepalive_kwargs

from .test_batching import FakeRequest, make_batcher  # noqa: F401  (the fixture)


class FakeQoS:
    def __init__(self):
        self.extra = 0

    def increment_eventually(self, n=1):
        self.extra += n

    def decrement_eventually(self, n=1):
        self.extra -= n


def test_a_blocked_player_defers_its_matches_and_every_later_match_of_their_players():
    """Blocked hot: m0 (hot, a) deferred; m1 (b, c) applies; m2 (a, d) deferred (a's earlier match
    is deferred), which defers m3 (d, e) too; m4 (f, g) applies; m5 (hot, h) deferred."""
    k = lambda *ps: [("elo", p) for p in ps]  # noqa: E731
    matches = [k("hot", "a"), k("b", "c"), k("a", "d"), k("d", "e"), k("f", "g"), k("hot", "h")]
    assert deferred_matches(matches, {("elo", "hot")}) == [0, 2, 3, 5]
    assert deferred_matches(matches, set()) == []
    assert deferred_matches([k("hot", "a")], {("sedma", "hot")}) == []  # another ladder's row


def test_a_deferred_message_is_held_with_backoff_then_retried_first_in_the_next_batch(make_batcher):  # noqa: F811
    """Verdicts ack / defer / ack: two acknowledged; the deferred one is neither acknowledged nor
    requeued, the prefetch is raised by one while it waits its backoff (0.125 to 0.25 s, the first
    delay with jitter), then it goes back at the head of the buffer, before newer messages, and the
    prefetch comes down again."""
    batcher, consumer = make_batcher(batch_size=3)
    consumer.qos = FakeQoS()
    first = [FakeRequest(n) for n in range(3)]
    for r in first:
        batcher.add(r)
    consumer.timer.pending.clear()  # the buffer's flush timer (the batch left full, at once)
    consumer.pool.jobs[0]["done"](["ack", "defer", "ack"])
    assert [r.settled for r in first] == ["ack", None, "ack"]
    assert consumer.qos.extra == 1
    [(delay, _)] = consumer.timer.pending
    assert 0.125 <= delay <= 0.25
    newer = FakeRequest(9)
    batcher.in_flight = batcher.slots  # a child busy: the newer message waits in the buffer
    batcher.add(newer)
    batcher.in_flight = 0
    consumer.timer.fire()
    assert consumer.qos.extra == 0
    assert [c[0] for c in consumer.pool.jobs[1]["calls"]] == ["task-1", "task-9"]


def test_the_deferred_messages_of_a_batch_come_back_together_in_queue_order(make_batcher):  # noqa: F811
    """Verdicts defer / ack / defer: one timer for both (the longer of their delays), the prefetch
    raised by two meanwhile; they return together, task-0 before task-2, so a player's matches keep
    their order."""
    batcher, consumer = make_batcher(batch_size=3)
    consumer.qos = FakeQoS()
    requests = [FakeRequest(n) for n in range(3)]
    for r in requests:
        batcher.add(r)
    consumer.timer.pending.clear()
    consumer.pool.jobs[0]["done"](["defer", "ack", "defer"])
    assert [r.settled for r in requests] == [None, "ack", None]
    assert len(consumer.timer.pending) == 1 and consumer.qos.extra == 2
    consumer.timer.fire()
    assert consumer.qos.extra == 0
    assert [c[0] for c in consumer.pool.jobs[1]["calls"]] == ["task-0", "task-2"]


def test_deferral_delays_double_up_to_the_maximum_and_a_message_held_too_long_goes_back_to_the_broker(monkeypatch):
    """initial 0.25 s, maximum 1 s: the n-th delay is min(1, 0.25 x 2^(n-1)) x [0.5, 1]; once the
    time held plus the next delay passes hold_limit, None (requeue to the broker) and the count restarts."""
    deferrals = Deferrals(0.25, 1.0, hold_limit=3.0)
    delays = [deferrals.next_delay("t") for _ in range(4)]
    for delay, full in zip(delays, [0.25, 0.5, 1.0, 1.0]):
        assert delay is not None and full / 2 <= delay <= full
    clock = time.monotonic()
    monkeypatch.setattr("worker.service.deferral.time.monotonic", lambda: clock + 2.5)
    assert deferrals.next_delay("t") is None  # 2.5 s held + up to 1 s more > 3 s
    assert deferrals.count("t") == 0


def test_a_message_deferred_past_a_quarter_of_the_visibility_timeout_is_requeued_to_the_broker(make_batcher):  # noqa: F811
    """The batcher holds a message at most visibility_timeout / 4 in all (Redis would redeliver one
    reserved longer): past that, the deferred message is rejected with requeue."""
    batcher, consumer = make_batcher(batch_size=1)
    consumer.qos = FakeQoS()
    batcher.deferrals.hold_limit = 0.0
    request = FakeRequest(0)
    batcher.add(request)
    consumer.pool.jobs[0]["done"](["defer"])
    assert request.settled == "requeue" and consumer.qos.extra == 0 and consumer.timer.pending == []


def test_the_child_returns_defer_for_a_deferred_match_ack_for_an_ended_one_requeue_for_the_rest(monkeypatch):
    """apply_batch_in_child's verdicts from the service's outcomes: applied -> ack, deferred -> defer
    (held by the batcher), not handled -> requeue."""
    from worker.outcome import Handled, Outcome
    from worker.service import tasks

    class Service:
        def rate(self, calls, handled):
            handled[0] = Handled(Outcome.APPLIED, None, "m0", "elo")
            handled[1] = Handled(Outcome.DEFERRED, "player_locked", "m1", "elo", blocked_players=("elo/hot",))
            return 0.0

    monkeypatch.setattr(tasks, "get_service", lambda: Service())
    calls = [(f"t{n}", [{}], {}) for n in range(3)]
    assert batching.apply_batch_in_child(calls) == ["ack", "defer", "requeue"]


def _arrive(path: str) -> None:
    FaultInjector(f"in_transaction:stop_once={path}").hit("in_transaction")


def test_stop_once_freezes_the_first_process_to_arrive_and_no_other(tmp_path):
    """The first process at the point writes its pid and stops itself (SIGSTOP); a second
    arrival finds the file and goes on; a malformed spec is refused with the syntax."""
    path = str(tmp_path / "stopped.pid")
    ctx = multiprocessing.get_context("fork")
    first = ctx.Process(target=_arrive, args=(path,))
    first.start()
    try:
        deadline = time.monotonic() + 30
        while not (os.path.exists(path) and psutil.Process(first.pid).status() == psutil.STATUS_STOPPED):
            assert time.monotonic() < deadline, "the first arrival did not stop"
            time.sleep(0.02)
        assert open(path).read() == str(first.pid)
        second = ctx.Process(target=_arrive, args=(path,))
        second.start()
        second.join(30)
        assert second.exitcode == 0  # went on
    finally:
        os.kill(first.pid, signal.SIGCONT)
        first.join(30)
    assert first.exitcode == 0
    with pytest.raises(ValueError, match="stop_once=<path>"):
        FaultInjector("in_transaction:stop_once=")


def test_keepalives_and_the_idle_transaction_bound_are_settings_with_stated_defaults():
    """Defaults: a frozen transaction loses its locks after 10 s; keepalive probes after 10 s of
    silence, every 5 s, 3 of them; a batch waits at most 1 s in all for held player rows; deferred
    messages back off from 0.25 s to 5 s. A zero keepalive setting leaves libpq's default."""
    s = Settings()
    assert (s.idle_in_transaction_timeout_ms, s.player_lock_wait_ms) == (10000, 1000)
    assert (s.deferral_backoff_initial, s.deferral_backoff_max) == (0.25, 5.0)
    assert keepalive_kwargs(s) == {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
                                   "keepalives_count": 3}
    assert keepalive_kwargs(Settings(db_keepalives_idle=0, db_keepalives_count=0)) == {
        "keepalives": 1, "keepalives_interval": 5}


def test_the_pool_bounds_the_wait_on_a_database_that_stops_answering():
    """Defaults: a new connection ready within 10 s (libpq connect_timeout, whole seconds), sent
    data acknowledged within 30 s (tcp_user_timeout, ms); 0 leaves the system's TCP default."""
    from worker.store.pool import silent_server_kwargs

    assert silent_server_kwargs(Settings()) == {"connect_timeout": 10, "tcp_user_timeout": 30000}
    assert silent_server_kwargs(Settings(db_connect_timeout=3, db_tcp_user_timeout_ms=0)) == {"connect_timeout": 3}
