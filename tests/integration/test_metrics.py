"""The worker's and the relay's /metrics, /healthz and /readyz, scraped from the real processes."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_worker import match

pytestmark = pytest.mark.integration


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """Samples of http://127.0.0.1:port/metrics as {(name, sorted labels): value}."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(samples: dict, name: str, **labels) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


def workers_total(env, name: str, **labels) -> float:
    return sum(total(scrape(env.procs.ports[w]), name, **labels) for w in ("w1", "w2"))


def get(port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def wait_for_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
            return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.2)


def test_metrics_count_what_the_test_did(clean, publisher):
    """After 6 applied, 2 duplicate and 3 dead-lettered messages, the workers' counters rose by
    exactly that, the message latency histogram by 11 (one observation per message), the
    batch-size histogram by 6 matches in as many transactions as the transaction lock-wait
    histogram counts (one observation of each per transaction that applied matches: with
    batching, 6 matches may take 1 to 6 transactions), and the relay published every event and
    reports no lag."""
    for w in ("w1", "w2", "relay"):
        wait_for_port(clean.procs.ports[w])
    before = {k: workers_total(clean, "ratings_messages_total", outcome=k) for k in ("applied", "duplicate", "dead_letter")}
    latency_before = workers_total(clean, "ratings_message_latency_seconds_count")
    dl_before = workers_total(clean, "ratings_dead_letters_total", reason="not_json")
    transactions_before = workers_total(clean, "ratings_batch_size_count")
    batched_before = workers_total(clean, "ratings_batch_size_sum")
    lock_waits_before = workers_total(clean, "ratings_transaction_lock_wait_seconds_count")
    relay_before = total(scrape(clean.procs.ports["relay"]), "ratings_events_published_total")
    for n in range(6):
        publisher(match(f"metrics-{n}", f"m{n}", f"n{n}", ladder="sedma", stats={"won_by_16": 1}))
    publisher(match("metrics-0", "m0", "n0", ladder="sedma", stats={"won_by_16": 1}))
    publisher(match("metrics-1", "m1", "n1", ladder="sedma", stats={"won_by_16": 1}))
    publisher("not json")
    publisher("still not json")
    publisher(match("metrics-x", "a", "b", ladder="nope"))
    clean.wait_drained(11)
    clean.wait_stream(12)
    time.sleep(0.5)
    after = {k: workers_total(clean, "ratings_messages_total", outcome=k) for k in ("applied", "duplicate", "dead_letter")}
    assert {k: after[k] - before[k] for k in after} == {"applied": 6, "duplicate": 2, "dead_letter": 3}
    assert workers_total(clean, "ratings_message_latency_seconds_count") - latency_before == 11
    assert workers_total(clean, "ratings_dead_letters_total", reason="not_json") - dl_before == 2
    assert workers_total(clean, "ratings_batch_size_sum") - batched_before == 6
    transactions = workers_total(clean, "ratings_batch_size_count") - transactions_before
    assert 1 <= transactions <= 6
    assert workers_total(clean, "ratings_transaction_lock_wait_seconds_count") - lock_waits_before == transactions
    relay = scrape(clean.procs.ports["relay"])
    assert total(relay, "ratings_events_published_total") - relay_before == 12
    assert total(relay, "ratings_outbox_lag_seconds") == 0
    assert total(relay, "ratings_stream_length") >= 12
    with clean.connect() as conn:
        drift = conn.execute("SELECT sum(rating) - 1000 * count(*) FROM players WHERE ladder = 'sedma'").fetchone()[0]
    assert total(relay, "ratings_rating_pool_drift", ladder="sedma") == pytest.approx(drift)


def test_a_message_latency_runs_from_its_receipt_so_the_wait_for_a_batch_counts(env, tmp_path):
    """A worker whose batches wait up to 0.5 s for company (RATINGS_BATCH_FLUSH_INTERVAL): a lone
    message waits that long in the buffer before its transaction (a few ms), and its one
    latency observation says so (at least 0.5 s; none at or below 0.25 s). A batch's time divided by
    its size would have been a few ms."""
    import os

    from worker.devtools.runtime import ServiceProcesses, wait_until_drained
    from worker.producer import producer_app, publish_match

    queue = env.queue + "-latency"
    procs = ServiceProcesses(dict(os.environ, RATINGS_QUEUE=queue, RATINGS_BATCH_SIZE="10",
                                  RATINGS_BATCH_FLUSH_INTERVAL="0.5"), tmp_path)
    try:
        procs.start_worker("latency-worker")
        port = procs.ports["latency-worker"]
        wait_for_port(port)
        from worker import store as repository

        with env.connect() as conn:
            before = repository.counts(conn).received
        publish_match(producer_app(env.broker_url), match("latency-1", "la", "lb"), queue=queue)
        wait_until_drained(env.database_url, before + 1, timeout=60)
        time.sleep(0.5)
        samples = scrape(port)
    finally:
        procs.stop_all()
    assert total(samples, "ratings_message_latency_seconds_count") == 1
    assert total(samples, "ratings_message_latency_seconds_sum") >= 0.5
    assert total(samples, "ratings_message_latency_seconds_bucket", le="0.25") == 0


