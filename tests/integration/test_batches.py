"""Batches on the rating path against a real PostgreSQL (the batch transaction, called directly) and
through real Celery worker processes (messages queued while the workers are stopped, so they are
taken in batches)."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections import defaultdict

import pytest

from worker.ops.generate import generate_sedma_matches
from worker.policy.ladders import load_ladders
from worker.service.rating_service import RatingService
from worker.settings import DEFAULT_LADDERS_FILE, Settings
from worker.store.ladders import LadderPolicy
from worker.store.pool import open_pool

from .test_worker import match, ratings, run_cli

pytestmark = pytest.mark.integration


def rating_service(clean, **settings_overrides) -> RatingService:
    """A rating service of this test process on the session's database (no Celery); close its pool."""
    settings = Settings(database_url=clean.database_url, broker_url=clean.broker_url, **settings_overrides)
    ladders = {name: LadderPolicy(name, policy) for name, policy in load_ladders(DEFAULT_LADDERS_FILE).items()}
    return RatingService(open_pool(settings), ladders, settings)


@pytest.fixture
def service(clean):
    """A rating service of this test process on the session's database (no Celery)."""
    svc = rating_service(clean)
    yield svc
    svc.pool.close()


def call(message, task_id: str) -> tuple[str, list, dict]:
    return (task_id, [message], {})


def test_a_batch_mixing_valid_duplicate_conflicting_and_invalid_messages_classifies_each(service, clean):
    """One batch: valid matches, the same match again (duplicate), the same id with another payload
    (conflicting duplicate, also against a match applied before the batch), invalid messages and a
    wrong call shape. Each message gets its own outcome; valid ones apply; verify passes; the same
    batch delivered again (same task ids) changes nothing and counts nothing."""
    before = match("old-1", "ann", "bob")
    first = [None]
    service.rate([call(before, "t-old")], first)
    assert first[0].outcome == "applied"
    calls = [
        call(match("b-1", "ann", "bob"), "t-1"),
        call("not json {", "t-2"),
        call(match("b-1", "ann", "bob"), "t-3"),                        # duplicate of t-1, same batch
        call(match("b-1", "ann", "cat"), "t-4"),                        # conflict with t-1, same batch
        call(match("old-1", "ann", "bob", outcome="draw"), "t-5"),      # conflict with the ledger
        call(match("old-1", "ann", "bob"), "t-6"),                      # duplicate of the ledger
        call(match("b-2", "bob", "cat", ladder="sedma", stats={"won_by_16": 2}), "t-7"),
        call(match("b-3", "x", "x"), "t-8"),                            # duplicate_player
        call(match("b-4", "ann", "dan", ladder="chess"), "t-9"),        # unknown_ladder
        ("t-10", [1, 2], {}),                                           # bad_task_arguments
        call(match("b-5", "cat", "ann", outcome="side_b_won"), "t-11"),
        call(match("b-1", "ann", "bob"), "t-1"),                        # t-1 delivered twice in the batch
    ]
    handled = [None] * len(calls)
    service.rate(calls, handled)
    assert [(h.outcome, h.reason_code) for h in handled] == [
        ("applied", None), ("dead_letter", "not_json"), ("duplicate", None),
        ("dead_letter", "conflicting_duplicate"), ("dead_letter", "conflicting_duplicate"), ("duplicate", None),
        ("applied", None), ("dead_letter", "duplicate_player"), ("dead_letter", "unknown_ladder"),
        ("dead_letter", "bad_task_arguments"), ("applied", None), ("redelivered", None),
    ]
    with clean.connect() as conn:
        counts = conn.execute("SELECT (SELECT count(*) FROM ledger), (SELECT count(*) FROM duplicate_deliveries), "
                              "(SELECT count(*) FROM dead_letters)").fetchone()
        conflict_raw = conn.execute("SELECT raw_body FROM dead_letters WHERE task_id = 't-4'").fetchone()[0]
    assert counts == (4, 2, 6)  # old-1 and 3 applied; 2 duplicates; 6 dead letters; t-1's second copy counts nothing
    assert json.loads(conflict_raw)["side_b"]["players"][0]["player_id"] == "cat"
    # the batch delivered again, as after a worker killed after COMMIT: nothing new
    again = [None] * len(calls)
    service.rate(calls, again)
    assert {h.outcome for h in again} == {"redelivered"}
    with clean.connect() as conn:
        assert conn.execute("SELECT (SELECT count(*) FROM ledger), (SELECT count(*) FROM duplicate_deliveries), "
                            "(SELECT count(*) FROM dead_letters)").fetchone() == counts
        assert conn.execute("SELECT redeliveries FROM ledger WHERE match_id = 'b-1'").fetchone()[0] == 1
    for ladder in ("elo", "sedma"):
        result = run_cli(clean, "verify", "--ladder", ladder)
        assert result.returncode == 0, result.stdout + result.stderr


