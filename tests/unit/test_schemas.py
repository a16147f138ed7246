"""Unit tests of the wire contracts in schemas/ (MatchFinished in, RatingChanged out)."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from schemas import (
    MAX_MESSAGE_BYTES,
    InvalidMessage,
    MatchFinished,
    PlayerResult,
    RatingChanged,
    SedmaStats,
    Side,
    generate,
    parse_match_finished,
)
from schemas.match_finished import REASON_CODES
from tests.profiles import examples

SEDMA_1V1: dict[str, Any] = {
    "schema_version": 1,
    "match_id": "sedma-2024-05-01-0001",
    "ladder": "sedma-ranked",
    "finished_at": "2024-05-01T18:30:00Z",
    "side_a": {
        "players": [
            {"player_id": "alice", "stats": {"bad_moves": 1, "won_by_16": 2, "won_by_24": 1, "won_by_4_and_last": 1}}
        ]
    },
    "side_b": {"players": [{"player_id": "bob", "stats": {"bad_moves": 4}}]},
    "outcome": "side_a_won",
}

SEDMA_2V2: dict[str, Any] = {
    "schema_version": 1,
    "match_id": "sedma-2024-05-01-0002",
    "ladder": "sedma-teams",
    "finished_at": "2024-05-01T20:30:00+02:00",
    "side_a": {"players": [{"player_id": "alice", "stats": {"won_by_24": 1}}, {"player_id": "carol", "stats": None}]},
    "side_b": {"players": [{"player_id": "bob"}, {"player_id": "dave", "stats": {}}]},
    "outcome": "draw",
}

FOOTBALL: dict[str, Any] = {
    "schema_version": 1,
    "match_id": "afcon 2024 / group A / match 3",
    "ladder": "football.national-teams",
    "finished_at": "2024-01-18T22:00:00+00:00",
    "side_a": {"players": [{"player_id": "Côte d'Ivoire"}]},
    "side_b": {"players": [{"player_id": "São Tomé and Príncipe"}]},
    "outcome": "side_b_won",
}


def message(**changes: Any) -> dict[str, Any]:
    """A copy of the 1v1 Sedma message with some top-level fields replaced or added."""
    result = copy.deepcopy(SEDMA_1V1)
    result.update(changes)
    return result


def without(field: str) -> dict[str, Any]:
    """A copy of the 1v1 Sedma message without one top-level field."""
    result = copy.deepcopy(SEDMA_1V1)
    del result[field]
    return result


def with_alice_stats(**stats: Any) -> dict[str, Any]:
    """A copy of the 1v1 Sedma message where alice reports the given stats."""
    return message(side_a={"players": [{"player_id": "alice", "stats": stats}]})


def players(*ids: str) -> dict[str, Any]:
    """A side holding the given player ids."""
    return {"players": [{"player_id": player_id} for player_id in ids]}


# --------------------------------------------------------------------------------------------
# Valid messages
# --------------------------------------------------------------------------------------------


def test_a_valid_1v1_sedma_message_parses_into_a_frozen_match() -> None:
    """A 1v1 Sedma message gives a MatchFinished with its stats, defaults filled in."""
    match = parse_match_finished(json.dumps(SEDMA_1V1).encode("utf-8"))

    assert match.match_id == "sedma-2024-05-01-0001"
    assert match.ladder == "sedma-ranked"
    assert match.finished_at == datetime(2024, 5, 1, 18, 30, tzinfo=UTC)
    assert match.side_a.players[0] == PlayerResult(
        player_id="alice", stats=SedmaStats(bad_moves=1, won_by_16=2, won_by_24=1, won_by_4_and_last=1)
    )
    assert match.side_b.players[0].stats == SedmaStats(bad_moves=4)
    assert match.outcome == "side_a_won"
    with pytest.raises(ValidationError):
        match.ladder = "other"  # type: ignore[misc]


def test_a_valid_2v2_message_parses_with_optional_stats() -> None:
    """A 2v2 message parses; stats may be an object, empty, null or omitted."""
    match = parse_match_finished(SEDMA_2V2)

    assert [p.player_id for p in match.side_a.players] == ["alice", "carol"]
    assert [p.player_id for p in match.side_b.players] == ["bob", "dave"]
    assert match.side_a.players[1].stats is None
    assert match.side_b.players[0].stats is None
    assert match.side_b.players[1].stats == SedmaStats()
    assert match.finished_at == datetime(2024, 5, 1, 18, 30, tzinfo=UTC)


def test_football_team_names_with_accents_apostrophes_and_spaces_are_valid_ids() -> None:
    """Ids are opaque: "Côte d'Ivoire" and "São Tomé and Príncipe" parse unchanged."""
    match = parse_match_finished(json.dumps(FOOTBALL, ensure_ascii=False).encode("utf-8"))

    assert match.side_a.players[0].player_id == "Côte d'Ivoire"
    assert match.side_b.players[0].player_id == "São Tomé and Príncipe"
    assert match.match_id == "afcon 2024 / group A / match 3"


def test_raw_bytes_text_and_decoded_dict_give_the_same_match() -> None:
    """bytes, str and the dict Celery hands over are validated identically."""
    text = json.dumps(SEDMA_2V2)

    from_bytes = parse_match_finished(text.encode("utf-8"))
    from_text = parse_match_finished(text)
    from_dict = parse_match_finished(copy.deepcopy(SEDMA_2V2))

    assert from_bytes == from_text == from_dict


def test_a_decoded_datetime_object_is_accepted_like_its_iso_text() -> None:
    """A dict holding an aware datetime (as kombu's JSON decoder gives) parses like the ISO string."""
    decoded = message(finished_at=datetime(2024, 5, 1, 20, 30, tzinfo=timezone(timedelta(hours=2))))

    assert parse_match_finished(decoded) == parse_match_finished(SEDMA_1V1)


def test_a_match_of_eight_players_a_side_with_counts_at_the_limits_is_valid() -> None:
    """The upper bounds are inclusive: 8 players a side and counts of 0 and 1000."""
    stats = {"bad_moves": 0, "won_by_16": 1000, "won_by_24": 1000, "won_by_4_and_last": 1000}
    body = message(
        side_a={"players": [{"player_id": f"a{i}", "stats": stats} for i in range(8)]},
        side_b={"players": [{"player_id": f"b{i}"} for i in range(8)]},
        match_id="m" * 128,
        ladder="l" * 64,
    )

    match = parse_match_finished(body)

    assert len(match.side_a.players) == len(match.side_b.players) == 8


# --------------------------------------------------------------------------------------------
# Invalid messages and their reason codes
# --------------------------------------------------------------------------------------------

BAD_INPUTS = [
    pytest.param(b'{"schema_version": 1, "match_id": ', "not_json", id="not JSON"),
    pytest.param(b"\xff\xfe{}", "not_json", id="not UTF-8"),
    pytest.param(b'{"schema_version": NaN}', "not_json", id="NaN literal"),
    pytest.param(b'{"schema_version": ' + b"9" * 4301 + b"}", "not_json", id="integer of 4301 digits"),
    pytest.param(b'{"schema_version": 1e400}', "not_json", id="number beyond float range"),
    pytest.param(b"\xef\xbb\xbf" + json.dumps(message()).encode(), "not_json", id="UTF-8 byte order mark"),
    pytest.param(b"[1, 2, 3]", "not_an_object", id="JSON array"),
    pytest.param(without("ladder"), "missing_field", id="missing field"),
    pytest.param(without("schema_version"), "missing_field", id="missing schema_version"),
    pytest.param(message(match_id=42), "wrong_type", id="wrong type"),
    pytest.param(message(side_a=[{"player_id": "alice"}]), "wrong_type", id="side as array"),
    pytest.param(with_alice_stats(bad_moves=True), "wrong_type", id="bool as count"),
    pytest.param(with_alice_stats(bad_moves=2.5), "wrong_type", id="fractional number as count"),
    pytest.param(with_alice_stats(bad_moves="2"), "wrong_type", id="string as count"),
    pytest.param(with_alice_stats(bad_moves=-1), "count_out_of_range", id="negative count"),
    pytest.param(with_alice_stats(won_by_16=10**6), "count_out_of_range", id="absurd count"),
    pytest.param(message(side_b=players("alice")), "duplicate_player", id="same player on both sides"),
    pytest.param(message(side_a=players("alice", "alice")), "duplicate_player", id="same player twice in a side"),
    pytest.param(message(side_b={"players": []}), "empty_side", id="empty side"),
    pytest.param(message(side_a=players(*[f"p{i}" for i in range(9)])), "too_many_players", id="nine players"),
    pytest.param(message(ladder="Bad Ladder!"), "invalid_ladder", id="bad ladder format"),
    pytest.param(message(ladder=""), "invalid_ladder", id="empty ladder"),
    pytest.param(message(finished_at="2024-05-01T18:30:00"), "naive_timestamp", id="naive timestamp"),
    pytest.param(message(finished_at="2999-01-01T00:00:00Z"), "timestamp_out_of_range", id="year 2999"),
    pytest.param(message(finished_at="1700-01-01T00:00:00Z"), "timestamp_out_of_range", id="year 1700"),
    pytest.param(message(finished_at="yesterday"), "invalid_timestamp", id="unparseable timestamp"),
    pytest.param(message(finished_at="2024-02-30T12:00:00Z"), "invalid_timestamp", id="no such day"),
    pytest.param(message(finished_at="1714588200"), "invalid_timestamp", id="unix time as text"),
    pytest.param(message(finished_at=1714588200), "wrong_type", id="unix time as number"),
    pytest.param(
        json.dumps(message(match_id="x" * 100, padding="y" * MAX_MESSAGE_BYTES)).encode(),
        "too_large",
        id="oversized body",
    ),
    pytest.param(message(schema_version=2), "unsupported_schema_version", id="schema version 2"),
    pytest.param(message(schema_version=True), "unsupported_schema_version", id="schema version true"),
    pytest.param(message(referee="Collina"), "unknown_field", id="extra field"),
    pytest.param(
        message(side_a={"players": [{"player_id": "alice", "team": "red"}]}), "unknown_field", id="extra nested field"
    ),
    pytest.param(message(side_b=players("bob\x00")), "invalid_id", id="control character in player_id"),
    pytest.param(message(side_b=players("bob\u202e")), "invalid_id", id="bidi override in player_id"),
    pytest.param(message(side_b=players("b" * 129)), "invalid_id", id="129-char player id"),
    pytest.param(message(match_id=""), "invalid_id", id="empty match id"),
    pytest.param(message(outcome="side_c_won"), "invalid_outcome", id="bad outcome"),
    pytest.param(b'{"ladder": "a", "ladder": "b"}', "schema_violation", id="repeated key"),
    pytest.param(
        message(sides=[{"placement": i + 1, **players(f"f{i}")} for i in range(3)]), "mixed_forms",
        id="sides and side_a together",
    ),
    pytest.param(without("outcome"), "missing_field", id="two-sided match without outcome"),
]


@pytest.mark.parametrize(("raw", "reason_code"), BAD_INPUTS)
def test_a_bad_message_is_rejected_with_its_reason_code(raw: Any, reason_code: str) -> None:
    """Each bad input raises InvalidMessage with exactly the expected reason code."""
    with pytest.raises(InvalidMessage) as caught:
        parse_match_finished(raw)

    assert caught.value.reason_code == reason_code, caught.value.detail


def test_the_bad_input_table_covers_every_reason_code() -> None:
    """Every reason code parse_match_finished can give appears in the table above (``invalid_text``
    is the annulment's free text only: tests/unit/test_annul_contract.py)."""
    assert {param.values[1] for param in BAD_INPUTS} == set(REASON_CODES) - {"invalid_text"}


def test_a_decoded_object_is_measured_by_its_json_size() -> None:
    """An already-decoded dict larger than the limit once written as JSON is too_large."""
    with pytest.raises(InvalidMessage) as caught:
        parse_match_finished(message(padding="y" * MAX_MESSAGE_BYTES))

    assert caught.value.reason_code == "too_large"


def test_the_detail_names_the_field_says_what_is_wrong_and_what_to_change() -> None:
    """The detail holds the field path, pydantic's text, the offending value and a fix."""
    with pytest.raises(InvalidMessage) as caught:
        parse_match_finished(with_alice_stats(bad_moves=-3))

    error = caught.value
    assert error.match_id == "sedma-2024-05-01-0001"
    assert "side_a.players[0].stats.bad_moves" in error.detail
    assert "greater than or equal to 0" in error.detail
    assert "-3" in error.detail
    assert "0 to 1000" in error.detail
    assert str(error) == f"count_out_of_range: {error.detail}"
    assert isinstance(error, ValueError)


def test_a_byte_order_mark_is_named_in_the_detail() -> None:
    """A body that starts with the UTF-8 byte order mark is not_json, and the detail says why (the
    shared decoder alone would say only "Expecting value")."""
    with pytest.raises(InvalidMessage) as error:
        parse_match_finished(b"\xef\xbb\xbf" + json.dumps(message()).encode())

    assert error.value.reason_code == "not_json"
    assert "BOM" in error.value.detail


def test_the_match_id_is_reported_only_when_it_can_be_read() -> None:
    """Unparseable bodies and invalid ids give match_id None; a valid id is reported."""
    with pytest.raises(InvalidMessage) as not_json:
        parse_match_finished(b"{")
    with pytest.raises(InvalidMessage) as bad_id:
        parse_match_finished(message(match_id="m\n1"))
    with pytest.raises(InvalidMessage) as bad_outcome:
        parse_match_finished(message(outcome="lost"))

    assert not_json.value.match_id is None
    assert bad_id.value.match_id is None
    assert bad_id.value.reason_code == "invalid_id"
    assert "U+000A" in bad_id.value.detail
    assert bad_outcome.value.match_id == "sedma-2024-05-01-0001"


@pytest.mark.parametrize(
    ("raw", "reason_code"),
    [
        pytest.param(message(schema_version=2, referee="x", ladder="Bad"), "unsupported_schema_version", id="version first"),
        pytest.param({**without("ladder"), "winner": "a"}, "unknown_field", id="unknown before missing"),
        pytest.param({**without("ladder"), "match_id": 7}, "missing_field", id="missing before wrong type"),
        pytest.param(message(match_id=7, ladder="Bad"), "wrong_type", id="wrong type before invalid ladder"),
        pytest.param(message(ladder="Bad", finished_at="2024-05-01"), "invalid_ladder", id="ladder before timestamp"),
        pytest.param(
            message(side_a={"players": []}, side_b={"players": [{"player_id": "bob", "stats": {"bad_moves": -1}}]}),
            "empty_side",
            id="side sizes before counts",
        ),
    ],
)
def test_with_several_problems_the_highest_priority_reason_is_reported(raw: Any, reason_code: str) -> None:
    """The reason code is the first in REASON_CODES order; the detail also mentions the others."""
    with pytest.raises(InvalidMessage) as caught:
        parse_match_finished(raw)

    assert caught.value.reason_code == reason_code
    assert "Also:" in caught.value.detail


def test_invalid_message_survives_pickling_with_its_attributes() -> None:
    """InvalidMessage keeps reason_code, detail and match_id through pickle (Celery may carry it)."""
    error = InvalidMessage("empty_side", "side_a.players: empty", "m-1")

    copy_ = pickle.loads(pickle.dumps(error))

    assert (copy_.reason_code, copy_.detail, copy_.match_id) == ("empty_side", "side_a.players: empty", "m-1")
    assert str(copy_) == "empty_side: side_a.players: empty"


# --------------------------------------------------------------------------------------------
# Canonical JSON and payload hash
# --------------------------------------------------------------------------------------------


def test_canonical_json_ignores_key_order_whitespace_and_utc_offset() -> None:
    """The same match written with other key order, spacing and offsets canonicalizes identically."""
    reordered = {key: SEDMA_1V1[key] for key in reversed(list(SEDMA_1V1))}
    reordered["finished_at"] = "2024-05-01T20:30:00+02:00"
    reordered["side_a"] = {
        "players": [
            {"stats": dict(reversed(list(SEDMA_1V1["side_a"]["players"][0]["stats"].items()))), "player_id": "alice"}
        ]
    }
    pretty = json.dumps(reordered, indent=4).encode("utf-8")
    utc_minus = message(finished_at="2024-05-01T13:30:00-05:00")

    first = parse_match_finished(SEDMA_1V1)
    second = parse_match_finished(pretty)
    third = parse_match_finished(utc_minus)

    assert first.canonical_json() == second.canonical_json() == third.canonical_json()
    assert first.payload_hash() == second.payload_hash() == third.payload_hash()
    assert b'"finished_at":"2024-05-01T18:30:00Z"' in first.canonical_json()


def test_canonical_json_is_sorted_compact_utf8_with_defaults_filled_in() -> None:
    """canonical_json is compact sorted UTF-8 JSON; omitted stats are null, omitted counts are 0."""
    match = parse_match_finished(FOOTBALL)
    canonical = match.canonical_json()

    data = json.loads(canonical.decode("utf-8"))
    assert canonical == json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert "Côte d'Ivoire".encode() in canonical
    assert data["side_a"]["players"][0]["stats"] is None
    assert parse_match_finished(SEDMA_2V2).canonical_json().count(b'"won_by_16":0') == 2
    assert len(match.payload_hash()) == 64
    assert int(match.payload_hash(), 16) >= 0


def test_omitted_and_null_stats_canonicalize_the_same() -> None:
    """A player without a stats key and one with stats null are the same content."""
    omitted = message(side_b={"players": [{"player_id": "bob"}]})
    null = message(side_b={"players": [{"player_id": "bob", "stats": None}]})

    assert parse_match_finished(omitted).payload_hash() == parse_match_finished(null).payload_hash()


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(message(match_id="sedma-2024-05-01-0003"), id="match_id"),
        pytest.param(message(ladder="sedma-casual"), id="ladder"),
        pytest.param(message(finished_at="2024-05-01T18:30:01Z"), id="finished_at by one second"),
        pytest.param(message(finished_at="2024-05-01T18:30:00.000001Z"), id="finished_at by one microsecond"),
        pytest.param(message(outcome="draw"), id="outcome"),
        pytest.param(message(side_b=players("bobby")), id="player_id"),
        pytest.param(message(side_b={"players": [{"player_id": "bob", "stats": {"bad_moves": 5}}]}), id="a count"),
        pytest.param(message(side_b={"players": [{"player_id": "bob", "stats": {}}]}), id="null stats vs zero stats"),
        pytest.param(message(side_a=SEDMA_1V1["side_b"], side_b=SEDMA_1V1["side_a"]), id="sides swapped"),
        pytest.param(message(side_b=players("bob", "zed")), id="one more player"),
    ],
)
def test_canonical_json_differs_when_any_field_differs(changed: dict[str, Any]) -> None:
    """Changing any single value changes canonical_json and payload_hash."""
    original = parse_match_finished(SEDMA_1V1)
    other = parse_match_finished(changed)

    assert other.canonical_json() != original.canonical_json()
    assert other.payload_hash() != original.payload_hash()


