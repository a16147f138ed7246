"""A message refused for a repeated key, NaN or Infinity keeps the match id its body still tells
(the first top-level ``match_id``), so its dead letter can be found by match id."""

from __future__ import annotations

import pytest

from schemas import InvalidMessage, parse_match_finished

BODY = ('{"schema_version": 1, "match_id": "m-7", "ladder": "elo", "finished_at": "2026-05-01T12:00:00Z", '
        '"side_a": {"players": [{"player_id": "a"}]}, "side_b": {"players": [{"player_id": "b"}]}, '
        '"outcome": "side_a_won"%s}')


@pytest.mark.parametrize(("body", "reason_code", "match_id"), [
    (BODY % ', "ladder": "elo"', "schema_violation", "m-7"),  # a repeated key
    (BODY % ', "match_id": "m-8"', "schema_violation", "m-7"),  # the match id repeated: the first one
    (BODY % ', "weight": NaN', "not_json", "m-7"),
    (BODY % ', "weight": -Infinity', "not_json", "m-7"),
    ("\ufeff" + BODY % "", "not_json", "m-7"),  # a byte order mark
    ((BODY % ', "x": NaN').replace('"m-7"', '"m\\u0000-7"'), "not_json", None),  # not a valid id
    ('{"a": {"match_id": "inner"}, "a": 1}', "schema_violation", None),  # not at the top level
    (BODY[:80], "not_json", None),  # cut short: not readable
])
def test_the_match_id_is_kept_when_the_body_still_tells_it(body, reason_code, match_id):
    for raw in (body, body.encode("utf-8")):
        with pytest.raises(InvalidMessage) as refused:
            parse_match_finished(raw)
        assert (refused.value.reason_code, refused.value.match_id) == (reason_code, match_id)


def test_a_decoded_object_with_nan_keeps_its_match_id():
    """What a task receives after kombu's JSON decoder accepted NaN: a dict that is not JSON."""
    with pytest.raises(InvalidMessage) as refused:
        parse_match_finished({"schema_version": 1, "match_id": "m-9", "weight": float("nan")})
    assert (refused.value.reason_code, refused.value.match_id) == ("not_json", "m-9")