def test_many_matches_of_a_few_players_in_one_batch_apply_in_queue_order(service, clean):
    """60 matches among 3 players in one batch, both ladders: each match sees the previous one's
    ratings (the batch equals applying them one by one, checked by verify and by a batch of size 1
    per match on a copy), ledger seqs follow the queue order, and every player's history and event
    sequences run 1, 2, 3, ... with one event per change."""
    players = ["p1", "p2", "p3"]
    messages = []
    for n in range(60):
        a, b = players[n % 3], players[(n + 1) % 3]
        ladder = "sedma" if n % 2 else "elo"
        messages.append(match(f"same-{n}", a, b, outcome=("side_a_won", "side_b_won", "draw")[n % 3],
                              ladder=ladder, stats={"won_by_16": n % 4} if ladder == "sedma" else None,
                              finished_at=f"2026-05-01T12:{n:02d}:00Z"))
    handled = [None] * len(messages)
    service.rate([call(m, f"same-t{n}") for n, m in enumerate(messages)], handled)
    assert {h.outcome for h in handled} == {"applied"}
    with clean.connect() as conn:
        order = [r[0] for r in conn.execute("SELECT match_id FROM ledger ORDER BY seq")]
        history = conn.execute(
            "SELECT rc.ladder, rc.player_id, rc.sequence, rc.rating_before, rc.rating_after, l.seq "
            "FROM rating_changes rc JOIN ledger l ON l.seq = rc.ledger_seq ORDER BY l.seq").fetchall()
        outbox = [json.loads(p) if isinstance(p, str) else p for (p,) in conn.execute("SELECT payload FROM outbox ORDER BY id")]
    assert order == [m["match_id"] for m in messages]
    per_player = defaultdict(list)
    for ladder, player, sequence, before, after, _ in history:
        per_player[(ladder, player)].append((sequence, before, after))
    for key, rows in per_player.items():
        assert [s for s, _, _ in rows] == list(range(1, len(rows) + 1)), key
        for (_, _, after), (_, before, _) in zip(rows, rows[1:]):
            assert before == after, f"{key}: a later match did not start from the earlier one's rating"
    assert len(outbox) == len(history)
    events = defaultdict(list)
    for e in outbox:
        events[(e["ladder"], e["player_id"])].append(e["sequence"])
    assert all(seqs == list(range(1, len(seqs) + 1)) for seqs in events.values())
    final = ratings(clean)
    # The same matches one per transaction (the batch-of-one path) on fresh tables give the same ratings.
    with clean.connect() as conn:
        conn.execute("TRUNCATE ledger, players, rating_changes, outbox, outbox_pending, duplicate_deliveries, dead_letters "
                     "RESTART IDENTITY CASCADE")
    for n, m in enumerate(messages):
        one = [None]
        service.rate([call(m, f"one-t{n}")], one)
        assert one[0].outcome == "applied"
    assert ratings(clean) == final
    for ladder in ("elo", "sedma"):
        assert run_cli(clean, "verify", "--ladder", ladder).returncode == 0


def test_a_batch_that_fails_for_a_permanent_reason_is_applied_one_by_one_and_only_the_culprit_is_dead_lettered(
        service, clean, monkeypatch):
    """A permanent error in the batch transaction (here: the engine raising for one match) rolls the
    batch back; its messages are then applied one by one, and only the culprit becomes an
    internal_error dead letter."""
    from engine import replay as engine_replay

    real_rate = engine_replay.rate

    def rate(m, players, policy):
        if m.match_id == "perm-2":
            raise ValueError("engine refuses this match")
        return real_rate(m, players, policy)

    monkeypatch.setattr(engine_replay, "rate", rate)
    messages = [match(f"perm-{n}", f"q{n}", f"r{n}") for n in range(4)]
    handled = [None] * 4
    service.rate([call(m, f"perm-t{n}") for n, m in enumerate(messages)], handled)
    assert [(h.outcome, h.reason_code) for h in handled] == [
        ("applied", None), ("applied", None), ("dead_letter", "internal_error"), ("applied", None)]
    with clean.connect() as conn:
        assert conn.execute("SELECT count(*) FROM players").fetchone()[0] == 6  # no trace of the culprit's players