def test_player_order_within_a_side_is_part_of_the_content() -> None:
    """Swapping two teammates changes the canonical form (lists keep their order)."""
    first = parse_match_finished(SEDMA_2V2)
    swapped = copy.deepcopy(SEDMA_2V2)
    swapped["side_a"]["players"].reverse()

    assert parse_match_finished(swapped).canonical_json() != first.canonical_json()


def test_a_match_built_in_python_with_an_offset_canonicalizes_like_the_wire_form() -> None:
    """A MatchFinished constructed directly stores finished_at in UTC and hashes like the parsed one."""
    built = MatchFinished(
        schema_version=1,
        match_id="sedma-2024-05-01-0001",
        ladder="sedma-ranked",
        finished_at=datetime(2024, 5, 1, 20, 30, tzinfo=timezone(timedelta(hours=2))),
        side_a=Side(
            players=[
                PlayerResult(
                    player_id="alice",
                    stats=SedmaStats(bad_moves=1, won_by_16=2, won_by_24=1, won_by_4_and_last=1),
                )
            ]
        ),
        side_b=Side(players=[PlayerResult(player_id="bob", stats=SedmaStats(bad_moves=4))]),
        outcome="side_a_won",
    )

    assert built.finished_at.utcoffset() == timedelta(0)
    assert built.payload_hash() == parse_match_finished(SEDMA_1V1).payload_hash()