def test_a_deferred_match_is_counted_by_ladder_and_its_latency_observed_once(clean):
    """A player's row held outside the service (an operator's open transaction): the workers defer
    the match past RATINGS_PLAYER_LOCK_WAIT_MS (1 s) and count it in
    ratings_deferred_matches_total{ladder="elo"}, a label with no player in it (the relay's top-N
    gauges name the player). Released, the match applies; its latency is observed once, from its
    receipt, so it holds the second waited, however many deferrals it took."""
    import threading

    import psycopg

    for w in ("w1", "w2", "relay"):
        wait_for_port(clean.procs.ports[w])
    deferred_before = workers_total(clean, "ratings_deferred_matches_total", ladder="elo")
    latency_count = workers_total(clean, "ratings_message_latency_seconds_count")
    latency_sum = workers_total(clean, "ratings_message_latency_seconds_sum")
    with clean.connect() as conn:
        conn.execute("INSERT INTO players (ladder, player_id, rating, peak_rating) VALUES ('elo', 'hot', 1200, 1200)")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with psycopg.connect(clean.database_url) as conn:
            conn.execute("SELECT 1 FROM players WHERE ladder = 'elo' AND player_id = 'hot' FOR UPDATE")
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        from worker.producer import producer_app, publish_match

        publish_match(producer_app(clean.broker_url), match("held-1", "ann", "hot"), queue=clean.queue)
        deadline = time.monotonic() + 30
        while workers_total(clean, "ratings_deferred_matches_total", ladder="elo") == deferred_before:
            assert time.monotonic() < deadline, "the match was never deferred"
            time.sleep(0.2)
    finally:
        release.set()
        holder.join()
    clean.wait_drained(1)
    time.sleep(0.5)
    for w in ("w1", "w2"):
        for (name, labels), _ in scrape(clean.procs.ports[w]).items():
            if name.startswith("ratings_deferred_matches"):
                assert dict(labels).keys() <= {"ladder"}, (name, labels)
    assert workers_total(clean, "ratings_message_latency_seconds_count") - latency_count == 1
    assert workers_total(clean, "ratings_message_latency_seconds_sum") - latency_sum >= 1.0
    relay = scrape(clean.procs.ports["relay"])
    assert total(relay, "ratings_player_deferred_matches", ladder="elo", player_id="hot") >= 1


def test_every_metric_served_is_in_the_catalogue_with_its_type_and_labels(clean, publisher):
    """What the workers and the relay serve, after real traffic, against
    :func:`worker.service.observability.metric_catalogue` (the docs' metrics page): each
    ``ratings_`` family is listed with its type and label names (a multiprocess gauge adds
    ``pid``), and one with values is recorded by the process the catalogue names; no other family
    carries a player id."""
    from worker.service.observability import metric_catalogue

    catalogue = {m.name: m for m in metric_catalogue()}
    for w in ("w1", "w2", "relay"):
        wait_for_port(clean.procs.ports[w])
    publisher(match("cat-1", "ca", "cb"))
    publisher("not json")
    clean.wait_drained(2)
    seen = set()
    for process, port in (("worker", clean.procs.ports["w1"]), ("worker", clean.procs.ports["w2"]),
                          ("relay", clean.procs.ports["relay"])):
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        for family in text_string_to_metric_families(text):
            if not family.name.startswith("ratings_") or family.name.endswith("_created"):
                continue  # _created: the time a client metric was made, a family of its own in this format
            name = family.name + ("_total" if family.type == "counter" else "")
            assert name in catalogue, name
            info = catalogue[name]
            assert family.type == info.type, name
            if any(s.value for s in family.samples if not s.name.endswith("_created")):
                assert process in info.recorded_by, (name, process)
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                labels = set(sample.labels) - {"le", "pid"}
                assert labels == set(info.labels), (sample.name, sample.labels, info.labels)
                if "player_id" in labels:
                    assert name.startswith("ratings_player_"), name
            seen.add(name)
    assert {"ratings_messages_total", "ratings_message_latency_seconds", "ratings_batch_size",
            "ratings_transaction_lock_wait_seconds", "ratings_outbox_lag_seconds", "ratings_stream_length",
            "ratings_events_published_total", "ratings_gc_frozen_objects"} <= seen


def test_health_and_readiness_endpoints_answer_for_worker_and_relay(env):
    """Liveness and readiness are 200 with details while the database and broker are up."""
    for name in ("w1", "w2", "relay"):
        port = env.procs.ports[name]
        wait_for_port(port)
        status, body = get(port, "/healthz")
        assert status == 200 and body["ok"] is True, (name, body)
        status, body = get(port, "/readyz")
        assert status == 200 and body["database"] == "ok" and body["broker"] == "ok", (name, body)


