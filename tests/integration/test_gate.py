"""Messages that Celery itself would log and drop end as dead letters, acknowledged once."""

from __future__ import annotations

import json
import pickle
import uuid

import pytest
from kombu import Connection

from tests.integration.test_worker import match

pytestmark = pytest.mark.integration


def raw_publish(env, body, *, content_type="application/json", headers=None, serializer=None):
    """Publish a raw message on the ratings queue with kombu, bypassing Celery's task API."""
    with Connection(env.broker_url) as conn:
        producer = conn.Producer()
        kwargs = {"serializer": serializer} if serializer else {"content_type": content_type, "content_encoding": "utf-8"}
        producer.publish(body, routing_key=env.queue, exchange="", headers=headers or {}, retry=True, **kwargs)


def task_headers(task="ratings.apply_match"):
    task_id = str(uuid.uuid4())
    return {"lang": "py", "task": task, "id": task_id, "root_id": task_id, "parent_id": None, "group": None,
            "argsrepr": "", "kwargsrepr": "", "origin": "test"}


def test_messages_celery_would_drop_become_dead_letters_and_good_ones_still_apply(clean, publisher):
    """Pickle, non-JSON bodies, unknown tasks, non-task messages and malformed task bodies are each
    dead-lettered once with a reason code and their raw body; a valid match in between applies."""
    good = match("gate-good", "a", "b")
    raw_publish(clean, [[good], {}, {}], headers=task_headers(), serializer="pickle")
    raw_publish(clean, "[[{not json", headers=task_headers())
    raw_publish(clean, json.dumps([[good], {}, {}]), headers=task_headers("billing.charge_card"))
    raw_publish(clean, json.dumps({"hello": "world"}))
    raw_publish(clean, json.dumps("just a string"), headers=task_headers())
    publisher(match("gate-good-2", "c", "d"))
    counts = clean.wait_drained(6)
    assert (counts.applied, counts.dead_letters) == (1, 5)
    with clean.connect() as conn:
        rows = conn.execute("SELECT reason_code, raw_body, raw_encoding, content_type FROM dead_letters ORDER BY id").fetchall()
    reasons = sorted(r[0] for r in rows)
    assert reasons == sorted(["content_type_refused", "undecodable_body", "unknown_task", "not_a_task_message",
                              "malformed_task_message"])
    by_reason = {r[0]: r for r in rows}
    assert by_reason["undecodable_body"][1] == "[[{not json"
    assert by_reason["content_type_refused"][3] == "application/x-python-serialize"
    assert by_reason["content_type_refused"][2] == "base64"
    import base64

    assert pickle.loads(base64.b64decode(by_reason["content_type_refused"][1]))[0][0]["match_id"] == "gate-good"
    assert json.loads(by_reason["unknown_task"][1])[0][0]["match_id"] == "gate-good"
    # Nothing is left on the queue or unacknowledged: no redelivery loop.
    assert clean.redis.llen(clean.queue) == 0
