"""Parsing an inbound message with reason codes: raw bytes, text or a decoded object in, a valid
:class:`schemas.match_finished.MatchFinished` (or :class:`schemas.annul_matches.AnnulMatches`) or
an :class:`InvalidMessage` out.

Standard library and pydantic only (see the import contract in pyproject.toml).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from pydantic import ValidationError

from ._types import is_valid_id
from .annul_matches import MAX_ANNULLED_PER_MESSAGE, MAX_REASON_LENGTH, AnnulMatches
from .match_finished import MAX_MESSAGE_BYTES, MAX_PLAYERS_PER_SIDE, MAX_STAT_COUNT, MatchFinished, SedmaStats

REASON_CODES: tuple[str, ...] = (
    # Decided before the fields are looked at, in this order.
    "too_large",
    "not_json",
    "not_an_object",
    # From field validation: when a message has several problems, the code earliest in this list
    # is reported (ties: the first problem in field order). A different schema_version means the
    # rest of the message follows another contract, so it goes first; then the shape of the object
    # (keys, JSON types), then the value rules field by field, then rules across fields.
    "unsupported_schema_version",
    "unknown_field",
    "missing_field",
    "wrong_type",
    "invalid_id",
    "invalid_text",
    "invalid_ladder",
    "invalid_timestamp",
    "naive_timestamp",
    "timestamp_out_of_range",
    "empty_side",
    "too_many_players",
    "count_out_of_range",
    "invalid_outcome",
    "duplicate_player",
    "mixed_forms",
    "schema_violation",
)
"""Every reason code :func:`parse_match_finished` and :func:`parse_annul_matches` can give, in
priority order (``invalid_text`` is the annulment's only: a match has no free text)."""

_PRIORITY = {code: rank for rank, code in enumerate(REASON_CODES)}

# Field name -> field group, for the rules that depend on which field failed.
_FIELD_GROUP = {
    "schema_version": "schema_version",
    "match_id": "id",
    "player_id": "id",
    "match_ids": "id",
    "annulled_by": "id",
    "reason": "text",
    "ladder": "ladder",
    "finished_at": "timestamp",
    "players": "players",
    "outcome": "outcome",
    **{name: "count" for name in SedmaStats.model_fields},
}

# (field group or "*" for any field, pydantic error type) -> reason code.
# Lookup tries the field's group first, then "*"; anything not listed is "schema_violation".
_REASONS: dict[tuple[str, str], str] = {
    ("*", "missing"): "missing_field",
    ("*", "extra_forbidden"): "unknown_field",
    ("*", "model_type"): "wrong_type",
    ("*", "model_attributes_type"): "wrong_type",
    ("*", "list_type"): "wrong_type",
    ("*", "string_type"): "wrong_type",
    ("*", "int_type"): "wrong_type",
    ("*", "timestamp_type"): "wrong_type",
    ("*", "duplicate_player"): "duplicate_player",
    ("*", "two_forms"): "mixed_forms",
    ("schema_version", "literal_error"): "unsupported_schema_version",
    ("id", "string_too_short"): "invalid_id",
    ("id", "string_too_long"): "invalid_id",
    ("id", "id_character"): "invalid_id",
    ("id", "string_unicode"): "invalid_id",  # a lone surrogate ("\ud800" escape)
    ("text", "text_character"): "invalid_text",
    ("text", "string_unicode"): "invalid_text",  # a lone surrogate
    ("ladder", "string_too_short"): "invalid_ladder",
    ("ladder", "string_too_long"): "invalid_ladder",
    ("ladder", "string_pattern_mismatch"): "invalid_ladder",
    ("ladder", "string_unicode"): "invalid_ladder",
    ("timestamp", "timestamp_format"): "invalid_timestamp",
    ("timestamp", "datetime_parsing"): "invalid_timestamp",
    ("timestamp", "datetime_from_date_parsing"): "invalid_timestamp",
    ("timestamp", "datetime_object_invalid"): "invalid_timestamp",
    ("timestamp", "timezone_aware"): "naive_timestamp",
    ("timestamp", "timestamp_out_of_range"): "timestamp_out_of_range",
    ("players", "too_short"): "empty_side",
    ("players", "too_long"): "too_many_players",
    ("count", "greater_than_equal"): "count_out_of_range",
    ("count", "less_than_equal"): "count_out_of_range",
    ("outcome", "literal_error"): "invalid_outcome",
}

# What the sender should change, per reason code (appended to the detail).
_HINTS = {
    "too_large": f"a match-finished message is at most {MAX_MESSAGE_BYTES} bytes of UTF-8 JSON",
    "not_json": "send one JSON object encoded as UTF-8 (no BOM, no NaN or Infinity)",
    "not_an_object": 'send a JSON object like {"schema_version": 1, "match_id": ...}',
    "unsupported_schema_version": "this worker reads schema_version 1; send version 1 or route the message to a consumer of its version",
    "unknown_field": "remove the field; version 1 accepts only the fields in schemas/json/match_finished.v1.json",
    "missing_field": "add the field; the required fields are listed in schemas/json/match_finished.v1.json",
    "wrong_type": "send the JSON type the schema names: ids, ladder, finished_at and outcome are strings, counts are integers, sides and stats are objects, players is an array",
    "invalid_id": "ids are 1 to 128 characters without control or invisible format characters",
    "invalid_text": "remove U+0000 (NUL) and lone surrogates from the text: PostgreSQL text cannot store them",
    "invalid_ladder": 'a ladder name is 1 to 64 characters of a-z, 0-9, "_", ".", "-", starting with a letter or digit, e.g. "sedma-ranked"',
    "invalid_timestamp": 'finished_at is an ISO 8601 date-time with a UTC offset, e.g. "2024-05-01T18:30:00Z"',
    "naive_timestamp": 'add a UTC offset to finished_at, e.g. "2024-05-01T18:30:00Z" or "2024-05-01T20:30:00+02:00"',
    "timestamp_out_of_range": "finished_at must be on or after 1800-01-01 and at most one day after the current UTC time; check the game server's clock",
    "empty_side": "each side needs at least one player",
    "too_many_players": f"a side has at most {MAX_PLAYERS_PER_SIDE} players",
    "count_out_of_range": f"stats counts are integers from 0 to {MAX_STAT_COUNT}",
    "invalid_outcome": 'outcome is one of "side_a_won", "side_b_won", "draw"',
    "duplicate_player": "each player may appear once in a match, on one side only",
    "mixed_forms": "send either side_a, side_b and outcome (two sides) or sides with placements (three or more), not both",
    "schema_violation": "see schemas/json/match_finished.v1.json",
}

# An annulment's hints where they differ from a match's.
_ANNUL_HINTS = {
    **_HINTS,
    "too_large": f"an annul-matches message is at most {MAX_MESSAGE_BYTES} bytes of UTF-8 JSON",
    "not_an_object": 'send a JSON object like {"schema_version": 1, "match_ids": [...], "reason": ..., "annulled_by": ...}',
    "unknown_field": "remove the field; version 1 accepts only the fields in schemas/json/annul_matches.v1.json",
    "missing_field": "add the field; the required fields are listed in schemas/json/annul_matches.v1.json",
    "wrong_type": "send the JSON type the schema names: match_ids is an array of strings, reason and annulled_by are strings",
    "schema_violation": f"match_ids holds 1 to {MAX_ANNULLED_PER_MESSAGE} ids and reason 1 to {MAX_REASON_LENGTH} characters, not only blanks; see schemas/json/annul_matches.v1.json",
}

_MAX_INPUT_SHOWN = 60
_MAX_OTHER_PROBLEMS_SHOWN = 3
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class InvalidMessage(ValueError):
    """A match-finished message that cannot be applied: goes to the dead letters as is.

    ``reason_code`` is one of :data:`REASON_CODES` (a stable label for counters and queries);
    ``detail`` says which field, what was wrong and what to change (ASCII-safe for logs);
    ``match_id`` is the message's match id when the input held a valid one, else None.
    """

    reason_code: str
    detail: str
    match_id: str | None

    def __init__(self, reason_code: str, detail: str, match_id: str | None = None) -> None:
        super().__init__(reason_code, detail, match_id)  # args mirror __init__: the exception pickles
        self.reason_code = reason_code
        self.detail = detail
        self.match_id = match_id

    def __str__(self) -> str:
        return f"{self.reason_code}: {self.detail}"


def parse_match_finished(raw: bytes | str | Mapping[str, Any] | object) -> MatchFinished:
    """Validate one match-finished message; raise :class:`InvalidMessage` if it is not valid.

    ``raw`` is the JSON text (``bytes``/``bytearray``/``memoryview`` as UTF-8, or ``str``) or an
    already-decoded object (what a Celery task receives: usually a dict). A decoded object is first
    written back to JSON with ``json.dumps`` (datetimes as ISO 8601, other mappings as objects) and
    that text is validated exactly like a raw body, so both routes accept and reject the same
    messages; its size is ``len(json.dumps(obj))``.

    Checks in order: size (``too_large``), UTF-8 and JSON syntax (``not_json``; NaN, Infinity and
    integers over 4300 digits included), repeated keys in one object (``schema_violation``), a JSON
    object at the top (``not_an_object``), then the fields. When the fields have several problems
    the reason code earliest in :data:`REASON_CODES` is reported; the detail names it first and
    lists a few of the others.
    """
    if isinstance(raw, MatchFinished):
        return raw
    try:
        obj = _object(raw, _HINTS)
    except InvalidMessage as exc:  # keep the match id where the body still tells it
        raise InvalidMessage(exc.reason_code, exc.detail, _readable_match_id(raw)) from None
    match_id = obj.get("match_id")
    match_id = match_id if is_valid_id(match_id) else None
    try:
        return MatchFinished.model_validate(obj)
    except ValidationError as exc:
        reason_code, detail = _explain(exc, _HINTS)
        raise InvalidMessage(reason_code, detail, match_id) from None


def _first_occurrence(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        obj.setdefault(key, value)
    return obj


_LENIENT_DECODER = json.JSONDecoder(object_pairs_hook=_first_occurrence)
"""A decoder that accepts what :data:`_DECODER` refuses (repeated keys: the first occurrence kept;
NaN and Infinity), used only to read the match id of a message already refused."""


def _readable_match_id(raw: object) -> str | None:
    """The match id of a refused message when it can still be read: the top-level ``match_id``
    (its first occurrence) of a body that is JSON but for repeated keys, NaN or Infinity, or of a
    decoded object; ``None`` when there is none, it is not a valid id, or the body is not readable."""
    if isinstance(raw, Mapping):
        candidate = raw.get("match_id")
    else:
        if isinstance(raw, (bytes, bytearray, memoryview)):
            try:
                text = bytes(raw).decode("utf-8")
            except UnicodeDecodeError:
                return None
        elif isinstance(raw, str):
            text = raw
        else:
            return None
        if len(text) > MAX_MESSAGE_BYTES:
            return None
        try:
            obj = _LENIENT_DECODER.decode(text.removeprefix("\ufeff"))
        except (ValueError, RecursionError):
            return None
        candidate = obj.get("match_id") if isinstance(obj, dict) else None
    return candidate if is_valid_id(candidate) else None


def parse_annul_matches(raw: bytes | str | Mapping[str, Any] | object) -> AnnulMatches:
    """Validate one annul-matches message as :func:`parse_match_finished` does a match (the same
    steps, the same reason codes, hints that name this contract); raise :class:`InvalidMessage`
    (``match_id`` None) if it is not valid."""
    if isinstance(raw, AnnulMatches):
        return raw
    obj = _object(raw, _ANNUL_HINTS)
    try:
        return AnnulMatches.model_validate(obj)
    except ValidationError as exc:
        reason_code, detail = _explain(exc, _ANNUL_HINTS)
        raise InvalidMessage(reason_code, detail) from None


def _object(raw: object, hints: Mapping[str, str]) -> dict[str, Any]:
    """The JSON object of a message: size, UTF-8 and JSON syntax, an object at the top."""
    if isinstance(raw, str):
        try:
            body = raw.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidMessage("not_json", _with_hint("not_json", f"the text is not valid Unicode: {exc}")) from None
    elif isinstance(raw, (bytes, bytearray, memoryview)):
        body = bytes(raw)
    else:
        body = _encode_decoded_object(raw)

    if len(body) > MAX_MESSAGE_BYTES:
        raise InvalidMessage(
            "too_large",
            _with_hint("too_large", f"the message is {len(body)} bytes, over the limit of {MAX_MESSAGE_BYTES}", hints),
        )
    obj = _decode_json(body)
    if not isinstance(obj, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(obj), "a number")
        raise InvalidMessage("not_an_object",
                             _with_hint("not_an_object", f"the message is {kind}, not a JSON object", hints))
    return obj


def _encode_decoded_object(obj: object) -> bytes:
    def to_json(value: object) -> object:
        if isinstance(value, Mapping):
            return dict(value)
        if isinstance(value, (datetime, date)):  # e.g. from kombu's JSON decoder
            return value.isoformat()
        raise TypeError(f"values of type {type(value).__name__} are not JSON")

    try:
        text = json.dumps(obj, allow_nan=False, default=to_json)
    except RecursionError:
        detail = "the object is nested too deeply to be JSON"
    except (TypeError, ValueError) as exc:
        detail = f"the object cannot be written as JSON: {exc}"
    else:
        return text.encode("utf-8")  # ensure_ascii: plain ASCII, so never fails
    raise InvalidMessage("not_json", _with_hint("not_json", _printable(detail)))


class _RepeatedKey(ValueError):
    pass


def _object_without_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _RepeatedKey(key)
        obj[key] = value
    return obj


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _parse_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:_MAX_INPUT_SHOWN]} is too large")
    return value


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > 4300:  # Python's own limit for int(str)
        raise ValueError(f"an integer with {len(text)} digits is too long")
    return int(text)


