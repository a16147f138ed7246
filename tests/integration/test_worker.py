"""The rating path end to end: real PostgreSQL, real Redis, real Celery worker and relay processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest

from schemas import RatingChanged
from worker.ops.generate import generate_sedma_matches

pytestmark = pytest.mark.integration


def match(match_id: str, a: str | list[str], b: str | list[str], outcome: str = "side_a_won", ladder: str = "elo",
          finished_at: str = "2026-05-01T12:00:00Z", stats: dict | None = None) -> dict:
    """A MatchFinished v1 message as a game server would send it."""
    def side(players):
        players = [players] if isinstance(players, str) else players
        return {"players": [{"player_id": p, **({"stats": stats} if stats else {})} for p in players]}

    return {"schema_version": 1, "match_id": match_id, "ladder": ladder, "finished_at": finished_at,
            "side_a": side(a), "side_b": side(b), "outcome": outcome}


def ratings(env) -> dict[tuple[str, str], tuple[float, int]]:
    with env.connect() as conn:
        rows = conn.execute("SELECT ladder, player_id, rating, games_played FROM players").fetchall()
    return {(lad, pid): (r, g) for lad, pid, r, g in rows}


def run_cli(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "worker", *args], env=dict(os.environ, COLUMNS="200"), capture_output=True,
                          text=True, timeout=120)


def test_one_match_is_applied_and_rated_by_hand_computed_elo(clean, publisher):
    """1200 vs 1200 on the K=30 ladder: the winner gains 15, the loser loses 15 (E = 0.5)."""
    publisher(match("m-1", "alice", "bob"))
    counts = clean.wait_drained(1)
    assert (counts.applied, counts.duplicates, counts.dead_letters) == (1, 0, 0)
    assert ratings(clean) == {("elo", "alice"): (1215.0, 1), ("elo", "bob"): (1185.0, 1)}


def test_the_same_message_published_three_times_is_applied_once(clean, publisher):
    """Three deliveries of one payload: one ledger row, two counted duplicates, one set of events."""
    message = match("m-dup", "alice", "bob", outcome="draw")
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda _: publisher(message), range(3)))
    counts = clean.wait_drained(3)
    assert (counts.applied, counts.duplicates, counts.dead_letters, counts.events) == (1, 2, 0, 2)
    assert ratings(clean) == {("elo", "alice"): (1200.0, 1), ("elo", "bob"): (1200.0, 1)}


def test_same_match_id_with_another_payload_is_dead_lettered_as_a_conflict(clean, publisher):
    """A reused match id never applies twice: the second payload is a conflicting_duplicate dead letter."""
    publisher(match("m-conflict", "alice", "bob"))
    clean.wait_drained(1)
    publisher(match("m-conflict", "alice", "bob", outcome="side_b_won"))
    counts = clean.wait_drained(2)
    assert (counts.applied, counts.duplicates, counts.dead_letters) == (1, 0, 1)
    with clean.connect() as conn:
        reason, raw = conn.execute("SELECT reason_code, raw_body FROM dead_letters").fetchone()
    assert reason == "conflicting_duplicate"
    assert json.loads(raw)["outcome"] == "side_b_won"
    assert ratings(clean)[("elo", "alice")] == (1215.0, 1)


def test_concurrent_conflicting_payloads_for_one_match_id_leave_no_trace_of_the_loser(clean, publisher):
    """100 match ids, each published at once with two different player pairs: one applies, the other
    is a conflicting_duplicate dead letter, and no player row of the loser survives (verify passes)."""
    messages = []
    for n in range(100):
        messages.append(match(f"race-{n}", f"ra-{n}", f"rb-{n}"))
        messages.append(match(f"race-{n}", f"rc-{n}", f"rd-{n}"))
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(publisher, messages))
    counts = clean.wait_drained(200)
    assert (counts.applied, counts.duplicates, counts.dead_letters) == (100, 0, 100)
    with clean.connect() as conn:
        assert conn.execute("SELECT count(*) FROM players WHERE games_played = 0").fetchone()[0] == 0
        reasons = {r[0] for r in conn.execute("SELECT reason_code FROM dead_letters")}
    assert reasons == {"conflicting_duplicate"}
    assert run_cli(clean, "verify", "--ladder", "elo").returncode == 0


def test_two_workers_rating_the_same_players_at_once_lose_no_update(clean, publisher):
    """400 matches among 4 players (A-B and B-A mixed, 2v2 too) on two worker nodes: verify passes."""
    players = ["ann", "ben", "cat", "dan"]
    messages = []
    for n in range(400):
        a, b = players[n % 4], players[(n + 1 + n // 4) % 4]
        if a == b:
            b = players[(players.index(a) + 2) % 4]
        if n % 5 == 0:
            messages.append(match(f"c-{n}", [a, b], [p for p in players if p not in (a, b)], ladder="sedma",
                                  outcome="side_b_won", stats={"won_by_16": 1, "bad_moves": n % 3}))
        else:
            messages.append(match(f"c-{n}", b if n % 2 else a, a if n % 2 else b, ladder="sedma",
                                  stats={"won_by_24": n % 3}))
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(publisher, messages))
    counts = clean.wait_drained(400, timeout=180)
    assert (counts.applied, counts.duplicates, counts.dead_letters) == (400, 0, 0)
    stored = ratings(clean)
    assert sum(games for _, games in stored.values()) == sum(
        len(m["side_a"]["players"]) + len(m["side_b"]["players"]) for m in messages
    )
    result = run_cli(clean, "verify", "--ladder", "sedma")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "400 matches replayed" in result.stdout


def test_every_rating_change_reaches_the_stream_with_consecutive_sequences(clean, publisher):
    """Each match's history row has one event on the stream (corrections of late matches add
    ``correction`` events, whose history rows announce none); per player the sequences run 1, 2, 3, ..."""
    messages = [m.model_dump(mode="json") for m in generate_sedma_matches(150, players=12, seed=3)]
    for m in messages:
        publisher(m)
    counts = clean.wait_drained(150)
    expected_events = sum(len(m["side_a"]["players"]) + len(m["side_b"]["players"]) for m in messages)
    with clean.connect() as conn:
        corrections = conn.execute("SELECT count(*) FROM outbox WHERE payload->>'reason' = 'correction'").fetchone()[0]
        history_ids = {str(r[0]) for r in conn.execute("SELECT event_id FROM rating_changes WHERE event_id IS NOT NULL")}
    assert counts.events == expected_events + corrections
    assert clean.wait_stream(counts.events) >= counts.events
    entries = clean.redis.xrange(clean.stream)
    event_ids = Counter(fields["event_id"] for _, fields in entries)
    assert len(event_ids) == counts.events
    match_ids = {fields["event_id"] for _, fields in entries if json.loads(fields["payload"])["reason"] == "match"}
    assert match_ids == history_ids and len(history_ids) == expected_events
    sequences = defaultdict(list)
    for _, fields in entries:
        event = json.loads(fields["payload"])
        RatingChanged.model_validate(event)  # the event honours the published contract
        assert event["event_id"] == fields["event_id"]
        sequences[(event["ladder"], event["player_id"])].append(event["sequence"])
    for key, seqs in sequences.items():
        assert sorted(seqs) == list(range(1, len(seqs) + 1)), key


BAD_MESSAGES = [
    ("not_json", "this is not json {"),
    ("not_an_object", "[1, 2, 3]"),
    ("missing_field", {k: v for k, v in match("bad-1", "x", "y").items() if k != "outcome"}),
    ("wrong_type", {**match("bad-2", "x", "y"), "side_a": {"players": [{"player_id": 42}]}}),
    ("count_out_of_range", match("bad-3", "x", "y", ladder="sedma", stats={"bad_moves": -1})),
    ("count_out_of_range", match("bad-4", "x", "y", ladder="sedma", stats={"won_by_16": 10**6})),
    ("duplicate_player", match("bad-5", "x", "x")),
    ("empty_side", {**match("bad-6", "x", "y"), "side_b": {"players": []}}),
    ("unknown_ladder", match("bad-7", "x", "y", ladder="chess")),
    ("naive_timestamp", match("bad-8", "x", "y", finished_at="2026-05-01T12:00:00")),
    ("timestamp_out_of_range", match("bad-9", "x", "y", finished_at="2999-01-01T00:00:00Z")),
    ("too_large", {**match("bad-10", "x", "y"), "padding": "x" * 70_000}),
    ("unsupported_schema_version", {**match("bad-11", "x", "y"), "schema_version": 2}),
]


def test_bad_messages_are_dead_lettered_with_their_reason_while_good_ones_apply(clean, publisher):
    """Each malformed message becomes one dead letter with its reason code and raw body; valid
    messages published in between are applied."""
    good = 0
    for i, (_, message) in enumerate(BAD_MESSAGES):
        publisher(message)
        publisher(match(f"good-{i}", "g1", "g2", outcome="draw"))
        good += 1
    counts = clean.wait_drained(len(BAD_MESSAGES) + good)
    assert (counts.applied, counts.duplicates, counts.dead_letters) == (good, 0, len(BAD_MESSAGES))
    with clean.connect() as conn:
        rows = conn.execute("SELECT reason_code, raw_body FROM dead_letters ORDER BY id").fetchall()
    assert sorted(r[0] for r in rows) == sorted(code for code, _ in BAD_MESSAGES)
    for code, message in BAD_MESSAGES:
        raw = message if isinstance(message, str) else json.dumps(message, ensure_ascii=False)
        assert (code, raw) in [(r[0], r[1]) for r in rows], code


def test_a_call_with_the_wrong_arguments_is_dead_lettered(clean):
    """A task message for ratings.apply_match with two arguments is kept as bad_task_arguments."""
    from worker.producer import producer_app

    producer_app(clean.broker_url).send_task("ratings.apply_match", args=[1, 2], queue=clean.queue)
    counts = clean.wait_drained(1)
    assert counts.dead_letters == 1
    with clean.connect() as conn:
        assert conn.execute("SELECT reason_code FROM dead_letters").fetchone()[0] == "bad_task_arguments"


def test_verify_fails_when_a_stored_rating_was_tampered_with(clean, publisher):
    """`ratings verify` exits non-zero when a stored rating differs from the ledger's replay."""
    for n in range(5):
        publisher(match(f"v-{n}", "p", "q", ladder="sedma", stats={"won_by_16": n}))
    clean.wait_drained(5)
    assert run_cli(clean, "verify", "--ladder", "sedma").returncode == 0
    with clean.connect() as conn:
        conn.execute("UPDATE players SET rating = rating + 1 WHERE player_id = 'p'")
    result = run_cli(clean, "verify", "--ladder", "sedma")
    assert result.returncode == 1
    assert "1 difference" in result.stdout
