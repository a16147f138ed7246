"""Property tests of every endpoint against the committed OpenAPI document (schemathesis), on the
session's real PostgreSQL through a real ``ratings api`` process.

schemathesis generates requests from ``schemas/openapi/ratings-api.json`` (valid ones and, for the
checks that ask for them, invalid ones) and checks every answer: no server error, a documented
status, the documented media type, the body valid against the documented schema. The examples are
bounded so the module runs in well under a minute.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

DOCUMENT = Path(__file__).resolve().parents[3] / "schemas" / "openapi" / "ratings-api.json"
schema = schemathesis.openapi.from_path(DOCUMENT)


@pytest.fixture(scope="module")
def seeded(env, module_publisher, api):
    """A few rated Elo matches, so that generated ladder and player names can hit real rows."""
    from ..test_chronological import elo_message

    with env.connect() as conn:
        done = conn.execute("SELECT (SELECT count(*) FROM ledger) + (SELECT count(*) FROM dead_letters)"
                            " + (SELECT count(*) FROM duplicate_deliveries)").fetchone()[0]
    matches = [elo_message(f"contract-{i}", f"c{i}", f"c{i + 1}", i % 24, 6) for i in range(6)]
    for m in matches:
        module_publisher(m)
    env.wait_drained(done + len(matches))
    return api


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_every_endpoint_answers_as_the_committed_openapi_document_says(case, seeded):
    """Each operation of the document, 15 generated requests: the answer conforms to the document."""
    case.call_and_validate(base_url=seeded.base)
