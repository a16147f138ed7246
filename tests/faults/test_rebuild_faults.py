"""Rebuilds that die, and a ladder lock held past the workers' patience, while matches flow."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from worker.settings import DEFAULT_LADDERS_FILE
from worker.store import LADDER_LOCK_CLASS

from .conftest import FAULT_LADDERS

pytestmark = pytest.mark.faults


def sedma_file(tmp_path, low_band_k: int = 48):
    """The default ladders file (and its policy files) with the K of Sedma's lowest band (< 1200) changed."""
    folder = tmp_path / f"ladders-sedma-{low_band_k}"
    (folder / "policies").mkdir(parents=True, exist_ok=True)
    policies = DEFAULT_LADDERS_FILE.parent / "policies"
    (folder / "policies" / "elo.toml").write_text((policies / "elo.toml").read_text())
    sedma = (policies / "sedma.toml").read_text()
    assert "[[1200, 40]," in sedma
    (folder / "policies" / "sedma.toml").write_text(sedma.replace("[[1200, 40],", f"[[1200, {low_band_k}],"))
    for other in policies.glob("*.toml"):  # the shipped ladders' other policies, unchanged
        if not (folder / "policies" / other.name).exists():
            (folder / "policies" / other.name).write_text(other.read_text())
    path = folder / "ladders.toml"
    path.write_text(DEFAULT_LADDERS_FILE.read_text())
    return path


def rebuild(cluster, ladders, fault: str | None = None) -> subprocess.CompletedProcess:
    """`ratings rebuild --ladder sedma --json` as a subprocess, optionally killing itself at ``fault``."""
    env = {**cluster.env, "RATINGS_LADDERS_FILE": str(ladders)}
    if fault:
        env["RATINGS_FAULT_INJECTION"] = f"{fault}:every=1"
    return subprocess.run([sys.executable, "-m", "worker", "rebuild", "--ladder", "sedma", "--json", "--by", "faults"],
                          env=env, capture_output=True, text=True, timeout=300)


def ladder_state(cluster) -> tuple:
    """The Sedma ladder's (policy version, generation), every rebuild's (status, error), and the
    Sedma ledger rows per policy version (half the scenario's matches: the rest are on Glicko-2)."""
    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        record = conn.execute("SELECT policy_version, generation FROM ladders WHERE ladder = 'sedma'").fetchone()
        statuses = conn.execute("SELECT status, coalesce(error, '') FROM rebuilds ORDER BY id").fetchall()
        versions = dict(conn.execute("SELECT policy_version, count(*) FROM ledger WHERE ladder = 'sedma' "
                                     "GROUP BY 1").fetchall())
    return record, statuses, versions


def test_a_rebuild_killed_before_its_switch_over_changes_nothing_and_the_next_one_completes(cluster_factory, tmp_path):
    """SIGKILL after replaying into uncommitted rows, before the exclusive lock, while workers
    apply matches: the ladder keeps its policy and generation, every invariant holds, and the next
    rebuild marks the dead one failed and completes."""
    cluster = cluster_factory("rebuild-killed-before-switch").start()
    cluster.publish(cluster.matches(800, players=80))
    cluster.wait_received(150)
    before, _, _ = ladder_state(cluster)
    killed = rebuild(cluster, sedma_file(tmp_path), fault="rebuild_before_switch")
    assert killed.returncode == -9, killed.stderr[-2000:]
    cluster.wait_drained()
    record, statuses, _ = ladder_state(cluster)
    assert record == before and statuses == [("running", "")]
    cluster.check_invariants()

    done = rebuild(cluster, sedma_file(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    record, statuses, versions = ladder_state(cluster)
    assert record == (report["policy_version"], report["generation"])
    assert statuses[0][0] == "failed" and "abandoned" in statuses[0][1] and statuses[1] == ("done", "")
    assert versions == {report["policy_version"]: 400}
    cluster.figures.update(killed_rebuilds=1, lock_held_ms=round(report["lock_held_seconds"] * 1000, 1))
    cluster.check_invariants()


def test_a_rebuild_killed_after_its_switch_over_leaves_the_ladder_switched_and_consistent(cluster_factory, tmp_path):
    """SIGKILL right after the switch-over committed, before stamping the ledger: the ladder is on
    the new policy and generation, verify and the event invariants hold, and the next rebuild
    closes the dead one and stamps every ledger row."""
    cluster = cluster_factory("rebuild-killed-after-switch").start()
    cluster.publish(cluster.matches(600, players=80))
    cluster.wait_received(150)
    killed = rebuild(cluster, sedma_file(tmp_path), fault="rebuild_after_switch")
    assert killed.returncode == -9, killed.stderr[-2000:]
    cluster.publish(cluster.matches(100, players=80, seed=2, prefix="after-switch"))
    cluster.wait_drained()
    record, statuses, versions = ladder_state(cluster)
    assert statuses == [("switched", "")] and record[1] == 1
    assert versions[record[0]] >= 50  # the Sedma matches rated after the switch, at least
    cluster.check_invariants()

    done = rebuild(cluster, sedma_file(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    record, statuses, versions = ladder_state(cluster)
    assert statuses[0][0] == "done" and "before stamping" in statuses[0][1]
    assert versions == {record[0]: 350}
    cluster.check_invariants()


def test_a_ladder_lock_held_past_the_workers_retries_requeues_its_matches_and_loses_nothing(cluster_factory):
    """The ladders' advisory locks held exclusively (as a rebuild's switch-over holds one) for 4 s,
    with lock_timeout 200 ms and 2 attempts: waiting tasks fail with LockNotAvailable, requeue
    their messages, and every match is applied once after the lock is released."""
    cluster = cluster_factory("ladder-lock-held", {"RATINGS_LOCK_TIMEOUT_MS": "200", "RATINGS_MAX_RETRIES": "2"}).start()
    cluster.publish(cluster.matches(50, players=30, prefix="before-lock"))
    cluster.wait_drained()
    held, release = threading.Event(), threading.Event()

    def hold():
        with psycopg.connect(cluster.database_url) as conn:
            for ladder in FAULT_LADDERS:
                conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LADDER_LOCK_CLASS, ladder))
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    cluster.publish(cluster.matches(50, players=30, seed=2, prefix="during-lock"))
    time.sleep(4.0)
    assert cluster.counts().applied == 50, "no match of the ladders commits while their locks are held"
    release.set()
    holder.join()
    cluster.figures["recovery_seconds"] = round(cluster.wait_drained(timeout=120), 1)
    cluster.figures["lock_timeouts_logged"] = cluster.log_count(r"LockNotAvailable|lock timeout")
    cluster.figures["requeues_logged"] = cluster.log_count(r"requeueing")
    figures = cluster.check_invariants()
    assert (figures["applied"], figures["dead_letters"]) == (100, 0)
    assert cluster.figures["lock_timeouts_logged"] >= 1 and cluster.figures["requeues_logged"] >= 1
