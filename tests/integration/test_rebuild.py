"""`ratings rebuild` against real PostgreSQL, Redis and Celery worker processes.

The rebuild runs as a subprocess, as an operator would run it, with a ladders file of its own; the
session's workers keep the default file and must follow the switch through the database.
Reference ratings come from a classic Elo loop written out in this file, not from the engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from schemas import RatingChanged
from tests.integration.test_worker import match
from worker.ops.generate import generate_sedma_matches
from worker.settings import DEFAULT_LADDERS_FILE
from worker.store import REBUILD_LOCK_CLASS

pytestmark = pytest.mark.integration

SCORE = {"side_a_won": (1.0, 0.0), "side_b_won": (0.0, 1.0), "draw": (0.5, 0.5)}


def classic_elo(matches: list[dict], k: float, initial: float = 1200.0) -> dict[str, float]:
    """Ratings after 1v1 ``matches`` in the order given, by the textbook formulas: E = 1 / (1 +
    10^((R_opp - R) / 400)), R' = R + K (S - E), from ``initial``."""
    ratings: dict[str, float] = {}
    for m in matches:
        a, b = m["side_a"]["players"][0]["player_id"], m["side_b"]["players"][0]["player_id"]
        ra, rb = ratings.get(a, initial), ratings.get(b, initial)
        sa, sb = SCORE[m["outcome"]]
        ratings[a] = ra + k * (sa - 1 / (1 + 10 ** ((rb - ra) / 400)))
        ratings[b] = rb + k * (sb - 1 / (1 + 10 ** ((ra - rb) / 400)))
    return ratings


def ladders_file(tmp_path: Path, elo_k: float = 30, sedma_low_k: float = 40) -> Path:
    """A copy of the default ladders file and its policy files, with elo's constant K and Sedma's
    lowest band's K changed."""
    folder = tmp_path / f"ladders-k{elo_k:g}-s{sedma_low_k:g}"
    (folder / "policies").mkdir(parents=True, exist_ok=True)
    policies = DEFAULT_LADDERS_FILE.parent / "policies"
    elo = (policies / "elo.toml").read_text()
    assert "constant = 30" in elo
    (folder / "policies" / "elo.toml").write_text(elo.replace("constant = 30", f"constant = {elo_k:g}"))
    sedma = (policies / "sedma.toml").read_text()
    assert "[[1200, 40]," in sedma
    (folder / "policies" / "sedma.toml").write_text(sedma.replace("[[1200, 40],", f"[[1200, {sedma_low_k:g}],"))
    for other in policies.glob("*.toml"):  # the shipped ladders' other policies, unchanged
        if not (folder / "policies" / other.name).exists():
            (folder / "policies" / other.name).write_text(other.read_text())
    path = folder / "ladders.toml"
    path.write_text(DEFAULT_LADDERS_FILE.read_text())
    return path


def cli(*args: str, ladders: Path | None = None, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m worker ARGS`` as an operator would, with the session's URLs."""
    env = dict(os.environ, COLUMNS="200")
    if ladders is not None:
        env["RATINGS_LADDERS_FILE"] = str(ladders)
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "worker", *args], env=env, capture_output=True, text=True,
                          timeout=600)


def rebuild(*args: str, ladders: Path | None = None) -> dict:
    """`ratings rebuild ARGS --json`; the report as a dict (fails the test on a non-zero exit)."""
    result = cli("rebuild", *args, "--json", ladders=ladders)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def stored(env, ladder: str) -> dict[str, tuple[float, int]]:
    with env.connect() as conn:
        rows = conn.execute("SELECT player_id, rating, games_played FROM players WHERE ladder = %s", (ladder,))
        return {pid: (rating, games) for pid, rating, games in rows}


CHRONOLOGICAL = 'order_at, match_id COLLATE "C"'
"""The replay order of a chronological ladder (the default), in SQL, for the tests' own replays."""


def ledger_payloads(env, ladder: str, order: str = "seq") -> list[dict]:
    with env.connect() as conn:
        return [r[0] for r in conn.execute(f"SELECT payload FROM ledger WHERE ladder = %s ORDER BY {order}", (ladder,))]