# --------------------------------------------------------------------------------------------
# RatingChanged
# --------------------------------------------------------------------------------------------


def rating_changed(**changes: Any) -> dict[str, Any]:
    """Fields of a valid RatingChanged event, with some replaced."""
    fields: dict[str, Any] = {
        "event_id": uuid.UUID("0b6a3f3e-5d4c-4f7e-9a51-6d2c1f0e8b7a"),
        "match_id": "sedma-2024-05-01-0001",
        "ladder": "sedma-ranked",
        "player_id": "alice",
        "rating_before": 1500.0,
        "rating_after": 1516.0,
        "delta": 16.0,
        "expected_score": 0.5,
        "actual_score": 1.0,
        "k_factor": 32.0,
        "sequence": 1,
        "games_played": 1,
        "occurred_at": datetime(2024, 5, 1, 18, 30, 5, tzinfo=UTC),
    }
    fields.update(changes)
    return fields


def test_a_rating_changed_event_round_trips_through_json_with_its_defaults() -> None:
    """RatingChanged fills schema_version, reason and out_of_order and round-trips through JSON."""
    event = RatingChanged(**rating_changed())

    assert (event.schema_version, event.reason, event.out_of_order) == (1, "match", False)
    assert RatingChanged.model_validate_json(event.model_dump_json()) == event


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"expected_score": 1.2}, id="expected score above 1"),
        pytest.param({"actual_score": -0.1}, id="actual score below 0"),
        pytest.param({"sequence": 0}, id="sequence 0"),
        pytest.param({"games_played": 0}, id="no games played"),
        pytest.param({"reason": "manual"}, id="unknown reason"),
        pytest.param({"occurred_at": datetime(2024, 5, 1, 18, 30)}, id="naive occurred_at"),
        pytest.param({"rating_after": float("nan")}, id="NaN rating"),
        pytest.param({"event_id": "not-a-uuid"}, id="bad event id"),
        pytest.param({"schema_version": 2}, id="other version"),
        pytest.param({"note": "x"}, id="extra field"),
    ],
)
def test_a_rating_changed_event_with_a_bad_field_is_rejected(changes: dict[str, Any]) -> None:
    """RatingChanged enforces its ranges, literals, timezone and closed field set."""
    with pytest.raises(ValidationError):
        RatingChanged(**rating_changed(**changes))


