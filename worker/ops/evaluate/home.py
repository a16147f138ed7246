"""``ratings evaluate --models``: a home advantage for the models with uncertainty.

Both shipped data sets have one (the home side wins about 57 % of decided NFL games), and Elo's
policies model it as rating points added to the home side; the Glicko-2 and Weng-Lin policies
have no such parameter. To compare the models on equal terms the evaluation gives them the same
one: :class:`HomeAdvantage` raises the home side's ratings (Glicko-2 rating, Weng-Lin mu) by
``points`` for the match, in the prediction and in the update, and takes them off again after, as
Elo's ``home_advantage`` does and as liglicko2's ``first_advantage`` does for the first mover.
Models without it are scored too (``points`` = 0 is in every search), and the table says which.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from engine.model import FreeForAll, Match, PlayerState, RatingChange
from engine.policy import UncertaintyPolicy


@dataclass(frozen=True)
class HomeAdvantage:
    """``inner`` with the home side's ratings raised by ``points`` (the model's rating unit) for
    each match that has a home side (:attr:`engine.model.Match.home`); a neutral match, and any
    match when ``points`` is 0, is rated by ``inner`` unchanged. The rating changes report ratings
    without the advantage, so the stored states are the players' own."""

    inner: UncertaintyPolicy
    points: float
    model: str = field(init=False)
    """The inner model's name."""
    version: str = field(init=False)
    """The inner policy's version."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", self.inner.model)
        object.__setattr__(self, "version", self.inner.version)

    def initial_state(self, player_id: str) -> PlayerState:
        """The inner policy's initial state."""
        return self.inner.initial_state(player_id)

    def home_players(self, match: Match | FreeForAll) -> frozenset[str]:
        """Ids of the players whose ratings are raised in ``match`` (none when neutral or 0 points)."""
        if not self.points or match.home is None or not isinstance(match, Match):
            return frozenset()
        side = match.side_a if match.home == "side_a" else match.side_b
        return frozenset(p.player_id for p in side)

    def raised(self, state: PlayerState) -> PlayerState:
        """``state`` with its rating raised by :attr:`points`."""
        return dataclasses.replace(state, rating=state.rating + self.points)

    def rate(self, match: Match | FreeForAll, states: Mapping[str, PlayerState]) -> tuple[RatingChange, ...]:
        """The inner policy's changes with the home players' ratings raised before and lowered after."""
        home = self.home_players(match)
        if not home:
            return self.inner.rate(match, states)
        shifted = dict(states)
        for pid in home:
            shifted[pid] = self.raised(states[pid] if pid in states else self.inner.initial_state(pid))
        changes = self.inner.rate(match, shifted)
        return tuple(
            c._replace(rating_before=c.rating_before - self.points, rating_after=c.rating_after - self.points)
            if c.player_id in home else c
            for c in changes
        )

    def predict(self, sides: Sequence[Sequence[PlayerState]], at: float | None = None):
        """The inner policy's prediction for ``sides`` as given (raise the home side's states with
        :meth:`raised` first: a proposed match does not say which side is at home)."""
        return self.inner.predict(sides, at)  # type: ignore[attr-defined]
