"""The published JSON Schema is the contract: the worker accepts a document iff it is valid under
``schemas/json/match_finished.v1.json`` (a match) or ``schemas/json/annul_matches.v1.json`` (an
annulment).

Differential property test: documents generated from the schema file itself (hypothesis-jsonschema)
and mutations of them are judged by an independent JSON Schema validator (jsonschema, draft 2020-12,
date-time format asserted by rfc3339-validator) and by the worker's validator
(:func:`schemas.parse_match_finished` on the JSON text). They must agree, except where the worker
rejects a schema-valid document for one of the semantic checks the schema's description lists
(:data:`EXCLUDED`), which are excluded from the comparison explicitly and counted.
"""

from __future__ import annotations

import copy
import json
import re
import unicodedata
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import hypothesis_jsonschema._from_schema
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from schemas import InvalidMessage, parse_annul_matches, parse_match_finished
from tests.profiles import examples

_regex_strategies: dict = {}
_from_js_regex = hypothesis_jsonschema._from_schema.from_js_regex


def _cached_from_js_regex(pattern, alphabet):
    """hypothesis-jsonschema builds a regex strategy for every string it draws (0.1 s for these
    patterns); one per pattern does (this test uses the default alphabet only)."""
    if pattern not in _regex_strategies:
        _regex_strategies[pattern] = _from_js_regex(pattern, alphabet)
    return _regex_strategies[pattern]


hypothesis_jsonschema._from_schema.from_js_regex = _cached_from_js_regex

_merged_strategies: dict = {}
_merged_as_strategies = hypothesis_jsonschema._from_schema.merged_as_strategies


def _cached_merged_as_strategies(schemas, *, alphabet, custom_formats):
    """hypothesis-jsonschema canonicalises an object's property schemas and builds their strategies
    again for every property of every object it draws (about 1 s per match document); a strategy is
    an immutable description of what to draw, so one per (schemas, alphabet, formats) draws the same
    documents."""
    key = (json.dumps(schemas, sort_keys=True), id(alphabet), id(custom_formats))
    if key not in _merged_strategies:
        _merged_strategies[key] = _merged_as_strategies(schemas, alphabet=alphabet, custom_formats=custom_formats)
    return _merged_strategies[key]


hypothesis_jsonschema._from_schema.merged_as_strategies = _cached_merged_as_strategies

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "schemas" / "json" / "match_finished.v1.json"
SCHEMA = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))

EXCLUDED = {"duplicate_player", "timestamp_out_of_range", "too_large"}
"""Reason codes of the semantic checks listed in the schema's description (invalid_id for a
forbidden character outside the Basic Multilingual Plane is excluded by :func:`_semantic`)."""


