"""Rating-changed events are built as the typed contract: validated at runtime, written as before."""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import orjson
import pydantic
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from engine import RatingChange
from tests.profiles import examples
from worker.store.events import event_payloads_json, match_events_json, rating_changed_json

EVENT_ID = uuid.UUID("00000000-0000-5000-8000-000000000001")


def test_a_match_event_is_written_as_the_rating_changed_json_consumers_read():
    """The seed tutorial's worked example, 1350 vs 1200, K = 30, the favourite wins: E = 1 / (1 + 10^(-150/400))
    = 0.70338 (10^-0.375 = 0.42170), new rating 1350 + 30 * 0.29662 = 1358.898 (unrounded; the tutorial rounds it to 1359). The JSON text is the
    contract's fields in order, compact, with the offset written as +00:00 (as before typing)."""
    expected = 1 / (1 + 10 ** ((1200 - 1350) / 400))
    after = 1350 + 30 * (1 - expected)
    change = RatingChange("ann", 1350.0, after, expected, 1.0, 30.0, "win")
    occurred = datetime(2026, 5, 1, 18, 30, 5, tzinfo=UTC)
    [text] = match_events_json([{"event_id": EVENT_ID, "match_id": "m-1", "ladder": "elo", "change": change,
                                 "sequence": 4, "games_played": 3, "out_of_order": False}], occurred)
    assert text == (
        '{"schema_version":1,"event_id":"00000000-0000-5000-8000-000000000001","reason":"match",'
        f'"match_id":"m-1","ladder":"elo","player_id":"ann","rating_before":1350.0,"rating_after":{after!r},'
        f'"delta":{after - 1350.0!r},"expected_score":{expected!r},"actual_score":1.0,"k_factor":30.0,'
        '"sequence":4,"games_played":3,"out_of_order":false,"occurred_at":"2026-05-01T18:30:05+00:00"}'
    )
    assert round(json.loads(text)["rating_after"], 3) == 1358.898


@pytest.mark.parametrize("field, value", [("expected_score", 1.5), ("sequence", 0), ("rating_after", float("nan")),
                                          ("occurred_at", "2026-05-01T18:30:05"), ("reason", "bonus"),
                                          ("k_factor", -1.0)])
def test_an_event_that_breaks_the_contract_is_refused_at_runtime(field, value):
    """Each event is validated as schemas.RatingChanged before it reaches the outbox: a score
    outside [0, 1], a sequence below 1, a NaN rating, a naive time or an unknown reason raises."""
    event = {"schema_version": 1, "event_id": str(EVENT_ID), "reason": "rebuild", "match_id": "m-1",
             "ladder": "elo", "player_id": "ann", "rating_before": 1200.0, "rating_after": 1210.0, "delta": 10.0,
             "expected_score": 0.5, "actual_score": 1.0, "k_factor": 20.0, "sequence": 2, "games_played": 1,
             "out_of_order": False, "occurred_at": "2026-05-01T18:30:05+00:00"}
    assert len(rating_changed_json([event])) == 1
    with pytest.raises(pydantic.ValidationError):
        rating_changed_json([event, {**event, field: value}])


finite = st.floats(allow_nan=False, allow_infinity=False)
scores = st.floats(min_value=0.0, max_value=1.0)
ids = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Co", "Cn", "Zl", "Zp")), min_size=1, max_size=40)


