"""The read API's response and request shapes (pydantic; the OpenAPI document is generated from them).

Ratings are in rating points, scores in [0, 1], times ISO 8601 with an offset (UTC).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_BATCH = 1000
"""Most player ids one batch lookup takes."""


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
        description="Rating deviation as of now, for models with uncertainty; null for Elo.")
    provisional: bool | None = Field(
        description="Whether the rating is still provisional, for models that say so; null for Elo.")
    rank: int = Field(description="1 + the number of players rated higher (ties share a rank).")
    games: int
    wins: int
    draws: int
    losses: int
    peak_rating: float
    last_match: LastMatch | None = Field(description="null when every match of the player was annulled.")


class BatchRequest(_Shape):
    """Player ids to look up at once (a matchmaker's call)."""

    player_ids: list[str] = Field(min_length=1, max_length=MAX_BATCH)


class BatchResponse(_Shape):
    """The states found, in the order asked, and the ids with no state on the ladder."""

    players: list[PlayerState]
    not_found: list[str]


class LeaderboardRow(_Shape):
    """A leaderboard row, as of the page's moment."""

    rank: int
    player_id: str
    rating: float
    games: int


class LeaderboardPage(_Shape):
    """One page of a ladder's leaderboard (highest rating first, ties by player id). Every page
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


class Health(_Shape):
    """Whether the API can answer: ``database`` is ``ok`` or the error's class name."""

    status: Literal["ok", "unavailable"]
    database: str