# --------------------------------------------------------------------------------------------
# Generated JSON Schema files and the import boundary
# --------------------------------------------------------------------------------------------


def test_the_generated_json_schema_files_are_current() -> None:
    """`python -m schemas.generate --check` passes: the committed files match the models."""
    assert generate.main(["--check"]) == 0, "run: python -m schemas.generate"


def test_the_generator_check_fails_when_a_file_is_stale(tmp_path: Any) -> None:
    """The check reports a missing or edited schema file as stale."""
    generate.write_all(tmp_path)
    assert generate.stale_files(tmp_path) == []

    (tmp_path / "rating_changed.v1.json").write_text("{}\n", encoding="utf-8")
    (tmp_path / "match_finished.v1.json").unlink()

    assert sorted(p.name for p in generate.stale_files(tmp_path)) == ["match_finished.v1.json", "rating_changed.v1.json"]


def test_importing_schemas_loads_no_engine_worker_or_infrastructure_module() -> None:
    """schemas imports pydantic and the standard library only."""
    code = (
        "import sys, schemas, schemas.generate\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'engine', 'worker', 'celery', 'kombu', 'redis', 'psycopg', 'psycopg_pool'})\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert result.stdout.strip() == ""


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=25,
)

FIELD_PATHS = [
    ("schema_version",),
    ("match_id",),
    ("ladder",),
    ("finished_at",),
    ("outcome",),
    ("side_a",),
    ("side_b", "players"),
    ("side_a", "players", 0),
    ("side_a", "players", 0, "player_id"),
    ("side_a", "players", 0, "stats"),
    ("side_a", "players", 0, "stats", "bad_moves"),
    ("side_a", "players", 0, "stats", "won_by_4_and_last"),
]