def _typed(value):
    """The value with every leaf tagged by its type (1 and 1.0, False and 0 differ)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    return (type(value).__name__, value)


@settings(max_examples=examples(300), deadline=None)
@given(rating_before=finite, rating_after=finite, expected=scores, actual=scores, k=st.floats(0.0, 1e300),
       sequence=st.integers(1, 2**31 - 1), games=st.integers(0, 2**31 - 1), player=ids, match_id=ids,
       out_of_order=st.booleans(), reason=st.sampled_from(["match", "rebuild", "correction"]))
def test_the_event_text_holds_exactly_the_validated_values_and_the_stream_text_too(
        rating_before, rating_after, expected, actual, k, sequence, games, player, match_id, out_of_order, reason):
    """orjson writes the outbox's and the stream's JSON text (a tenth of the standard library's time): whatever the
    values (floats of any size, tiny or huge, which orjson may write with another exponent than
    Python's repr; any Unicode in the ids), the text reads back to the very values given, of the
    same JSON types, and the relay's text of that payload reads back to it again."""
    event = {"schema_version": 1, "event_id": str(EVENT_ID), "reason": reason, "match_id": match_id,
             "ladder": "elo", "player_id": player, "rating_before": rating_before, "rating_after": rating_after,
             "delta": rating_after - rating_before, "expected_score": expected, "actual_score": actual,
             "k_factor": k, "sequence": sequence, "games_played": games, "out_of_order": out_of_order,
             "occurred_at": "2026-05-01T18:30:05+00:00"}
    assume(math.isfinite(event["delta"]))
    try:
        [text] = rating_changed_json([event])
    except pydantic.ValidationError:
        assume(False)  # an id the contract refuses (e.g. surrounding whitespace): not this test's subject
    assert _typed(json.loads(text)) == _typed(event)
    assert _typed(json.loads(event_payloads_json(text))) == _typed(event)
    # the relay's real input: the jsonb text PostgreSQL returns, made compact by the relay. A
    # float reads back as the same double, though maybe as an integer (jsonb writes 1e15 as
    # 1000000000000000, and 5.580776429449658e16 as the 17 digits of its shortest form, which
    # json.loads reads as an int 4 away from the double: float() of it is the double again)
    relayed = json.loads(event_payloads_json(_jsonb_text(json.loads(text))))
    assert relayed.keys() == event.keys()
    for key, value in event.items():
        assert (float(relayed[key]) == value if isinstance(value, float) else _typed(relayed[key]) == _typed(value)), key


def _jsonb_text(payload: dict) -> str:
    """The text PostgreSQL's ``jsonb`` output gives for a flat ``payload``: numbers in plain notation
    with their decimal digits (``numeric``'s output: ``0.00001`` for 1e-05, 1e20 as 21 digits)."""
    def value(v):
        return format(Decimal(repr(v)), "f") if isinstance(v, float) else json.dumps(v, ensure_ascii=False)
    return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {value(v)}" for k, v in payload.items()) + "}"


@pytest.mark.parametrize("text", ['{"x": 1' + "0" * 400 + ', "ok": true}', "[" * 255 + "]" * 255,
                                  "[" * 2000 + "]" * 2000],
                         ids=["number beyond the float range", "nested 255 deep", "nested 2000 deep"])
def test_a_payload_orjson_cannot_take_goes_to_the_stream_as_its_jsonb_text(text, caplog):
    """The relay makes each outbox payload's jsonb text compact with orjson, which refuses a number
    beyond the float range (jsonb returns 1e400 as a 401-digit integer) and writes no nesting deeper
    than 254 levels: such a payload goes as its jsonb text, so one row never stops the relay (the
    integration test tests/integration/test_outbox_pending.py runs it through a real relay)."""
    with pytest.raises(TypeError if text.startswith("[") and len(text) < 1000 else orjson.JSONDecodeError):
        orjson.dumps(orjson.loads(text))

    assert event_payloads_json(text) == text
    assert "goes to the stream as its jsonb text" in caplog.text  # no writer of the service makes one


def test_a_payload_is_made_compact(caplog):
    """jsonb's text has a space after each colon and comma; the stream's has none."""
    assert event_payloads_json('{"s": "é", "ok": 1, "x": [1, 2.5]}') == '{"s":"é","ok":1,"x":[1,2.5]}'
    assert not caplog.records


@pytest.mark.parametrize("value", [Decimal("32.0"), type("Float", (float,), {})(32.0), 2**64],
                         ids=["Decimal", "float subclass", "integer beyond 64 bits"])
def test_a_value_orjson_cannot_write_as_its_json_type_raises_rather_than_becoming_a_string(value):
    """A K-factor that passes validation but is not a plain float (a Decimal, a float subclass such
    as numpy.float64) raises; it is never written as the string "32.0" against the contract's number."""
    event = {"schema_version": 1, "event_id": str(EVENT_ID), "reason": "rebuild", "match_id": "m-1",
             "ladder": "elo", "player_id": "ann", "rating_before": 1200.0, "rating_after": 1210.0, "delta": 10.0,
             "expected_score": 0.5, "actual_score": 1.0, "k_factor": value, "sequence": 2, "games_played": 1,
             "out_of_order": False, "occurred_at": "2026-05-01T18:30:05+00:00"}
    with pytest.raises(TypeError):
        rating_changed_json([event])


def _schema_validator(schema: dict) -> object:
    import jsonschema  # the test extra's independent validator, as in test_contract_differential

    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


ELO_ONLY_SCHEMA = json.loads((Path(__file__).parents[1] / "data" / "rating_changed.v1.elo-only.json").read_text())
CURRENT_SCHEMA = json.loads((Path(__file__).parents[2] / "schemas" / "json" / "rating_changed.v1.json").read_text())


def _one_event(change: RatingChange) -> dict:
    [text] = match_events_json([{"event_id": EVENT_ID, "match_id": "m-1", "ladder": "l", "change": change,
                                 "sequence": 1, "games_played": 1, "out_of_order": False}],
                               datetime(2026, 5, 1, tzinfo=UTC))
    return json.loads(text)


def test_an_elo_event_stays_valid_for_a_consumer_built_on_the_schema_before_deviations():
    """An Elo change's event has no deviation or volatility key at all, so the schema committed
    before they existed (``additionalProperties: false``) still accepts it, as does today's."""
    event = _one_event(RatingChange("ann", 1350.0, 1358.9, 0.7, 1.0, 30.0, "win"))
    assert not {"deviation_before", "deviation_after", "volatility_before", "volatility_after"} & event.keys()
    assert _schema_validator(ELO_ONLY_SCHEMA).is_valid(event)  # type: ignore[attr-defined]
    assert _schema_validator(CURRENT_SCHEMA).is_valid(event)  # type: ignore[attr-defined]


def test_a_glicko2_event_carries_the_deviation_and_volatility_before_and_after():
    """A change with a deviation carries the four fields with the change's values; today's schema
    accepts the event and the schema before them refuses it (an additive change consumers opt into)."""
    change = RatingChange("ann", 1500.0, 1563.2, 0.5, 1.0, 126.4, "win", 0.0, False, 200.0, 175.2, 0.06, 0.059999)
    event = _one_event(change)
    assert (event["deviation_before"], event["deviation_after"]) == (200.0, 175.2)
    assert (event["volatility_before"], event["volatility_after"]) == (0.06, 0.059999)
    assert _schema_validator(CURRENT_SCHEMA).is_valid(event)  # type: ignore[attr-defined]
    assert not _schema_validator(ELO_ONLY_SCHEMA).is_valid(event)  # type: ignore[attr-defined]


def test_a_negative_deviation_breaks_the_contract():
    """A deviation is at least 0: a change saying otherwise is refused before it reaches the outbox."""
    change = RatingChange("ann", 1500.0, 1510.0, 0.5, 1.0, 20.0, "win", 0.0, False, 200.0, -1.0, None, None)
    with pytest.raises(pydantic.ValidationError):
        _one_event(change)


def test_a_model_with_uncertainty_may_take_a_negative_step_in_a_free_for_all():
    """A Weng-Lin free-for-all can move a player against the sign of actual - expected (the mean
    pairwise score): its event, which carries the deviation, may state a negative K-factor; an Elo
    event may not (the parametrized test above)."""
    change = RatingChange("ann", 25.0, 25.5, 0.6, 0.5, -5.0, "draw", 0.0, False, 8.3, 8.1, None, None)
    assert _one_event(change)["k_factor"] == -5.0
