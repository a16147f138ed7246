"""Late matches placed in their chronological position (``docs/decisions/0008-chronological-order.md``) under faults, with real worker
processes: a worker child killed inside a correction, two late matches whose corrections overlap, a
correction racing `ratings rebuild`. Each scenario's matches go in turn to the Sedma (Elo) ladder and
the Glicko-2 ladder (:data:`tests.faults.conftest.FAULT_LADDERS`). Each time: nothing lost, nothing
applied twice, verify exact, and every stored player state (rating, games; deviation, volatility and
the time of the last match under Glicko-2) equals a single-process chronological replay of every
published message bit for bit (:mod:`tests.reference_replay`, computed here from the messages, never
from the store).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import psycopg
import pytest

from ..reference_replay import chronological_states

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]


def split_late(messages: list[dict], every: int, before: int) -> tuple[list[dict], list[dict]]:
    """(in time order, held back): of the first ``before`` messages, every ``every``-th of each
    ladder is held back, to be published after the rest has been applied (so each is late for its
    players). The held-back ones come grouped by ladder, each group in time order, so that
    consecutive ones (a pair published at once) are on one ladder."""
    seen: Counter[str] = Counter()
    late = []
    for m in messages[:before]:
        seen[m["ladder"]] += 1
        if seen[m["ladder"]] % every == 0:
            late.append(m)
    late.sort(key=lambda m: m["ladder"])  # stable: time order within a ladder
    held = {m["match_id"] for m in late}
    return [m for m in messages if m["match_id"] not in held], late


def assert_chronological(cluster, messages: list[dict]) -> None:
    """Every stored player state equals the chronological replay of ``messages``: (rating, games
    played, deviation, volatility, last_played), the last three ``None`` under Elo; no match was
    placed at the end."""
    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        stored = {(lad, pid): (r, g, d, v, lp) for lad, pid, r, g, d, v, lp in conn.execute(
            "SELECT ladder, player_id, rating, games_played, deviation, volatility, last_played FROM players")}
        assert conn.execute("SELECT count(*) FROM ledger WHERE placed_at_end").fetchone()[0] == 0
    expected = chronological_states(messages)
    assert {lad for lad, _ in expected} == {m["ladder"] for m in messages}
    assert stored == expected


def corrections(cluster) -> tuple[int, int]:
    """(corrections recorded, most matches one correction re-rated)."""
    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        n, most = conn.execute("SELECT count(*), coalesce(max(matches_rerated), 0) FROM corrections").fetchone()
    return int(n), int(most)


@pytest.mark.parametrize("batch_size", [1], ids=["one-per-transaction"])
def test_a_worker_child_killed_inside_a_correction_loses_nothing_and_applies_nothing_twice(cluster_factory):
    """500 Sedma matches in time order (half on the Elo ladder, half on the Glicko-2 one), then the
    40 held back from the first 400 (each late, re-rating the later matches of its players), one per
    transaction; every 4th transaction that makes a correction is SIGKILLed with everything written
    and no COMMIT. The late matches come back and are placed once: every player's state equals the
    chronological replay, verify and the event sequences hold."""
    cluster = cluster_factory("kill-in-correction", {"RATINGS_FAULT_INJECTION": "in_correction:every=4"}).start()
    messages = cluster.matches(500, players=30)
    in_order, late = split_late(messages, 10, 400)
    cluster.publish(in_order)
    cluster.wait_drained(timeout=180)
    before, _ = corrections(cluster)  # two nodes applying in time order already race a little
    cluster.publish(late)
    cluster.figures["recovery_seconds"] = round(cluster.wait_drained(timeout=180), 1)
    cluster.wait_broker_empty(timeout=120)
    figures = cluster.check_invariants()
    kills = cluster.log_count(r"exited with 'signal 9")
    made, most = corrections(cluster)
    cluster.figures.update(kills=kills, corrections=made, late_corrections=made - before, largest_correction=most)
    assert kills >= 3, "the fault was not injected"
    assert (figures["applied"], figures["duplicates"], figures["dead_letters"]) == (500, 0, 0)
    assert made - before == len(late)  # one committed correction per late match: the killed ones left nothing
    assert_chronological(cluster, messages)


@pytest.mark.parametrize("batch_size", [1], ids=["one-per-transaction"])
def test_two_late_matches_whose_corrections_overlap_are_both_placed_exactly(cluster_factory):
    """300 Sedma matches among 8 players in time order (on the two ladders), then 24 held back (12
    per ladder), published in pairs of one ladder from two processes at once to two worker nodes:
    each pair's corrections re-rate the same later matches. Both are placed: the second correction starts from the first one's rows (some match's
    history row is superseded twice), the ratings equal the chronological replay, every player's
    event sequence has no gap."""
    cluster = cluster_factory("overlapping-corrections").start(workers=2)
    messages = cluster.matches(300, players=8)
    in_order, late = split_late(messages, 10, 240)
    cluster.publish(in_order)
    cluster.wait_drained(timeout=180)
    before, _ = corrections(cluster)
    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        last_id = conn.execute("SELECT coalesce(max(id), 0) FROM corrections").fetchone()[0]
    cluster.publish_from_processes([late[0::2], late[1::2]])
    cluster.figures["recovery_seconds"] = round(cluster.wait_drained(timeout=180), 1)
    figures = cluster.check_invariants()
    made, most = corrections(cluster)
    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        # a (match, player) history row superseded by two of the late phase's corrections
        twice = conn.execute("""SELECT count(*) FROM (SELECT 1 FROM rating_changes WHERE superseded_by > %s
                                 GROUP BY match_id, player_id HAVING count(DISTINCT superseded_by) >= 2) AS t""",
                             (last_id,)).fetchone()[0]
    cluster.figures.update(late_corrections=made - before, largest_correction=most, rows_corrected_twice=twice)
    assert (figures["applied"], figures["duplicates"], figures["dead_letters"]) == (300, 0, 0)
    assert made - before == len(late) and twice > 0
    assert_chronological(cluster, messages)


def test_a_correction_racing_a_rebuild_is_in_the_rebuilt_ladder_exactly(cluster_factory, tmp_path: Path):
    """`ratings rebuild --ladder sedma --order finished-at` stops itself after replaying its snapshot
    into a new generation, before the switch-over; meanwhile 30 late matches are applied with
    corrections of the old generation. Resumed, the rebuild catches them up in their chronological
    place and switches over: the ratings equal the chronological replay, verify and the event
    sequences hold, nothing is lost or applied twice."""
    stopped = tmp_path / "rebuild-stopped.pid"
    cluster = cluster_factory("correction-racing-rebuild").start()
    messages = cluster.matches(600, players=40)
    in_order, late = split_late(messages, 15, 450)
    cluster.publish(in_order)
    cluster.wait_drained(timeout=180)
    before, _ = corrections(cluster)
    env = {**cluster.env, "RATINGS_FAULT_INJECTION": f"rebuild_before_switch:stop_once={stopped}"}
    rebuild = subprocess.Popen([sys.executable, "-m", "worker", "rebuild", "--ladder", "sedma", "--order", "finished-at",
                                "--json", "--by", "faults"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        deadline = time.monotonic() + 120
        while not stopped.exists() and rebuild.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert stopped.exists(), "the rebuild did not reach its switch-over"
        time.sleep(0.1)  # the pid is written before the stop
        assert psutil.Process(rebuild.pid).status() == psutil.STATUS_STOPPED
        cluster.publish(late)
        cluster.wait_drained(timeout=180)
        made_before_switch, _ = corrections(cluster)
    finally:
        os.kill(rebuild.pid, signal.SIGCONT)
    out, err = rebuild.communicate(timeout=240)
    assert rebuild.returncode == 0, err[-2000:]
    cluster.wait_drained(timeout=60)
    figures = cluster.check_invariants()
    cluster.figures.update(corrections_before_switch=made_before_switch - before)
    assert made_before_switch > before  # the late matches corrected the old generation first
    assert (figures["applied"], figures["duplicates"], figures["dead_letters"]) == (600, 0, 0)
    assert_chronological(cluster, messages)
