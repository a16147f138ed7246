"""One contract, one verdict for text: whatever a producer may send, PostgreSQL can store.

PostgreSQL's ``text`` refuses U+0000 ("invalid byte sequence for encoding UTF8: 0x00"), and a lone
surrogate (what a JSON ``"\\ud800"`` escape decodes to) cannot be encoded as UTF-8 at all. Every
string field of both inbound contracts (match, annulment) must refuse both, in the pydantic
contract (with a reason code) and in the published JSON Schema alike; the table below is checked
against the schema files so that a string field added later is not missed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from schemas import InvalidMessage, parse_annul_matches, parse_match_finished
from worker.producer import publish_annulment, publish_match

JSON_DIR = Path(__file__).resolve().parents[2] / "schemas" / "json"

MATCH = {
    "schema_version": 1, "match_id": "m-1", "ladder": "elo", "finished_at": "2026-05-01T12:00:00Z",
    "side_a": {"players": [{"player_id": "ann"}]}, "side_b": {"players": [{"player_id": "bob"}]},
    "outcome": "side_a_won", "home": "side_a", "season": "2026",
}
FREE_FOR_ALL = {
    "schema_version": 1, "match_id": "m-2", "ladder": "elo", "finished_at": "2026-05-01T12:00:00Z",
    "sides": [{"players": [{"player_id": p}], "placement": n} for n, p in enumerate(["ann", "bob", "cat"], 1)],
}
ANNULMENT = {"schema_version": 1, "match_ids": ["m-1"], "reason": "cheating", "annulled_by": "anti-cheat"}

# Every string field, as the schema walk below names it, with the document and path to put it at.
MATCH_FIELDS: dict[str, tuple[dict[str, Any], tuple[str | int, ...]]] = {
    "match_id": (MATCH, ("match_id",)),
    "ladder": (MATCH, ("ladder",)),
    "finished_at": (MATCH, ("finished_at",)),
    "outcome": (MATCH, ("outcome",)),
    "home": (MATCH, ("home",)),
    "season": (MATCH, ("season",)),
    "side_a.players[].player_id": (MATCH, ("side_a", "players", 0, "player_id")),
    "side_b.players[].player_id": (MATCH, ("side_b", "players", 0, "player_id")),
    "sides[].players[].player_id": (FREE_FOR_ALL, ("sides", 1, "players", 0, "player_id")),
}
ANNUL_FIELDS: dict[str, tuple[dict[str, Any], tuple[str | int, ...]]] = {
    "match_ids[]": (ANNULMENT, ("match_ids", 0)),
    "reason": (ANNULMENT, ("reason",)),
    "annulled_by": (ANNULMENT, ("annulled_by",)),
}


def _schema(name: str) -> dict[str, Any]:
    return json.loads((JSON_DIR / name).read_text(encoding="utf-8"))


def string_fields(schema: dict[str, Any], node: dict[str, Any] | None = None, path: str = "") -> set[str]:
    """Dotted paths (``[]`` for array items) of every string-typed value a schema admits."""
    node = schema if node is None else node
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    found: set[str] = set()
    kinds = node.get("type")
    if kinds == "string" or (isinstance(kinds, list) and "string" in kinds) or "enum" in node and any(
            isinstance(v, str) for v in node["enum"]) or isinstance(node.get("const"), str):
        found.add(path)
    for option in node.get("anyOf", []):
        found |= string_fields(schema, option, path)
    for name, sub in node.get("properties", {}).items():
        found |= string_fields(schema, sub, f"{path}.{name}" if path else name)
    if isinstance(node.get("items"), dict):
        found |= string_fields(schema, node["items"], path + "[]")
    return found


def _with(doc: dict[str, Any], path: tuple[str | int, ...], bad: str) -> dict[str, Any]:
    """``doc`` (deep-copied) with ``bad`` appended to the string at ``path``."""
    doc = json.loads(json.dumps(doc))
    target: Any = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] += bad
    return doc


def test_the_tables_name_every_string_field_of_both_contracts():
    """A string field added to a contract must be added here (and so be checked for NUL)."""
    assert string_fields(_schema("match_finished.v1.json")) == set(MATCH_FIELDS)
    assert string_fields(_schema("annul_matches.v1.json")) == set(ANNUL_FIELDS)


CASES = [pytest.param(schema, parse, doc, path, bad, id=f"{field} {name}")
         for schema, parse, fields in (("match_finished.v1.json", parse_match_finished, MATCH_FIELDS),
                                       ("annul_matches.v1.json", parse_annul_matches, ANNUL_FIELDS))
         for field, (doc, path) in fields.items()
         for name, bad in (("NUL", "\x00"), ("lone surrogate", "\ud800"))]


@pytest.mark.parametrize(("schema", "parse", "doc", "path", "bad"), CASES)
def test_text_postgresql_cannot_store_is_refused_in_every_field_by_contract_and_schema(schema, parse, doc, path, bad):
    """NUL or a lone surrogate in any string field: the JSON Schema refuses it, and so does the
    contract, with a reason code of its own (never a document the worker would take to the
    database). The message is JSON text with the character escaped, as a producer sends it."""
    assert jsonschema.Draft202012Validator(_schema(schema)).is_valid(doc)
    bad_doc = _with(doc, path, bad)
    assert not jsonschema.Draft202012Validator(_schema(schema)).is_valid(bad_doc)
    with pytest.raises(InvalidMessage) as caught:
        parse(json.dumps(bad_doc))
    assert caught.value.reason_code in {"invalid_id", "invalid_ladder", "invalid_text", "invalid_timestamp",
                                        "invalid_outcome", "schema_violation"}, caught.value


def test_an_annulment_whose_reason_holds_nul_is_refused_before_it_is_published():
    """``publish_annulment`` validated a reason holding U+0000 and published it,
    and the worker's INSERT failed ("invalid byte sequence for encoding UTF8: 0x00"). It is refused
    with ``invalid_text`` before the broker is touched (no app is needed to see it)."""
    with pytest.raises(InvalidMessage) as caught:
        publish_annulment(None, ["m-1"], reason="cheating\x00", annulled_by="anti-cheat")  # type: ignore[arg-type]
    assert caught.value.reason_code == "invalid_text"
    assert "U+0000" in caught.value.detail and "\x00" not in caught.value.detail


def test_a_match_holding_nul_is_refused_before_it_is_published():
    """The match's sibling: a player id with U+0000 is ``invalid_id`` in ``publish_match``."""
    with pytest.raises(InvalidMessage) as caught:
        publish_match(None, _with(MATCH, ("side_b", "players", 0, "player_id"), "\x00"))  # type: ignore[arg-type]
    assert caught.value.reason_code == "invalid_id"


@pytest.mark.parametrize(("args", "code"), [
    ([b"m-1", b"--reason", b"cheating \xff"], "invalid_text"),  # not UTF-8: a lone surrogate once decoded
    ([b"m-1", b"--reason", b"cheating", b"--by", b"ref\xffree"], "invalid_id"),
    ([b"m\x1b1", b"--reason", b"cheating"], "invalid_id"),
    ([b"m-1", b"--reason", b"   "], "schema_violation"),
])
def test_the_annul_command_holds_its_arguments_to_the_annulment_contract(args, code):
    """``ratings annul`` gives the verdict a message would get, before it reaches the database (an
    argument that is not UTF-8 becomes a lone surrogate, which PostgreSQL cannot take): exit 2 and
    the reason code. No database is configured: the refusal comes first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATINGS_")}
    result = subprocess.run([os.fsencode(sys.executable), b"-m", b"worker", b"annul", *args], env={**env, "COLUMNS": "200"},
                            capture_output=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"({code})".encode() in result.stderr and b"Fix:" in result.stderr