_DECODER = json.JSONDecoder(
    object_pairs_hook=_object_without_repeated_keys,
    parse_constant=_reject_constant,
    parse_float=_parse_float,
    parse_int=_parse_int,
)
"""One decoder for every message (``json.loads`` with hooks builds a new one per call: 4 of the 24 µs
a Sedma message took to decode)."""


def _decode_json(body: bytes) -> Any:
    try:
        text = body.decode("utf-8")
        if text.startswith("\ufeff"):  # json.loads says so; JSONDecoder.decode only "Expecting value"
            raise ValueError("Unexpected UTF-8 BOM (send UTF-8 without a byte order mark)")
        return _DECODER.decode(text)
    except _RepeatedKey as exc:
        key = json.dumps(exc.args[0])
        raise InvalidMessage(
            "schema_violation",
            f"the key {key} appears twice in one JSON object. Fix: send each key once.",
        ) from None
    except UnicodeDecodeError as exc:
        detail = f"the body is not UTF-8: {exc}"
    except RecursionError:
        detail = "the JSON is nested too deeply"
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        detail = f"the body is not JSON: {exc}"
    raise InvalidMessage("not_json", _with_hint("not_json", _printable(detail)))


def _reason_code(error: Mapping[str, Any]) -> str:
    field = next((part for part in reversed(error["loc"]) if isinstance(part, str)), "")
    group = _FIELD_GROUP.get(field, "")
    kind = error["type"]
    return _REASONS.get((group, kind)) or _REASONS.get(("*", kind)) or "schema_violation"