def _ecma_pattern(validator, pattern, instance, schema):
    """``pattern`` as ECMA-262 reads it (what JSON Schema specifies): a final ``$`` is the end of
    the text. Python's ``re`` (jsonschema's default) also lets ``$`` match before a final newline."""
    if not validator.is_type(instance, "string"):
        return
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    if not re.search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _ecma_pattern})
VALIDATOR = Validator(SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def test_the_validator_of_the_test_asserts_the_date_time_format():
    """rfc3339-validator is installed: a 30 February is invalid under the schema (not only to the worker)."""
    assert not VALIDATOR.is_valid({"schema_version": 1, "match_id": "m", "ladder": "elo",
                                   "finished_at": "2024-02-30T12:00:00Z", "side_a": {"players": [{"player_id": "a"}]},
                                   "side_b": {"players": [{"player_id": "b"}]}, "outcome": "draw"})


def _astral_forbidden(doc) -> bool:
    text = json.dumps(doc, ensure_ascii=False)
    return any(ord(c) > 0xFFFF and unicodedata.category(c) == "Cf" for c in text)


def _semantic(reason: str, doc) -> bool:
    return reason in EXCLUDED or (reason == "invalid_id" and _astral_forbidden(doc))


def _worker(doc) -> str | None:
    """None when the worker accepts the document's JSON text, else its reason code."""
    try:
        match = parse_match_finished(json.dumps(doc, ensure_ascii=False))
    except InvalidMessage as exc:
        return exc.reason_code
    # the rating path stores canonical()'s object as the ledger payload instead of parsing the text
    data, text = match.canonical()
    assert _same_json(data, json.loads(text)), (data, text)
    return None


def _same_json(a, b) -> bool:
    """Equal values of the same JSON types all the way down (1 and 1.0, True and 1 differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b))
    return a == b


def _compare(doc, validator=VALIDATOR, worker=_worker) -> str:
    """Assert the two validators agree on ``doc``; return "agree" or "excluded"."""
    schema_valid = validator.is_valid(doc)
    reason = worker(doc)
    if schema_valid and reason is not None and _semantic(reason, doc):
        return "excluded"
    errors = [e.message for e in validator.iter_errors(doc)][:3]
    assert schema_valid == (reason is None), (json.dumps(doc, ensure_ascii=False)[:600], reason, errors)
    return "agree"


_NOW = datetime.now(UTC)
in_range_timestamps = st.datetimes(
    min_value=datetime(1800, 1, 1), max_value=(_NOW - timedelta(hours=1)).replace(tzinfo=None),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-5, minutes=-30))]),
).map(lambda d: d.isoformat().replace("+00:00", "Z"))


def _form_schema(form: dict) -> dict:
    """The schema file's object schema for one of its ``anyOf`` forms, merged by hand (generating
    from the top-level ``anyOf`` as it stands makes hypothesis-jsonschema far too slow): the
    form's required keys added, a property it forbids (``null`` only) left out, a property it
    requires non-null keeps its non-null options."""
    schema = copy.deepcopy({k: v for k, v in SCHEMA.items() if k != "anyOf"})
    schema["required"] = sorted(set(schema["required"]) | set(form["required"]))
    for name, rule in form["properties"].items():
        if rule == {"type": "null"}:
            del schema["properties"][name]
        else:
            prop = schema["properties"][name]
            options = [o for o in prop.pop("anyOf") if o != {"type": "null"}]
            prop.update(options[0] if len(options) == 1 else {"anyOf": options})
    return schema


GENERATED_ID_PATTERN = "^[A-Za-z0-9 '._\u00c0-\u017f\u0400-\u04ff\u4e00-\u4e2f-]+$"
"""Ids are generated from this subset of the schema's id pattern: hypothesis builds a strategy for
the schema's pattern (a large negated class) at every draw, 0.1 s each. Ids outside it (invisible
characters, surrogates, astral text) come from the mutations."""


def _cheap_ids(schema):
    if isinstance(schema, dict):
        return {k: (GENERATED_ID_PATTERN if k == "pattern" and v == SCHEMA["properties"]["match_id"]["pattern"]
                    else _cheap_ids(v)) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_cheap_ids(v) for v in schema]
    return schema


FORMS = [_cheap_ids(_form_schema(form)) for form in SCHEMA["anyOf"]]
GENERATED = st.one_of([from_schema(form) for form in FORMS])


@st.composite
def documents(draw):
    """A document generated from the schema (one of its two forms), with ``finished_at`` drawn in
    range half the time (a generated date-time is otherwise mostly outside 1800..now, an excluded
    semantic check)."""
    doc = draw(GENERATED)
    if isinstance(doc, dict) and "finished_at" in doc and draw(st.booleans()):
        doc = {**doc, "finished_at": draw(in_range_timestamps)}
    return doc


TRICKY_VALUES = [
    None, True, False, 0, 1, 1.0, 2.0, 2.5, -1, 1000, 1001, 1e6, 1e6 + 1, "", "x", "3", "1", [], {}, [1], 1e300,
    {"__type__": "datetime", "__value__": "2026-01-01T00:00:00"}, {"__type__": "decimal", "__value__": "1.5"},
    "2024-05-01T18:30:00Z", "2024-05-01 18:30:00Z", "2024-05-01T18:30Z", "2024-05-01T18:30:00", "2024-02-30T12:00:00Z",
    "2024-05-01T18:30:00.123456789+02:00", "2024-05-01t18:30:00z", "2024-05-01T24:00:00Z", "2024-05-01T23:59:60Z",
    "2024-05-01T18:30:00+24:00", "1714588200", "elo", "elo\n", "Elo", "-elo", "a" * 64, "a" * 65, "bob\u202e",
    "bob\x00", "caf\u00e9", "x" * 128, "x" * 129, "\u2028", "a\ud800", "tag\U000e0001", "side_a", "side_b",
    "side_a_won", "draw", "2024", "2024-spring", " 2024", "2024\n", "\u00ad", "a\u200bb", "\ufeffx", "\U0001f600",
    "\u4e00\u0301", "Côte d'Ivoire",
]


def _paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, path + (index,))


def _replace(value, path, new):
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    copy = list(value)
    copy[head] = _replace(value[head], rest, new)
    return copy


def _delete(value, path):
    head, rest = path[0], path[1:]
    if rest:
        if isinstance(value, dict):
            return {**value, head: _delete(value[head], rest)}
        copy = list(value)
        copy[head] = _delete(value[head], rest)
        return copy
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != head}
    return [v for i, v in enumerate(value) if i != head]


@st.composite
def mutations(draw, source=None, other_forms=True):
    """A generated document (from ``source``, default :func:`documents`) with one to three edits: a
    value replaced by a tricky one, a key or array item deleted, an unknown key added, or a key
    copied from the other form of a match (``other_forms``)."""
    doc = draw(documents() if source is None else source)
    kinds = ["replace", "replace", "delete", "add"] + (["other_form"] if other_forms else [])
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        kind = draw(st.sampled_from(kinds))
        if kind == "replace":
            doc = _replace(doc, path, draw(st.sampled_from(TRICKY_VALUES) | st.from_type(int) | st.text(max_size=5)))
        elif kind == "delete" and path:
            doc = _delete(doc, path)
        elif kind == "add" and isinstance(doc, dict):
            doc = _replace(doc, path, {**(_get(doc, path)), "referee": "x"}) if isinstance(_get(doc, path), dict) else doc
        elif kind == "other_form" and isinstance(doc, dict):
            extra = draw(st.sampled_from([
                {"sides": [{"players": [{"player_id": f"s{i}"}], "placement": i + 1} for i in range(3)]},
                {"side_a": {"players": [{"player_id": "sa"}]}}, {"outcome": "draw"}, {"home": "side_a"},
                {"score": {"side_a": 1, "side_b": 0}}, {"side_b": None}, {"sides": None},
            ]))
            doc = {**doc, **extra}
    return doc


def _get(value, path):
    for part in path:
        value = value[part]
    return value


SEEN = {"agree": 0, "excluded": 0}


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=documents())
def test_documents_generated_from_the_schema_are_accepted_by_the_worker(doc):
    """Every schema-generated document is accepted, unless a listed semantic check refuses it."""
    SEEN[_compare(doc)] += 1


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=mutations())
def test_mutated_documents_are_accepted_by_the_worker_iff_the_schema_accepts_them(doc):
    """Mutations of generated documents: worker and jsonschema agree on each (bar listed semantic checks)."""
    SEEN[_compare(doc)] += 1


def test_the_comparison_excluded_only_a_minority_of_documents():
    """The exclusions stay exclusions: most compared documents were judged by both validators."""
    if SEEN["agree"] + SEEN["excluded"]:
        print(f"differential: {SEEN['agree']} agreed, {SEEN['excluded']} excluded (semantic checks)")
        assert SEEN["agree"] > SEEN["excluded"]


def test_a_number_without_fraction_is_an_integer_as_in_json_schema():
    """``2.0`` is the JSON number 2: JSON Schema's ``integer`` accepts it (2020-12, 6.1.1), so does
    the worker, and the canonical JSON (the idempotency payload) writes it as 2."""
    doc = {"schema_version": 1.0, "match_id": "m", "ladder": "elo", "finished_at": "2024-05-01T18:30:00Z",
           "side_a": {"players": [{"player_id": "a", "stats": {"bad_moves": 2.0}}]},
           "side_b": {"players": [{"player_id": "b"}]}, "outcome": "draw"}
    assert VALIDATOR.is_valid(doc)
    canonical = parse_match_finished(json.dumps(doc)).canonical_json()
    assert b'"bad_moves":2,' in canonical and b'"schema_version":1,' in canonical


def test_a_space_instead_of_t_in_finished_at_is_refused_by_both():
    """RFC 3339 allows only T or t between date and time; the worker refused nothing else before."""
    doc = {"schema_version": 1, "match_id": "m", "ladder": "elo", "finished_at": "2024-05-01 18:30:00Z",
           "side_a": {"players": [{"player_id": "a"}]}, "side_b": {"players": [{"player_id": "b"}]}, "outcome": "draw"}
    assert not VALIDATOR.is_valid(doc) and _worker(doc) == "invalid_timestamp"


ANNUL_SCHEMA_FILE = SCHEMA_FILE.parent / "annul_matches.v1.json"
ANNUL_SCHEMA = json.loads(ANNUL_SCHEMA_FILE.read_text(encoding="utf-8"))
ANNUL_VALIDATOR = Validator(ANNUL_SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
ANNUL_GENERATED = from_schema({**_cheap_ids(ANNUL_SCHEMA), "required": sorted(ANNUL_SCHEMA["required"])})


def _annul_worker(doc) -> str | None:
    """None when the worker accepts the annulment's JSON text, else its reason code."""
    try:
        parse_annul_matches(json.dumps(doc, ensure_ascii=False))
    except InvalidMessage as exc:
        return exc.reason_code
    return None


