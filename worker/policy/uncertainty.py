"""Policy files of the rating models with uncertainty: ``model = "glicko2"`` and the Weng-Lin models.

A policy file (or a ladder's inline table) without ``model``, or with ``model = "elo"``, is an Elo
policy (:class:`worker.policy.config.PolicyConfig`; ``model = "elo"`` is dropped before it is
validated, so writing it leaves the version unchanged). Any other ``model`` is read here, validated
as strictly (unknown keys and values out of range name the file, line and key), hashed the same
way (12 hex digits of SHA-256 over the sorted canonical JSON, ``model`` included, ``description``
left out) and built into the engine's policy:

.. code-block:: toml

    model = "glicko2"
    initial_rating = 1500          # rating points (Glicko scale)
    initial_deviation = 500        # RD of a new player, rating points
    initial_volatility = 0.09
    tau = 0.75                     # the system constant
    periods_per_day = 0.21436      # rating periods per day of inactivity (deviation growth)
    min_deviation = 45
    max_deviation = 500
    max_volatility = 0.1
    max_rating_change = 700        # rating points per match
    provisional_deviation = 110    # provisional at or above (leaderboard mark)
    rankable_deviation = 75        # rankable at or below (leaderboard mark)
    conservative_k = 2             # leaderboards rank by rating - k x deviation
    inactive_days = 365            # optional: unranked after this many days without a match

.. code-block:: toml

    model = "plackett_luce"        # or "bradley_terry_full", "thurstone_mosteller_full"
    mu = 25.0                      # rating (mu) of a new player
    sigma = 8.333333333333334      # deviation (sigma) of a new player
    beta = 4.166666666666667
    kappa = 0.0001
    tau = 0.08333333333333333      # additive dynamics per match
    tau_per_day = 0.0              # sigma growth per day of inactivity (0: off, as openskill)
    limit_sigma = false
    epsilon = 0.1                  # Thurstone-Mosteller draw margin
    conservative_k = 3             # leaderboards rank by mu - k x sigma
    provisional_deviation = 6.0    # optional leaderboard marks, sigma thresholds
    rankable_deviation = 4.0
    inactive_days = 365            # optional

The defaults are the engine's (lichess's for Glicko-2, openskill's for Weng-Lin;
:class:`engine.glicko2.Glicko2Policy`, :class:`engine.weng_lin.WengLinPolicy`). ``inactive_days``,
``provisional_deviation`` and ``rankable_deviation`` are read by leaderboards
(:class:`LeaderboardRules`), never by the rating.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.glicko2 import Glicko2Policy
from engine.model import PlayerState
from engine.policy import AnyPolicy, RatingPolicy
from engine.weng_lin import MODELS as WENG_LIN_MODELS
from engine.weng_lin import WengLinPolicy

ELO = "elo"
MODELS = (ELO, "glicko2", *WENG_LIN_MODELS)
"""Every value ``model`` may take in a policy file."""

RATING_LIMIT = 1e9
"""As :data:`worker.policy.config.RATING_LIMIT`: ratings and deviations stay within ±10^9 points."""

_STRICT = ConfigDict(extra="forbid")
Rating = Annotated[float, Field(ge=-RATING_LIMIT, le=RATING_LIMIT, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, le=RATING_LIMIT, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, le=RATING_LIMIT, allow_inf_nan=False)]
Days = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]

SECONDS_PER_DAY = 86_400.0


def _version(canonical: dict[str, Any]) -> str:
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class _ModelConfig(BaseModel):
    """What every model with uncertainty's file shares: ``description``, the leaderboard's
    ``inactive_days``, and the canonical content, version and build."""

    model_config = _STRICT
    description: str = ""
    inactive_days: Days | None = None

    def canonical(self) -> dict[str, Any]:
        """The rating-relevant content: every key with defaults filled in, without ``description``."""
        return self.model_dump(mode="json", exclude={"description"})

    def version(self) -> str:
        """Content hash: first 12 hex digits of SHA-256 over the sorted canonical JSON."""
        return _version(self.canonical())

    def problems(self) -> list[tuple[tuple[str, ...], str]]:
        """Problems a key can be named for (none beyond the field checks)."""
        return []

    def _engine_kwargs(self) -> dict[str, Any]:
        return self.model_dump(exclude={"description", "inactive_days", "provisional_deviation",
                                        "rankable_deviation"})


class Glicko2Config(_ModelConfig):
    """A Glicko-2 policy file (see the module docstring; each key's meaning is
    :class:`engine.glicko2.Glicko2Policy`'s)."""

    model: Literal["glicko2"]
    initial_rating: Rating = 1500.0
    initial_deviation: Positive = 500.0
    initial_volatility: Positive = 0.09
    tau: Positive = 0.75
    periods_per_day: NonNegative = 0.21436
    min_deviation: Positive = 45.0
    max_deviation: Positive = 500.0
    max_volatility: Positive = 0.1
    max_rating_change: Positive = 700.0
    provisional_deviation: Positive = 110.0
    rankable_deviation: Positive = 75.0
    conservative_k: NonNegative = 2.0
    epsilon: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 1e-6

    @model_validator(mode="after")
    def _possible(self) -> Glicko2Config:
        self.build()  # the engine's own checks (deviation and volatility bounds in order), as ValueError
        return self

    def build(self) -> Glicko2Policy:
        """The engine :class:`engine.glicko2.Glicko2Policy` (its ``version`` set to :meth:`version`)."""
        kwargs = self._engine_kwargs()
        kwargs.update(provisional_deviation=self.provisional_deviation, rankable_deviation=self.rankable_deviation)
        return Glicko2Policy(**kwargs, version=self.version())


class WengLinConfig(_ModelConfig):
    """A Weng-Lin policy file: ``model`` one of ``plackett_luce``, ``bradley_terry_full``,
    ``thurstone_mosteller_full`` (each key's meaning is :class:`engine.weng_lin.WengLinPolicy`'s),
    and the leaderboard's optional ``provisional_deviation`` / ``rankable_deviation`` (sigma)."""

    model: Literal["plackett_luce", "bradley_terry_full", "thurstone_mosteller_full"]
    mu: Rating = 25.0
    sigma: Positive = 25.0 / 3.0
    beta: Positive = 25.0 / 6.0
    kappa: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.0001
    tau: NonNegative = 25.0 / 300.0
    tau_per_day: NonNegative = 0.0
    limit_sigma: bool = False
    epsilon: NonNegative = 0.1
    conservative_k: NonNegative = 3.0
    provisional_deviation: Positive | None = None
    rankable_deviation: Positive | None = None

    @model_validator(mode="after")
    def _possible(self) -> WengLinConfig:
        self.build()
        return self

    def build(self) -> WengLinPolicy:
        """The engine :class:`engine.weng_lin.WengLinPolicy` (its ``version`` set to :meth:`version`)."""
        return WengLinPolicy(**self._engine_kwargs(), version=self.version())


ModelConfig = Glicko2Config | WengLinConfig


def model_of(raw: dict[str, Any]) -> str:
    """The ``model`` a policy table names (``"elo"`` when absent). Raises ``ValueError`` for a
    value that is not one of :data:`MODELS`."""
    model = raw.get("model", ELO)
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}; got {model!r}")
    return str(model)