def test_messages_queued_while_the_workers_are_stopped_are_applied_in_batches(clean, publisher):
    """Real worker processes: 300 messages (valid, duplicates, a conflict, invalid ones) queued while
    both worker nodes are stopped, then taken in batches: every message ends once, the workers'
    ratings_batch_size histogram shows transactions of more than one match, and verify passes."""
    from .test_metrics import scrape, total

    def batch_metrics():
        samples = [scrape(clean.procs.ports[w]) for w in ("w1", "w2")]
        return (sum(total(s, "ratings_batch_size_sum") for s in samples),
                sum(total(s, "ratings_batch_size_count") for s in samples))

    matches_before, transactions_before = batch_metrics()
    groups = [os.getpgid(p.pid) for name, p in clean.procs.procs.items() if name.startswith("w")]
    valid = [m.model_dump(mode="json") for m in generate_sedma_matches(280, players=15, seed=11, id_prefix="qb")]
    messages = valid + valid[:10] + [{**valid[0], "outcome": "draw"}] + ["{not json"] * 9
    for g in groups:
        os.killpg(g, signal.SIGSTOP)
    try:
        for m in messages:
            publisher(m)
    finally:
        for g in groups:
            os.killpg(g, signal.SIGCONT)
    counts = clean.wait_drained(len(messages), timeout=180)
    assert (counts.applied, counts.duplicates, counts.dead_letters) == (280, 10, 10)
    assert run_cli(clean, "verify", "--ladder", "sedma").returncode == 0
    # every message was acknowledged (in bulk on Redis): nothing of this queue is left queued or unacknowledged
    deadline = time.monotonic() + 15  # the acks follow the last commit by a moment
    while clean.broker_messages() != (0, 0) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert clean.broker_messages() == (0, 0)
    matches_after, transactions_after = batch_metrics()
    assert matches_after - matches_before == 280
    assert transactions_after - transactions_before < 280 / 2, "the matches were not applied in batches"


@pytest.mark.redis_broker  # the linger is the Redis transport's: not run on the RabbitMQ pass
@pytest.mark.parametrize("linger", [0.5, 0.0])
def test_matches_arriving_while_a_worker_lingers_are_applied_together(clean, env, tmp_path, linger):
    """A worker of its own (one node, one child, a queue of its own). One match, then ten more
    published 40 ms apart. With ``RATINGS_POLL_LINGER=0.5`` the node's poll after the first match
    (which emptied the queue) waits half a second, so the ten (sent within 0.4 s) arrive meanwhile
    and are taken in one poll and applied in one transaction: 2 transactions for the 11 matches (3
    allowed, should this process stall). Without a linger (0, the control) the node waits on the
    queue and takes each match as it comes: about one transaction each."""
    from worker.devtools.runtime import ServiceProcesses
    from worker.producer import producer_app, publish_match

    from .test_metrics import scrape, total

    queue = f"ratings-linger-{uuid.uuid4().hex[:8]}"
    procs = ServiceProcesses(dict(os.environ, RATINGS_QUEUE=queue, RATINGS_POLL_LINGER=str(linger)), tmp_path)
    procs.start_worker("linger", concurrency=1)
    app = producer_app(clean.broker_url)
    try:
        matches = [m.model_dump(mode="json") for m in generate_sedma_matches(12, players=40, seed=5, id_prefix="lg")]
        publish_match(app, matches[0], queue=queue)  # the worker is up once this one is applied
        clean.wait_drained(1, timeout=90)
        time.sleep(0.6)  # its linger, if any, is over: the node waits on the queue
        before = scrape(procs.ports["linger"])
        publish_match(app, matches[1], queue=queue)
        for m in matches[2:]:
            time.sleep(0.04)
            publish_match(app, m, queue=queue)
        counts = clean.wait_drained(12, timeout=60)
        assert counts.applied == 12
        after = scrape(procs.ports["linger"])
        assert total(after, "ratings_batch_size_sum") - total(before, "ratings_batch_size_sum") == 11
        transactions = total(after, "ratings_batch_size_count") - total(before, "ratings_batch_size_count")
    finally:
        procs.stop_all()
        env.redis.delete(queue, f"_kombu.binding.{queue}")
    if linger:
        assert transactions <= 3, f"{transactions} transactions: the matches that came during the linger were not applied together"
    else:
        assert transactions >= 6, f"{transactions} transactions: without a linger, matches 40 ms apart were still applied together"
