"""The same matches give the same ratings, whatever the workers' timing
(``docs/decisions/0008-chronological-order.md``).

Real PostgreSQL, Redis and the session's two worker processes. The reference is the engine's
plain fold over the messages sorted by ``(finished_at, match_id)`` (:mod:`tests.reference_replay`):
it never reads the store's order or its corrections.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import time
from collections import defaultdict
from datetime import timedelta

import psycopg
import pytest

from schemas import parse_match_finished
from worker import store as repository
from worker.bootstrap import load_ladder_policies
from worker.ops.football import football_matches
from worker.ops.generate import generate_sedma_matches
from worker.ops.rebuild import rebuild_ladder
from worker.ops.verify import verify_ladder
from worker.settings import get_settings

from ..reference_replay import chronological_states


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "worker", *args], env=dict(os.environ, COLUMNS="200"),
                          capture_output=True, text=True, timeout=120)


CHECKED_LADDERS = ("elo", "sedma", "glicko2")
"""The ladders of :func:`demo_messages`: two Elo policies and the shipped Glicko-2 one."""


def demo_messages() -> list[dict]:
    """A shorter demo: its first 600 football matches, 300 Sedma matches among 30 players, and 150
    generated Sedma matches among 20 players on the Glicko-2 ladder (an uncertainty model: the same
    guarantees, deviation and volatility included)."""
    football = [json.loads(m.canonical_json()) for m in football_matches(limit=600)]
    sedma = [json.loads(m.canonical_json()) for m in generate_sedma_matches(300, players=30, seed=2026)]
    glicko2 = [json.loads(m.canonical_json()) for m in
               generate_sedma_matches(150, players=20, seed=2027, ladder="glicko2", id_prefix="glicko2")]
    return football + sedma + glicko2


def stored(env) -> dict[tuple[str, str], tuple]:
    """Every stored player state: (ladder, player_id) to (rating, games played, deviation,
    volatility, last_played), the last three ``None`` under Elo (as :func:`chronological_states`)."""
    with env.connect() as conn:
        return {(lad, pid): (r, g, d, v, lp) for lad, pid, r, g, d, v, lp in conn.execute(
            "SELECT ladder, player_id, rating, games_played, deviation, volatility, last_played FROM players")}


def run_once(env, publisher, messages: list[dict]) -> tuple[dict, int]:
    """Publish ``messages`` in the order given to the two workers; the stored ratings and the
    number of matches that arrived late."""
    with env.connect() as conn:
        conn.execute("TRUNCATE ledger, players, rating_changes, outbox, outbox_pending, duplicate_deliveries, dead_letters, "
                     "ladders, policies, rebuilds, player_lock_waits, corrections RESTART IDENTITY CASCADE")
    for m in messages:
        publisher(m)
    counts = env.wait_drained(len(messages), timeout=240)
    assert (counts.applied, counts.dead_letters) == (len(messages), 0)
    with env.connect() as conn:
        late = conn.execute("SELECT count(*) FROM ledger WHERE out_of_order").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM ledger WHERE placed_at_end").fetchone()[0] == 0
        # a consumer that keeps the last event per player holds the stored rating, with no gap
        events = defaultdict(list)
        for (payload,) in conn.execute("SELECT payload FROM outbox"):
            events[(payload["ladder"], payload["player_id"])].append(payload)
        for key, evs in events.items():
            evs.sort(key=lambda e: e["sequence"])
            assert [e["sequence"] for e in evs] == list(range(1, len(evs) + 1)), key
        last = {key: evs[-1]["rating_after"] for key, evs in events.items()}
        ladders = load_ladder_policies(get_settings())
        for ladder in CHECKED_LADDERS:
            assert verify_ladder(conn, ladder, ladders[ladder].policy).ok
    ratings = stored(env)
    assert last == {key: state[0] for key, state in ratings.items()}
    return ratings, late


def elo_message(mid: str, a: str, b: str, hour: int, day: int = 1) -> dict:
    """An Elo 1v1 match-finished message: ``a`` beats ``b`` at ``hour``:00 on 2026-05-``day``."""
    return {"schema_version": 1, "match_id": mid, "ladder": "elo", "finished_at": f"2026-05-{day:02}T{hour:02}:00:00Z",
            "side_a": {"players": [{"player_id": a}]}, "side_b": {"players": [{"player_id": b}]},
            "outcome": "side_a_won"}


def elo_entry(m: dict, ladders) -> repository.BatchMatch:
    """``m`` validated as the worker does, as a batch entry of the ``elo`` ladder."""
    parsed = parse_match_finished(m)
    canonical = parsed.canonical_json()
    return repository.BatchMatch(json.loads(canonical), hashlib.sha256(canonical).hexdigest(),
                                 parsed.finished_at, ladders["elo"], None)


def test_two_runs_in_different_arrival_orders_equal_the_chronological_states(clean, publisher):
    """The shorter demo in date order, then shuffled, through two workers: identical ratings,
    equal to a single-process chronological replay; the shuffled run had late matches."""
    messages = demo_messages()
    first, _ = run_once(clean, publisher, messages)
    shuffled = list(messages)
    random.Random(18).shuffle(shuffled)
    second, late = run_once(clean, publisher, shuffled)
    assert late > 100  # corrections really happened
    assert first == second == chronological_states(messages)


def test_a_late_match_past_the_bound_goes_at_the_end_and_a_rebuild_puts_it_back(clean):
    """RATINGS_CORRECTION_MAX_MATCHES = 1: a match arriving after two later matches of its player
    is applied at the end and flagged ``placed_at_end`` (no correction; verify stays exact, its order
    key being the end); ``rebuild --order finished-at`` puts it in its place: the ratings then equal
    the chronological replay by finish time, computed here by hand with Elo K = 30."""
    ladders = load_ladder_policies(get_settings())

    limits = repository.TransactionTimeouts(5000, 30000, correction_max_matches=1)
    with psycopg.connect(clean.database_url, autocommit=True) as conn:
        repository.apply_batch(conn, [elo_entry(elo_message("b2", "ann", "ben", 12), ladders), elo_entry(elo_message("b3", "ann", "cid", 13), ladders)],
                               timeouts=limits)
        results, _ = repository.apply_batch(conn, [elo_entry(elo_message("b1", "ben", "cid", 11), ladders)], timeouts=limits)
        assert results[0].placed_at_end and results[0].out_of_order
        assert conn.execute("SELECT match_id FROM ledger WHERE placed_at_end").fetchall() == [("b1",)]
        assert conn.execute("SELECT count(*) FROM corrections").fetchone()[0] == 0
        assert verify_ladder(conn, "elo", ladders["elo"].policy).ok
        report = rebuild_ladder(clean.direct_database_url, "elo", ladders["elo"].policy, ladders["elo"].content,
                                order="finished-at")
        assert report.apply_order == "finished-at"
        assert conn.execute("SELECT count(*) FROM ledger WHERE placed_at_end").fetchone()[0] == 0
        assert verify_ladder(conn, "elo", ladders["elo"].policy).ok
        stored_now = {pid: r for pid, r in conn.execute("SELECT player_id, rating FROM players WHERE ladder = 'elo'")}

    def elo(ra: float, rb: float) -> tuple[float, float]:  # the winner's and loser's new ratings, K = 30
        e = 1 / (1 + 10 ** ((rb - ra) / 400))
        return ra + 30 * (1 - e), rb - 30 * (1 - e)

    # by finish time: b1 (ben beats cid), b2 (ann beats ben), b3 (ann beats cid)
    ben, cid = elo(1200, 1200)
    ann, ben = elo(1200, ben)
    ann, cid = elo(ann, cid)
    assert stored_now == pytest.approx({"ann": ann, "ben": ben, "cid": cid}, abs=1e-9)


def test_annulling_the_only_match_of_its_players_resets_them_with_a_correction_event_of_zero_games(clean):
    """Regression: annulling a match that was a player's only match on the ladder (a new account's
    first game) failed: its correction event said games_played 0, which the RatingChanged contract
    refused (minimum 1), so `ratings annul` stopped with a validation error and an annulment message
    was dropped. Now both players are back at the initial rating (1200, the elo policy's), with 0
    games, each told by a `correction` event (sequence 2, games_played 0) the contract accepts."""
    from schemas import RatingChanged

    ladders = load_ladder_policies(get_settings())
    parsed = parse_match_finished({"schema_version": 1, "match_id": "solo", "ladder": "elo",
                                   "finished_at": "2026-05-01T10:00:00Z",
                                   "side_a": {"players": [{"player_id": "new1"}]},
                                   "side_b": {"players": [{"player_id": "new2"}]}, "outcome": "side_a_won"})
    canonical = parsed.canonical_json()
    with psycopg.connect(clean.database_url, autocommit=True) as conn:
        repository.apply_batch(conn, [repository.BatchMatch(json.loads(canonical), hashlib.sha256(canonical).hexdigest(),
                                                            parsed.finished_at, ladders["elo"], None)])
        result = repository.annul_matches(conn, ["solo"], "smurf account", "anti-cheat", ladders)
        players = {pid: (r, g) for pid, r, g in conn.execute("SELECT player_id, rating, games_played FROM players")}
        events = [p for (p,) in conn.execute("SELECT payload FROM outbox WHERE payload->>'reason' = 'correction' "
                                             "ORDER BY payload->>'player_id'")]
        assert verify_ladder(conn, "elo", ladders["elo"].policy).ok
    assert result.annulled == ["solo"]
    assert players == {"new1": (1200.0, 0), "new2": (1200.0, 0)}
    assert [(e["player_id"], e["sequence"], e["games_played"], e["rating_after"]) for e in events] == \
        [("new1", 2, 0, 1200.0), ("new2", 2, 0, 1200.0)]
    for e in events:
        RatingChanged.model_validate(e)


def test_history_lists_an_annulment_once_per_player_with_its_reason_whether_or_not_they_played_it(clean):
    """Regression: `ratings history` printed an annulment twice for a player who played an annulled
    match and a re-rated one (once with the reason, once without), and without its reason for a
    player who only played re-rated ones. Now one line per correction for every player touched:
    the annulled match ids, the reason and who, and whether the player's own match was annulled."""
    ladders = load_ladder_policies(get_settings())

    def entry(mid: str, a: str, b: str, hour: int) -> repository.BatchMatch:
        parsed = parse_match_finished({"schema_version": 1, "match_id": mid, "ladder": "elo",
                                       "finished_at": f"2026-05-01T{hour:02}:00:00Z",
                                       "side_a": {"players": [{"player_id": a}]},
                                       "side_b": {"players": [{"player_id": b}]}, "outcome": "side_a_won"})
        canonical = parsed.canonical_json()
        return repository.BatchMatch(json.loads(canonical), hashlib.sha256(canonical).hexdigest(),
                                     parsed.finished_at, ladders["elo"], None)

    with psycopg.connect(clean.database_url, autocommit=True) as conn:
        # h1 ann-ben, h2 ann-cid, h3 cid-dan, h4 ann-dan, h5 eve-ann; annul h1 and h3: ann played h1
        # (annulled) and h2, h4, h5 (re-rated); ben only h1; eve only h5, re-rated
        repository.apply_batch(conn, [entry("h1", "ann", "ben", 10), entry("h2", "ann", "cid", 11),
                                      entry("h3", "cid", "dan", 12), entry("h4", "ann", "dan", 13),
                                      entry("h5", "eve", "ann", 14)])
        repository.annul_matches(conn, ["h3", "h1"], "server bug", "ops", ladders)
        seen = {p: repository.history_corrections(conn, "elo", p) for p in ("ann", "ben", "cid", "dan", "eve")}
    for player, rows in seen.items():
        assert len(rows) == 1, (player, rows)
        row = rows[0]
        assert (row["kind"], row["annulled"], row["reason"], row["annulled_by"]) == \
            ("annulment", ["h1", "h3"], "server bug", "ops"), player
    assert {p: rows[0]["own_match"] for p, rows in seen.items()} == {"ann": True, "ben": True, "cid": True,
                                                                     "dan": True, "eve": False}
    # rows superseded: ann h1, h2, h4, h5; ben h1; cid h2, h3; dan h3, h4; eve h5
    assert {p: rows[0]["rows"] for p, rows in seen.items()} == {"ann": 4, "ben": 1, "cid": 2, "dan": 2, "eve": 1}


def test_annulling_a_match_in_the_middle_of_a_ladder_equals_the_replay_without_it(clean, publisher):
    """The shorter demo through two workers, then `ratings annul` of a Sedma match in the middle:
    the ratings equal a chronological replay of the messages without it, every changed player got a
    `correction` event (last event = stored rating, no gap), verify passes, the annulment is on
    record; annulling it again does nothing; publishing it again is a duplicate."""
    messages = demo_messages()
    run_once(clean, publisher, messages)
    sedma = sorted((m for m in messages if m["ladder"] == "sedma"), key=lambda m: (m["finished_at"], m["match_id"]))
    victim = sedma[len(sedma) // 2]
    first = run_cli("annul", victim["match_id"], "--reason", "cheating", "--by", "referee")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "sedma: annulled" in first.stdout
    rest = [m for m in messages if m["match_id"] != victim["match_id"]]
    assert stored(clean) == chronological_states(rest)
    with clean.connect() as conn:
        events = defaultdict(list)
        for (payload,) in conn.execute("SELECT payload FROM outbox"):
            events[(payload["ladder"], payload["player_id"])].append(payload)
        corrections = conn.execute("SELECT count(*) FROM outbox WHERE payload->>'reason' = 'correction'").fetchone()[0]
        record = conn.execute("SELECT reason, annulled_by FROM annulments WHERE match_id = %s",
                              (victim["match_id"],)).fetchone()
        ladders = load_ladder_policies(get_settings())
        assert verify_ladder(conn, "sedma", ladders["sedma"].policy).ok
    assert corrections > 0 and record == ("cheating", "referee")
    for key, evs in events.items():
        evs.sort(key=lambda e: e["sequence"])
        assert [e["sequence"] for e in evs] == list(range(1, len(evs) + 1)), key
        assert evs[-1]["rating_after"] == stored(clean)[key][0], key
    again = run_cli("annul", victim["match_id"], "--reason", "cheating")
    assert again.returncode == 0 and "already annulled" in again.stdout
    assert stored(clean) == chronological_states(rest)
    publisher(victim)
    counts = clean.wait_drained(len(messages) + 1)
    assert counts.duplicates == 1 and counts.applied == len(messages)
    history = run_cli("history", victim["side_a"]["players"][0]["player_id"], "--ladder", "sedma")
    assert "annulment of " + victim["match_id"] in history.stdout


def test_an_annulment_message_through_a_worker_equals_the_replay_without_its_matches(clean, publisher):
    """A game backend's `ratings.annul_matches` message (worker.producer.publish_annulment) naming a
    football match, a Sedma match and a Glicko-2 match in the middle of their ladders, through the
    session's workers: every player's state equals a chronological replay of the messages without them, every changed player's
    last event (a `correction`) holds its stored rating with no sequence gap, the annulment is on
    record with its reason and who. The same message again changes nothing; an invalid one and one
    naming an unknown match end as dead letters with their reason codes, the message kept."""
    from worker.producer import ANNUL_TASK_NAME, producer_app, publish_annulment, publish_body

    messages = [json.loads(m.canonical_json()) for m in football_matches(limit=300)]
    messages += [json.loads(m.canonical_json()) for m in generate_sedma_matches(200, players=20, seed=18)]
    messages += [json.loads(m.canonical_json()) for m in
                 generate_sedma_matches(100, players=12, seed=19, ladder="glicko2", id_prefix="glicko2")]
    run_once(clean, publisher, messages)
    victims = []
    for ladder in CHECKED_LADDERS:
        mine = sorted((m for m in messages if m["ladder"] == ladder), key=lambda m: (m["finished_at"], m["match_id"]))
        victims.append(mine[len(mine) // 2]["match_id"])
    app = producer_app(clean.broker_url)
    publish_annulment(app, victims, reason="match fixing", annulled_by="anti-cheat", queue=clean.queue)

    def annulled() -> int:
        with clean.connect() as conn:
            return conn.execute("SELECT count(*) FROM annulments").fetchone()[0]

    deadline = time.monotonic() + 60
    while annulled() < len(victims) and time.monotonic() < deadline:
        time.sleep(0.1)
    clean.wait_drained(len(messages))
    rest = [m for m in messages if m["match_id"] not in victims]
    assert stored(clean) == chronological_states(rest)
    with clean.connect() as conn:
        records = conn.execute("SELECT match_id, reason, annulled_by FROM annulments ORDER BY match_id").fetchall()
        corrections = conn.execute("SELECT count(*) FROM outbox WHERE payload->>'reason' = 'correction'").fetchone()[0]
        events = defaultdict(list)
        for (payload,) in conn.execute("SELECT payload FROM outbox"):
            events[(payload["ladder"], payload["player_id"])].append(payload)
        ladders = load_ladder_policies(get_settings())
        assert all(verify_ladder(conn, ladder, ladders[ladder].policy).ok for ladder in CHECKED_LADDERS)
    assert records == sorted((v, "match fixing", "anti-cheat") for v in victims) and corrections > 0
    now = stored(clean)
    for key, evs in events.items():
        evs.sort(key=lambda e: e["sequence"])
        assert [e["sequence"] for e in evs] == list(range(1, len(evs) + 1)), key
        assert evs[-1]["rating_after"] == now[key][0], key

    with clean.connect() as conn:
        corrections_before = conn.execute("SELECT count(*) FROM corrections").fetchone()[0]
    publish_annulment(app, victims, reason="match fixing", annulled_by="anti-cheat", queue=clean.queue)
    publish_body(app, b'{"schema_version":1,"match_ids":[],"reason":"x","annulled_by":"y"}', clean.queue,
                 task=ANNUL_TASK_NAME)
    publish_annulment(app, ["no-such-match"], reason="typo", annulled_by="anti-cheat", queue=clean.queue)

    def settled() -> bool:
        mine = [u for u in (json.loads(v) for v in clean.redis.hvals("unacked")) if u[2] == clean.queue]
        with clean.connect() as conn:
            dead = conn.execute("SELECT count(*) FROM dead_letters").fetchone()[0]
        return dead == 2 and clean.redis.llen(clean.queue) == 0 and not mine

    deadline = time.monotonic() + 60
    while not settled() and time.monotonic() < deadline:
        time.sleep(0.1)
    with clean.connect() as conn:
        dead = conn.execute("SELECT reason_code, raw_body, headers->>'task' FROM dead_letters ORDER BY reason_code").fetchall()
        corrections_after = conn.execute("SELECT count(*) FROM corrections").fetchone()[0]
    assert [(code, task) for code, _, task in dead] == [("schema_violation", ANNUL_TASK_NAME),
                                                         ("unknown_match", ANNUL_TASK_NAME)]
    assert json.loads(dead[1][1])["match_ids"] == ["no-such-match"]
    assert annulled() == len(victims) and corrections_after == corrections_before  # the same annulment again: a no-op
    assert stored(clean) == chronological_states(rest)


def test_a_correction_reads_the_rows_and_payloads_of_only_the_later_matches_it_may_re_rate(clean):
    """Stored S1 (p1 beats p2, 12:00), S2 (p2 beats p3, 13:00), S3 (p4 beats p5, 14:00); then the late
    L (p1 beats p6, 11:00). The correction re-rates S1 and, through p2, S2 (a chain), not S3:
    ``later_match_players`` lists the three with their players from the ledger alone,
    ``plan_corrections`` keeps S1 and S2 and reads their rows and payloads only, and the stored
    ratings equal the replay by finish time (L, S1, S2, S3), computed here by hand with Elo K = 30.
    A ledger row written before migration 0009 (``player_ids`` NULL) gives the same players."""
    from engine.chronology import affected_players
    from worker.store.chronology import later_match_players, later_matches, read_rows

    ladders = load_ladder_policies(get_settings())

    limits = repository.TransactionTimeouts(5000, 30000)
    with psycopg.connect(clean.database_url, autocommit=True) as conn:
        repository.apply_batch(conn, [elo_entry(elo_message("s1", "p1", "p2", 12, day=2), ladders), elo_entry(elo_message("s2", "p2", "p3", 13, day=2), ladders),
                                      elo_entry(elo_message("s3", "p4", "p5", 14, day=2), ladders)], timeouts=limits)
        at, = conn.execute("SELECT order_at FROM ledger WHERE match_id = 's1'").fetchone()
        generation, = conn.execute("SELECT max(generation) FROM rating_changes").fetchone()
        late_key = (at - timedelta(hours=1), "l")
        later = later_match_players(conn.cursor(), "elo", late_key, generation, 10)
        assert [(m.match_id, set(m.players), m.rows, m.payload) for m in later] == [
            ("s1", {"p1", "p2"}, [], None), ("s2", {"p2", "p3"}, [], None), ("s3", {"p4", "p5"}, [], None)]
        conn.execute("UPDATE ledger SET player_ids = NULL WHERE match_id = 's2'")  # as before migration 0009
        assert [set(m.players) for m in later_match_players(conn.cursor(), "elo", late_key, generation, 10)] == [
            {"p1", "p2"}, {"p2", "p3"}, {"p4", "p5"}]
        assert [m.match_id for m in later_match_players(conn.cursor(), "elo", late_key, generation, 2)] == ["s1", "s2"]
        affected = affected_players([(late_key, ("p1", "p6"))], later, late_key)
        assert affected == {"p1", "p2", "p3", "p6"}
        touched = read_rows(conn.cursor(), [m for m in later if not affected.isdisjoint(m.players)], generation)
        assert [json.loads(m.payload)["match_id"] for m in touched] == ["s1", "s2"]
        assert [[(r.player_id, r.sequence, r.result) for r in m.rows] for m in touched] == [
            [("p1", 1, "win"), ("p2", 1, "loss")], [("p2", 2, "win"), ("p3", 1, "loss")]]
        full = later_matches(conn.cursor(), "elo", late_key, generation, 10)  # the reader rebuild and annulments use
        assert [(m.match_id, m.rows) for m in full[:2]] == [(m.match_id, m.rows) for m in touched]

        results, _ = repository.apply_batch(conn, [elo_entry(elo_message("l", "p1", "p6", 11, day=2), ladders)], timeouts=limits)
        assert results[0].out_of_order and not results[0].placed_at_end
        assert conn.execute("SELECT matches_rerated FROM corrections").fetchall() == [(2,)]
        assert verify_ladder(conn, "elo", ladders["elo"].policy).ok
        stored_now = {pid: r for pid, r in conn.execute("SELECT player_id, rating FROM players WHERE ladder = 'elo'")}

    def elo(ra: float, rb: float) -> tuple[float, float]:  # the winner's and loser's new ratings, K = 30
        e = 1 / (1 + 10 ** ((rb - ra) / 400))
        return ra + 30 * (1 - e), rb - 30 * (1 - e)

    p1, p6 = elo(1200, 1200)  # l
    p1, p2 = elo(p1, 1200)  # s1
    p2, p3 = elo(p2, 1200)  # s2
    p4, p5 = elo(1200, 1200)  # s3
    assert stored_now == pytest.approx({"p1": p1, "p2": p2, "p3": p3, "p4": p4, "p5": p5, "p6": p6}, abs=1e-9)
