"""The event contract for other languages: the AsyncAPI 3 document, validated by the AsyncAPI parser (npm),
and the Node consumer example run against the real stream the relay fills."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.test_worker import match, ratings
from tests.npm import npm_ci

pytestmark = pytest.mark.integration

ASYNCAPI_DIR = REPO_ROOT / "schemas" / "asyncapi"
NODE_CONSUMER_DIR = REPO_ROOT / "examples" / "node-consumer"


def node(directory, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``node args`` in ``directory``, its npm packages installed from its lock file first if missing."""
    executable = npm_ci(directory)
    return subprocess.run([executable, *args], cwd=directory, env=env, capture_output=True, text=True, timeout=120)


def test_the_asyncapi_document_is_valid_and_resolves_its_json_schemas():
    """@asyncapi/parser reads ratings.asyncapi.yaml without errors: both channels, the three messages,
    and the payloads resolved from schemas/json (their properties listed)."""
    result = node(ASYNCAPI_DIR, "validate.mjs", "ratings.asyncapi.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("valid AsyncAPI 3.0.0: channels matchFinished=ratings, ratingChanged=ratings.rating-changed; "
            "messages MatchFinished, AnnulMatches, RatingChanged") in result.stdout
    changed = json.loads((REPO_ROOT / "schemas" / "json" / "rating_changed.v1.json").read_text())
    assert f"RatingChanged: {len(changed['properties'])} properties" in result.stdout


def test_the_parser_rejects_a_document_whose_schema_reference_is_broken(tmp_path):
    """The validation is not vacuous: a $ref to a missing schema file is an error (exit 1)."""
    broken = ASYNCAPI_DIR / "broken.test.yaml"
    broken.write_text((ASYNCAPI_DIR / "ratings.asyncapi.yaml").read_text().replace(
        "../json/rating_changed.v1.json", "../json/no_such_schema.json"))
    try:
        result = node(ASYNCAPI_DIR, "validate.mjs", broken.name)
    finally:
        broken.unlink()
    assert result.returncode == 1 and "invalid-ref" in result.stdout


def test_the_node_consumer_example_reads_every_event_of_the_real_stream(clean, publish_in_order):
    """The Node example, a consumer group member, handles each of the 12 events once (a republished entry
    dropped) and ends with every player's rating equal to the database."""
    publish_in_order([match(f"node-{n}", "amy", "bea" if n % 2 else "cid") for n in range(6)])
    clean.wait_stream(12)
    _, fields = clean.redis.xrange(clean.stream, count=1)[0]
    clean.redis.xadd(clean.stream, fields)  # the relay may publish an event twice
    env = dict(os.environ, RATINGS_BROKER_URL=clean.broker_url, RATINGS_STREAM=clean.stream)
    result = node(NODE_CONSUMER_DIR, "consumer.mjs", "node-group", "node-1", "--until-idle", env=env)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    handled = [line["handled"] for line in lines if "handled" in line]
    assert len(handled) == 12 and len({e["event_id"] for e in handled}) == 12
    assert not [line for line in lines if "gap" in line or "trimmed" in line]
    latest = {}
    for e in handled:
        latest[(e["ladder"], e["player_id"])] = e["rating_after"]
    assert latest == {key: rating for key, (rating, _) in ratings(clean).items()}
    assert clean.redis.xpending(clean.stream, "node-group")["pending"] == 0
