"""Consumers' access: the backfill read path (`ratings events`, `ratings outbox prune`), consumer lag in the
metrics and `ratings doctor`, the Redis ACL user of a consumer and the read-only PostgreSQL role."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid

import psycopg
import pytest
import redis

from tests.integration.test_consumer_library import event
from tests.integration.test_metrics import scrape, total, wait_for_port
from tests.integration.test_worker import match, ratings, run_cli
from worker.consumer import MemoryState, RatingEventConsumer, RedisState
from worker.consumer.acl import consumer_acl_rules
from worker.devtools.runtime import _free_port
from worker.store.urls import url_with

pytestmark = pytest.mark.integration


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_events_read_prints_a_players_events_after_a_sequence_and_snapshot_the_current_ratings(clean,
                                                                                                  publish_in_order):
    """Three matches of amy: `events read --player amy --after-sequence 1` prints her sequences 2 and 3 as the
    stream carries them; `events snapshot` her rating (as in players) and sequence 3."""
    publish_in_order([match(f"ev-{n}", "amy", f"opp{n}") for n in range(3)])
    clean.wait_stream(6)
    read = run_cli(clean, "events", "read", "--ladder", "elo", "--player", "amy", "--after-sequence", "1")
    assert read.returncode == 0, read.stderr
    events = jsonl(read.stdout)
    assert [e["sequence"] for e in events] == [2, 3]
    on_stream = {f["event_id"]: json.loads(f["payload"]) for _, f in clean.redis.xrange(clean.stream)}
    assert all(on_stream[e["event_id"]] == e for e in events)
    snap = jsonl(run_cli(clean, "events", "snapshot", "--player", "amy").stdout)
    assert snap == [{"ladder": "elo", "player_id": "amy", "rating": ratings(clean)[("elo", "amy")][0],
                     "games_played": 3, "sequence": 3}]


def test_outbox_prune_deletes_published_events_older_than_the_retention_and_keeps_unpublished_ones(clean, publisher):
    """Of four published events, three written 10 days ago, one of which is made unpublished again (its
    ``outbox_pending`` row back, held locked so that the relay skips it): `outbox prune` (retention 7
    days) deletes the two old published ones only; the old unpublished one and the recent one stay."""
    import psycopg

    publisher(match("pr-1", "a", "b"))
    publisher(match("pr-2", "c", "d"))
    clean.wait_drained(2)
    with clean.connect() as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM outbox ORDER BY id")]
        assert conn.execute("SELECT count(*) FROM outbox_pending").fetchone()[0] == 0
        conn.execute("UPDATE outbox SET created_at = now() - interval '10 days' WHERE id = ANY(%s)", (ids[:3],))
    with psycopg.connect(clean.database_url) as holder:
        holder.execute("INSERT INTO outbox_pending (id) VALUES (%s)", (ids[2],))
        holder.commit()
        assert holder.execute("SELECT id FROM outbox_pending WHERE id = %s FOR UPDATE", (ids[2],)).fetchone()
        pruned = run_cli(clean, "outbox", "prune")
        assert pruned.returncode == 0 and "pruned 2 published events older than 7 days" in pruned.stdout
        assert [r[0] for r in holder.execute("SELECT id FROM outbox ORDER BY id")] == ids[2:]
        holder.execute("DELETE FROM outbox_pending WHERE id = %s", (ids[2],))


def test_consumer_lag_shows_in_the_relay_metrics_and_fails_doctor_past_the_threshold(clean, publish_in_order):
    """A group that received 2 of 6 entries and acknowledged none: the relay's gauges say 4 undelivered and
    2 pending; `ratings doctor` with RATINGS_CONSUMER_LAG_THRESHOLD=5 fails on that group, passes at 6."""
    publish_in_order([match(f"lag-{n}", "a", "b") for n in range(3)])
    clean.wait_stream(6)
    clean.redis.xgroup_create(clean.stream, "slow-service", id="0")
    clean.redis.xreadgroup("slow-service", "c1", {clean.stream: ">"}, count=2)
    wait_for_port(clean.procs.ports["relay"])
    samples = scrape(clean.procs.ports["relay"])
    assert total(samples, "ratings_consumer_lag_entries", group="slow-service", state="undelivered") == 4
    assert total(samples, "ratings_consumer_lag_entries", group="slow-service", state="pending") == 2
    assert total(samples, "ratings_consumer_oldest_pending_seconds", group="slow-service") >= 0
    import os
    os.environ["RATINGS_CONSUMER_LAG_THRESHOLD"] = "5"
    try:
        sick = run_cli(clean, "doctor", "--skip-verify")
        os.environ["RATINGS_CONSUMER_LAG_THRESHOLD"] = "6"
        healthy = run_cli(clean, "doctor", "--skip-verify")
    finally:
        os.environ.pop("RATINGS_CONSUMER_LAG_THRESHOLD")
    assert sick.returncode == 1 and "consumer group slow-service" in sick.stdout, sick.stdout
    assert "4 undelivered, 2 pending" in sick.stdout
    assert healthy.returncode == 0, healthy.stdout
    clean.redis.xgroup_destroy(clean.stream, "slow-service")


@pytest.fixture
def acl_redis(tmp_path):
    """A real redis-server with ACLs (default user password-protected) on a spare loopback port."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server)")
    port, admin_password = _free_port(), uuid.uuid4().hex
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path), "--requirepass", admin_password],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    admin = redis.Redis(port=port, password=admin_password, decode_responses=True)
    for _ in range(100):
        try:
            admin.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    yield port, admin
    proc.terminate()
    proc.wait(10)


