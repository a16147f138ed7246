"""The inbound contract: one ``match-finished`` message, schema version 1.

A game server publishes one message per finished match. The worker calls
:func:`parse_match_finished` on whatever the broker hands it (raw bytes, text, or the dict Celery
decoded) and gets either a valid, frozen :class:`MatchFinished` or an :class:`InvalidMessage` with a
stable ``reason_code`` for the dead-letter row.

Standard library and pydantic only (see the import contract in pyproject.toml).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ._types import ID_RULES, Id, LadderName

__all__ = [
    "MAX_MESSAGE_BYTES",
    "REASON_CODES",
    "InvalidMessage",
    "MatchFinished",
    "PlayerResult",
    "SedmaStats",
    "Side",
    "parse_match_finished",
]

MAX_MESSAGE_BYTES = 64 * 1024
"""Largest accepted message, in bytes of UTF-8 JSON text."""

MAX_PLAYERS_PER_SIDE = 8
MAX_SIDES = 16
MAX_STAT_COUNT = 1000
EARLIEST_FINISHED_AT = datetime(1800, 1, 1, tzinfo=UTC)
MAX_CLOCK_SKEW = timedelta(days=1)
"""How far after the receiving worker's clock (UTC) finished_at may lie."""
SEASON_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$"
"""A season name: a letter or digit, then letters, digits and ``_ . : / -`` (at most 32 characters)."""

_CONFIG = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------------------------
# The models
# --------------------------------------------------------------------------------------------

def _integral_number(value: Any) -> Any:
    """A JSON number with no fractional part (``2.0``) is the integer it equals: JSON Schema's
    ``integer`` type accepts it (2020-12, section 6.1.1), so the contract does too."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


StatCount = Annotated[
    int,
    Field(
        default=0,
        strict=True,
        ge=0,
        le=MAX_STAT_COUNT,
        description="A count of rounds or moves in this match: a JSON integer from 0 to 1000.",
    ),
    BeforeValidator(_integral_number),
]


class SedmaStats(BaseModel):
    """Per-player performance counts for one Sedma match (used to adjust the actual score).

    Every field is a count in this match: a JSON integer (not a boolean, float or string) from 0
    to 1000 inclusive; an omitted count is 0.
    """

    model_config = _CONFIG

    bad_moves: StatCount = Field(description="Moves the game judged as mistakes (count, 0..1000).")
    won_by_16: StatCount = Field(description="Rounds this player won by 16 points (count, 0..1000).")
    won_by_24: StatCount = Field(description="Rounds this player won by 24 points (count, 0..1000).")
    won_by_4_and_last: StatCount = Field(
        description="Rounds won with the 4 and the last trick (count, 0..1000)."
    )


class PlayerResult(BaseModel):
    """One player in one side of a match: ``{"player_id": str, "stats": SedmaStats | null}``.

    ``player_id`` is an opaque id (1 to 128 characters, no control or invisible characters; spaces,
    apostrophes and accents are fine). ``stats`` is present for games that report performance
    (Sedma) and null or omitted otherwise. ``weight`` (optional, in (0, 1], default 1) is the share of
    the match the player took part in; left out of the canonical JSON when absent.
    """

    model_config = _CONFIG

    player_id: Id
    stats: SedmaStats | None = Field(
        default=None,
        description="Performance counts for rating adjustments; null or omitted when the game reports none.",
    )
    weight: float | None = Field(
        default=None,
        strict=True,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="Share of the match this player took part in, in (0, 1] (partial play); null or omitted "
        "means 1. Models with uncertainty scale the player's update by it; Elo policies ignore it.",
    )


class Side(BaseModel):
    """One side (team) of a match: ``{"players": [PlayerResult, ...]}`` with 1 to 8 players.

    A one-player side is a 1v1 match; the sides need not have the same size.
    """

    model_config = _CONFIG

    players: list[PlayerResult] = Field(
        min_length=1,
        max_length=MAX_PLAYERS_PER_SIDE,
        description="The players of this side: 1 to 8 entries, each player at most once in the match.",
    )


class PlacedSide(Side):
    """One side of a match of three or more sides: its players and its ``placement``.

    ``placement`` is the side's rank, 1 = best; sides with the same placement drew with each other.
    """

    placement: Annotated[int, BeforeValidator(_integral_number)] = Field(
        strict=True, ge=1, le=MAX_SIDES, description="Rank of this side, 1 = best (1..16); equal ranks drew.")


class Score(BaseModel):
    """Points scored by each side (goals, points...), for margin-of-victory policies."""

    model_config = _CONFIG

    side_a: float = Field(strict=True, ge=0, le=1e6, allow_inf_nan=False, description="Points of side A (>= 0).")
    side_b: float = Field(strict=True, ge=0, le=1e6, allow_inf_nan=False, description="Points of side B (>= 0).")


OPTIONAL_CONTEXT = ("home", "score", "season", "sides", "side_a", "side_b", "outcome")
"""Fields left out of the canonical JSON when null, so that v1 messages without them keep the
canonical form (and payload hash) they had before these fields existed."""


def _sides_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The sides of a dumped match (``side_a`` and ``side_b``, or ``sides``), as dicts."""
    return [side for side in (data.get("side_a"), data.get("side_b"), *(data.get("sides") or ())) if side]


