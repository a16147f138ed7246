"""Worker processes killed at the worst moments: nothing lost, nothing applied twice."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from .conftest import BATCH_SIZES

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]


def kill_every(batch_size: int) -> int:
    """Fault injection counts transactions: every 37th match alone, every 2nd batch when batched (a
    batch holds many matches, and a child killed on its 37th match of a batch would never get past it)."""
    return 37 if batch_size == 1 else 2


# A child killed mid-work reaches the acknowledgement path, which differs between Celery's own
# strategy (task_reject_on_worker_lost) and the batching consumer (Batcher._failed): both are run.
@pytest.mark.parametrize("batch_size", list(BATCH_SIZES.values()), ids=list(BATCH_SIZES))
def test_a_worker_child_killed_inside_the_rating_transaction_loses_nothing(cluster_factory, batch_size):
    """SIGKILL inside the transaction (all rows written, no COMMIT), every 37th transaction (every
    2nd when batched): the transaction rolls back, the messages are redelivered and each is
    applied exactly once."""
    every = kill_every(batch_size)
    cluster = cluster_factory("kill-in-transaction", {"RATINGS_FAULT_INJECTION": f"in_transaction:every={every}"}).start()
    # Batched, each child commits one transaction and dies in its 2nd, so kills >= transactions - 2 (the two
    # children alive at the end); a transaction holds at most 100 matches, so 800 matches make >= 6 kills
    # (400 could make only 2 once the pop path filled batches of 100).
    cluster.publish(cluster.matches(400 if batch_size == 1 else 800))
    cluster.figures["recovery_seconds"] = round(cluster.wait_drained(timeout=180), 1)
    figures = cluster.check_invariants()
    kills = cluster.log_count(r"exited with 'signal 9")
    cluster.figures["kills"] = kills
    assert kills >= 5, "the fault was not injected"
    assert figures["applied"] == (400 if batch_size == 1 else 800) and figures["dead_letters"] == 0


@pytest.mark.parametrize("batch_size", list(BATCH_SIZES.values()), ids=list(BATCH_SIZES))
def test_a_worker_child_killed_after_commit_before_the_ack_applies_once(cluster_factory, batch_size):
    """SIGKILL after COMMIT but before the ack, every 37th transaction (every 2nd when batched): the
    redelivered messages find their own task ids in the ledger and are neither applied again nor
    counted as duplicates."""
    every = kill_every(batch_size)
    cluster = cluster_factory("kill-after-commit", {"RATINGS_FAULT_INJECTION": f"after_commit:every={every}"}).start()
    cluster.publish(cluster.matches(400))
    cluster.figures["recovery_seconds"] = round(cluster.wait_drained(timeout=180), 1)
    # Every effect is committed before the killed messages come back: wait for them to be taken
    # again (and counted as redeliveries), not only for the counts.
    cluster.wait_broker_empty(timeout=120)
    figures = cluster.check_invariants()
    cluster.figures["kills"] = cluster.log_count(r"exited with 'signal 9")
    assert figures["redeliveries"] >= 5, "the kill after commit did not cause redeliveries"
    assert (figures["applied"], figures["duplicates"], figures["dead_letters"]) == (400, 0, 0)


def test_tasks_of_a_worker_whose_main_process_is_killed_are_not_dropped(cluster_factory):
    """SIGKILL of a worker node's main process while 400 matches are in flight: its reserved
    messages come back after the visibility timeout and are applied once by the other node."""
    cluster = cluster_factory("kill-worker-main-process").start()
    cluster.publish(cluster.matches(400))
    before = cluster.wait_received(40)
    main = cluster.procs.procs["w1"]
    orphans = cluster.children("w1")
    main.send_signal(signal.SIGKILL)
    main.wait()
    for child in orphans:  # a node loss takes the children too
        try:
            child.kill()
        except Exception:
            pass
    killed_at = time.monotonic()
    cluster.figures["in_flight_when_killed"] = 400 - before
    cluster.wait_drained(timeout=180)
    cluster.figures["recovery_seconds"] = round(time.monotonic() - killed_at, 1)
    figures = cluster.check_invariants()
    assert (figures["applied"], figures["duplicates"], figures["dead_letters"]) == (400, 0, 0)


def test_warm_shutdown_and_restart_every_two_seconds_during_a_steady_stream(cluster_factory):
    """SIGTERM (Celery's warm shutdown) and restart of one node or the other every 2 s while
    600 matches arrive at a steady rate: every match applied once."""
    cluster = cluster_factory("sigterm-restarts").start()
    messages = cluster.matches(600)
    done = threading.Event()

    def steady():
        for i in range(0, len(messages), 20):
            cluster.publish(messages[i:i + 20])
            time.sleep(0.1)
        done.set()

    publisher = threading.Thread(target=steady)
    publisher.start()
    restarts = 0
    while not done.is_set() or restarts < 4:
        node = f"w{restarts % 2 + 1}"
        cluster.procs.stop(node, signal.SIGTERM, timeout=30)
        cluster.procs.start_worker(node)
        restarts += 1
        time.sleep(2.0)
    publisher.join()
    cluster.figures["restarts"] = restarts
    cluster.figures["recovery_seconds"] = round(cluster.wait_drained(timeout=180), 1)
    figures = cluster.check_invariants()
    assert (figures["applied"], figures["duplicates"], figures["dead_letters"]) == (600, 0, 0)
