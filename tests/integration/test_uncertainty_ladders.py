"""Every guarantee for the models with uncertainty, through real workers.

Real PostgreSQL, Redis and the session's two worker processes. Generated matches (1v1 with draws,
2v2, uneven 1v2, four-side free-for-alls with ties, some partial play) go to a ladder of each model
with uncertainty (Glicko-2 and the three Weng-Lin models of the shipped ladders file); a tenth of
them is delivered late, after everything else was applied, and a few are then annulled. The
reference is the engine's plain fold over the surviving messages sorted by ``(finished_at,
match_id)`` (:func:`tests.reference_replay.chronological_states`): it never reads the store's order
key, its corrections or its history rows. Stored states are compared with ``==`` (bit for bit),
deviation, volatility and time of the last match included.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from worker.bootstrap import load_ladder_policies
from worker.ops.verify import verify_ladder
from worker.producer import producer_app, publish_annulment
from worker.settings import get_settings

from ..reference_replay import chronological_states

LADDERS = ("glicko2", "plackett_luce", "bradley_terry_full", "thurstone_mosteller_full")
PER_LADDER = 70
START = datetime(2026, 3, 1, tzinfo=UTC)


def _player(pid: str, rng: random.Random) -> dict:
    return {"player_id": pid, "weight": 0.5} if rng.random() < 0.1 else {"player_id": pid}


def generated_matches(ladder: str, n: int, seed: int) -> list[dict]:
    """``n`` matches of 14 players on ``ladder``, hours to days apart (deviations grow between
    them): 1v1 (a fifth of them draws), 2v2, uneven 1v2 and four-side free-for-alls with a tie."""
    rng = random.Random(seed)
    players = [f"{ladder[:2]}-p{i:02}" for i in range(14)]
    at = START
    out = []
    for i in range(n):
        at += timedelta(hours=rng.choice([1, 3, 7, 30, 80]))
        base = {"schema_version": 1, "match_id": f"{ladder}-{i:03}", "ladder": ladder,
                "finished_at": at.strftime("%Y-%m-%dT%H:%M:%SZ")}
        shape = i % 4
        if shape == 3:
            who = rng.sample(players, 4)
            places = [1, 2, 2, 4] if rng.random() < 0.3 else [1, 2, 3, 4]
            rng.shuffle(places)
            out.append({**base, "sides": [{"players": [_player(p, rng)], "placement": place}
                                          for p, place in zip(who, places)]})
            continue
        size_a, size_b = [(1, 1), (2, 2), (1, 2)][shape]
        who = rng.sample(players, size_a + size_b)
        outcome = "draw" if shape == 0 and rng.random() < 0.2 else rng.choice(["side_a_won", "side_b_won"])
        out.append({**base, "side_a": {"players": [_player(p, rng) for p in who[:size_a]]},
                    "side_b": {"players": [_player(p, rng) for p in who[size_a:]]}, "outcome": outcome})
    return out


def stored_states(env) -> dict[tuple[str, str], tuple]:
    with env.connect() as conn:
        return {(lad, pid): (r, g, d, v, lp) for lad, pid, r, g, d, v, lp in conn.execute(
            "SELECT ladder, player_id, rating, games_played, deviation, volatility, last_played FROM players")}


def test_late_matches_and_annulments_on_every_uncertainty_ladder_give_the_chronological_replay(clean, publisher):
    """280 matches over the four ladders, 28 of them delivered late and 8 then annulled: every
    stored state (rating, games, deviation, volatility, last match time) equals the single-process
    chronological replay of the surviving matches bit for bit, ``verify`` is exact on every
    ladder, the late matches caused corrections, and each player's last event announces its
    stored rating and deviation with event sequences that have no gap."""
    messages = [m for n, ladder in enumerate(LADDERS) for m in generated_matches(ladder, PER_LADDER, 40 + n)]
    rng = random.Random(2026)
    late_ids = set(rng.sample([m["match_id"] for m in messages], len(messages) // 10))
    on_time = [m for m in messages if m["match_id"] not in late_ids]
    late = [m for m in messages if m["match_id"] in late_ids]
    for m in on_time:
        publisher(m)
    clean.wait_drained(len(on_time), timeout=300)
    for m in late:
        publisher(m)
    counts = clean.wait_drained(len(messages), timeout=300)
    assert (counts.applied, counts.dead_letters) == (len(messages), 0)

    annulled = [f"{ladder}-{i:03}" for ladder in LADDERS for i in (20, 51)]
    app = producer_app(clean.broker_url)
    publish_annulment(app, annulled, reason="disputed", annulled_by="referee", queue=clean.queue)
    deadline = time.monotonic() + 120
    with clean.connect() as conn:
        while conn.execute("SELECT count(*) FROM annulments").fetchone()[0] < len(annulled):
            assert time.monotonic() < deadline, "the annulment was not applied in time"
            time.sleep(0.1)

    surviving = [m for m in messages if m["match_id"] not in set(annulled)]
    reference = chronological_states(surviving)
    now = stored_states(clean)
    assert {k: v for k, v in now.items() if k[0] in LADDERS} == reference
    assert all(state[2] is not None for state in reference.values())  # every ladder here has deviations
    with clean.connect() as conn:
        ladders = load_ladder_policies(get_settings())
        for ladder in LADDERS:
            result = verify_ladder(conn, ladder, ladders[ladder].policy)
            assert result.ok and result.matches == PER_LADDER - 2, (ladder, result.differences[:3])
        flagged = {mid for (mid,) in conn.execute("SELECT match_id FROM ledger WHERE out_of_order")}
        kinds = {k for (k,) in conn.execute("SELECT kind FROM corrections")}
        events = defaultdict(list)
        for (payload,) in conn.execute("SELECT payload FROM outbox ORDER BY id"):
            events[(payload["ladder"], payload["player_id"])].append(payload)
    assert len(flagged & late_ids) >= len(late_ids) // 2 and {"late", "annulment"} <= kinds
    for key, state in now.items():
        if key[0] not in LADDERS:
            continue
        mine = sorted(events[key], key=lambda e: e["sequence"])
        assert [e["sequence"] for e in mine] == list(range(1, len(mine) + 1)), key
        assert (mine[-1]["rating_after"], mine[-1].get("deviation_after")) == (state[0], state[2]), key

    # what an operator reads: the leaderboard ranks by rating - 2 deviations, a prediction sums to 1
    board = _cli("leaderboard", "--ladder", "glicko2", "--at", "2026-09-01T00:00:00Z", "--top", "50")
    assert "ranked by rating - 2 × deviation" in board and board.count("gl-p") == len(
        {pid for (lad, pid) in now if lad == "glicko2"}), board
    got = json.loads(_cli("predict", "glicko2", "--side", "gl-p00,gl-p01", "--side", "gl-p02", "--json"))
    assert got["sides"] == [["gl-p00", "gl-p01"], ["gl-p02"]] and got["draw_probability"] is None
    assert abs(sum(got["win_probabilities"]) - 1) < 1e-12 and 0 < got["quality"] <= 1
    draw = json.loads(_cli("predict", "plackett_luce", "--side", "pl-p00", "--side", "pl-p01", "--json"))
    assert 0 < draw["draw_probability"] < 1


def _cli(*args: str) -> str:
    """``python -m worker ARGS`` as an operator runs it; its standard output (fails on a non-zero exit)."""
    result = subprocess.run([sys.executable, "-m", "worker", *args], env=dict(os.environ, COLUMNS="200"),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_a_rebuild_switches_an_elo_ladder_to_glicko2_and_a_late_match_then_corrects_it(clean, publisher, tmp_path):
    """An Elo ladder of 40 1v1 matches is rebuilt under a Glicko-2 policy (`ratings rebuild` with a
    ladders file naming it): every player's state equals the chronological Glicko-2 replay of the
    ledger bit for bit, players that changed get a `rebuild` event with their deviation, and a late
    match published afterwards is re-rated into its place under Glicko-2 with verify exact."""
    from engine.replay import replay
    from worker.mapping import to_engine_match
    from worker.policy.ladders import load_ladder_policies as load_file

    rng = random.Random(7)
    players = [f"e{i}" for i in range(8)]
    at = START
    messages = []
    for i in range(40):
        at += timedelta(hours=rng.choice([2, 20, 70]))
        a, b = rng.sample(players, 2)
        messages.append({"schema_version": 1, "match_id": f"e-{i:03}", "ladder": "elo",
                         "finished_at": at.strftime("%Y-%m-%dT%H:%M:%SZ"), "side_a": {"players": [{"player_id": a}]},
                         "side_b": {"players": [{"player_id": b}]},
                         "outcome": rng.choice(["side_a_won", "side_b_won", "draw"])})
    late, on_time = messages[5], messages[:5] + messages[6:]
    for m in on_time:
        publisher(m)
    clean.wait_drained(len(on_time))

    folder = tmp_path / "to-glicko2"
    (folder / "policies").mkdir(parents=True)
    shipped = Path(get_settings().ladders_file).parent
    for name in ("sedma.toml", "glicko2.toml"):
        (folder / "policies" / name).write_text((shipped / "policies" / name).read_text())
    (folder / "ladders.toml").write_text('[ladders.sedma]\npolicy = "policies/sedma.toml"\n'
                                         '[ladders.elo]\npolicy = "policies/glicko2.toml"\n')
    glicko2 = load_file(folder / "ladders.toml")["elo"].policy
    result = subprocess.run([sys.executable, "-m", "worker", "rebuild", "--ladder", "elo", "--json"],
                            env=dict(os.environ, RATINGS_LADDERS_FILE=str(folder / "ladders.toml")),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr

    def reference(ms: list[dict]) -> dict:
        from schemas import parse_match_finished

        parsed = sorted((parse_match_finished(m) for m in ms), key=lambda m: (m.finished_at, m.match_id.encode()))
        standings = replay((to_engine_match(json.loads(m.canonical_json())) for m in parsed), glicko2)
        return {("elo", p): (s.rating, s.games_played, s.deviation, s.volatility, s.last_played)
                for p, s in standings.items()}

    assert {k: v for k, v in stored_states(clean).items() if k[0] == "elo"} == reference(on_time)
    with clean.connect() as conn:
        rebuilt = [p for (p,) in conn.execute("SELECT payload FROM outbox") if p["reason"] == "rebuild"]
        assert rebuilt and all(isinstance(e["deviation_after"], float) for e in rebuilt)
        assert verify_ladder(conn, "elo", glicko2).ok

    publisher(late)  # finished before 34 stored matches: re-rated into its place under Glicko-2
    clean.wait_drained(len(messages))
    assert {k: v for k, v in stored_states(clean).items() if k[0] == "elo"} == reference(messages)
    with clean.connect() as conn:
        assert verify_ladder(conn, "elo", glicko2).ok
        assert conn.execute("SELECT out_of_order FROM ledger WHERE match_id = %s", (late["match_id"],)).fetchone()[0]
