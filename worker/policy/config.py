"""Rating policies as validated configuration files (TOML), with a content hash per version.

A policy file holds the keys below (all optional except ``k_factor``); a ladders file
(``worker/ladders.toml``) names each ladder's policy, either inline or as ``policy = "file.toml"``.
The engine objects they build are in :mod:`engine.policy` and :mod:`engine.k_factor`.

.. code-block:: toml

    description = "free text, not part of the version"
    initial_rating = 1200          # rating points; per-player starting ratings in [initial_ratings]
    scale = 400                    # logistic scale
    rounding = "none"              # "none" | "half_even" | "half_away"
    floor = 100                    # ratings never go below it (optional)
    difference_cap = 400           # FIDE's 400-point rule for the expected score (optional)
    home_advantage = 0             # rating points added to the home side (the match says which)
    performance = "none"           # "none" | "sedma" | a [performance] table of Sedma weights

    [k_factor]                     # exactly one of: constant, bands (+ top), fide
    constant = 30
    # bands = [[1200, 40], [1800, 32], [2200, 24]]
    # top = 16
    # fide = {}                    # 40 until 30 games, 20 below 2400, 10 once 2400 was reached
    # provisional = { games = 20, k = 40 }   # optional, before any of the above

    [margin_of_victory]            # optional
    formula = "fivethirtyeight_nfl"

    [season]                       # optional: regression at a player's first match of a season
    regress_to = 1505
    weight = 0.3333333333333333
    [season.set]                   # ratings set by hand at a season boundary
    CLE = { "1999" = 1300.0 }

    [teams]
    rating = "mean"                # "mean" | "sum"
    uneven = "allow"               # "allow" | "reject"
    free_for_all_divide = true

    [initial_ratings]
    some_player = 1500

``model`` (optional) names the rating model: ``"elo"`` (the default, these keys) or a model with
uncertainty, ``"glicko2"``, ``"plackett_luce"``, ``"bradley_terry_full"`` or
``"thurstone_mosteller_full"``, whose keys :mod:`worker.policy.uncertainty` describes. Writing
``model = "elo"`` leaves an Elo policy's content and version as they were without it.

Unknown keys and impossible values raise :class:`PolicyConfigError` naming the file, the line and
the key.

**A policy that validates rates every valid match safely** (the decision record
``docs/decisions/0003-every-valid-policy-rates-every-valid-match.md``): no exception other than the
refusals it states (``uneven_sides``, ``missing_score``, ``unsupported_match``), finite ratings,
K >= 0, expected and actual scores in [0, 1]. The engine decides each formula's edges (the
expected score saturates at 0 and 1, :mod:`engine.elo`; the margin-of-victory divisor has a floor,
:class:`engine.policy.MarginOfVictory`; the floor holds at a season start, :func:`engine.rate`);
validation rejects what remains, the magnitudes that could overflow a double or a binary32:

* ratings — ``initial_rating``, ``initial_ratings``, ``floor``, ``home_advantage``,
  ``season.regress_to``, ``season.set`` — lie within ±:data:`RATING_LIMIT` (10^9 rating points);
* every K (``constant``, ``bands``, ``top``, ``fide``'s and ``provisional``'s) is in
  (0, :data:`K_LIMIT`] (10^6 rating points per unit of score);
* Sedma weights, caps and shares are in [0, 1] score units (a larger one saturates the score on
  its own; with counts up to 1000 every binary32 intermediate stays finite);
* a margin-of-victory draw multiplier ``base / draw_divisor`` is at most :data:`DRAW_RATIO_LIMIT`;
* ``season.set`` ratings are not below ``floor`` (as ``initial_ratings``).

With these, one match moves a rating by at most K × 2·10^7 (margin multiplier ≤ 10^6 ×
ln(10^6 + 1), × 15 opponents' sides), so a history of any length that could be stored stays
finite (``tests/unit/test_policy_safety.py`` checks the promise on policies drawn from exactly
what this module accepts). The **version** of a policy is the first 12 hex digits of the SHA-256 of its canonical
JSON (every key with defaults filled in, ``description`` left out, sorted keys): two files that
rate the same way have the same version whatever their layout or comments.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from engine import SEDMA_K, BandedK, ConstantK, RatingPolicy, Rounding, SedmaAdjustment
from engine.k_factor import FideK, KFactor, ProvisionalK
from engine.policy import AnyPolicy, MarginOfVictory, SeasonRegression, TeamRating
from worker.policy.uncertainty import ELO, ModelConfig, model_of, validate_model_config

RATING_LIMIT = 1e9
"""Largest magnitude of a rating in a policy (initial ratings, floor, home advantage, season), in
rating points: far beyond any real ladder, far below where a double overflows."""
K_LIMIT = 1e6
"""Largest K-factor a policy may set, in rating points per unit of score."""
DRAW_RATIO_LIMIT = 1e6
"""Largest ``base / draw_divisor`` of a margin-of-victory policy (its multiplier of a draw)."""

Finite = Annotated[float, Field(allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Rating = Annotated[float, Field(ge=-RATING_LIMIT, le=RATING_LIMIT, allow_inf_nan=False)]
KValue = Annotated[float, Field(gt=0, le=K_LIMIT, allow_inf_nan=False)]
_STRICT = ConfigDict(extra="forbid")


class FideConfig(BaseModel):
    """FIDE's K-factor parameters (defaults: FIDE Rating Regulations 2014, art. 8.3.3)."""

    model_config = _STRICT
    provisional_games: int = Field(default=30, ge=0)
    provisional_k: KValue = 40.0
    k: KValue = 20.0
    threshold: Finite = 2400.0
    top_k: KValue = 10.0