def _schema_version_is_an_int(value: Any) -> Any:
    # Literal[1] on its own would accept True (it compares equal to 1); 1.0 is the JSON number 1.
    value = _integral_number(value)
    if type(value) is not int:
        raise PydanticCustomError("literal_error", "Input should be 1")
    return value


DATE_TIME_PATTERN = (
    r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    r"(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
)
"""``finished_at``: an RFC 3339 date-time (section 5.6) with a UTC offset, leap second excluded;
the calendar (no 30 February) is the ``date-time`` format's part."""

_DATE_TIME = re.compile(DATE_TIME_PATTERN.replace("$", r"\Z"))

SEMANTIC_CHECKS = (
    "Checked by the worker beyond this schema (JSON Schema cannot state them): "
    "(1) a player appears at most once in a match, on one side (duplicate_player); "
    "(2) finished_at lies between 1800-01-01T00:00:00Z and one day after the receiving worker's clock "
    "(timestamp_out_of_range); "
    "(3) ids hold no invisible format character outside the Basic Multilingual Plane, e.g. U+E0001 "
    "(invalid_id); "
    "(4) the message is at most 65536 bytes of UTF-8 JSON text with no key repeated in an object "
    "(too_large, schema_violation). "
    "The date-time format of finished_at is asserted (RFC 3339: a real calendar date). A number with "
    "no fractional part (2.0) is an integer, as in JSON Schema. A pattern's $ is the end of the text "
    "(ECMA-262)."
)
"""The checks of :func:`parse_match_finished` that the JSON Schema does not express; appended to
the schema's description, and the ones the differential test excludes from its comparison."""

_FORMS = {
    "anyOf": [
        {
            "title": "two sides",
            "required": ["side_a", "side_b", "outcome"],
            "properties": {"side_a": {"not": {"type": "null"}}, "side_b": {"not": {"type": "null"}},
                           "outcome": {"not": {"type": "null"}}, "sides": {"type": "null"}},
        },
        {
            "title": "three or more sides",
            "required": ["sides"],
            "properties": {"sides": {"not": {"type": "null"}}, "side_a": {"type": "null"},
                           "side_b": {"type": "null"}, "outcome": {"type": "null"}, "home": {"type": "null"},
                           "score": {"type": "null"}},
        },
    ]
}


def _contract_schema(schema: dict[str, Any]) -> None:
    """Add what the model's validators check to the generated JSON Schema: the two forms of a
    match, and the list of semantic checks in the description."""
    schema.update(_FORMS)
    schema["description"] = schema.get("description", "").rstrip() + "\n\n" + SEMANTIC_CHECKS


