"""The committed OpenAPI document is the one the read API serves."""

from __future__ import annotations

import json
from pathlib import Path

from worker.api.openapi import openapi_text

DOCUMENT = Path(__file__).resolve().parents[2] / "schemas" / "openapi" / "ratings-api.json"


def test_the_committed_openapi_document_is_current():
    """schemas/openapi/ratings-api.json equals the app's document (regenerate: python -m worker.api.openapi)."""
    assert DOCUMENT.read_text(encoding="utf-8") == openapi_text(), (
        "schemas/openapi/ratings-api.json is out of date: run `python -m worker.api.openapi` and commit it")


def test_the_document_is_openapi_3_1_with_every_endpoint():
    """OpenAPI 3.1, the seven /v1 operations and the two operational ones, problems as application/problem+json."""
    doc = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    assert doc["openapi"].startswith("3.1.")
    operations = {(method.upper(), path) for path, item in doc["paths"].items() for method in item}
    assert operations == {
        ("GET", "/v1/ladders"), ("GET", "/v1/ladders/{ladder}/players/{player_id}"),
        ("POST", "/v1/ladders/{ladder}/players"), ("GET", "/v1/ladders/{ladder}/leaderboard"),
        ("GET", "/v1/ladders/{ladder}/history/{player_id}"), ("GET", "/v1/matches/{match_id}"),
        ("POST", "/v1/ladders/{ladder}/predictions"), ("GET", "/health"), ("GET", "/metrics")}
    not_found = doc["paths"]["/v1/matches/{match_id}"]["get"]["responses"]["404"]["content"]
    assert list(not_found) == ["application/problem+json"]
