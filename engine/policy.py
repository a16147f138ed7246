"""A ladder's rating policy: everything :func:`engine.rating.rate` needs besides the match."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Protocol

from engine.k_factor import BandedK, ConstantK, KFactor
from engine.model import FreeForAll, Match, PlayerState, RatingChange
from engine.sedma import SedmaAdjustment

_EMPTY: Mapping[str, object] = MappingProxyType({})


class Rounding(str, Enum):
    """How a new rating is rounded after each update (before the floor is applied).

    Edge (so that every valid policy rates every valid match safely): rounding is monotone, so a
    winner's rating after is never below its rounded rating before and a loser's never above it. A
    rating that is not a whole number before the match (a non-integer initial rating or floor, or a
    season start after regression) can
    therefore move by up to 0.5 against the result once, when it is first rounded; ratings that
    are whole numbers (the Sedma seed's) never do.
    """

    NONE = "none"
    """Stored exactly (a double)."""
    HALF_EVEN = "half_even"
    """To an integer, half to even (C# ``Math.Round``, the Sedma seed)."""
    HALF_AWAY = "half_away"
    """To an integer, half away from zero (``MidpointRounding.AwayFromZero``; 1234.5 → 1235)."""


class TeamRating(str, Enum):
    """How a side of several players is reduced to one rating for the expected score."""

    MEAN = "mean"
    SUM = "sum"


MIN_DIVISOR_SHARE = 0.5
"""The margin-of-victory divisor X of a win never goes below this share of ``base``: the multiplier stays
positive and finite at any upset (``docs/decisions/0003-every-valid-policy-rates-every-valid-match.md``)."""


@dataclass(frozen=True, slots=True)
class MarginOfVictory:
    """FiveThirtyEight's NFL margin-of-victory multiplier of K (Silver, "Introducing NFL Elo
    Ratings", 2014; ``forecast.py`` of github.com/fivethirtyeight/nfl-elo-game):

    ``ln(max(|margin|, 1) + 1) × base / X``, with X = ``draw_divisor`` (1.0) for a draw and
    otherwise X = ``autocorrelation`` (0.001) × the winner's rating difference (home advantage
    included) + ``base`` (2.2), **floored at** :data:`MIN_DIVISOR_SHARE` × ``base``.

    Edge (decided so that every valid policy rates every valid match safely,
    ``docs/decisions/0003-every-valid-policy-rates-every-valid-match.md``; FiveThirtyEight's code has
    no floor): as written, X reaches 0 when
    the winner was the underdog by ``base / autocorrelation`` points (2,200 with FiveThirtyEight's
    values), so the multiplier grows without bound before that pole (a 21-20 upset by 2,199 points
    gave the winner +30,498), divides by zero at it, and turns negative beyond it (the winner
    loses, K < 0). The floor X ≥ base / 2 keeps the multiplier positive and finite, at most
    ``2 × ln(max(|margin|, 1) + 1)`` for a win: an upset by more than ``base / (2 ×
    autocorrelation)`` points (1,100 with FiveThirtyEight's values, 110 with autocorrelation 0.01)
    counts as an upset by exactly that much. FiveThirtyEight's published games never come near
    it: their smallest X is 1.738 (0.79 × base; New England lost at home to Miami on 2008-09-21,
    the winner 462 points below), so ``tests/data/nfl-elo`` is reproduced exactly.
    For a draw X = ``draw_divisor`` (> 0, validated), no floor. The multiplier is unitless, > 0
    and finite for finite inputs.
    """

    base: float = 2.2
    autocorrelation: float = 0.001
    draw_divisor: float = 1.0

    def multiplier(self, margin: float, winner_difference: float | None) -> float:
        """The multiplier (> 0, unitless) for a match won by ``margin`` points (``winner_difference``
        in rating points from the winner's side, or ``None`` for a draw)."""
        if winner_difference is None:
            divisor = self.draw_divisor
        else:
            divisor = winner_difference * self.autocorrelation + self.base
            floor = self.base * MIN_DIVISOR_SHARE
            if divisor < floor:
                divisor = floor
        return math.log(max(abs(margin), 1) + 1.0) * (self.base / divisor)


@dataclass(frozen=True, slots=True)
class SeasonRegression:
    """Regression toward ``mean`` when a player plays the first match of a new season.

    The player's rating becomes ``rating × (1 − weight) + weight × mean`` (FiveThirtyEight NFL:
    mean 1505, weight 1/3). ``overrides`` maps ``(player_id, season)`` to a rating set instead of
    the regression (operators' fixes; FiveThirtyEight's hand-set team-seasons). A player's first
    season is never regressed. :func:`engine.rate` raises the result to the policy's floor when it
    is below it, so a season start never goes below the floor.
    """

    mean: float
    weight: float
    overrides: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def start_of_season(self, player_id: str, season: str, rating: float) -> float:
        """The rating ``player_id`` starts ``season`` with, from ``rating`` at the end of the last."""
        fixed = self.overrides.get((player_id, season))
        if fixed is not None:
            return fixed
        return rating * (1 - self.weight) + self.weight * self.mean


@dataclass(frozen=True, slots=True)
class RatingPolicy:
    """Parameters of an Elo-family rating policy.

    * ``k_factor``: a K-factor policy (:mod:`engine.k_factor`), called with the player's rating,
      games played and peak rating before the match;
    * ``initial_rating``: rating of a player's first match (rating points); ``initial_ratings``
      overrides it per player id;
    * ``scale``: logistic scale in rating points (400);
    * ``rounding``: applied to each new rating; ``floor``: ratings never go below it, after an
      update or at a season start (the points it adds after an update are reported in
      :attr:`engine.model.RatingChange.floor_points`);
    * ``difference_cap``: the rating difference used for the expected score is clamped to
      ±cap (FIDE's 400-point rule), or ``None``;
    * ``home_advantage``: rating points added to the home side's rating for the expected score
      (the match says which side, if any, is at home);
    * ``margin_of_victory``: a K multiplier from the score margin, or ``None``;
    * ``season``: regression toward a mean at the start of a season, or ``None``;
    * ``performance``: the Sedma adjustment of the actual score, or ``None`` (win 1 / draw 0.5 /
      loss 0);
    * ``team_rating``: a side's rating is the mean or the sum of its players'; ``uneven_sides``:
      whether sides of different sizes are rated (otherwise :class:`engine.rating.UnratableMatch`);
    * ``free_for_all_divide``: in a match of more than two sides (rated pairwise), whether K is
      divided by the number of opponents' sides (n − 1), so that a player's change stays on the
      scale of one two-sided match;
    * ``version``: content hash of the configuration the policy was read from.
    """

    k_factor: KFactor
    initial_rating: float = 1200.0
    scale: float = 400.0
    rounding: Rounding = Rounding.NONE
    performance: SedmaAdjustment | None = None
    floor: float | None = None
    difference_cap: float | None = None
    home_advantage: float = 0.0
    margin_of_victory: MarginOfVictory | None = None
    season: SeasonRegression | None = None
    initial_ratings: Mapping[str, float] = field(default_factory=dict)
    team_rating: TeamRating = TeamRating.MEAN
    uneven_sides: bool = True
    free_for_all_divide: bool = True
    version: str = ""

    def round(self, rating: float) -> float:
        """``rating`` rounded as this policy says (still a ``float``)."""
        if self.rounding is Rounding.HALF_EVEN:
            return float(round(rating))
        if self.rounding is Rounding.HALF_AWAY:
            whole = math.floor(abs(rating))
            if abs(rating) - whole >= 0.5:
                whole += 1
            return math.copysign(float(whole), rating)
        return rating

    def initial_for(self, player_id: str) -> float:
        """The rating ``player_id`` starts with (rating points)."""
        return self.initial_ratings.get(player_id, self.initial_rating)

    is_basic: bool = field(init=False, repr=False, compare=False)
    """True when only K (by rating), scale, rounding, performance and the mean of a side are in
    play: the policies the fast paths of :func:`engine.rate` and :mod:`engine.fast_replay` handle."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_basic", self._basic())

    def _basic(self) -> bool:
        return (
            self.floor is None
            and self.difference_cap is None
            and self.home_advantage == 0.0
            and self.margin_of_victory is None
            and self.season is None
            and not self.initial_ratings
            and self.team_rating is TeamRating.MEAN
            and self.uneven_sides
            and isinstance(self.k_factor, (ConstantK, BandedK))
        )


class UncertaintyPolicy(Protocol):
    """A rating model with uncertainty (Glicko-2, Weng-Lin) as a ladder's policy.

    ``model`` names the model as the policy files do (e.g. ``"glicko2"``, ``"plackett_luce"``);
    ``version`` is the content hash of the configuration it was read from. :func:`engine.rating.rate`
    hands a match to :meth:`rate` with the :class:`engine.model.PlayerState` of every player it has
    (a player absent from ``states`` starts from :meth:`initial_state`); each returned
    :class:`engine.model.RatingChange` carries the deviation (and volatility) before and after.
    """

    # read-only members, so that the frozen dataclasses the models are satisfy the protocol
    @property
    def model(self) -> str: ...

    @property
    def version(self) -> str: ...

    def rate(self, match: Match | FreeForAll, states: Mapping[str, PlayerState]) -> tuple[RatingChange, ...]:
        """Rating changes of every player of ``match``, side by side, in match order."""
        ...

    def initial_state(self, player_id: str) -> PlayerState:
        """The state ``player_id`` starts from before its first match."""
        ...


AnyPolicy = RatingPolicy | UncertaintyPolicy
"""Any ladder policy: an Elo-family :class:`RatingPolicy` or a model with uncertainty."""