def test_workers_and_relay_keep_their_start_up_objects_out_of_the_collectors_full_passes(env):
    """Each worker main process, worker child and the active relay froze its start-up objects
    (``gc.freeze``, :mod:`worker.service.heap`): without it a full collection walked them all, 100
    to 270 ms in a child at a time, every few seconds of a steady load. Celery, kombu, psycopg,
    pydantic and the app are well over 50,000 objects in each."""
    for name in ("w1", "w2", "relay"):
        wait_for_port(env.procs.ports[name])
    frozen: dict[str, float] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for name in ("w1", "w2", "relay"):
            samples = scrape(env.procs.ports[name])
            for process in ("worker_main", "worker_child", "relay"):
                value = total(samples, "ratings_gc_frozen_objects", process=process)
                if value:
                    frozen[f"{name}/{process}"] = value
        if len(frozen) == 5:
            break
        time.sleep(0.5)
    assert sorted(frozen) == ["relay/relay", "w1/worker_child", "w1/worker_main", "w2/worker_child", "w2/worker_main"]
    assert min(frozen.values()) > 50_000, frozen


def test_relay_readiness_fails_when_the_broker_is_unreachable_and_when_the_outbox_lags(env, tmp_path):
    """A relay whose broker is down answers /readyz 503 naming the broker; one that sees an event
    older than RATINGS_RELAY_MAX_LAG unpublished answers 503 with the lag."""
    import os

    from worker.devtools.runtime import ServiceProcesses

    procs = ServiceProcesses(dict(os.environ, RATINGS_BROKER_URL="redis://127.0.0.1:1/0",
                                  RATINGS_EVENTS_REDIS_URL="redis://127.0.0.1:1/0"), tmp_path / "a")
    lagging = ServiceProcesses(dict(os.environ, RATINGS_RELAY_MAX_LAG="1", RATINGS_STREAM=env.stream + "-lag"),
                               tmp_path / "b")
    try:
        procs.start_relay("down-relay")
        wait_for_port(procs.ports["down-relay"])
        status, body = get(procs.ports["down-relay"], "/readyz")
        assert status == 503 and body["broker"] != "ok" and body["database"] == "ok"

        # An unpublished event two minutes old, row-locked by this test so that the active relay
        # skips it (FOR UPDATE SKIP LOCKED): lag a relay must report as not ready.
        lagging.start_relay("lag-relay")
        wait_for_port(lagging.ports["lag-relay"])
        import psycopg

        with psycopg.connect(env.database_url) as holder:
            for _ in range(50):  # the active relay may publish the row before we lock it: try again
                row_id = holder.execute(
                    "INSERT INTO outbox (event_id, payload, created_at) VALUES (gen_random_uuid(), '{}', "
                    "now() - interval '2 minutes') RETURNING id").fetchone()[0]
                holder.commit()
                locked = holder.execute("SELECT id FROM outbox_pending WHERE id = %s FOR UPDATE",
                                        (row_id,)).fetchone() is not None
                if locked:
                    break
                holder.execute("DELETE FROM outbox WHERE id = %s", (row_id,))
                holder.commit()
            assert locked, "the active relay published the test row every time before it could be locked"
            status, body = get(lagging.ports["lag-relay"], "/readyz")
            assert status == 503 and body["outbox_lag_seconds"] >= 119, body
            holder.execute("DELETE FROM outbox_pending WHERE id = %s", (row_id,))
            holder.execute("DELETE FROM outbox WHERE id = %s", (row_id,))
            holder.commit()
        status, body = get(lagging.ports["lag-relay"], "/readyz")
        assert status == 200, body
    finally:
        procs.stop_all()
        lagging.stop_all()


def test_each_handled_message_logs_one_json_line_with_match_task_ladder_and_duration(env, tmp_path):
    """With JSON logs, a worker at INFO writes for each message a line carrying match_id, ladder,
    task_id, outcome and duration_ms."""
    import os

    from worker.devtools.runtime import ServiceProcesses, wait_until_drained
    from worker.producer import producer_app, publish_match

    queue = env.queue + "-logs"
    procs = ServiceProcesses(dict(os.environ, RATINGS_QUEUE=queue, RATINGS_LOG_JSON="true"), tmp_path)
    try:
        procs.start_worker("log-worker", loglevel="INFO")
        from worker import store as repository

        with env.connect() as conn:  # received, not applied: earlier tests' dead letters count there too
            before = repository.counts(conn).received
        task_id = publish_match(producer_app(env.broker_url), match("log-1", "la", "lb", ladder="sedma"), queue=queue)
        wait_until_drained(env.database_url, before + 1, timeout=60)
        deadline = time.monotonic() + 10
        line = None
        while line is None and time.monotonic() < deadline:
            for raw in (tmp_path / "log-worker.log").read_text().splitlines():
                if raw.startswith("{") and '"match handled"' in raw:
                    line = json.loads(raw)
            time.sleep(0.2)
    finally:
        procs.stop_all()
    assert line is not None
    assert (line["match_id"], line["ladder"], line["task_id"], line["outcome"]) == ("log-1", "sedma", task_id, "applied")
    assert line["duration_ms"] > 0 and line["level"] == "info"