class MatchFinished(BaseModel):
    """A finished match, as published by a game server (schema version 1).

    Shape:

        {"schema_version": 1, "match_id": str, "ladder": str,
         "finished_at": "2024-05-01T18:30:00Z",
         "side_a": {"players": [{"player_id": str, "stats": {...} | null}, ...]},
         "side_b": {"players": [...]},
         "outcome": "side_a_won" | "side_b_won" | "draw",
         "home": "side_a" | "side_b",                 # optional: home advantage
         "score": {"side_a": 3, "side_b": 1},        # optional: margin of victory
         "season": "2024"}                           # optional: season regression

    A match of three or more sides (free-for-all) sends ``"sides": [{"players": [...],
    "placement": 1}, ...]`` (3 to 16 sides, placement 1 = best, equal placements drew) instead of
    ``side_a``, ``side_b``, ``outcome``, ``home`` and ``score``.

    Constraints: no other keys; ids are 1 to 128 characters without control or invisible
    characters; the ladder name matches ``^[a-z0-9][a-z0-9_.-]*$`` (1 to 64 characters);
    ``finished_at`` is an ISO 8601 date-time with a UTC offset, on or after 1800-01-01 and at most one
    day after the receiving worker's clock; each side holds 1 to 8 players and no player appears twice
    in the match, on the same side or across sides.

    ``match_id`` is the idempotency key: re-sending a match must send the same content. Two messages
    have the same content when their canonical JSON (``MatchFinished.canonical_json``: sorted keys,
    no spaces, UTF-8, all defaults filled in, ``finished_at`` in UTC) is byte for byte equal; key
    order, whitespace and the UTC offset used do not matter. ``finished_at`` is stored in UTC.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_contract_schema)

    schema_version: Annotated[Literal[1], BeforeValidator(_schema_version_is_an_int)] = Field(
        description="Contract version; this document describes version 1."
    )
    match_id: Id = Field(
        description="Unique id of the match, chosen by the game server; the idempotency key. " + ID_RULES
    )
    ladder: LadderName
    finished_at: AwareDatetime = Field(
        json_schema_extra={"pattern": DATE_TIME_PATTERN},
        description=(
            "When the match ended: an ISO 8601 / RFC 3339 date-time with a UTC offset, e.g. "
            "\"2024-05-01T18:30:00Z\" or \"2024-05-01T20:30:00+02:00\"; on or after 1800-01-01 and at "
            "most one day in the future."
        )
    )
    side_a: Side | None = Field(default=None, description="First side (two-sided match).")
    side_b: Side | None = Field(default=None, description="Second side (two-sided match).")
    outcome: Literal["side_a_won", "side_b_won", "draw"] | None = Field(
        default=None, description="Which side won, or a draw (two-sided match)."
    )
    sides: list[PlacedSide] | None = Field(
        default=None,
        min_length=3,
        max_length=MAX_SIDES,
        description=(
            "Instead of side_a, side_b and outcome: the 3 to 16 sides of a free-for-all match, each "
            "with its placement (rated pairwise)."
        ),
    )
    home: Literal["side_a", "side_b"] | None = Field(
        default=None, description="The side playing at home (home advantage), or omitted on neutral ground."
    )
    score: Score | None = Field(default=None, description="Points scored by each side (margin of victory); optional.")
    season: Annotated[str, Field(min_length=1, max_length=32, pattern=SEASON_PATTERN)] | None = Field(
        default=None,
        description=(
            "The season the match belongs to (e.g. \"2024\" or \"2024-spring\"), for season regression; optional."
        ),
    )

    @field_validator("finished_at", mode="before")
    @classmethod
    def _finished_at_is_a_date_time_string(cls, value: Any) -> Any:
        # pydantic alone would also take numbers and digit strings as Unix times, and a bare date.
        if isinstance(value, datetime):
            return value
        if isinstance(value, str):
            if _DATE_TIME.match(value):
                return value
            if re.match(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?\Z", value):
                raise PydanticCustomError("timezone_aware", "Input should have timezone info")
            raise PydanticCustomError(
                "timestamp_format",
                "Input should be an RFC 3339 date-time like 2024-05-01T18:30:00Z",
            )
        if isinstance(value, date):
            kind = "a date without a time"
        else:
            kind = type(value).__name__
        raise PydanticCustomError(
            "timestamp_type",
            "Input should be a date-time string like 2024-05-01T18:30:00Z, not {kind}",
            {"kind": kind},
        )

    @field_validator("finished_at")
    @classmethod
    def _finished_at_in_range_as_utc(cls, value: datetime) -> datetime:
        latest = datetime.now(UTC) + MAX_CLOCK_SKEW
        if value < EARLIEST_FINISHED_AT or value > latest:
            raise PydanticCustomError(
                "timestamp_out_of_range",
                "Date-time should be between 1800-01-01T00:00:00Z and {latest} (one day after now, UTC)",
                {"latest": latest.replace(microsecond=0).isoformat().replace("+00:00", "Z")},
            )
        return value.astimezone(UTC)  # safe: the range check keeps it far from year 1 and 9999

    @model_validator(mode="after")
    def _one_form(self) -> MatchFinished:
        two_sided = [name for name in ("side_a", "side_b", "outcome") if getattr(self, name) is not None]
        if self.sides is not None:
            if two_sided or self.home is not None or self.score is not None:
                raise PydanticCustomError(
                    "two_forms",
                    "A free-for-all match (sides) has no side_a, side_b, outcome, home or score; got {fields}",
                    {"fields": ", ".join(two_sided + [n for n in ("home", "score") if getattr(self, n) is not None])},
                )
        elif len(two_sided) != 3:
            missing = [name for name in ("side_a", "side_b", "outcome") if getattr(self, name) is None]
            raise PydanticCustomError(
                "missing",
                "Field required: {fields} (or `sides` with placements for a match of three or more sides)",
                {"fields": ", ".join(missing)},
            )
        return self

    def all_sides(self) -> list[tuple[str, Side]]:
        """``(name, side)`` of every side: ``side_a``/``side_b``, or ``sides[i]``."""
        if self.sides is not None:
            return [(f"sides[{i}]", side) for i, side in enumerate(self.sides)]
        return [("side_a", self.side_a), ("side_b", self.side_b)]  # type: ignore[list-item]

    @model_validator(mode="after")
    def _no_player_twice(self) -> MatchFinished:
        seen: dict[str, str] = {}
        for side_name, side in self.all_sides():
            for index, player in enumerate(side.players):
                where = f"{side_name}.players[{index}]"
                first = seen.setdefault(player.player_id, where)
                if first != where:
                    raise PydanticCustomError(
                        "duplicate_player",
                        "Player {player_id} appears more than once in the match: at {first} and at {second}",
                        {
                            "player_id": json.dumps(player.player_id, ensure_ascii=False),
                            "first": first,
                            "second": where,
                        },
                    )
        return self

    def canonical_json(self) -> bytes:
        """The match as deterministic UTF-8 JSON bytes: the idempotency payload.

        ``json.dumps(model_dump(mode="json"), sort_keys=True, separators=(",", ":"),
        ensure_ascii=False)`` encoded as UTF-8, with every field present (omitted stats counts as 0,
        omitted ``stats`` as null) and ``finished_at`` in UTC with a ``Z`` suffix. Key order,
        whitespace and the sender's UTC offset therefore do not change it; any field value does.
        This form is part of the v1 contract: changing it (or adding a defaulted field) changes the
        hash of messages already in the ledger, so it needs a new schema version.
        """
        return self.canonical()[1]

    def canonical(self) -> tuple[dict[str, Any], bytes]:
        """The match's canonical JSON object and its text: ``(data, canonical_json())``, where
        ``data == json.loads(canonical_json())`` (a fresh dict of JSON types, which the caller may
        keep; the rating path stores it as the ledger payload without parsing the text again)."""
        model = self
        if self.finished_at.tzinfo is not UTC:
            # Validation already converts to UTC; this covers instances made with model_construct.
            model = self.model_copy(update={"finished_at": self.finished_at.astimezone(UTC)})
        data = model.model_dump(mode="json")
        for name in OPTIONAL_CONTEXT:
            if data.get(name) is None:
                data.pop(name, None)
        for side in _sides_of(data):
            for player in side["players"]:
                if player.get("weight") is None:
                    player.pop("weight", None)
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return data, text.encode("utf-8")

    def payload_hash(self) -> str:
        """Hex SHA-256 of :meth:`canonical_json` (64 lowercase hex characters)."""
        return hashlib.sha256(self.canonical_json()).hexdigest()


# Parsing with reason codes lives in schemas/parsing.py; re-exported here for existing imports.
from .parsing import REASON_CODES, InvalidMessage, parse_match_finished  # noqa: E402