def outbox_events(env) -> list[dict]:
    with env.connect() as conn:
        return [r[0] for r in conn.execute("SELECT payload FROM outbox ORDER BY id")]


def assert_event_sequences_have_no_gap(events: list[dict]) -> None:
    """Each event id once; per (ladder, player) the sequences run 1, 2, 3, ... (matches and rebuilds)."""
    assert len({e["event_id"] for e in events}) == len(events)
    per_player = defaultdict(list)
    for e in events:
        per_player[(e["ladder"], e["player_id"])].append(e["sequence"])
    for key, seqs in per_player.items():
        assert sorted(seqs) == list(range(1, len(seqs) + 1)), key


def publish_one_by_one(env, publisher, messages: list[dict], start: int = 0) -> None:
    """Publish each message and wait until it is applied: the apply order is the publish order."""
    for i, m in enumerate(messages, start=start + 1):
        publisher(m)
        env.wait_drained(i)


def test_a_rebuild_under_a_smaller_k_recomputes_every_rating_and_announces_only_the_players_it_changed(
        clean, publisher, tmp_path):
    """Elo ladder rated with K = 30, rebuilt with K = 20: every rating equals a hand-written K = 20
    replay of the ledger; one `rebuild` event for each player whose rating changed (not for two
    players who only drew with each other), each taking the player's next sequence; verify passes;
    the history is the rebuilt one; a match applied afterwards is rated with K = 20 although the
    workers' own ladders file still says 30."""
    players = [f"p{i}" for i in range(6)]
    messages = [match(f"k-{n}", players[n % 6], players[(5 * n + 1) % 6],  # 5n + 1 != n (mod 6): two players
                      outcome="side_a_won" if n % 3 else "side_b_won") for n in range(60)]
    messages += [match(f"xy-{n}", "x", "y", outcome="draw") for n in range(3)]
    for m in messages:
        publisher(m)
    clean.wait_drained(len(messages))
    before = stored(clean, "elo")
    assert before["p0"][0] == pytest.approx(classic_elo(ledger_payloads(clean, "elo", CHRONOLOGICAL), 30)["p0"],
                                            abs=1e-9)
    events_before = outbox_events(clean)

    k20 = ladders_file(tmp_path, elo_k=20)
    report = rebuild("--ladder", "elo", "--by", "ops-test", ladders=k20)

    assert report["matches_replayed"] == 63 and report["apply_order"] == "finished-at"
    after = stored(clean, "elo")
    expected = classic_elo(ledger_payloads(clean, "elo", CHRONOLOGICAL), 20)
    assert set(after) == set(expected)
    for pid, (rating, games) in after.items():
        assert rating == pytest.approx(expected[pid], abs=1e-9), pid
        assert games == before[pid][1]
    assert after["x"][0] == after["y"][0] == 1200.0
    changed = {pid for pid in after if after[pid][0] != before[pid][0]}
    assert changed == set(players)
    assert report["players_changed"] == report["events_emitted"] == 6

    clean.wait_drained(len(messages))  # the relay published the rebuild events too
    events = outbox_events(clean)
    rebuild_events = [e for e in events if e["reason"] == "rebuild"]
    assert {e["player_id"] for e in rebuild_events} == changed
    last_sequence = defaultdict(int)
    for e in events_before:
        last_sequence[e["player_id"]] = max(last_sequence[e["player_id"]], e["sequence"])
    for e in rebuild_events:
        RatingChanged.model_validate(e)
        assert e["rating_before"] == before[e["player_id"]][0]
        assert e["rating_after"] == after[e["player_id"]][0]
        assert e["delta"] == e["rating_after"] - e["rating_before"]
        assert e["sequence"] == last_sequence[e["player_id"]] + 1
        assert e["games_played"] == after[e["player_id"]][1]
        assert e["k_factor"] == 20.0
    assert_event_sequences_have_no_gap(events)
    assert clean.wait_stream(len(events)) >= len(events)
    stream_ids = {fields["event_id"] for _, fields in clean.redis.xrange(clean.stream)}
    assert {e["event_id"] for e in rebuild_events} <= stream_ids

    verify = cli("verify", "--ladder", "elo", ladders=k20)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"policy {report['policy_version']}" in verify.stdout
    with_old_file = cli("verify", "--ladder", "elo")  # the policy in force is the database's
    assert with_old_file.returncode == 0 and "stays in force" in with_old_file.stdout

    with clean.connect() as conn:
        versions = conn.execute("SELECT DISTINCT policy_version FROM ledger WHERE ladder = 'elo'").fetchall()
        content = conn.execute("SELECT content FROM policies WHERE version = %s", (report["policy_version"],)).fetchone()[0]
        audit = conn.execute("SELECT status, requested_by, apply_order, matches_replayed, events_emitted, "
                             "previous_policy_version FROM rebuilds").fetchall()
    assert versions == [(report["policy_version"],)]
    assert content["k_factor"]["constant"] == 20
    assert audit == [("done", "ops-test", "finished-at", 63, 6, report["previous_policy_version"])]
    listing = cli("rebuilds", "--ladder", "elo")
    assert listing.returncode == 0 and "done" in listing.stdout and "ops-test" in listing.stdout

    history = cli("history", "p0", "--ladder", "elo", "--csv")
    rows = [line.split(",") for line in history.stdout.splitlines()[1:]]
    assert [int(r[0]) for r in rows] == list(range(1, after["p0"][1] + 1))
    assert {float(r[-1]) for r in rows} == {20.0}
    assert float(rows[-1][5]) == after["p0"][0]

    # A match after the switch: K = 20 from the database, the next sequence, the new version.
    ra, rb = after["p0"][0], after["p1"][0]
    publisher(match("k-after", "p0", "p1"))
    clean.wait_drained(len(messages) + 1)
    assert stored(clean, "elo")["p0"][0] == pytest.approx(ra + 20 * (1 - 1 / (1 + 10 ** ((rb - ra) / 400))), abs=1e-9)
    new_event = next(e for e in outbox_events(clean) if e["match_id"] == "k-after" and e["player_id"] == "p0")
    assert new_event["sequence"] == last_sequence["p0"] + 2 and new_event["k_factor"] == 20.0
    with clean.connect() as conn:
        assert conn.execute("SELECT policy_version FROM ledger WHERE match_id = 'k-after'").fetchone()[0] == report["policy_version"]
    assert_event_sequences_have_no_gap(outbox_events(clean))
    assert cli("verify", "--ladder", "elo").returncode == 0


