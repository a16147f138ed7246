"""The outbox without its second write (migration 0008): an event row is written once, in the rating
transaction; what the relay has still to publish is ``outbox_pending``, filled by a trigger and emptied
by the relay. Against a real PostgreSQL, real workers and a real relay."""

from __future__ import annotations

import json
import time
import uuid

import psycopg
import pytest
from yoyo import get_backend, read_migrations

from worker.store.migrate import MIGRATIONS_DIR, _yoyo_url
from worker.store.urls import url_with

from .test_worker import match

pytestmark = pytest.mark.integration


def test_the_relay_publishes_every_event_without_writing_its_outbox_row_again(clean, publisher):
    """Matches through the workers and the relay: every event reaches the stream and leaves
    ``outbox_pending``, and every outbox row is still the version the rating transaction wrote (its
    ``xmin`` is the transaction id of the ledger row written beside it, not the relay's). Only the
    ``match`` events are joined to their ledger rows: two workers may commit the six matches out of
    order, and a correction's events belong to the transaction of the late match."""
    for n in range(6):
        publisher(match(f"op-{n}", f"p{n % 3}", f"q{n % 2}"))
    clean.wait_drained(6)  # (counts any message an earlier test left in flight too: the checks below are by match id)
    with clean.connect() as conn:
        deadline = time.monotonic() + 60
        while conn.execute("SELECT count(*) FROM outbox_pending").fetchone()[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert conn.execute("SELECT count(*) FROM outbox_pending").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM ledger WHERE match_id LIKE 'op-%'").fetchone()[0] == 6
        rows = conn.execute(
            """SELECT o.xmin::text = l.xmin::text FROM outbox o JOIN ledger l ON l.match_id = o.payload->>'match_id'
                WHERE l.match_id LIKE 'op-%' AND o.payload->>'reason' = 'match'""").fetchall()
    assert len(rows) == 12 and all(same for (same,) in rows), rows
    on_stream = {json.loads(f["payload"])["match_id"] for _, f in clean.redis.xrange(clean.stream)}
    assert {f"op-{n}" for n in range(6)} <= on_stream


def test_migration_0008_keeps_the_unpublished_events_pending(env):
    """A database at migration 0007 with published and unpublished outbox rows, migrated to 0008:
    exactly the unpublished rows are pending; ``published_at`` is gone; rows added later by INSERT
    and by COPY become pending through the trigger, in one statement each."""
    name = f"ratings_mig_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(env.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = url_with(env.database_url, dbname=name)
    try:
        backend = get_backend(_yoyo_url(url))
        migrations = read_migrations(str(MIGRATIONS_DIR))
        with backend.lock():
            backend.apply_migrations(backend.to_apply(migrations.filter(lambda m: m.id < "0008")))
        with psycopg.connect(url, autocommit=True) as conn:
            ids = [conn.execute("INSERT INTO outbox (event_id, payload, published_at) VALUES (gen_random_uuid(), "
                                "'{}', CASE WHEN %s THEN now() END) RETURNING id", (n % 2 == 0,)).fetchone()[0]
                   for n in range(5)]
        with backend.lock():
            backend.apply_migrations(backend.to_apply(migrations))
        with psycopg.connect(url, autocommit=True) as conn:
            assert [r[0] for r in conn.execute("SELECT id FROM outbox_pending ORDER BY id")] == ids[1::2]
            columns = {r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'outbox'")}
            assert "published_at" not in columns and "created_at" in columns
            added = [r[0] for r in conn.execute(
                "INSERT INTO outbox (event_id, payload) SELECT gen_random_uuid(), '{}' FROM generate_series(1, 3) "
                "RETURNING id")]
            with conn.cursor().copy("COPY outbox (event_id, payload) FROM STDIN") as copy:
                copy.write_row((str(uuid.uuid4()), "{}"))
                copy.write_row((str(uuid.uuid4()), "{}"))
            copied = [r[0] for r in conn.execute("SELECT id FROM outbox WHERE id > %s ORDER BY id", (added[-1],))]
            assert len(copied) == 2
            assert [r[0] for r in conn.execute("SELECT id FROM outbox_pending ORDER BY id")] == ids[1::2] + added + copied
    finally:
        with psycopg.connect(env.database_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_payload_orjson_cannot_read_is_published_as_it_is_and_the_events_behind_it_too(clean):
    """The relay decodes the outbox's ``jsonb`` with orjson, which refuses a number beyond the float
    range (``jsonb`` returns 1e400 as a 401-digit integer) and writes no nesting deeper than 254
    levels. No writer of the service makes such a row,
    but a row made by hand must not stop the relay: it goes to the stream as its ``jsonb`` text, and
    the rows behind it are published too (the running relay process, real PostgreSQL and Redis)."""
    deep = "[" * 300 + "]" * 300
    payloads = ['{"x": 1e400}', '{"x": -1e309, "y": "é"}', f'{{"deep": {deep}}}', '{"ok": 1}']
    with clean.connect() as conn:
        for payload in payloads:
            conn.execute("INSERT INTO outbox (event_id, payload) VALUES (gen_random_uuid(), %s::jsonb)", (payload,))
        deadline = time.monotonic() + 60
        while conn.execute("SELECT count(*) FROM outbox_pending").fetchone()[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert conn.execute("SELECT count(*) FROM outbox_pending").fetchone()[0] == 0
    published = [json.loads(f["payload"]) for _, f in clean.redis.xrange(clean.stream)]
    assert published == [{"x": 10**400}, {"x": -(10**309), "y": "é"}, {"deep": json.loads(deep)}, {"ok": 1}]