def assert_parses_or_raises_invalid_message(raw: object) -> None:
    """parse_match_finished either returns a match with a payload hash or raises a well-formed InvalidMessage."""
    try:
        match = parse_match_finished(raw)
    except InvalidMessage as error:
        assert error.reason_code in REASON_CODES
        assert error.detail
        assert str(error) == f"{error.reason_code}: {error.detail}"
        error.detail.encode("utf-8")  # storable as text
    else:
        assert isinstance(match, MatchFinished)
        assert len(match.payload_hash()) == 64


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_arbitrary_json_values_only_ever_give_a_match_or_invalid_message(value: Any) -> None:
    """Any JSON value, decoded or as UTF-8 text, yields a MatchFinished or an InvalidMessage."""
    assert_parses_or_raises_invalid_message(value)
    assert_parses_or_raises_invalid_message(json.dumps(value).encode("utf-8"))


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FIELD_PATHS), json_values)
def test_a_valid_message_with_one_field_replaced_by_any_json_never_crashes(path: tuple[Any, ...], value: Any) -> None:
    """Replacing any one field of a valid message yields a MatchFinished or an InvalidMessage."""
    body = copy.deepcopy(SEDMA_1V1)
    target: Any = body
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value

    assert_parses_or_raises_invalid_message(body)
    assert_parses_or_raises_invalid_message(json.dumps(body).encode("utf-8"))


