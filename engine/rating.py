"""The general entry point: rate one finished match under a policy."""

from __future__ import annotations

from collections.abc import Mapping

from engine.elo import DRAW, LOSS, WIN, expected_score, update
from engine.model import Match, Outcome, PlayerState, RatingChange
from engine.policy import RatingPolicy
from engine.teams import side_rating

BASE_SCORES = {
    # Actual scores (side A, side B) before any performance adjustment: win 1, draw 0.5, loss 0.
    Outcome.SIDE_A_WON: (WIN, LOSS),
    Outcome.SIDE_B_WON: (LOSS, WIN),
    Outcome.DRAW: (DRAW, DRAW),
}
_RESULT = {WIN: "win", DRAW: "draw", LOSS: "loss"}


def _rating(state: float | PlayerState | None, policy: RatingPolicy) -> float:
    if state is None:
        return policy.initial_rating
    if isinstance(state, PlayerState):
        return state.rating
    return state


def rate(match: Match, ratings: Mapping[str, float | PlayerState], policy: RatingPolicy) -> tuple[RatingChange, ...]:
    """Rating changes of every player of ``match``, side A's players first, in match order.

    ``ratings`` maps player id to current rating (rating points) or to a
    :class:`engine.model.PlayerState` (rating, games played, peak, season); a player absent from it
    starts at ``policy.initial_rating``. For each player:

    * expected score E = 1 / (1 + 10^((R_opp_side − R_own_side) / scale)), where a side's rating
      is the mean of its players' ratings (:func:`engine.teams.side_rating`);
    * actual score S = 1 / 0.5 / 0 for a win / draw / loss, then adjusted by the player's own
      Sedma performance when the policy has one (:class:`engine.sedma.SedmaAdjustment`);
    * K from the player's own rating before the match; new rating = round(R + K · (S − E)).

    For a 1v1 Sedma match this is exactly the seed's ``CalculateNewRatings``. Raises
    ``ValueError`` if a side is empty.
    """
    before_a = [_rating(ratings.get(p.player_id), policy) for p in match.side_a]
    before_b = [_rating(ratings.get(p.player_id), policy) for p in match.side_b]
    side_a, side_b = side_rating(before_a), side_rating(before_b)
    expected_a = expected_score(side_a, side_b, policy.scale)
    expected_b = expected_score(side_b, side_a, policy.scale)
    base_a, base_b = BASE_SCORES[match.outcome]
    adjustment = policy.performance
    changes: list[RatingChange] = []
    for players, befores, expected, base in (
        (match.side_a, before_a, expected_a, base_a),
        (match.side_b, before_b, expected_b, base_b),
    ):
        for participant, before in zip(players, befores):
            k = policy.k_factor(before)
            actual = base if adjustment is None else adjustment.adjusted_score(base, participant.performance)
            after = policy.round(update(before, k, actual, expected))
            changes.append(
                RatingChange(
                    player_id=participant.player_id,
                    rating_before=before,
                    rating_after=after,
                    expected_score=expected,
                    actual_score=actual,
                    k_factor=k,
                    result=_RESULT[base],
                )
            )
    return tuple(changes)
