"""Re-published messages, a message published three times at once, hot players, long lock waits."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from .conftest import BATCH_SIZES

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]


def test_a_match_published_three_times_at_once_is_rated_once_and_every_republished_message_too(cluster_factory):
    """400 matches each published twice, plus one match published by three processes at the same
    moment: 401 applied, 402 counted duplicates (the games of FAForever's 'rated three times' bug)."""
    cluster = cluster_factory("published-twice").start()
    messages = cluster.matches(400)
    cluster.publish(messages)
    cluster.publish(messages[::-1])
    triple = cluster.matches(1, prefix="triple")[0]
    cluster.publish_from_processes([[triple], [triple], [triple]])
    cluster.figures["recovery_seconds"] = round(cluster.wait_drained(timeout=180), 1)
    figures = cluster.check_invariants()
    assert (figures["applied"], figures["duplicates"], figures["dead_letters"]) == (401, 402, 0)


def _pairs(players, count):
    """Matches among a handful of players, A-B and B-A alternating, some 2v2 (for the sedma ladder:
    the elo ladder rates 1v1 only)."""
    out = []
    for n in range(count):
        a, b = players[n % len(players)], players[(n + 1) % len(players)]
        if n % 2:
            a, b = b, a
        if n % 6 == 0:
            rest = [p for p in players if p not in (a, b)][:2]
            out.append(([a, rest[0]], [b, rest[1]]))
        else:
            out.append(([a], [b]))
    return out


def test_concurrent_results_for_the_same_hot_players_are_all_kept_without_deadlock(cluster_factory):
    """600 matches among 5 players (A-B and B-A published together) on 2 nodes x 2 children: no
    deadlock surfaces as a failure, no lost update (the 'one of two concurrent results lost' bug)."""
    cluster = cluster_factory("hot-players").start(workers=2, concurrency=2)
    players = ["hot-a", "hot-b", "hot-c", "hot-d", "hot-e"]
    messages = []
    for n, (side_a, side_b) in enumerate(_pairs(players, 600)):
        messages.append({
            "schema_version": 1, "match_id": f"hot-{n}", "ladder": "sedma" if n % 2 or len(side_a) > 1 else "elo",
            "finished_at": "2026-06-01T12:00:00Z",
            "side_a": {"players": [{"player_id": p, "stats": {"won_by_16": n % 4}} for p in side_a]},
            "side_b": {"players": [{"player_id": p, "stats": {"bad_moves": n % 5}} for p in side_b]},
            "outcome": "side_a_won" if n % 3 else "side_b_won",
        })
    cluster.publish_from_processes([messages[0::2], messages[1::2]])
    cluster.figures["recovery_seconds"] = round(cluster.wait_drained(timeout=180), 1)
    figures = cluster.check_invariants()
    cluster.figures["deadlocks_logged"] = cluster.log_count(r"DeadlockDetected|deadlock detected")
    assert (figures["applied"], figures["duplicates"], figures["dead_letters"]) == (600, 0, 0)
    assert cluster.figures["deadlocks_logged"] == 0


# A deferred message is held by the batcher, or rejected with requeue by Celery's own strategy: both run.
@pytest.mark.parametrize("batch_size", list(BATCH_SIZES.values()), ids=list(BATCH_SIZES))
def test_a_long_lock_wait_defers_the_match_retries_it_with_backoff_and_applies_it(cluster_factory, batch_size):
    """A player row held locked for 3 s by another session: the transaction waiting for it gives up
    after player_lock_wait_ms (300 ms), defers the match (never a dead letter), retries it with
    backoff, and applies it once the lock is gone."""
    cluster = cluster_factory("long-lock-wait", {"RATINGS_PLAYER_LOCK_WAIT_MS": "300"}).start()
    first = cluster.matches(1, prefix="lock-first")[0]
    first["side_a"]["players"][0]["player_id"] = "locked-player"
    cluster.publish([first])
    cluster.wait_drained(timeout=60)
    held = threading.Event()
    release = threading.Event()

    def hold_lock():
        with psycopg.connect(cluster.database_url) as conn:
            conn.execute("SELECT 1 FROM players WHERE player_id = 'locked-player' FOR UPDATE")
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    held.wait(10)
    second = cluster.matches(1, prefix="lock-second", seed=2)[0]
    second["side_b"]["players"][0]["player_id"] = "locked-player"
    cluster.publish([second])
    time.sleep(3.0)
    assert cluster.counts().applied == 1, "the second match must wait for the lock"
    release.set()
    holder.join()
    cluster.figures["recovery_seconds"] = round(cluster.wait_drained(timeout=60), 1)
    cluster.figures["deferrals_logged"] = cluster.log_count(r"held by another transaction")
    figures = cluster.check_invariants()
    assert figures["applied"] == 2 and figures["dead_letters"] == 0
    assert cluster.figures["deferrals_logged"] >= 1