class ProvisionalConfig(BaseModel):
    """``k`` for a player's first ``games`` rated matches."""

    model_config = _STRICT
    games: int = Field(ge=1)
    k: KValue


class KFactorConfig(BaseModel):
    """Exactly one of ``constant``, ``bands`` (with ``top``) or ``fide``; ``provisional`` optional."""

    model_config = _STRICT
    constant: KValue | None = None
    bands: list[tuple[Finite, KValue]] | None = None
    top: KValue | None = None
    fide: FideConfig | None = None
    provisional: ProvisionalConfig | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> KFactorConfig:
        kinds = [k for k in ("constant", "bands", "fide") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(
                "needs exactly one of `constant`, `bands` (with `top`) or `fide`"
                + (f", got {' and '.join(kinds)}" if kinds else "")
            )
        if self.bands is not None:
            if self.top is None:
                raise ValueError("`bands` needs `top`, the K at and above the last bound")
            if not self.bands:
                raise ValueError("`bands` needs at least one [upper_bound, k] pair")
            bounds = [b for b, _ in self.bands]
            if any(b2 <= b1 for b1, b2 in zip(bounds, bounds[1:])):
                raise ValueError(f"`bands` bounds must be strictly increasing, got {bounds}")
        elif self.top is not None:
            raise ValueError("`top` only goes with `bands`")
        return self

    def build(self) -> KFactor:
        """The engine K-factor policy."""
        k: KFactor
        if self.constant is not None:
            k = ConstantK(self.constant)
        elif self.bands is not None:
            k = BandedK(tuple((float(b), float(v)) for b, v in self.bands), float(self.top))  # type: ignore[arg-type]
            if k == BandedK(SEDMA_K.bands, SEDMA_K.top_k):
                k = SEDMA_K
        else:
            f = self.fide
            assert f is not None
            k = FideK(f.provisional_games, f.provisional_k, f.k, f.threshold, f.top_k)
        if self.provisional is not None:
            k = ProvisionalK(self.provisional.games, self.provisional.k, k)
        return k


class SedmaConfig(BaseModel):
    """Weights, caps and shares of the Sedma performance adjustment (defaults: the seed's), each in
    [0, 1] score units."""

    model_config = _STRICT
    bonus_per_16: Share = 0.05
    max_bonus_16: Share = 0.15
    bonus_per_24: Share = 0.1
    max_bonus_24: Share = 0.2
    bonus_per_4_and_last: Share = 0.03
    max_bonus_4_and_last: Share = 0.09
    malus_per_bad_move: Share = 0.02
    max_malus: Share = 0.3
    loser_bonus_share: Share = 0.1
    draw_bonus_share: Share = 0.5


class MarginConfig(BaseModel):
    """A margin-of-victory multiplier of K; only FiveThirtyEight's NFL formula for now
    (:class:`engine.policy.MarginOfVictory`: a win's divisor is floored at ``base / 2``, so any
    ``autocorrelation`` is safe; a draw's multiplier ``base / draw_divisor`` is bounded here)."""

    model_config = _STRICT
    formula: Literal["fivethirtyeight_nfl"]
    base: Positive = 2.2
    autocorrelation: NonNegative = 0.001
    draw_divisor: Positive = 1.0

    @field_validator("draw_divisor")
    @classmethod
    def _draw_multiplier_bounded(cls, value: float, info: ValidationInfo) -> float:
        base = info.data.get("base")
        if base is not None and base / value > DRAW_RATIO_LIMIT:
            raise ValueError(
                f"must be at least base / {DRAW_RATIO_LIMIT:g} = {base / DRAW_RATIO_LIMIT:g} "
                f"(a draw's multiplier base / draw_divisor is at most {DRAW_RATIO_LIMIT:g}), got {value:g}"
            )
        return value


class SeasonConfig(BaseModel):
    """Regression toward ``regress_to`` by ``weight`` at a player's first match of a new season;
    ``set`` fixes a player's rating at a given season's start instead (``{player = {season = r}}``)."""

    model_config = _STRICT
    regress_to: Rating
    weight: Share
    set: dict[str, dict[str, Rating]] = Field(default_factory=dict)


class TeamsConfig(BaseModel):
    """How sides of several players and matches of more than two sides are rated."""

    model_config = _STRICT
    rating: Literal["mean", "sum"] = "mean"
    uneven: Literal["allow", "reject"] = "allow"
    free_for_all_divide: bool = True


class PolicyConfig(BaseModel):
    """One rating policy as written in a policy file (see the module docstring)."""

    model_config = _STRICT
    description: str = ""
    initial_rating: Rating = 1200.0
    initial_ratings: dict[str, Rating] = Field(default_factory=dict)
    scale: Positive = 400.0
    rounding: Literal["none", "half_even", "half_away"] = "none"
    floor: Rating | None = None
    difference_cap: Positive | None = None
    home_advantage: Rating = 0.0
    k_factor: KFactorConfig
    margin_of_victory: MarginConfig | None = None
    season: SeasonConfig | None = None
    performance: SedmaConfig | None = None
    teams: TeamsConfig = Field(default_factory=TeamsConfig)

    @field_validator("performance", mode="before")
    @classmethod
    def _performance_shorthand(cls, value: Any) -> Any:
        if value == "none":
            return None
        if value == "sedma":
            return {}
        if isinstance(value, str):
            raise ValueError(f"must be \"none\", \"sedma\" or a table of Sedma weights, not {value!r}")
        return value

    @model_validator(mode="after")
    def _possible(self) -> PolicyConfig:
        if self.floor is not None:
            if self.initial_rating < self.floor:
                raise ValueError(f"floor {self.floor:g} is above initial_rating {self.initial_rating:g}")
            low = {p: r for p, r in self.initial_ratings.items() if r < self.floor}
            if low:
                raise ValueError(f"initial_ratings below the floor {self.floor:g}: {sorted(low)[:5]}")
        return self

    def problems(self) -> list[tuple[tuple[str, ...], str]]:
        """Problems across tables that a key can be named for: ``(key path, message)`` each.

        ``season.set`` ratings below ``floor``. (:func:`validate_policy` reports them with file and
        line; the engine holds the floor at a season start either way.)
        """
        found: list[tuple[tuple[str, ...], str]] = []
        if self.floor is not None and self.season is not None:
            for player, seasons in self.season.set.items():
                for season, rating in seasons.items():
                    if rating < self.floor:
                        found.append((("season", "set", player, season),
                                      f"{rating:g} is below the floor {self.floor:g}; set it at or above the floor"))
        return found

    def canonical(self) -> dict[str, Any]:
        """The rating-relevant content: every key with defaults filled in, without ``description``."""
        return self.model_dump(mode="json", exclude={"description"})

    def version(self) -> str:
        """Content hash: first 12 hex digits of SHA-256 over the sorted canonical JSON."""
        return policy_version(self.canonical())

    def build(self) -> RatingPolicy:
        """The engine :class:`engine.RatingPolicy` (its ``version`` set to :meth:`version`)."""
        season = None
        if self.season is not None:
            overrides = {(p, s): r for p, seasons in self.season.set.items() for s, r in seasons.items()}
            season = SeasonRegression(self.season.regress_to, self.season.weight, overrides)
        mov = None
        if self.margin_of_victory is not None:
            m = self.margin_of_victory
            mov = MarginOfVictory(m.base, m.autocorrelation, m.draw_divisor)
        return RatingPolicy(
            k_factor=self.k_factor.build(),
            initial_rating=self.initial_rating,
            scale=self.scale,
            rounding=Rounding(self.rounding),
            performance=None if self.performance is None else SedmaAdjustment(**self.performance.model_dump()),
            floor=self.floor,
            difference_cap=self.difference_cap,
            home_advantage=self.home_advantage,
            margin_of_victory=mov,
            season=season,
            initial_ratings=dict(self.initial_ratings),
            team_rating=TeamRating(self.teams.rating),
            uneven_sides=self.teams.uneven == "allow",
            free_for_all_divide=self.teams.free_for_all_divide,
            version=self.version(),
        )


def policy_version(canonical: dict[str, Any]) -> str:
    """First 12 hex digits of SHA-256 over ``canonical`` as sorted, compact JSON."""
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


AnyConfig = PolicyConfig | ModelConfig
"""A validated policy file of any model."""


def config_of(raw: dict[str, Any]) -> AnyConfig:
    """``raw`` (a policy table) validated as the config of the model it names (``model``, default
    ``"elo"``, which is dropped so an Elo policy's content is the same with or without it). Raises
    ``ValueError`` for an unknown model, :class:`pydantic.ValidationError` for invalid keys."""
    model = model_of(raw)
    if model == ELO:
        return PolicyConfig.model_validate({k: v for k, v in raw.items() if k != "model"})
    return validate_model_config(raw)


class PolicyConfigError(ValueError):
    """A policy or ladders file is missing, not TOML, or does not validate.

    The message names the file, the line (when it can be found) and the dotted key, e.g.
    ``policies/elo.toml:7: k_factor.konstant: unknown key``.
    """


@dataclass(frozen=True)
class LoadedPolicy:
    """A validated policy: the engine ``policy``, its ``config``, ``version`` and ``source`` file."""

    policy: AnyPolicy
    config: AnyConfig
    source: Path

    @property
    def version(self) -> str:
        return self.policy.version


def read_toml(path: Path) -> tuple[dict[str, Any], str]:
    """``(parsed, text)`` of a TOML file; :class:`PolicyConfigError` if unreadable or not TOML."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # tomllib refuses a BOM
    except OSError as exc:
        raise PolicyConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        raise PolicyConfigError(f"{path}: not valid TOML: {exc}") from exc


def validate_policy(raw: dict[str, Any], path: Path, text: str, prefix: tuple[str, ...] = ()) -> AnyConfig:
    """Validate ``raw`` (the table at ``prefix`` in ``path``) as the config of its ``model``
    (:func:`config_of`: a :class:`PolicyConfig` for Elo).

    Raises :class:`PolicyConfigError` listing each problem as ``file:line: key: message``.
    """
    try:
        config = config_of(raw)
    except ValidationError as exc:
        raise PolicyConfigError(describe_errors(exc, path, text, prefix)) from None
    except ValueError as exc:  # an unknown model
        line = locate(text, (*prefix, "model"))
        raise PolicyConfigError(f"{path}:{line}: {'.'.join((*prefix, 'model'))}: {exc}" if line
                                else f"{path}: model: {exc}") from None
    problems = config.problems()
    if problems:
        lines = []
        for key, message in problems:
            loc = prefix + key
            line = locate(text, loc)
            lines.append(f"{path}:{line}: {'.'.join(loc)}: {message}" if line else f"{path}: {'.'.join(loc)}: {message}")
        raise PolicyConfigError("\n".join(lines))
    return config


def load_policy(path: Path) -> LoadedPolicy:
    """Read and validate one policy file. Raises :class:`PolicyConfigError`."""
    raw, text = read_toml(path)
    config = validate_policy(raw, path, text)
    return LoadedPolicy(config.build(), config, Path(path))


def describe_errors(exc: ValidationError, path: Path, text: str, prefix: tuple[str, ...] = ()) -> str:
    """One line per validation error: ``file:line: dotted.key: message``."""
    lines = []
    for error in exc.errors():
        loc = prefix + tuple(str(part) for part in error["loc"] if not isinstance(part, int))
        # model validators report no field; tuple/list positions are dropped from the key
        loc = tuple(part for part in loc if part not in ("function-after[_one_kind()]",))
        key = ".".join(loc) or "(top level)"
        message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        message = message.removeprefix("Value error, ")
        line = locate(text, loc)
        where = f"{path}:{line}" if line else str(path)
        lines.append(f"{where}: {key}: {message}")
    return "\n".join(lines)


_HEADER = re.compile(r"^\[\[?\s*(?P<key>[^\]]+?)\s*\]\]?")
_ASSIGN = re.compile(r"^(?P<key>(?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9_-]+)(?:\s*\.\s*(?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9_-]+))*)\s*=")


def _split_key(key: str) -> tuple[str, ...]:
    parts = re.findall(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_-]+)", key)
    return tuple(a or b or c for a, b, c in parts)


def locate(text: str, loc: tuple[str, ...]) -> int | None:
    """1-based line of ``text`` (TOML) that defines the deepest prefix of the key path ``loc``.

    Tracks table headers and ``key = value`` lines (dotted keys and keys of an inline table on the
    same line included); ``None`` when nothing matches. Used only to point at errors.
    """
    header: tuple[str, ...] = ()
    best_depth, best_line = 0, None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _HEADER.match(stripped)
        if match:
            header = _split_key(match.group("key"))
            path = header
        else:
            match = _ASSIGN.match(stripped)
            if not match:
                continue
            path = header + _split_key(match.group("key"))
        if loc[: len(path)] != path:
            continue
        depth = len(path)
        # a key of an inline table written on this line: `k_factor = { konstant = 30 }`
        while depth < len(loc) and re.search(r"[{,]\s*[\"']?" + re.escape(loc[depth]) + r"[\"']?\s*=", stripped):
            depth += 1
        if depth > best_depth or (depth == best_depth and best_line is None):
            best_depth, best_line = depth, number
    return best_line if best_depth else None


def flatten(content: Any, prefix: str = "") -> dict[str, Any]:
    """``{"k_factor.constant": 30.0, ...}`` from nested canonical content (for ``policy diff``)."""
    if isinstance(content, dict):
        out: dict[str, Any] = {}
        if not content and prefix:
            out[prefix] = {}
        for key, value in content.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: content}


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, old value, new value)`` for every flattened key that differs (missing = ``None``)."""
    a, b = flatten(old), flatten(new)
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]

