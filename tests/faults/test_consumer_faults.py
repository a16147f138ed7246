"""Consumers of rating-changed events under faults, with real worker, relay and consumer processes.

Four scenarios (``docs/decisions/0004-events-at-least-once-with-backfill.md``): a consumer killed mid-handler; the stream trimmed below a group's pending
entries; a consumer offline while more events than the stream keeps were produced; one of two group
members killed. The stream keeps ~10 entries (``RATINGS_STREAM_MAXLEN=10``, approximate: Redis trims
whole nodes of 100 entries). Each ends with every consumer holding every player's latest rating equal
to the database, each event's effect applied once (the test's idempotency store,
:mod:`tests.faults.consumer_process`), every player's sequences 1..n applied, and nothing pending or
undelivered in the group. Figures (events produced, trimmed, claimed, backfilled, time to recover) are
printed and added to the suite's figures.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter

import psycopg
import pytest

from tests.conftest import REPO_ROOT
from worker.consumer import consumer_lag

pytestmark = pytest.mark.faults

OVERRIDES = {"RATINGS_STREAM_MAXLEN": "10"}


class Consumers:
    """Consumer processes of one group on a cluster's stream, and the test's view of what they hold."""

    def __init__(self, cluster, group: str = "leaderboard"):
        self.cluster, self.group = cluster, group
        self.prefix = f"{cluster.stream}:test:{group}"
        self.redis = cluster.redis
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, **config) -> subprocess.Popen:
        config = {"broker_url": self.cluster.broker_url, "database_url": self.cluster.database_url,
                  "stream": self.cluster.stream, "group": self.group, "consumer": name, "prefix": self.prefix,
                  **config}
        log = open(self.cluster.log_dir / f"consumer-{name}.log", "a")
        proc = subprocess.Popen([sys.executable, "-m", "tests.faults.consumer_process", json.dumps(config)],
                                cwd=REPO_ROOT, env=self.cluster.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        return proc

    def wait_hanging(self, name: str, timeout: float = 120.0) -> None:
        """Wait until consumer ``name`` is inside its handler at the call it hangs on."""
        deadline = time.monotonic() + timeout
        while not self.redis.exists(f"{self.prefix}:hanging:{name}"):
            assert self.procs[name].poll() is None, f"consumer {name} exited"
            assert time.monotonic() < deadline, f"consumer {name} never reached its handler's hang"
            time.sleep(0.05)
        self.redis.delete(f"{self.prefix}:hanging:{name}")

    def kill(self, name: str) -> None:
        """SIGKILL consumer ``name`` (no cleanup: its entries stay pending on the group)."""
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs.clear()

    def database(self) -> tuple[dict[str, tuple[float, int]], set[str]]:
        """Every player's (rating, last sequence) as ``ladder|player``, and every event id, from PostgreSQL."""
        with psycopg.connect(self.cluster.database_url, autocommit=True) as conn:
            players = {f"{lad}|{p}": (r, s) for lad, p, r, s in conn.execute(
                "SELECT ladder, player_id, rating, games_played + rebuild_events FROM players")}
            events = {e for (e,) in conn.execute("SELECT payload->>'event_id' FROM outbox")}
        return players, events

    def held(self) -> dict[str, tuple[float, int]]:
        ratings = self.redis.hgetall(f"{self.prefix}:rating")
        seqs = self.redis.hgetall(f"{self.prefix}:rating-seq")
        return {k: (float(v), int(seqs[k])) for k, v in ratings.items()}

    def wait_caught_up(self, timeout: float = 180.0) -> float:
        """Wait until the consumers hold the database's ratings and the group has nothing left; seconds waited."""
        start = time.monotonic()
        while True:
            players, _ = self.database()
            lag = {g.group: g for g in consumer_lag(self.redis, self.cluster.stream)}.get(self.group)
            if self.held() == players and lag is not None and lag.pending == 0 and lag.undelivered == 0:
                return time.monotonic() - start
            for name, proc in self.procs.items():
                assert proc.poll() is None, f"consumer {name} exited: see {self.cluster.log_dir}"
            if time.monotonic() - start > timeout:
                missing = {k: v for k, v in players.items() if self.held().get(k) != v}
                raise AssertionError(f"consumers not caught up after {timeout:.0f} s: {len(missing)} players "
                                     f"differ, e.g. {list(missing.items())[:3]}; lag {lag}")
            time.sleep(0.2)

    def reports(self) -> Counter:
        total: Counter = Counter()
        for key in self.redis.scan_iter(f"{self.prefix}:report:*"):
            total.update({k: v for k, v in json.loads(self.redis.get(key)).items() if isinstance(v, int)})
        return total

    def check(self) -> dict:
        """Assert the acceptance invariants; return the figures."""
        players, events = self.database()
        assert self.held() == players, "a player's rating or sequence differs from the database"
        applied = self.redis.smembers(f"{self.prefix}:applied")
        assert applied == events, f"{len(events - applied)} events never applied, {len(applied - events)} unknown"
        for key, (_, last) in players.items():
            seqs = sorted(int(s) for s in self.redis.smembers(f"{self.prefix}:seq:{key}"))
            assert seqs == list(range(1, last + 1)), f"{key}: sequences applied {seqs[:5]}... of {last}"
        calls = sum(int(v) for v in self.redis.hvals(f"{self.prefix}:calls"))
        [lag] = [g for g in consumer_lag(self.redis, self.cluster.stream) if g.group == self.group]
        assert lag.pending == 0 and lag.undelivered == 0, f"group left with {lag}"
        r = self.reports()
        return {"events_produced": len(events), "stream_length": self.redis.xlen(self.cluster.stream),
                "stream_trimmed": len(events) - self.redis.xlen(self.cluster.stream),
                "trimmed_pending_entries": r["trimmed"], "claimed": r["claimed"], "backfilled": r["backfilled"],
                "snapshots": r["snapshots"], "reconciles": r["reconciles"], "gaps": r["gaps"],
                "duplicates_dropped_by_library": r["duplicates"], "parked": r["parked"],
                "handler_calls": calls, "redundant_handler_calls": calls - len(applied)}

    def close(self) -> None:
        self.stop_all()
        for key in self.redis.scan_iter(f"{self.prefix}*"):
            self.redis.delete(key)


