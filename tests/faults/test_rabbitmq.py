"""RabbitMQ as the broker: TLS with a certificate authority the test makes, and a publish the broker
confirmed survives the loss of the node leading the queue.

A three-node RabbitMQ cluster of our own (Debian's rabbitmq-server, spare loopback ports, a cookie of
its own: :class:`worker.devtools.rabbitmq.RabbitCluster`), started once for the module (a cluster
start takes about 20 s), its first node also listening for TLS with a certificate for ``localhost``
signed by a CA made here (``trustme``). The TLS tests run first; the last test kills a node. The
rating queue is a quorum queue replicated on the three nodes; workers and the relay are real
processes, the producer is :func:`worker.producer.publish_match`, which returns only after the
broker's confirm.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import psycopg
import pytest

from worker.devtools import rabbitmq
from worker.producer import BrokerTlsRefused, BrokerUnavailable, producer_app, publish_match

pytestmark = [pytest.mark.faults, pytest.mark.rabbitmq]


NODE_CONFIG = "net_ticktime = 10\ncluster_partition_handling = autoheal\n"
"""rabbitmq.conf lines of every node, as ``docs/operators/brokers.md`` recommends for production: a node that stops
answering (frozen, paused VM) is declared down by the others after 7.5 to 12.5 s (``net_ticktime``,
60 s by default, during which the cluster's metadata operations, a queue declaration among them,
wait for it), and the partition its return makes heals by itself (``autoheal``)."""


@pytest.fixture(scope="module")
def rabbit_cluster(tmp_path_factory, tls_files):
    """Three clustered RabbitMQ nodes, started once for the module (their start time is reported);
    the first has a TLS listener with the session's certificate (``tls_files``: it names
    ``localhost`` only, not 127.0.0.1)."""
    if not rabbitmq.available():
        pytest.skip("Debian's rabbitmq-server is not installed (.ci/run installs it)")
    files = {"cacertfile": tls_files.ca_pem, "certfile": tls_files.cert_pem, "keyfile": tls_files.key_pem}
    started = time.monotonic()
    cluster = rabbitmq.RabbitCluster(tmp_path_factory.mktemp("rabbit"), nodes=3, config=NODE_CONFIG,
                                     tls={k: str(v) for k, v in files.items()})
    cluster.start_seconds = round(time.monotonic() - started, 1)
    cluster.ca_file = str(files["cacertfile"])
    try:
        yield cluster
    finally:
        cluster.stop()


def test_worker_and_producer_work_over_amqps_with_the_ca_they_are_given(cluster_factory, rabbit_cluster):
    """amqps:// to the node's TLS port by the name its certificate holds, with RATINGS_BROKER_CA_FILE
    (workers) and ``ca_file`` (producer): 30 matches published with confirms are applied, verify exact."""
    url = f"amqps://guest:guest@localhost:{rabbit_cluster.tls_port}//"
    cluster = cluster_factory("rabbit-tls", {"RATINGS_BROKER_CA_FILE": rabbit_cluster.ca_file}, broker_url=url)
    cluster.start(workers=1)
    app = producer_app(url, ca_file=rabbit_cluster.ca_file)
    for match in cluster.matches(30):
        publish_match(app, match, queue=cluster.queue)
    cluster.published = 30
    cluster.wait_drained(60)
    figures = cluster.check_invariants()
    assert figures["applied"] == 30


def test_a_certificate_that_does_not_name_the_host_is_refused_with_its_reason(cluster_factory, rabbit_cluster):
    """The same TLS port reached as 127.0.0.1, which the certificate does not name: the producer
    raises BrokerTlsRefused (a BrokerUnavailable) with reason code tls_certificate_mismatch and what
    to change, and `ratings worker` refuses to start (exit 3, environment not ready) with the same reason instead of
    retrying for ever."""
    url = f"amqps://guest:guest@127.0.0.1:{rabbit_cluster.tls_port}//"
    cluster = cluster_factory("rabbit-tls-refused", {"RATINGS_BROKER_CA_FILE": rabbit_cluster.ca_file},
                              broker_url=url)
    with pytest.raises(BrokerTlsRefused, match=r"tls_certificate_mismatch.*put a host name the certificate names") as refused:
        publish_match(producer_app(url, ca_file=rabbit_cluster.ca_file), cluster.matches(1)[0], queue=cluster.queue)
    assert refused.value.reason == "tls_certificate_mismatch"
    proc = subprocess.run([sys.executable, "-m", "worker", "worker"], env=cluster.env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]  # environment not ready
    assert "refused" in proc.stderr and "tls_certificate_mismatch" in proc.stderr
    assert "RATINGS_BROKER_URL" in proc.stderr


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


RABBIT_FROZEN_BOUND = 60.0
"""Seconds after a node froze by which every confirmed publish must be applied, the node still
frozen: the workers miss two AMQP heartbeats (``RATINGS_RABBITMQ_HEARTBEAT``, 5 s here) and
reconnect to the next node of the URL, the producer's publish gives up at its confirm timeout
(10 s), drops the connection at its read timeout (5 s) and retries on the next node, the other nodes declare the frozen one down (``net_ticktime``
10 s: at most 12.5 s), the quorum queue elects a leader among them, and what the frozen node had
pushed to the workers is redelivered."""


def test_a_frozen_node_is_left_for_the_others_and_nothing_confirmed_is_lost(cluster_factory, rabbit_cluster):
    """300 matches published at 40/s with confirms; after 100 the node every client is connected
    to (the URL's first) is SIGSTOPped: the producer and the workers move to the other nodes, every
    confirmed match is applied within :data:`RABBIT_FROZEN_BOUND` s of the freeze while the node is
    still frozen; after SIGCONT (the partition its return makes heals: ``autoheal``) nothing is
    applied twice and the invariants hold."""
    cluster = cluster_factory("rabbit-node-frozen", broker_url=rabbit_cluster.url)
    cluster.rabbit_cluster = rabbit_cluster
    cluster.start(workers=2)
    matches = cluster.matches(300, players=100)
    publisher = SteadyPublisher(rabbit_cluster.url, cluster.queue, matches, rate=40)
    publisher.start()
    deadline = time.monotonic() + 60
    while len(publisher.confirmed) < 100 and publisher.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    node = rabbit_cluster.nodes[0]
    rabbit_cluster.freeze(node)
    try:
        frozen_at = time.monotonic()
        publisher.join(max(0.0, frozen_at + RABBIT_FROZEN_BOUND - time.monotonic()))
        while True:
            confirmed = set(publisher.confirmed)
            with psycopg.connect(cluster.database_url, autocommit=True) as conn:
                applied = {m for (m,) in conn.execute("SELECT match_id FROM ledger")}
            if (not publisher.is_alive() and confirmed <= applied) or time.monotonic() > frozen_at + RABBIT_FROZEN_BOUND:
                break
            time.sleep(0.5)
        seconds = time.monotonic() - frozen_at
    finally:
        rabbit_cluster.thaw(node)
    cluster.figures.update(confirmed=len(confirmed), applied_while_frozen=len(applied & confirmed),
                           seconds_to_apply_after_freeze=round(seconds, 1),
                           failed_publish_attempts=publisher.failed_attempts)
    assert publisher.error is None, f"publisher gave up: {publisher.error!r}"
    assert not publisher.is_alive(), f"a publish still waits on the frozen node after {RABBIT_FROZEN_BOUND:.0f} s"
    assert len(confirmed) == len(matches)
    assert confirmed <= applied, f"{len(confirmed - applied)} confirmed publishes not applied while the node was frozen"
    cluster.figures["heal_seconds"] = round(rabbit_cluster.wait_healed(), 1)
    cluster.published = len(confirmed)
    cluster.wait_drained()
    cluster.wait_broker_empty()
    figures = cluster.check_invariants(unconfirmed=publisher.failed_attempts)
    assert figures["applied"] == len(matches) and figures["dead_letters"] == 0


def test_killing_the_node_that_leads_the_quorum_queue_loses_no_confirmed_publish(cluster_factory, rabbit_cluster):
    """1,500 matches published at a steady 250/s through the producer helper (confirms); once 400
    are confirmed the node leading the quorum queue is killed with SIGKILL (the nodes' first, which
    every client is connected to): every confirmed match is applied exactly once, verify is exact,
    and the events are whole."""
    cluster = cluster_factory("rabbit-leader-kill", broker_url=rabbit_cluster.url)
    cluster.rabbit_cluster = rabbit_cluster
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
                             "WHERE superseded_by IS NULL GROUP BY 1, 2 HAVING count(*) > 1) t").fetchone()[0]
    figures = cluster.check_invariants(unconfirmed=publisher.failed_attempts)
    figures.update(confirmed=len(confirmed), confirmed_lost=len(lost), applied_twice=twice,
                   confirmed_before_kill=confirmed_before_kill, failed_publish_attempts=publisher.failed_attempts,
                   killed_leader=leader.name, new_leader=new_leader.name)
    assert not lost, f"{len(lost)} confirmed publishes never applied, e.g. {sorted(lost)[:5]}"
    assert ledger_rows == len(confirmed) and twice == 0
