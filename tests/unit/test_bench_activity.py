"""The bench's backend-activity sampler: statement names and the summary (worker/devtools/bench/activity.py)."""

from __future__ import annotations

import inspect
from collections import Counter

from worker.devtools.bench.activity import summarize
from worker.devtools.bench.sql import statement_label
from worker.store import chronology, events, locking, rating


def test_the_rating_transactions_statements_are_named_from_their_text() -> None:
    # the statements as the service sends them (their source text), not copies
    source = inspect.getsource(rating._create_players)
    start = source.index("WITH u AS (SELECT * FROM unnest")
    assert statement_label(source[start:start + 400]) == "create new player rows (rating transaction)"
    assert statement_label(locking._SELECT) == "lock player rows (rating transaction)"
    relay = inspect.getsource(events.take_unpublished)  # FOR UPDATE SKIP LOCKED too: not a player lock
    assert statement_label(relay[relay.index("WITH taken"):]) == "take unpublished events (relay)"
    players = inspect.getsource(chronology.later_match_players)
    assert statement_label(players[players.index("SELECT l.seq"):]) == "read later matches' players (correction)"
    rows = inspect.getsource(chronology.read_rows)
    assert statement_label(rows[rows.index("SELECT u.seq"):]) == "read later matches' rows (correction)"
    assert statement_label("  commit") == "COMMIT"
    assert statement_label("SELECT  count(*)\n  FROM   whatever_else WHERE x = 1") == "SELECT count(*) FROM whatever_else WHERE"


def test_shares_of_the_backends_active_time_and_the_lock_waiting_share() -> None:
    counts = Counter({("Lock:transactionid", "create"): 30, ("running", "write"): 60, ("IO:WALSync", "COMMIT"): 10})
    out = summarize(counts, samples=50, top=2)
    assert out["samples"] == 50 and out["mean_active_backends"] == 2.0
    assert out["lock_waiting_share"] == 0.3
    assert out["top"] == [{"wait": "running", "statement": "write", "share": 0.6, "mean_backends": 1.2},
                          {"wait": "Lock:transactionid", "statement": "create", "share": 0.3, "mean_backends": 0.6}]
    assert summarize(Counter(), samples=0) == {"samples": 0, "mean_active_backends": None,
                                               "lock_waiting_share": None, "top": []}


def test_the_heads_of_lock_waits_per_sample_and_the_samples_without_one() -> None:
    from worker.devtools.bench.activity import summarize_heads

    heads = Counter({("idle in transaction", "lock player rows (rating transaction)"): 6,
                     ("active", "write ledger, history, outbox, players (rating transaction)"): 2, ("none", ""): 3})
    assert summarize_heads(heads, chain_samples=10) == {
        "samples": 10, "headless_samples": 3,
        "top": [{"state": "idle in transaction", "statement": "lock player rows (rating transaction)", "per_sample": 0.6},
                {"state": "active", "statement": "write ledger, history, outbox, players (rating transaction)",
                 "per_sample": 0.2}]}