def test_the_annulment_schema_is_the_one_the_id_shortcut_knows():
    """The annulment's ids carry the match's id pattern, so generation takes the cheap subset for
    them too (and so the comparison below draws ids the worker accepts)."""
    assert ANNUL_SCHEMA["properties"]["annulled_by"]["pattern"] == SCHEMA["properties"]["match_id"]["pattern"]


ANNUL_PROFILE = settings(max_examples=examples(40), deadline=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
"""Fewer examples than the match's: the annulment has four fields, and this file's runtime stays modest."""


@ANNUL_PROFILE
@given(doc=ANNUL_GENERATED)
def test_annulments_generated_from_the_schema_are_accepted_by_the_worker(doc):
    """Every schema-generated annulment is accepted (bar a listed semantic check)."""
    SEEN[_compare(doc, ANNUL_VALIDATOR, _annul_worker)] += 1


@settings(ANNUL_PROFILE, max_examples=examples(100))
@given(doc=mutations(ANNUL_GENERATED, other_forms=False))
def test_mutated_annulments_are_accepted_by_the_worker_iff_the_schema_accepts_them(doc):
    """Mutations of generated annulments (NUL, surrogates, blanks, wrong types among the tricky
    values): worker and jsonschema agree on each."""
    SEEN[_compare(doc, ANNUL_VALIDATOR, _annul_worker)] += 1


@pytest.mark.parametrize("reason", ["cheating\x00", "\x00", " \x00 ", "a\ud800", "\udfff", "   ", "\n"])
def test_a_reason_postgresql_cannot_store_or_only_blanks_is_refused_by_both(reason):
    """The worker's verdict on ``reason`` is the schema's: NUL and lone surrogates (invalid_text)
    and blanks only (schema_violation) are refused by both. The JSON text escapes them (``\\u0000``,
    ``\\ud800``): a lone surrogate cannot be written as UTF-8 at all."""
    doc = {"schema_version": 1, "match_ids": ["m-1"], "reason": reason, "annulled_by": "anti-cheat"}
    assert not ANNUL_VALIDATOR.is_valid(doc)
    with pytest.raises(InvalidMessage) as caught:
        parse_annul_matches(json.dumps(doc))
    assert caught.value.reason_code == ("schema_violation" if reason.isspace() else "invalid_text")
