"""A Redis primary SIGKILLed mid-stream and Sentinel failing over to a replica: what a publish that
returned success is worth on a replicated Redis.

A real primary, two replicas and three Sentinels on spare loopback ports
(:class:`worker.devtools.sentinel.ReplicatedRedis`: append-only, ``appendfsync everysec``, as the
operators' documentation recommends), workers, relay and producer reaching them through ``sentinel://`` URLs. A steady
stream of matches is published, the primary is SIGKILLed mid-stream (no shutdown, no flush), the
Sentinels promote a replica, and everything drains. Then, from the database:

* lost: matches whose publish returned success and that were never applied. Redis replication is
  asynchronous, so a promoted replica may miss the last writes the old primary acknowledged: the
  count is the finding and is printed with the scenario's figures, not asserted to be 0 for plain
  Redis;
* what must hold whatever the broker: nothing applied twice, nothing applied that was not
  published, ``verify`` of every ladder, one event per rating change with consecutive sequences.

Three runs: the primary killed while its replicas keep up (on one machine's loopback they get each
write within microseconds); the replicas cut off half a second before the kill (stopped, their
replication connections closed: the primary acknowledges what they never get, as in a partition or
with replicas that fell behind); and the same with the producer's ``wait_replicas=1`` (Redis ``WAIT``
after each publish).
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from worker.devtools.sentinel import ReplicatedRedis, sentinel_binary
from worker.producer import BrokerUnavailable, producer_app, publish_match

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

FAILOVER_SETTINGS = {
    # a message whose ack the promoted replica missed is redelivered after this: keep it short
    "RATINGS_VISIBILITY_TIMEOUT": "10",
    "RATINGS_TASK_TIME_LIMIT": "4",
    "RATINGS_RESTORE_INTERVAL": "1",
}
MATCHES, RATE, KILL_AT = 1500, 400, 500
"""Matches published, at most per second, and the publish after which the primary is killed."""


@pytest.fixture
def replicated_redis(tmp_path):
    if sentinel_binary() is None:
        pytest.skip("redis-sentinel is not installed (Debian: apt-get install -y redis-sentinel; .ci/run does)")
    rr = ReplicatedRedis.start(tmp_path / "replicated-redis", replicas=2, sentinels=3)
    yield rr
    rr.stop()


LAG_SECONDS = 0.5
"""How long the replicas are cut off before the primary is killed, in the lagging runs."""


@pytest.mark.parametrize(("lagging", "wait_replicas"), [(False, 0), (True, 0), (True, 1)],
                         ids=["replicas-current", "replicas-lagging", "replicas-lagging-wait-1"])
def test_primary_killed_mid_stream_sentinel_fails_over_and_acknowledged_publishes_are_counted(
        replicated_redis, cluster_factory, lagging, wait_replicas):
    """Publishes that returned success and were never applied are counted (the figure
    ``lost_acknowledged``; asserted 0 only with ``wait_replicas``); none applied twice, none applied
    unpublished, the invariants hold."""
    rr = replicated_redis
    name = f"redis-failover-{'lagging' if lagging else 'current'}{'-wait' if wait_replicas else ''}"
    cluster = cluster_factory(name, FAILOVER_SETTINGS, broker_url=rr.url()).start()
    messages = cluster.matches(MATCHES)
    app = producer_app(rr.url(), wait_replicas=wait_replicas, wait_timeout_ms=500)
    succeeded: list[str] = []
    failed: dict[str, str] = {}
    killed = threading.Event()

    def publish_steadily() -> None:
        start, i = time.monotonic(), 0
        while i < len(messages):
            with app.producer_or_acquire() as producer:  # a new one after a failed publish, as a game server would
                for m in messages[i:]:
                    time.sleep(max(0.0, start + i / RATE - time.monotonic()))
                    if i == KILL_AT:
                        killed.set()
                    i += 1
                    try:
                        publish_match(app, m, queue=cluster.queue, producer=producer)
                        succeeded.append(m["match_id"])
                    except BrokerUnavailable as exc:  # ReplicasNotAcknowledged too: not acknowledged
                        failed[m["match_id"]] = f"{getattr(exc, 'reason', 'broker_unavailable')}: {exc.__cause__!r}"
                        break

    publisher = threading.Thread(target=publish_steadily)
    publisher.start()
    assert killed.wait(60), "the stream never reached the kill point"
    if lagging:
        rr.cut_off_replicas()
        time.sleep(LAG_SECONDS)
    old_primary = rr.kill_primary()
    rr.resume_replicas()
    failover_seconds = rr.wait_failover()
    publisher.join(timeout=240)
    assert not publisher.is_alive() and len(succeeded) + len(failed) == len(messages)
    assert rr.primary_port != old_primary

    # Drained: nothing queued or unacknowledged on the new primary (the redeliveries of messages
    # whose ack it missed come back after the visibility timeout), no event waiting in the outbox.
    cluster.wait_broker_empty(timeout=120)
    deadline = time.monotonic() + 60
    while cluster.counts().unpublished_events and time.monotonic() < deadline:
        time.sleep(0.2)
    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        applied = {m for (m,) in conn.execute("SELECT match_id FROM ledger")}
        twice = conn.execute("SELECT count(*) FROM (SELECT match_id, player_id FROM rating_changes "
                             "WHERE superseded_by IS NULL GROUP BY 1, 2 HAVING count(*) > 1) t").fetchone()[0]
    lost = set(succeeded) - applied
    assert twice == 0, "a match applied twice"
    assert applied <= set(succeeded) | set(failed), "a match applied that was never published"
    cluster.published = cluster.counts().received  # what arrived; the lost ones are counted apart
    figures = cluster.check_invariants(stream_timeout=10, stream_may_lose=True)
    assert figures["dead_letters"] == 0
    cluster.figures.update(
        lagging_replicas_seconds=LAG_SECONDS if lagging else 0, wait_replicas=wait_replicas, publishes_attempted=len(messages), publish_succeeded=len(succeeded),
        publish_failed=len(failed), publish_failed_reasons=sorted(set(failed.values())),
        failed_but_applied=len(applied & set(failed)), failover_seconds=round(failover_seconds, 1),
        lost_acknowledged=len(lost), lost_examples=sorted(lost)[:5],
    )
    if wait_replicas:
        # Every publish that returned was acknowledged by a replica before the cut-off, and Sentinel
        # promotes the replica with the largest replication offset: it has them all.
        assert not lost, f"wait_replicas=1: acknowledged publishes lost: {sorted(lost)[:5]}"
    print(f"{name}: {len(lost)} acknowledged publish(es) lost "
          f"of {len(succeeded)}; {len(failed)} publish(es) refused; failover {failover_seconds:.1f} s")