def test_arrival_order_is_an_explicit_choice_and_finished_at_restores_the_chronological_one(clean, publisher):
    """Matches published latest-finished first on a default ladder: ratings equal a replay by
    finish time (chronological is the default). ``--order applied`` switches to arrival order:
    ratings equal a replay in apply order, verify follows it, and late matches are then appended;
    ``--order finished-at`` restores the chronological order, and late matches published after
    that are placed in their position (corrections), verify exact each time."""
    start = datetime(2026, 3, 1, tzinfo=UTC)
    trio = ["ann", "bob", "cid"]
    messages = [match(f"fa-{n}", trio[n % 3], trio[(n + 1) % 3], outcome="side_a_won" if n % 4 else "draw",
                      finished_at=(start - timedelta(hours=n)).isoformat().replace("+00:00", "Z")) for n in range(12)]
    publish_one_by_one(clean, publisher, messages)
    by_finish = ledger_payloads(clean, "elo", "finished_at, seq")

    def assert_ratings(payloads):
        expected = classic_elo(payloads, 30)
        for pid, (rating, _) in stored(clean, "elo").items():
            assert rating == pytest.approx(expected[pid], abs=1e-9), pid
        verify = cli("verify", "--ladder", "elo")
        assert verify.returncode == 0, verify.stdout + verify.stderr
        return verify.stdout

    assert "order finished-at" in assert_ratings(by_finish)

    back = rebuild("--ladder", "elo", "--order", "applied")
    assert back["apply_order"] == "applied" and back["players_changed"] > 0
    assert "order finished-at" not in assert_ratings(ledger_payloads(clean, "elo"))
    # Two matches finished before all the others: appended in arrival order.
    late = [match(f"fa-late-{n}", "ann", "cid", finished_at=(start - timedelta(days=30 + n)).isoformat().replace("+00:00", "Z"))
            for n in range(2)]
    publish_one_by_one(clean, publisher, late, start=len(messages))
    assert_ratings(ledger_payloads(clean, "elo"))

    again = rebuild("--ladder", "elo", "--order", "finished-at")
    assert again["apply_order"] == "finished-at" and again["matches_replayed"] == 14
    assert "order finished-at" in assert_ratings(ledger_payloads(clean, "elo", "finished_at, seq"))
    later = [match(f"fa-later-{n}", "bob", "cid", finished_at=(start - timedelta(days=40 + n)).isoformat().replace("+00:00", "Z"))
             for n in range(2)]
    publish_one_by_one(clean, publisher, later, start=len(messages) + 2)
    assert_ratings(ledger_payloads(clean, "elo", "finished_at, seq"))
    assert_event_sequences_have_no_gap(outbox_events(clean))