def test_the_consumer_acl_user_reads_and_manages_its_group_and_can_do_nothing_else(acl_redis):
    """A user with consumer_acl_rules consumes (group, claim, park a poison event, its state) on a real
    redis-server with ACLs on, and is refused XADD/XDEL/XTRIM/DEL on the stream, group destruction, other keys."""
    port, admin = acl_redis
    stream, group = "ratings.rating-changed", "leaderboard"
    admin.acl_setuser("leaderboard-consumer", enabled=True, passwords=["+consumer-secret"])
    admin.execute_command("ACL", "SETUSER", "leaderboard-consumer", *consumer_acl_rules(stream, group))
    evs = [event("p1", s, 1500.0 + s) for s in (1, 2, 3)]
    poison = event("p2", 1, 1400.0)
    for e in [*evs, poison]:
        admin.xadd(stream, {"event_id": e["event_id"], "type": "rating-changed.v1", "payload": json.dumps(e)})
    admin.set("other-service:secret", "x")
    client = redis.Redis(port=port, username="leaderboard-consumer", password="consumer-secret", decode_responses=True)
    handled = []

    def handle(e):
        if e["event_id"] == poison["event_id"]:
            raise ValueError("poison")
        handled.append(e["sequence"])

    state = RedisState(client, f"{stream}:{group}:state")
    consumer = RatingEventConsumer(client, handle, stream=stream, group=group, state=state, claim_idle_ms=0,
                                   max_deliveries=2)
    report = consumer.run_until_idle()
    assert handled == [1, 2, 3] and report.parked == 1
    assert admin.xlen(f"{stream}:{group}:parked") == 1 and admin.xpending(stream, group)["pending"] == 0
    denied = [
        lambda: client.xadd(stream, {"event_id": "forged"}),
        lambda: client.xdel(stream, admin.xrange(stream, count=1)[0][0]),
        lambda: client.xtrim(stream, maxlen=0),
        lambda: client.delete(stream),
        lambda: client.xgroup_destroy(stream, group),
        lambda: client.xgroup_setid(stream, group, "0"),
        lambda: client.get("other-service:secret"),
        lambda: client.xadd("other-service:events", {"x": "1"}),
        lambda: client.flushall(),
        lambda: client.config_get("*"),
    ]
    for attempt in denied:
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    assert admin.xlen(stream) == 4 and MemoryState().last_sequence("elo", "p1") == 0


