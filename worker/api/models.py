"""The read API's response and request shapes (pydantic; the OpenAPI document is generated from them).

Ratings are in rating points, scores in [0, 1], times ISO 8601 with an offset (UTC).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_BATCH = 1000
"""Most player ids one batch lookup takes."""

NO_NUL = r"^[^\x00]*$"
"""Ids are text without NUL (PostgreSQL's text cannot hold it; no id on record has one)."""


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Ladder(_Shape):
    """A ladder and the policy in force on it."""

    name: str
    model: str = Field(description="Rating model of the policy (elo, ...).")
    policy_version: str = Field(description="Content hash of the policy in force (`ratings policy show`).")
    generation: int = Field(description="History generation: 0 until the ladder's first rebuild.")
    apply_order: Literal["applied", "finished-at"] = Field(description="Replay order of the ladder's matches.")
    players: int


class Ladders(_Shape):
    """Every ladder with a policy in force."""

    ladders: list[Ladder]


class LastMatch(_Shape):
    """The player's last match in the ladder's history."""

    match_id: str
    finished_at: datetime


class PlayerState(_Shape):
    """One player's current state on a ladder."""

    player_id: str
    rating: float = Field(description="Rating points.")
    deviation: float | None = Field(
        description="Rating deviation as of now (grown since the last match, computed on read; Glicko-2's "
        "RD, Weng-Lin's sigma), for models with uncertainty; null for Elo.")
    volatility: float | None = Field(description="Glicko-2's volatility; null for other models.")
    conservative: float | None = Field(
        description="The conservative rating the leaderboard ranks by (rating - k x deviation as of now, "
        "k the policy's `conservative_k`), for models with uncertainty; null for Elo.")
    provisional: bool | None = Field(
        description="Whether the rating is still provisional (deviation as of now at or above the policy's "
        "`provisional_deviation`), for models with uncertainty; null for Elo.")
    rankable: bool | None = Field(
        description="Whether the player is ranked (deviation at or below `rankable_deviation` and not "
        "inactive), for models with uncertainty; null for Elo.")
    inactive: bool | None = Field(
        description="No match for longer than the policy's `inactive_days`, for models with uncertainty; "
        "null for Elo.")
    rank: int | None = Field(
        description="Elo: 1 + the number of players rated higher. Models with uncertainty: 1 + the number "
        "of rankable players with a higher conservative rating, null when the player is not rankable. "
        "Ties share a rank.")
    games: int
    wins: int
    draws: int
    losses: int
    peak_rating: float
    last_match: LastMatch | None = Field(description="null when every match of the player was annulled.")


class BatchRequest(_Shape):
    """Player ids to look up at once (a matchmaker's call)."""

    player_ids: list[Annotated[str, Field(pattern=NO_NUL)]] = Field(min_length=1, max_length=MAX_BATCH)


class BatchResponse(_Shape):
    """The states found, in the order asked, and the ids with no state on the ladder."""

    players: list[PlayerState]
    not_found: list[str]


class LeaderboardRow(_Shape):
    """A leaderboard row, as of the page's moment."""

    rank: int | None = Field(description="Ties share a rank; null for a player not rankable (models with "
                             "uncertainty: listed after the ranked players).")
    player_id: str
    rating: float
    games: int
    deviation: float | None = Field(description="Deviation grown to the page's moment; null for Elo.")
    conservative: float | None = Field(description="The conservative rating ranked by; null for Elo.")
    provisional: bool | None = Field(description="Provisional mark; null for Elo.")
    inactive: bool | None = Field(description="Inactive mark (unranked); null for Elo.")


class LeaderboardPage(_Shape):
    """One page of a ladder's leaderboard (highest rating first, ties by player id; on a ladder
    rated with uncertainty, the rankable players by conservative rating, then the others unranked,
    as ``ratings leaderboard``). Every page
    reached through ``next_cursor`` is read as of ``as_of``, the first page's moment: no player
    appears twice or goes missing across pages while ratings change."""

    ladder: str
    as_of: datetime
    rows: list[LeaderboardRow]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class HistoryEntry(_Shape):
    """One rated match of the player, in the ladder's current history."""

    sequence: int = Field(description="The player's n-th match.")
    match_id: str
    finished_at: datetime
    result: Literal["win", "draw", "loss"]
    rating_before: float
    rating_after: float
    delta: float
    expected_score: float
    actual_score: float
    k_factor: float
    deviation_before: float | None = Field(description="Deviation the match was rated from (grown to its "
                                           "time); null for Elo.")
    deviation_after: float | None = Field(description="Deviation after the match; null for Elo.")
    volatility_before: float | None = Field(description="Glicko-2's volatility before; null for other models.")
    volatility_after: float | None = Field(description="Glicko-2's volatility after; null for other models.")
    corrected_by: int | None = Field(
        description="Id of the correction that last rewrote this row (a late match before it, or an "
        "annulment); null when it is as first rated.")


class Correction(_Shape):
    """A correction that rewrote part of the player's history."""

    id: int
    kind: Literal["late", "annulment"]
    match_id: str = Field(description="The late match, or the first annulled one.")
    at: datetime
    rows: int = Field(description="Rows of the player's history it superseded.")
    annulled: list[str] | None = Field(description="Annulled match ids (annulment only).")
    reason: str | None
    annulled_by: str | None
    own_match: bool = Field(description="Whether one of the annulled matches was the player's own.")


class History(_Shape):
    """A player's rating history on a ladder, oldest first, with the corrections that rewrote it."""

    ladder: str
    player_id: str
    entries: list[HistoryEntry]
    corrections: list[Correction]


class RatingChange(_Shape):
    """One player's rating change by the match (current history)."""

    player_id: str
    result: Literal["win", "draw", "loss"]
    rating_before: float
    rating_after: float
    delta: float
    expected_score: float
    actual_score: float
    k_factor: float


class AnnulmentInfo(_Shape):
    """Why, by whom and when a match was annulled."""

    reason: str
    annulled_by: str
    annulled_at: datetime


class DeadLetterInfo(_Shape):
    """A dead letter of the match: not applied, with the reason code and detail."""

    id: int
    reason_code: str
    detail: str
    status: Literal["open", "requeued", "discarded"]
    received_at: datetime


class MatchStatus(_Shape):
    """What became of a match: ``applied`` (with its rating changes), ``annulled`` (applied, then
    voided), or ``dead_letter`` (never applied: see ``dead_letters``). Duplicate deliveries and
    dead letters (a conflicting duplicate of an applied match) are listed whatever the status."""

    match_id: str
    status: Literal["applied", "annulled", "dead_letter"]
    ladder: str | None
    finished_at: datetime | None
    applied_at: datetime | None
    policy_version: str | None
    placed_at_end: bool | None = Field(description="A late match applied at the end, past the correction bound.")
    redeliveries: int
    changes: list[RatingChange]
    annulment: AnnulmentInfo | None
    duplicate_deliveries: list[datetime]
    dead_letters: list[DeadLetterInfo]


MAX_SIDES = 16
MAX_SIDE_PLAYERS = 100


class PredictionRequest(_Shape):
    """A proposed match: its sides (each a list of player ids) and optionally its moment."""

    sides: list[Annotated[list[Annotated[str, Field(min_length=1, max_length=200, pattern=NO_NUL)]],
                          Field(min_length=1, max_length=MAX_SIDE_PLAYERS)]] = Field(
        min_length=2, max_length=MAX_SIDES,
                                   description="Each side's player ids (at least two sides, none empty, "
                                   "no player on two sides).")
    at: datetime | None = Field(default=None, description="The match's moment (ISO 8601 with an offset; "
                                "deviations grow to it); default now.")


class PredictionResponse(_Shape):
    """The forecast of a proposed match from the players' stored states."""

    ladder: str
    model: str
    at: datetime = Field(description="The moment deviations were grown to.")
    sides: list[list[str]]
    win_probabilities: list[float] = Field(
        description="Each side's probability of winning, in [0, 1], summing to 1 (more than two sides: its "
        "share of the expected pairwise wins).")
    draw_probability: float | None = Field(
        description="Probability of a draw; null when the model has none (Elo, Glicko-2).")
    quality: float = Field(description="Match quality in [0, 1]: higher for a closer and better-known match.")
    unknown_players: list[str] = Field(
        description="Players with no state on the ladder: each started from the policy's initial state.")


class Health(_Shape):
    """Whether the API can answer: ``database`` is ``ok`` or the error's class name."""

    status: Literal["ok", "unavailable"]
    database: str