def test_bad_rebuild_requests_fail_with_a_clear_message(clean, tmp_path):
    """An unknown ladder or order exits 2 saying what to change; a second rebuild of a ladder
    while one runs exits 1; a broken ladders file exits 3 (environment not ready). Nothing is recorded for any of them."""
    unknown = cli("rebuild", "--ladder", "chess")
    assert unknown.returncode == 2 and "unknown ladder 'chess'" in unknown.stderr
    bad_order = cli("rebuild", "--ladder", "elo", "--order", "sideways")
    assert bad_order.returncode == 2 and "sideways" in bad_order.stderr
    broken = tmp_path / "broken.toml"
    broken.write_text("[ladders.elo]\nk_factor = { constant = -1 }\n")
    bad_file = cli("rebuild", "--ladder", "elo", ladders=broken)
    assert bad_file.returncode == 3 and "ladders file error" in bad_file.stderr
    with clean.connect() as conn:
        conn.execute("SELECT pg_advisory_lock(%s, hashtext('elo'))", (REBUILD_LOCK_CLASS,))
        busy = cli("rebuild", "--ladder", "elo")
        conn.execute("SELECT pg_advisory_unlock(%s, hashtext('elo'))", (REBUILD_LOCK_CLASS,))
        assert conn.execute("SELECT count(*) FROM rebuilds").fetchone()[0] == 0
    assert busy.returncode == 1 and "already running" in busy.stderr


def test_a_rebuild_of_a_ladder_without_matches_records_the_policy_workers_then_use(clean, publisher, tmp_path):
    """Rebuilding an empty ladder just switches its policy: the first match is rated with it."""
    report = rebuild("--ladder", "elo", ladders=ladders_file(tmp_path, elo_k=10))
    assert (report["matches_replayed"], report["players_changed"]) == (0, 0)
    publisher(match("empty-1", "a", "b"))
    clean.wait_drained(1)
    assert stored(clean, "elo") == {"a": (1205.0, 1), "b": (1195.0, 1)}
    assert cli("verify", "--ladder", "elo").returncode == 0


