"""The outbound contract: one ``rating-changed`` event per player per applied match, version 1.

Standard library and pydantic only (see the import contract in pyproject.toml).
"""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from ._types import Id, LadderName

__all__ = ["RatingChanged"]

Rating = Annotated[float, Field(allow_inf_nan=False)]
Score = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Deviation = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


class RatingChanged(BaseModel):
    """One player's rating change on one ladder, caused by one match (or a ladder rebuild).

    Units: ``rating_before``, ``rating_after``, ``delta`` and ``k_factor`` are rating points
    (Elo scale; ``delta = rating_after - rating_before``, after the ladder policy's rounding).
    ``expected_score`` and ``actual_score`` are scores from 0 (loss) to 1 (win), 0.5 a draw;
    ``actual_score`` is the score after the performance adjustment (Sedma stats), which is what the
    update used.

    Delivery is at least once. Consumers:

    - drop duplicates by ``event_id`` (the same event may arrive more than once, always with the
      same ``event_id`` and content);
    - detect gaps by ``sequence``: per (``ladder``, ``player_id``) it starts at 1 and grows by
      exactly 1 for each event of that player on that ladder (each match applied to them, and each
      rebuild or correction that changed their rating), so after sequence n the next event for the pair is
      n + 1; a jump means events were missed (re-read them from the stream or ask the service), a
      smaller or equal number is a duplicate or a late copy.

    ``out_of_order`` is true when the match arrived after a later match (in the ladder's replay
    order) of one of its players had been applied: on a chronological ladder it was placed in its
    position and a ``correction`` event follows for each player whose rating that changed.

    ``reason`` is ``"rebuild"`` for an event emitted by a ladder recomputation
    (``ratings rebuild``, e.g. after a policy change): one per player whose rating the rebuild
    changed. It sets the player's rating to ``rating_after``; ``rating_before`` is the rating before
    the rebuild and ``delta`` the difference; ``match_id``, ``expected_score``, ``actual_score`` and
    ``k_factor`` are those of the player's last match in the recomputed history (after which the
    new rating holds); ``games_played`` is unchanged; ``out_of_order`` is false.

    ``reason`` is ``"correction"`` when a late match (or an annulment) re-rated the matches that
    followed it: one per player whose stored rating changed, after the late match's own events in
    the same transaction. It sets the player's rating to ``rating_after`` (the stored rating);
    ``rating_before`` is the rating the player's previous event announced; ``match_id``,
    ``expected_score``, ``actual_score`` and ``k_factor`` are those of the player's last re-rated
    match; ``games_played`` is the player's matches now (0 when every one was annulled: then
    ``rating_after`` is the initial rating, ``match_id`` the earliest annulled match, both scores
    0.5 and the K-factor 0); ``out_of_order`` is false. A consumer that keeps only the last
    event per player holds the stored rating.

    On a ladder rated by a model with uncertainty (Glicko-2, Weng-Lin) an event also carries
    ``deviation_before``/``deviation_after`` (rating points; Weng-Lin's sigma) and, for Glicko-2,
    ``volatility_before``/``volatility_after``; ``expected_score`` is then the model's expectation.
    These fields are absent (not null) on Elo ladders, so an Elo event is exactly what it was
    before they existed and validates against the earlier schema. A ``correction`` or ``rebuild``
    event carries only the after fields (the player's stored state now).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = Field(default=1, description="Contract version of this event.")
    event_id: UUID = Field(description="Unique id of this event; the key for dropping duplicates.")
    reason: Literal["match", "rebuild", "correction"] = Field(
        default="match",
        description='"match": applying one match; "rebuild": recomputing the ladder from its ledger; '
        '"correction": re-rating the matches after a late (or annulled) match.',
    )
    match_id: Id = Field(
        description="The match that caused the change (its match-finished match_id); for a rebuild, "
        "the player's last match in the recomputed history."
    )
    ladder: LadderName
    player_id: Id = Field(description="The player whose rating changed.")
    rating_before: Rating = Field(
        description="Rating before this match (for a rebuild: before the rebuild), in rating points."
    )
    rating_after: Rating = Field(
        description="Rating after this match (for a rebuild: the recomputed rating), in rating points."
    )
    delta: Rating = Field(description="rating_after - rating_before, in rating points.")
    expected_score: Score = Field(
        description="Expected score against the opponents before the match, 0..1 (Elo expectation)."
    )
    actual_score: Score = Field(
        description="Score used for the update, 0..1: 1 win, 0.5 draw, 0 loss, after the performance adjustment."
    )
    k_factor: Rating = Field(
        description="K-factor the policy applied, in rating points per unit of score: at least 0 on Elo "
        "ladders. On a ladder with uncertainty it is the step the model took, (rating_after - rating_before) / "
        "(actual_score - expected_score), which may be below 0 in a free-for-all where the model's update and "
        "the mean pairwise score disagree."
    )
    sequence: int = Field(
        ge=1,
        description=(
            "Per (ladder, player_id): 1 for the first event, +1 for each further one (an applied "
            "match, or a rebuild or correction that changed the rating). A gap means missed events; "
            "a repeat is a duplicate."
        ),
    )
    games_played: int = Field(
        ge=0, description="Matches this player has had applied on this ladder, including this one; "
        "0 only in a correction event after every match of the player on the ladder was annulled."
    )
    out_of_order: bool = Field(
        default=False,
        description="True when the match finished before an already applied match of one of its players.",
    )
    occurred_at: AwareDatetime = Field(
        description="When the change was applied (RFC 3339 date-time with offset), not when the match ended."
    )
    deviation_before: Deviation | None = Field(
        default=None,
        description="Ladders of a model with uncertainty (Glicko-2: RD; Weng-Lin: sigma), in rating points: the "
        "deviation the match was rated from, grown for the time since the player's previous match. Absent on "
        "Elo ladders and in correction and rebuild events.",
    )
    deviation_after: Deviation | None = Field(
        default=None,
        description="Ladders of a model with uncertainty: the deviation after the match (in a correction or "
        "rebuild event, the player's stored deviation now), in rating points. Absent on Elo ladders.",
    )
    volatility_before: Deviation | None = Field(
        default=None,
        description="Glicko-2 ladders: the volatility (sigma on the Glicko-2 scale) before the match. Absent "
        "otherwise and in correction and rebuild events.",
    )
    volatility_after: Deviation | None = Field(
        default=None,
        description="Glicko-2 ladders: the volatility after the match (in a correction or rebuild event, the "
        "stored one now). Absent otherwise.",
    )

    @model_validator(mode="after")
    def _k_factor_of_elo_at_least_zero(self) -> RatingChanged:
        """An Elo event (no deviation) has a K-factor of at least 0, as before the models with uncertainty."""
        if self.k_factor < 0 and self.deviation_after is None:
            raise ValueError(f"k_factor is {self.k_factor!r}: an Elo event's K-factor is at least 0 (only a model "
                             "with uncertainty, whose events carry deviation_after, may take a negative step)")
        return self

    @model_validator(mode="after")
    def _no_games_only_after_an_annulment(self) -> RatingChanged:
        """``games_played`` 0 is a ``correction`` event's only (every match of the player annulled)."""
        if self.games_played == 0 and self.reason != "correction":
            raise ValueError(f"games_played is 0 in a {self.reason!r} event: only a correction event (every match "
                             "of the player annulled) may say 0")
        return self
