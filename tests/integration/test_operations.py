"""Operating the service: dead-letter tooling, doctor, the worker role, secrets kept out of logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest

from tests.integration.test_worker import match, run_cli

pytestmark = pytest.mark.integration


def test_dead_letters_list_show_requeue_and_discard(clean, publisher):
    """A fixable dead letter is requeued through validation and applied; who/when are recorded;
    discarding keeps the row; a requeue of a still-bad body dead-letters it again."""
    publisher(match("dl-1", "a", "b", ladder="chess"))           # unknown ladder: fixable by config, not here
    publisher("{broken")                                         # not JSON
    clean.wait_drained(2)
    with clean.connect() as conn:
        ids = dict(conn.execute("SELECT reason_code, id FROM dead_letters").fetchall())
    listing = run_cli(clean, "dead-letters", "list")
    assert "unknown_ladder=1" in listing.stdout and "not_json=1" in listing.stdout
    shown = run_cli(clean, "dead-letters", "show", str(ids["not_json"]))
    assert shown.returncode == 0 and shown.stdout.rstrip().endswith("{broken")

    # Fix the data by hand: the requeue sends the stored body again, so edit it to the right ladder.
    with clean.connect() as conn:
        raw = json.loads(conn.execute("SELECT raw_body FROM dead_letters WHERE id = %s", (ids["unknown_ladder"],)).fetchone()[0])
        raw["ladder"] = "elo"
        conn.execute("UPDATE dead_letters SET raw_body = %s WHERE id = %s", (json.dumps(raw), ids["unknown_ladder"]))
    requeued = run_cli(clean, "dead-letters", "requeue", str(ids["unknown_ladder"]), str(ids["not_json"]), "--by", "ops-alice")
    assert requeued.returncode == 0, requeued.stderr
    counts = clean.wait_drained(4)
    assert (counts.applied, counts.dead_letters) == (1, 3)
    with clean.connect() as conn:
        rows = conn.execute("SELECT id, reason_code, status, resolved_by, resolved_at IS NOT NULL, requeue_task_id FROM dead_letters ORDER BY id").fetchall()
    assert rows[0][2:5] == ("requeued", "ops-alice", True) and rows[1][2:5] == ("requeued", "ops-alice", True)
    assert rows[2][1:3] == ("not_json", "open")          # the requeued broken body failed validation again
    assert run_cli(clean, "dead-letters", "requeue", str(ids["not_json"])).returncode == 1  # not open any more
    assert run_cli(clean, "dead-letters", "discard", str(rows[2][0]), "--by", "ops-bob").returncode == 0
    with clean.connect() as conn:
        assert conn.execute("SELECT status, resolved_by FROM dead_letters WHERE id = %s", (rows[2][0],)).fetchone() == ("discarded", "ops-bob")


def test_doctor_passes_on_a_healthy_service_and_fails_on_open_dead_letters_and_tampering(clean, publisher):
    """`ratings doctor` exits 0 when all is well, 1 with an open dead letter or a rating that differs from the ledger."""
    publisher(match("doc-1", "a", "b"))
    clean.wait_drained(1)
    healthy = run_cli(clean, "doctor")
    assert healthy.returncode == 0, healthy.stdout
    publisher("not json")
    clean.wait_drained(2)
    sick = run_cli(clean, "doctor")
    assert sick.returncode == 1 and "not_json=1" in sick.stdout
    with clean.connect() as conn:
        conn.execute("UPDATE dead_letters SET status = 'discarded'")
        conn.execute("UPDATE players SET rating = rating + 0.5 WHERE player_id = 'a'")
    tampered = run_cli(clean, "doctor")
    assert tampered.returncode == 1 and "1 difference" in tampered.stdout


def test_the_worker_role_can_read_and_write_but_not_alter_the_tables(clean):
    """A login user granted ratings_worker inserts and updates rows (an outbox row adds its
    ``outbox_pending`` row, which the relay locks and deletes) but cannot ALTER or DROP a table."""
    with clean.connect() as conn:
        conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ratings_app_test') "
                     "THEN CREATE ROLE ratings_app_test LOGIN; END IF; END $$")
        conn.execute("GRANT ratings_worker TO ratings_app_test")
    # direct: the test PgBouncer logs every client in as one user (auth_type = any)
    url = psycopg.conninfo.make_conninfo(clean.direct_database_url, user="ratings_app_test")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO dead_letters (reason_code, detail, raw_body) VALUES ('x', 'role test', '{}')")
        conn.execute("UPDATE dead_letters SET detail = 'updated' WHERE reason_code = 'x'")
        with conn.transaction(force_rollback=True):  # the outbox as the worker and the relay use it
            row_id = conn.execute("INSERT INTO outbox (event_id, payload) VALUES (gen_random_uuid(), '{}') "
                                  "RETURNING id").fetchone()[0]
            assert conn.execute("SELECT id FROM outbox_pending WHERE id = %s FOR UPDATE", (row_id,)).fetchone()
            assert conn.execute("DELETE FROM outbox_pending WHERE id = %s", (row_id,)).rowcount == 1
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("ALTER TABLE players ADD COLUMN evil int")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DROP TABLE ledger")


def test_credentials_in_urls_never_reach_the_logs(clean, tmp_path):
    """A worker and a relay whose database and broker URLs carry passwords (Redis requiring AUTH)
    rate a match, and neither password appears in their logs or in doctor's output."""
    from worker.devtools.embedded import EmbeddedServers
    from worker.devtools.runtime import ServiceProcesses
    from worker.producer import producer_app, publish_match
    from worker.store.urls import url_with

    secret_pg, secret_redis = "Sup3rS3cretPg", "Sup3rS3cretRedis"
    broker = EmbeddedServers.start(tmp_path / "redis", postgres=False, redis_password=secret_redis)
    db_url = url_with(clean.database_url, password=secret_pg)
    env = dict(os.environ, RATINGS_DATABASE_URL=db_url, RATINGS_BROKER_URL=broker.broker_url)
    procs = ServiceProcesses(env, tmp_path / "logs")
    try:
        procs.start_worker("secret-worker")
        procs.start_relay("secret-relay")
        publish_match(producer_app(broker.broker_url), match("secret-1", "a", "b"), queue=clean.queue)
        clean.wait_drained(1, timeout=60)
        doctor = subprocess.run([sys.executable, "-m", "worker", "doctor", "--skip-verify"], env=env,
                                capture_output=True, text=True)
    finally:
        procs.stop_all()
        broker.stop()
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "logs").glob("*.log"))
    assert "transport:" in logs  # the worker printed its banner, with the broker URL masked
    for secret in (secret_pg, secret_redis):
        assert secret not in logs and secret not in doctor.stdout + doctor.stderr