def test_a_rebuild_under_load_loses_nothing(clean, publisher, tmp_path):
    """Acceptance: matches keep arriving while `ratings rebuild` runs (a subprocess) with a changed
    Sedma policy. Afterwards every published match is in the ledger once, verify passes, every
    ledger row names the new policy, the current history was rated with the new K-factors only,
    and event ids and per-player sequences have no duplicate and no gap."""
    new_file = ladders_file(tmp_path, sedma_low_k=48)
    matches = [m.model_dump(mode="json") for m in generate_sedma_matches(1500, players=150, seed=11, id_prefix="load")]
    first, during, after = matches[:500], matches[500:1300], matches[1300:]
    for m in first:
        publisher(m)
    clean.wait_drained(200)  # the workers are busy with a queue behind them

    stop = threading.Event()
    published_during = []

    def publish_during_rebuild():
        for m in during:
            publisher(m)
            published_during.append(m["match_id"])
            if stop.is_set() and len(published_during) >= 100:
                break

    feeder = threading.Thread(target=publish_during_rebuild)
    feeder.start()
    result = cli("rebuild", "--ladder", "sedma", "--json", ladders=new_file)
    stop.set()
    feeder.join()
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    for m in after:
        publisher(m)
    total = len(first) + len(published_during) + len(after)
    counts = clean.wait_drained(total, timeout=300)
    print("\nrebuild under load:", json.dumps(report))

    with clean.connect() as conn:
        dead = conn.execute("SELECT reason_code, left(detail, 400) FROM dead_letters LIMIT 3").fetchall()
    assert (counts.applied, counts.duplicates, counts.dead_letters) == (total, 0, 0), dead
    for ladders in (new_file, None):
        verify = cli("verify", "--ladder", "sedma", ladders=ladders)
        assert verify.returncode == 0, verify.stdout + verify.stderr
    with clean.connect() as conn:
        assert conn.execute("SELECT count(*) FROM ledger").fetchone()[0] == total
        versions = dict(conn.execute(
            "SELECT seq > %s, count(DISTINCT policy_version) || ':' || max(policy_version) FROM ledger GROUP BY 1",
            (report["snapshot_seq"],)).fetchall())
        generation = conn.execute("SELECT generation FROM ladders WHERE ladder = 'sedma'").fetchone()[0]
        k_factors = {r[0] for r in conn.execute(
            "SELECT DISTINCT k_factor FROM rating_changes WHERE ladder = 'sedma' AND generation = %s", (generation,))}
        history = conn.execute(
            "SELECT player_id, array_agg(sequence ORDER BY sequence) FROM rating_changes "
            "WHERE ladder = 'sedma' AND generation = %s AND superseded_by IS NULL GROUP BY 1", (generation,)).fetchall()
        current_rows, ledger_players = conn.execute(
            """SELECT (SELECT count(*) FROM rating_changes WHERE generation = %s AND superseded_by IS NULL),
                      (SELECT sum(jsonb_array_length(payload -> 'side_a' -> 'players')
                                  + jsonb_array_length(payload -> 'side_b' -> 'players')) FROM ledger)""",
            (generation,)).fetchone()
    # Matches committed after the snapshot (caught up at the switch, or rated after it) exist and
    # name the new policy, like every earlier one.
    assert versions[True] == f"1:{report['policy_version']}"
    assert versions[False] == f"1:{report['policy_version']}"
    assert generation == report["generation"]
    assert 48.0 in k_factors and 40.0 not in k_factors and k_factors <= {48.0, 32.0, 24.0, 16.0}
    assert current_rows == ledger_players  # one current history row per player of every applied match
    for player, seqs in history:
        assert seqs == list(range(1, len(seqs) + 1)), player
    events = outbox_events(clean)
    assert_event_sequences_have_no_gap(events)
    assert sum(e["reason"] == "rebuild" for e in events) == report["events_emitted"] > 0
    assert clean.wait_stream(len(events), timeout=120) >= len(events)
    assert len({fields["event_id"] for _, fields in clean.redis.xrange(clean.stream)}) == len(events)


def test_a_worker_whose_file_differs_rates_under_the_policy_in_force_until_a_rebuild(clean, publisher, tmp_path):
    """A worker started with K = 10 in its ladders file, on a ladder whose recorded policy says
    K = 30, rates under K = 30: a file change alone changes nothing until `ratings rebuild`."""
    from worker.devtools.runtime import ServiceProcesses
    from worker.producer import producer_app, publish_match

    publisher(match("pin-1", "a", "b"))  # the session's workers record K = 30 for elo
    clean.wait_drained(1)
    queue = clean.queue + "-k10"
    procs = ServiceProcesses(dict(os.environ, RATINGS_QUEUE=queue, RATINGS_LADDERS_FILE=str(ladders_file(tmp_path, elo_k=10))),
                             tmp_path / "logs")
    try:
        procs.start_worker("k10-worker")
        publish_match(producer_app(clean.broker_url), match("pin-2", "c", "d"), queue=queue)
        clean.wait_drained(2, timeout=120)
    finally:
        procs.stop_all()
        clean.redis.delete(queue, f"_kombu.binding.{queue}")
    assert stored(clean, "elo")["c"] == (1215.0, 1)  # K = 30, not 10
    with clean.connect() as conn:
        assert len({r[0] for r in conn.execute("SELECT policy_version FROM ledger")}) == 1
