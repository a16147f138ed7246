"""RabbitMQ as the broker: a publish the broker confirmed survives the loss of the node leading the queue.

A three-node RabbitMQ cluster of our own (Debian's rabbitmq-server, spare loopback ports, a cookie of
its own: :class:`worker.devtools.rabbitmq.RabbitCluster`), started once for the module. The rating
queue is a quorum queue replicated on the three nodes; producers, workers and the relay are real
processes (the producer is this test's thread, publishing through :func:`worker.producer.publish_match`,
which returns only after the broker's confirm).
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from worker.devtools import rabbitmq
from worker.producer import BrokerUnavailable, producer_app, publish_match

pytestmark = [pytest.mark.faults, pytest.mark.rabbitmq]


@pytest.fixture(scope="module")
def rabbit_cluster(tmp_path_factory):
    """Three clustered RabbitMQ nodes, started once for the module (their start time is reported)."""
    if not rabbitmq.available():
        pytest.skip("Debian's rabbitmq-server is not installed (.ci/run installs it)")
    started = time.monotonic()
    cluster = rabbitmq.RabbitCluster(tmp_path_factory.mktemp("rabbit"), nodes=3)
    cluster.start_seconds = round(time.monotonic() - started, 1)
    try:
        yield cluster
    finally:
        cluster.stop()


class SteadyPublisher(threading.Thread):
    """Publishes ``matches`` one by one at about ``rate`` per second, as a game server would: a
    publish that raised (:class:`BrokerUnavailable`) is kept and published again until the broker
    confirms it. ``confirmed``: match ids whose publish returned."""

    def __init__(self, broker_url: str, queue: str, matches: list[dict], rate: float):
        super().__init__(daemon=True)
        self.app = producer_app(broker_url)
        self.queue, self.matches, self.rate = queue, matches, rate
        self.confirmed: list[str] = []
        self.failed_attempts = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            start = time.monotonic()
            for n, match in enumerate(self.matches):
                time.sleep(max(0.0, start + n / self.rate - time.monotonic()))
                deadline = time.monotonic() + 90
                while True:
                    try:
                        publish_match(self.app, match, queue=self.queue)
                        break
                    except BrokerUnavailable:
                        self.failed_attempts += 1
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.2)
                self.confirmed.append(match["match_id"])
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def test_killing_the_node_that_leads_the_quorum_queue_loses_no_confirmed_publish(cluster_factory, rabbit_cluster):
    """1,500 matches published at a steady 250/s through the producer helper (confirms); once 400
    are confirmed the node leading the quorum queue is killed with SIGKILL (the nodes' first, which
    every client is connected to): every confirmed match is applied exactly once, verify is exact,
    and the events are whole."""
    cluster = cluster_factory("rabbit-leader-kill", broker_url=rabbit_cluster.url)
    cluster.figures["cluster_start_seconds"] = rabbit_cluster.start_seconds
    cluster.start(workers=2)
    matches = cluster.matches(1500, players=200)
    publisher = SteadyPublisher(rabbit_cluster.url, cluster.queue, matches, rate=250)
    publisher.start()
    while len(publisher.confirmed) < 1 and publisher.is_alive():  # the queue exists (declared by the workers)
        time.sleep(0.01)
    leader = rabbit_cluster.leader(cluster.queue)
    deadline = time.monotonic() + 60
    while len(publisher.confirmed) < 400 and publisher.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    confirmed_before_kill = len(publisher.confirmed)
    rabbit_cluster.kill(leader)
    publisher.join(180)
    assert publisher.error is None, f"publisher gave up: {publisher.error!r}"
    assert not publisher.is_alive()
    assert len(publisher.confirmed) == len(matches)
    new_leader = rabbit_cluster.leader(cluster.queue)
    assert new_leader is not leader

    cluster.published = len(publisher.confirmed)
    deadline = time.monotonic() + 120
    confirmed = set(publisher.confirmed)
    while True:
        with psycopg.connect(cluster.database_url, autocommit=True) as conn:
            applied = {m for (m,) in conn.execute("SELECT match_id FROM ledger")}
        lost = confirmed - applied
        if not lost or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    cluster.wait_drained()
    cluster.wait_broker_empty()
    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        ledger_rows = conn.execute("SELECT count(*) FROM ledger").fetchone()[0]
        twice = conn.execute("SELECT count(*) FROM (SELECT match_id, player_id FROM rating_changes "
                             "GROUP BY 1, 2 HAVING count(*) > 1) t").fetchone()[0]
    figures = cluster.check_invariants(unconfirmed=publisher.failed_attempts)
    figures.update(confirmed=len(confirmed), confirmed_lost=len(lost), applied_twice=twice,
                   confirmed_before_kill=confirmed_before_kill, failed_publish_attempts=publisher.failed_attempts,
                   killed_leader=leader.name, new_leader=new_leader.name)
    assert not lost, f"{len(lost)} confirmed publishes never applied, e.g. {sorted(lost)[:5]}"
    assert ledger_rows == len(confirmed) and twice == 0