@settings(max_examples=examples(200))
@given(st.binary(max_size=200))
def test_arbitrary_bytes_only_ever_give_a_match_or_invalid_message(raw: bytes) -> None:
    """Random bytes are rejected with an InvalidMessage, never another exception."""
    assert_parses_or_raises_invalid_message(raw)


# --------------------------------------------------------------------------------------------
# Optional context (home, score, season) and free-for-all matches
# --------------------------------------------------------------------------------------------


def test_home_score_and_season_are_read() -> None:
    match = parse_match_finished(message(home="side_b", score={"side_a": 1, "side_b": 3}, season="2024"))
    assert (match.home, match.score.side_a, match.score.side_b, match.season) == ("side_b", 1.0, 3.0, "2024")


def test_a_message_without_the_optional_fields_keeps_its_canonical_form() -> None:
    """The optional fields are left out of the canonical JSON when absent, so the payload hash of a
    message sent before they existed does not change. The expected form is written out here."""
    body = message(side_a={"players": [{"player_id": "alice"}]}, side_b={"players": [{"player_id": "bob"}]})
    expected = {
        "finished_at": body["finished_at"].replace("+00:00", "Z"),
        "ladder": body["ladder"],
        "match_id": body["match_id"],
        "outcome": body["outcome"],
        "schema_version": 1,
        "side_a": {"players": [{"player_id": "alice", "stats": None}]},
        "side_b": {"players": [{"player_id": "bob", "stats": None}]},
    }
    match = parse_match_finished(body)
    text = json.dumps(expected, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert match.canonical_json() == text.encode()


def test_a_free_for_all_match_is_valid_and_canonical() -> None:
    body = without("outcome")
    del body["side_a"], body["side_b"]
    body["sides"] = [{"placement": p, **players(pid)} for p, pid in ((2, "b"), (1, "a"), (2, "c"))]
    match = parse_match_finished(body)
    assert [s.placement for s in match.sides] == [2, 1, 2]
    assert b'"side_a"' not in match.canonical_json() and b'"outcome"' not in match.canonical_json()


@pytest.mark.parametrize(
    ("changes", "reason_code"),
    [
        ({"home": "side_c"}, "schema_violation"),
        ({"score": {"side_a": -1, "side_b": 0}}, "schema_violation"),
        ({"season": ""}, "schema_violation"),
    ],
)
def test_bad_optional_context_is_refused(changes, reason_code) -> None:
    with pytest.raises(InvalidMessage) as info:
        parse_match_finished(message(**changes))
    assert info.value.reason_code == reason_code


def test_a_player_twice_across_free_for_all_sides_is_refused() -> None:
    body = without("outcome")
    del body["side_a"], body["side_b"]
    body["sides"] = [{"placement": 1, **players("a")}, {"placement": 2, **players("b")}, {"placement": 3, **players("a")}]
    with pytest.raises(InvalidMessage) as info:
        parse_match_finished(body)
    assert info.value.reason_code == "duplicate_player"


def test_only_a_correction_event_may_say_zero_games_played() -> None:
    """A correction after every match of the player was annulled says games_played 0 (back at the
    initial rating); a match or rebuild event with 0 games is still refused."""
    event = RatingChanged(**rating_changed(reason="correction", games_played=0, rating_after=1500.0, delta=0.0))
    assert event.games_played == 0
    for reason in ("match", "rebuild"):
        with pytest.raises(ValidationError, match="only a correction event"):
            RatingChanged(**rating_changed(reason=reason, games_played=0))


def test_a_players_weight_is_kept_in_the_canonical_form_and_bounded_to_the_unit_interval() -> None:
    """``weight`` (partial play) is optional: when given it is part of the canonical JSON (so of the
    payload hash); 0, above 1, a string or a boolean are schema violations naming the field."""
    body = message(side_a={"players": [{"player_id": "alice", "weight": 0.5}]},
                   side_b={"players": [{"player_id": "bob"}]})
    assert b'{"player_id":"alice","stats":null,"weight":0.5}' in parse_match_finished(body).canonical_json()
    for bad in (0, 1.5, "0.5", True, -0.1):
        body["side_a"]["players"][0]["weight"] = bad
        with pytest.raises(InvalidMessage) as caught:
            parse_match_finished(body)
        assert caught.value.reason_code == "schema_violation" and "weight" in str(caught.value)