def _explain(exc: ValidationError, hints: Mapping[str, str]) -> tuple[str, str]:
    """Pick the reason code by priority and write the detail: main problem, hint, a few others."""
    problems = sorted(
        ((_reason_code(error), index, error) for index, error in enumerate(exc.errors(include_url=False))),
        key=lambda item: (_PRIORITY[item[0]], item[1]),
    )
    reason_code, _, first = problems[0]
    detail = _with_hint(reason_code, _describe(first), hints)
    others = problems[1:]
    if others:
        shown = "; ".join(f"{_describe(error)} [{code}]" for code, _, error in others[:_MAX_OTHER_PROBLEMS_SHOWN])
        more = len(others) - _MAX_OTHER_PROBLEMS_SHOWN
        detail += f" Also: {shown}" + (f"; and {more} more." if more > 0 else ".")
    return reason_code, _printable(detail)


def _describe(error: Mapping[str, Any]) -> str:
    path = _path(error["loc"])
    text = f"{path}: {error['msg']}"
    if error["loc"] and error["type"] not in ("missing", "extra_forbidden"):
        text += f" (got {_shown(error['input'])})"
    return text


def _path(loc: tuple[int | str, ...]) -> str:
    if not loc:
        return "message"
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _NAME.fullmatch(part):
            path += f".{part}" if path else part
        else:
            path += f"[{json.dumps(part)}]"
    return path


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    if len(text) > _MAX_INPUT_SHOWN:
        text = text[: _MAX_INPUT_SHOWN - 3] + "..."
    return text


def _with_hint(reason_code: str, text: str, hints: Mapping[str, str] = _HINTS) -> str:
    return f"{text}. Fix: {hints[reason_code]}."


def _printable(text: str) -> str:
    """Escape anything a log line or a database text column could choke on or be spoofed by."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)