def validate_model_config(raw: dict[str, Any]) -> ModelConfig:
    """``raw`` (with a ``model`` other than ``"elo"``) as its model's config. Raises
    :class:`pydantic.ValidationError`."""
    if raw.get("model") == "glicko2":
        return Glicko2Config.model_validate(raw)
    return WengLinConfig.model_validate(raw)


class Shown(NamedTuple):
    """A player as a leaderboard shows it at a moment: the ``conservative`` rating it is ranked by
    and the ``deviation`` grown to that moment (rating points), whether the rating is
    ``provisional``, whether it is ``rankable`` (shown with a rank), and whether the player is
    ``inactive`` (no match for longer than the ladder allows: not rankable)."""

    conservative: float
    deviation: float
    provisional: bool
    rankable: bool
    inactive: bool


@dataclass(frozen=True, slots=True)
class LeaderboardRules:
    """How a leaderboard shows a ladder of a model with uncertainty at a moment ``at`` (seconds since
    the epoch): players ranked by the policy's conservative rating; ``provisional`` at a deviation
    (grown to ``at``) at or above ``provisional_deviation``; ``rankable`` at or below
    ``rankable_deviation`` (``None``: no such mark); unranked once ``inactive_days`` days passed
    since the last match (``None``: never). The deviation shown is the policy's ``display`` (grown
    since the last match, computed on read, never written)."""

    policy: Glicko2Policy | WengLinPolicy
    provisional_deviation: float | None
    rankable_deviation: float | None
    inactive_days: float | None

    def shown(self, state: PlayerState, at: float) -> Shown:
        """The player's row of the leaderboard at ``at`` (seconds since the epoch)."""
        deviation = self.policy.display(state, at).deviation
        assert deviation is not None, "a model with uncertainty's state has a deviation"
        inactive = (self.inactive_days is not None and state.last_played is not None
                    and at - state.last_played > self.inactive_days * SECONDS_PER_DAY)
        provisional = self.provisional_deviation is not None and deviation >= self.provisional_deviation
        rankable = not inactive and (self.rankable_deviation is None or deviation <= self.rankable_deviation)
        return Shown(self.policy.conservative(state, at), deviation, provisional, rankable, inactive)


def leaderboard_rules(policy: AnyPolicy, content: dict[str, Any] | None) -> LeaderboardRules | None:
    """The :class:`LeaderboardRules` of a ladder rated by ``policy`` (its canonical ``content``, for
    the leaderboard's keys; ``None``: the defaults), or ``None`` for an Elo policy (ranked by rating)."""
    if isinstance(policy, RatingPolicy):
        return None
    content = content or {}
    if isinstance(policy, Glicko2Policy):
        return LeaderboardRules(policy, policy.provisional_deviation, policy.rankable_deviation,
                                content.get("inactive_days"))
    assert isinstance(policy, WengLinPolicy), f"no leaderboard rules for {type(policy).__name__}"
    return LeaderboardRules(policy, content.get("provisional_deviation"), content.get("rankable_deviation"),
                            content.get("inactive_days"))
