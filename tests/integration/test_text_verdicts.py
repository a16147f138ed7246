"""What a producer may not send, a real worker refuses with the contract's reason code: text that
PostgreSQL cannot store (U+0000) and lone surrogates end as ``invalid_text`` dead letters with their
raw body kept, never as an ``internal_error`` with a database traceback."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_worker import match, ratings
from worker.producer import ANNUL_TASK_NAME, producer_app, publish_body

pytestmark = pytest.mark.integration


def test_an_annulment_whose_reason_postgresql_cannot_store_is_an_invalid_text_dead_letter(clean, publisher):
    """An annulment whose ``reason`` held U+0000 became an ``internal_error`` dead
    letter ("invalid byte sequence for encoding UTF8: 0x00"). Sent as JSON text (``\\u0000`` and
    ``\\ud800`` escaped, as any JSON encoder writes them), each is an ``invalid_text`` dead letter
    with its raw body, and the match stays rated."""
    publisher(match("nul-1", "ann", "bob"))
    clean.wait_drained(1)
    before = ratings(clean)
    app = producer_app(clean.broker_url)
    bodies = [json.dumps({"schema_version": 1, "match_ids": ["nul-1"], "reason": reason, "annulled_by": "anti-cheat"})
              for reason in ("cheating\x00", "cheating\ud800")]
    assert all("\\u0000" in b or "\\ud800" in b for b in bodies)
    for body in bodies:
        publish_body(app, body.encode(), clean.queue, task=ANNUL_TASK_NAME)
    clean.wait_drained(3)
    with clean.connect() as conn:
        dead = conn.execute("SELECT reason_code, detail, raw_body, headers->>'task' FROM dead_letters "
                            "ORDER BY id").fetchall()
        annulled = conn.execute("SELECT count(*) FROM annulments").fetchone()[0]
    assert [(code, task) for code, _, _, task in dead] == [("invalid_text", ANNUL_TASK_NAME)] * 2
    assert sorted(raw for _, _, raw, _ in dead) == sorted(bodies)
    assert "U+0000" in dead[0][1] and "Fix:" in dead[0][1]
    assert annulled == 0 and ratings(clean) == before
