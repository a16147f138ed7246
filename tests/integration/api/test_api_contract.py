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
from schemathesis.checks import positive_data_acceptance

DOCUMENT = Path(__file__).resolve().parents[3] / "schemas" / "openapi" / "ratings-api.json"
schema = schemathesis.openapi.from_path(DOCUMENT)
RATED_LADDERS = ("elo", "glicko2", "plackett_luce")


@pytest.fixture(scope="module")
def seeded(env, module_publisher, api):
    """A few rated Elo matches and a match on each ladder rated with uncertainty, so that generated
    ladder and player names can hit real rows."""
    from ..test_chronological import elo_message

    with env.connect() as conn:
        done = conn.execute("SELECT (SELECT count(*) FROM ledger) + (SELECT count(*) FROM dead_letters)"
                            " + (SELECT count(*) FROM duplicate_deliveries)").fetchone()[0]
    matches = [elo_message(f"contract-{i}", f"c{i}", f"c{i + 1}", i % 24, 6) for i in range(6)]
    for ladder in RATED_LADDERS[1:]:  # the ladders rated with uncertainty: a match each
        matches.append({**elo_message(f"contract-{ladder}", "c0", "c1", 1, 6), "ladder": ladder})
    for m in matches:
        module_publisher(m)
    env.wait_drained(done + len(matches))
    return api


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_every_endpoint_answers_as_the_committed_openapi_document_says(case, seeded):
    """Each operation of the document, 15 generated requests: the answer conforms to the document."""
    case.call_and_validate(base_url=seeded.base)


@schema.include(path_regex="^/v1/ladders/\\{ladder\\}/").parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_every_ladder_endpoint_on_each_model_answers_as_the_document_says(case, seeded):
    """The ladder operations (players, batch, leaderboard, history, predictions) with the ladder set
    to one rated by each model (Elo, Glicko-2, Weng-Lin) and the rest generated: answers conform.
    A schema-valid request may still be refused on purpose (a generated cursor this API never
    issued: 400 ``invalid_cursor``; a player on two sides: 422 ``invalid_sides``), so the check
    that every schema-valid request is accepted is left out here; it runs in the test above."""
    for ladder in RATED_LADDERS:
        case.path_parameters = {**(case.path_parameters or {}), "ladder": ladder}
        case.call_and_validate(base_url=seeded.base, excluded_checks=[positive_data_acceptance])
