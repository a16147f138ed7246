"""Generated malformed messages: each ends as exactly one row (a dead letter with its reason and raw
body, or an application when the mutation happens to be valid), is acknowledged once, and the
worker keeps serving valid messages in between."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.test_worker import match
from tests.profiles import examples
from worker.producer import producer_app, publish_match

pytestmark = pytest.mark.integration

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
FIELDS = ["schema_version", "match_id", "ladder", "finished_at", "side_a", "side_b", "outcome"]


@st.composite
def bad_messages(draw):
    """A valid message with one field replaced by, or removed for, arbitrary JSON; or any JSON value; or text."""
    kind = draw(st.sampled_from(["mutate", "drop", "any_json", "text"]))
    n = draw(st.integers(0, 10**9))
    base = match(f"gen-{n}", f"x{n}", f"y{n}")
    if kind == "mutate":
        base[draw(st.sampled_from(FIELDS))] = draw(json_values)
        return base
    if kind == "drop":
        del base[draw(st.sampled_from(FIELDS))]
        return base
    if kind == "any_json":
        return draw(json_values)
    return draw(st.text(max_size=200))


def where_it_ended(conn, task_id: str) -> list[tuple[str, str | None]]:
    return conn.execute(
        """SELECT 'applied', NULL FROM ledger WHERE task_id = %(t)s
           UNION ALL SELECT 'duplicate', NULL FROM duplicate_deliveries WHERE task_id = %(t)s
           UNION ALL SELECT 'dead_letter', reason_code FROM dead_letters WHERE task_id = %(t)s""",
        {"t": task_id},
    ).fetchall()


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(message=bad_messages())
def test_each_generated_message_ends_exactly_once_and_valid_ones_keep_flowing(clean, message):
    """One generated message, then a valid one: each ends in exactly one place; nothing is redelivered."""
    app = producer_app(clean.broker_url)
    bad_id = publish_match(app, message, queue=clean.queue, validate=False)
    good_id = publish_match(app, match(f"good-{bad_id}", "g1", "g2", outcome="draw"), queue=clean.queue)
    deadline = time.monotonic() + 30
    with clean.connect() as conn:
        while time.monotonic() < deadline:
            ended_bad, ended_good = where_it_ended(conn, bad_id), where_it_ended(conn, good_id)
            if ended_bad and ended_good:
                break
            time.sleep(0.05)
        assert len(ended_bad) == 1, (message, ended_bad)
        assert ended_good == [("applied", None)]
        if ended_bad[0][0] == "dead_letter":
            assert ended_bad[0][1]  # a reason code
            raw = conn.execute("SELECT raw_body FROM dead_letters WHERE task_id = %s", (bad_id,)).fetchone()[0]
            expected = message if isinstance(message, str) else json.dumps(message, ensure_ascii=False)
            assert raw == expected.replace("\x00", "\\u0000") or "\x00" in expected
    assert clean.broker_messages()[0] == 0