def test_the_read_only_backfill_role_reads_events_and_ratings_and_cannot_write(clean, publisher):
    """A login user granted ratings_reader runs `ratings events read/snapshot` and cannot insert, update,
    delete or prune (PostgreSQL refuses)."""
    publisher(match("ro-1", "amy", "bea"))
    clean.wait_drained(1)
    role = f"ratings_reader_test_{uuid.uuid4().hex[:8]}"
    with clean.connect() as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT ratings_reader TO {role}")
    try:
        # A URL (the settings refuse a keyword/value DSN): the same server and database, as the role,
        # direct (a test PgBouncer logs every client in as one user: auth_type = any).
        url = url_with(clean.direct_database_url, user=role, password=None)
        env = {"RATINGS_DATABASE_URL": url, "RATINGS_DIRECT_DATABASE_URL": url}
        import os

        read = subprocess.run([sys.executable, "-m", "worker", "events", "read"],
                              env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
        assert read.returncode == 0, read.stderr
        assert sorted(e["player_id"] for e in jsonl(read.stdout)) == ["amy", "bea"]
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM players").fetchone()[0] == 2
            for sql in ("INSERT INTO outbox (event_id, payload) VALUES (gen_random_uuid(), '{}')",
                        "UPDATE players SET rating = 0", "DELETE FROM outbox", "SELECT * FROM ledger",
                        "TRUNCATE outbox"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(sql)
        prune = subprocess.run([sys.executable, "-m", "worker", "outbox", "prune", "--older-than-days", "0"],
                               env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
        assert prune.returncode != 0
    finally:
        with clean.connect() as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_a_consumer_away_longer_than_the_retention_takes_the_snapshot_then_the_later_events(clean, publish_in_order):
    """Two matches consumed; three more, then the outbox pruned and the stream trimmed to its last entry:
    the returning consumer (direct read-only backfill) applies amy's and bea's snapshots and ends with
    the database's ratings, after exactly one reconcile for its absence. Its first read, a new group
    reading from the stream's head, reconciles too on Redis 6.2 (the embedded server): without
    XINFO's ``entries-added`` (Redis 7.0) it cannot tell a new stream from one trimmed before the
    group existed."""
    from worker.consumer.database import DatabaseBackfill

    held: dict = {}

    def handle(e):
        held[(e["ladder"], e["player_id"])] = e["rating_after"]

    def take(row):
        held[(row["ladder"], row["player_id"])] = row["rating"]

    publish_in_order([match(f"away-{n}", "amy", "bea") for n in range(2)])
    clean.wait_stream(4)
    consumer = RatingEventConsumer(clean.redis, handle, on_snapshot=take, stream=clean.stream, group="away",
                                   backfill=DatabaseBackfill(clean.database_url))
    consumer.run_until_idle()
    redis_7 = int(clean.redis.info("server")["redis_version"].split(".")[0]) >= 7
    assert consumer.report.reconciles == (0 if redis_7 else 1)
    before_absence = consumer.report.reconciles
    publish_in_order([match(f"away-{n}", "amy", "bea") for n in range(2, 5)])
    clean.wait_stream(10)
    with clean.connect() as conn:
        conn.execute("UPDATE outbox SET created_at = now() - interval '30 days'")
    assert "pruned 10 published events" in run_cli(clean, "outbox", "prune").stdout
    clean.redis.xtrim(clean.stream, maxlen=1, approximate=False)
    consumer.run_until_idle()
    assert held == {key: rating for key, (rating, _) in ratings(clean).items()}
    assert consumer.report.snapshots == 2 and consumer.report.reconciles - before_absence == 1
    assert consumer.state.last_sequence("elo", "amy") == 5
