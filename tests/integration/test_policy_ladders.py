"""Ladders whose policies use home advantage, seasons, FIDE K, a floor, team rules and
free-for-all matches, rated by a real Celery worker: versions recorded, unratable matches
dead-lettered with the policy's reason code, and ``ratings verify`` exact."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from worker.devtools.runtime import ServiceProcesses
from worker.policy.ladders import load_ladder_policies

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

LADDERS = f"""
[ladders.elo]
policy = "{ROOT / 'worker' / 'policies' / 'elo.toml'}"

[ladders.league]
description = "home advantage, seasons, FIDE K and a floor"
home_advantage = 50
floor = 1150
initial_rating = 1200
k_factor = {{ fide = {{}} }}
season = {{ regress_to = 1200, weight = 0.5 }}

[ladders.doubles]
k_factor = {{ constant = 20 }}
teams = {{ rating = "sum", uneven = "reject" }}
match_shapes = {{ sides = 2, players_per_side = [1, 2], uneven = true }}  # uneven admitted: the policy refuses it

[ladders.ffa]
initial_rating = 1500
k_factor = {{ constant = 32 }}
match_shapes = {{ sides = [3, 16] }}
"""


def two_sided(match_id, ladder, a, b, outcome="side_a_won", **extra):
    side = lambda ps: {"players": [{"player_id": p} for p in ([ps] if isinstance(ps, str) else ps)]}  # noqa: E731
    return {"schema_version": 1, "match_id": match_id, "ladder": ladder, "finished_at": "2026-05-01T12:00:00Z",
            "side_a": side(a), "side_b": side(b), "outcome": outcome, **extra}


@pytest.fixture(scope="module")
def policy_env(env, tmp_path_factory):
    """A worker of its own reading the test ladders file, on a queue of its own."""
    folder = tmp_path_factory.mktemp("policies")
    ladders = folder / "ladders.toml"
    ladders.write_text(LADDERS)
    queue = f"ratings-policies-{uuid.uuid4().hex[:8]}"
    environ = dict(os.environ, RATINGS_LADDERS_FILE=str(ladders), RATINGS_QUEUE=queue, COLUMNS="200")
    procs = ServiceProcesses(environ, folder)
    procs.start_worker("policies", concurrency=1)
    try:
        yield environ, queue, ladders
    finally:
        procs.stop_all()
        env.redis.delete(queue, f"_kombu.binding.{queue}")


def test_rich_policies_through_the_worker(clean, policy_env) -> None:
    from worker.producer import producer_app, publish_match

    environ, queue, ladders = policy_env
    app = producer_app(clean.broker_url)
    messages = []
    for i in range(30):  # two seasons of a home-and-away league, one match a minute (the replay is by finish time)
        home, away = (f"club{i % 4}", f"club{(i + 1) % 4}")
        messages.append(two_sided(f"lg-{i}", "league", home, away, ["side_a_won", "side_b_won", "draw"][i % 3],
                                  home="side_a", season="2025" if i < 15 else "2026", score={"side_a": i % 5, "side_b": 1},
                                  finished_at=f"2026-05-01T12:{i:02d}:00Z"))
    messages.append(two_sided("dbl-1", "doubles", ["ann", "bob"], ["cat", "dan"]))
    messages.append(two_sided("dbl-2", "doubles", ["ann", "bob"], ["cat"]))  # uneven: refused by the policy
    ffa = {"schema_version": 1, "match_id": "ffa-1", "ladder": "ffa", "finished_at": "2026-05-01T12:00:00Z",
           "sides": [{"players": [{"player_id": p}], "placement": n} for n, p in enumerate("wxyz", start=1)]}
    messages.append(ffa)
    for message in messages:
        publish_match(app, message, queue=queue)
    counts = clean.wait_drained(len(messages))
    assert (counts.applied, counts.dead_letters) == (len(messages) - 1, 1)

    with clean.connect() as conn:
        dead = conn.execute("SELECT reason_code, match_id, raw_body FROM dead_letters").fetchall()
        assert [(r, m) for r, m, _ in dead] == [("uneven_sides", "dbl-2")] and '"dbl-2"' in dead[0][2]
        versions = dict(conn.execute("SELECT ladder, min(policy_version) FROM ledger GROUP BY ladder").fetchall())
        ffa_ratings = dict(conn.execute("SELECT player_id, rating FROM players WHERE ladder = 'ffa'").fetchall())
        floor_ok = conn.execute("SELECT min(rating) FROM players WHERE ladder = 'league'").fetchone()[0]
        seasons = set(conn.execute("SELECT season FROM players WHERE ladder = 'league'").fetchall())
    loaded = load_ladder_policies(ladders)
    assert versions == {name: loaded[name].version for name in ("league", "doubles", "ffa")}
    # four sides, equal ratings, K / 3 per pairing: 32/3 * (sum of (S - 0.5) over the three others)
    assert ffa_ratings["w"] == pytest.approx(1516) and ffa_ratings["x"] == pytest.approx(1500 + 32 / 6)
    assert ffa_ratings["y"] == pytest.approx(1500 - 32 / 6) and ffa_ratings["z"] == pytest.approx(1484)
    assert floor_ok >= 1150 and seasons == {("2026",)}

    verify = subprocess.run([sys.executable, "-m", "worker", "verify"], env=environ, capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    for ladder in ("league", "doubles", "ffa"):
        assert f"verify {ladder}:" in verify.stdout

    show = subprocess.run([sys.executable, "-m", "worker", "policy", "show", "--ladder", "league"], env=environ,
                          capture_output=True, text=True, timeout=60)
    assert show.returncode == 0 and loaded["league"].version in show.stdout and "30" in show.stdout
    assert "(this file's policy)" in show.stdout


def test_policies_are_recorded_and_diffable_by_version(clean, policy_env, tmp_path) -> None:
    environ, _, ladders = policy_env
    run = lambda *args: subprocess.run([sys.executable, "-m", "worker", *args], env=environ,  # noqa: E731
                                       capture_output=True, text=True, timeout=60)
    assert run("migrate").returncode == 0  # records the configured policies
    league = load_ladder_policies(ladders)["league"]
    changed = tmp_path / "league.toml"
    changed.write_text('home_advantage = 60\nfloor = 1150\nk_factor = { fide = {} }\n'
                       'season = { regress_to = 1200, weight = 0.5 }\n')
    out = run("policy", "diff", f"version:{league.version}", str(changed), "--exit-code")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "home_advantage" in out.stdout and "50.0" in out.stdout and "60.0" in out.stdout
    same = run("policy", "diff", f"version:{league.version}", "ladder:league")
    assert same.returncode == 0 and "no differences" in same.stdout
