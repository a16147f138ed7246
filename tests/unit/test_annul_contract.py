"""The annul-matches contract: what a game backend's annulment must look like, the
reason codes of bad input, and where a requeued annulment dead letter goes."""

from __future__ import annotations

import json

import pytest

from schemas import AnnulMatches, InvalidMessage, parse_annul_matches
from worker.ops.requeue import requeue_task
from worker.producer import ANNUL_TASK_NAME, TASK_NAME, annulment_json

GOOD = {"schema_version": 1, "match_ids": ["m-1", "m-2"], "reason": "cheating", "annulled_by": "anti-cheat"}


def test_a_valid_annulment_parses_from_text_bytes_and_a_decoded_object():
    """The three shapes a worker may receive give the same frozen message."""
    text = json.dumps(GOOD)
    assert parse_annul_matches(text) == parse_annul_matches(text.encode()) == parse_annul_matches(GOOD)
    assert parse_annul_matches(GOOD).match_ids == ["m-1", "m-2"]


@pytest.mark.parametrize(("change", "code"), [
    ({"schema_version": 2}, "unsupported_schema_version"),
    ({"extra": 1}, "unknown_field"),
    ({"reason": None}, "wrong_type"),
    ({"match_ids": "m-1"}, "wrong_type"),
    ({"match_ids": ["m\n1"]}, "invalid_id"),
    ({"annulled_by": ""}, "invalid_id"),
    ({"match_ids": []}, "schema_violation"),
    ({"match_ids": [f"m-{n}" for n in range(1001)]}, "schema_violation"),
    ({"reason": "   "}, "schema_violation"),
    ({"reason": "cheating\x00"}, "invalid_text"),
    ({"reason": "\ud800"}, "invalid_text"),
])
def test_bad_annulments_get_a_reason_code_and_a_fix_naming_this_contract(change, code):
    """Each broken field gives its reason code; the detail says what to change."""
    with pytest.raises(InvalidMessage) as caught:
        parse_annul_matches({**GOOD, **change})
    assert caught.value.reason_code == code
    assert "Fix:" in caught.value.detail and "match_finished" not in caught.value.detail


def test_a_missing_field_and_a_non_object_are_refused():
    """Without reason, or not a JSON object at all: missing_field, not_an_object, not_json."""
    missing = {k: v for k, v in GOOD.items() if k != "reason"}
    for raw, code in ((missing, "missing_field"), ("[1]", "not_an_object"), ("{", "not_json")):
        with pytest.raises(InvalidMessage) as caught:
            parse_annul_matches(raw)
        assert caught.value.reason_code == code


def test_the_producer_json_is_what_the_worker_parses():
    """annulment_json writes the message compactly; parsing it gives the same message."""
    message = AnnulMatches(**GOOD)
    assert json.loads(annulment_json(message)) == GOOD
    assert parse_annul_matches(annulment_json(message)) == message


def test_a_requeued_annulment_dead_letter_goes_back_to_the_annulment_task():
    """The dead letter's headers name the task: an annulment's goes to ratings.annul_matches, a
    match's (or one without headers) to ratings.apply_match."""
    assert requeue_task({"headers": {"task": ANNUL_TASK_NAME}}) == ANNUL_TASK_NAME
    assert requeue_task({"headers": {"task": TASK_NAME}}) == TASK_NAME
    assert requeue_task({"headers": None}) == TASK_NAME