@pytest.fixture
def consumers_of():
    made: list[Consumers] = []

    def make(cluster, group: str = "leaderboard") -> Consumers:
        made.append(Consumers(cluster, group))
        return made[-1]

    yield make
    for c in made:
        c.close()


def finish(cluster, consumers: Consumers, recovered_in: float) -> dict:
    figures = consumers.check() | {"time_to_recover_s": round(recovered_in, 2)}
    cluster.figures.update(figures)
    print(f"\n{cluster.name}: {json.dumps(figures)}")
    return figures


def test_a_consumer_killed_mid_handler_resumes_without_applying_an_event_twice(cluster_factory, consumers_of):
    """Killed after its handler's effect and before the acknowledgement: the restarted consumer re-reads its
    pending entries, the idempotency store drops the one applied, every event applied once."""
    cluster = cluster_factory("consumer-killed-mid-handler", OVERRIDES).start(workers=1)
    consumers = consumers_of(cluster)
    consumers.start("c1", hang_at=30)
    cluster.publish(cluster.matches(120, players=20))
    consumers.wait_hanging("c1")
    consumers.kill("c1")
    restarted = time.monotonic()
    consumers.start("c1")
    cluster.wait_drained()
    consumers.wait_caught_up()
    figures = finish(cluster, consumers, time.monotonic() - restarted)
    assert figures["redundant_handler_calls"] >= 1  # the event whose effect committed was delivered again


def test_the_stream_trimmed_below_a_groups_pending_entries(cluster_factory, consumers_of):
    """A consumer dies holding 20 pending entries, 300 more events trim them away; restarted, it acknowledges
    the empty entries and reconciles with the database (no KeyError, nothing stuck pending)."""
    cluster = cluster_factory("consumer-stream-trimmed-below-pending", OVERRIDES).start(workers=1)
    consumers = consumers_of(cluster)
    consumers.start("c1", hang_at=5, count=20)
    cluster.publish(cluster.matches(20, players=20, prefix="first"))
    consumers.wait_hanging("c1")
    consumers.kill("c1")
    cluster.publish(cluster.matches(150, players=20, prefix="then"))
    cluster.wait_drained()
    restarted = time.monotonic()
    consumers.start("c1")
    consumers.wait_caught_up()
    figures = finish(cluster, consumers, time.monotonic() - restarted)
    assert figures["trimmed_pending_entries"] >= 1 and figures["backfilled"] >= 1


def test_a_consumer_offline_while_more_events_than_the_stream_keeps_were_produced(cluster_factory, consumers_of):
    """Stopped after 40 matches, back after 200 more (the stream keeps ~100): it catches up through
    `ratings events read` (the CLI backfill) and ends with every rating and every sequence."""
    cluster = cluster_factory("consumer-offline-beyond-stream", OVERRIDES).start(workers=1)
    consumers = consumers_of(cluster)
    consumers.start("c1", backfill="cli")
    cluster.publish(cluster.matches(40, players=20, prefix="before"))
    cluster.wait_drained()
    consumers.wait_caught_up()
    consumers.stop_all()
    cluster.publish(cluster.matches(200, players=20, prefix="away"))
    cluster.wait_drained()
    restarted = time.monotonic()
    consumers.start("c1", backfill="cli")
    consumers.wait_caught_up()
    figures = finish(cluster, consumers, time.monotonic() - restarted)
    assert figures["stream_trimmed"] > 0 and figures["backfilled"] >= figures["stream_trimmed"] - 80


def test_one_of_two_group_members_killed_its_entries_are_claimed_by_the_other(cluster_factory, consumers_of):
    """Two members; one is killed mid-handler and never comes back: the survivor claims its pending entries
    after 2 s idle (XAUTOCLAIM) and the group ends complete."""
    # The stream keeps every entry here, so the dead member's entries are claimed, not found trimmed.
    cluster = cluster_factory("consumer-group-member-killed").start(workers=1)
    consumers = consumers_of(cluster)
    consumers.start("a", hang_at=15, claim_idle_ms=2000, handler_delay=0.005)
    consumers.start("b", claim_idle_ms=2000, handler_delay=0.005)
    cluster.publish(cluster.matches(120, players=20))
    consumers.wait_hanging("a")
    consumers.kill("a")
    killed = time.monotonic()
    cluster.wait_drained()
    consumers.wait_caught_up()
    figures = finish(cluster, consumers, time.monotonic() - killed)
    assert figures["claimed"] >= 1
