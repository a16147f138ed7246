"""Ladder configuration: which rating policy each ladder uses, read from a TOML file."""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from engine import SEDMA_K, BandedK, ConstantK, RatingPolicy, Rounding, SedmaAdjustment


class KFactorConfig(BaseModel):
    """Either ``constant = K`` or ``bands = [[upper, K], ...]`` with ``top = K``."""

    model_config = ConfigDict(extra="forbid")
    constant: float | None = Field(default=None, gt=0)
    bands: list[tuple[float, Annotated[float, Field(gt=0)]]] | None = None
    top: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_kind(self) -> "KFactorConfig":
        if (self.constant is None) == (self.bands is None):
            raise ValueError("k_factor needs exactly one of `constant` or `bands` (with `top`)")
        if self.bands is not None and self.top is None:
            raise ValueError("k_factor `bands` needs `top`, the K at and above the last bound")
        return self


class LadderConfig(BaseModel):
    """One ladder's policy as written in the ladders file."""

    model_config = ConfigDict(extra="forbid")
    description: str = ""
    k_factor: KFactorConfig
    initial_rating: float = 1200.0
    scale: float = Field(default=400.0, gt=0)
    rounding: Literal["none", "half_even"] = "none"
    performance: Literal["none", "sedma"] = "none"

    def canonical(self) -> dict:
        """The rating-relevant content (every key, defaults filled in; ``description`` left out)."""
        return self.model_dump(mode="json", exclude={"description"})

    def version(self) -> str:
        """Content hash: first 12 hex digits of SHA-256 over the canonical JSON of :meth:`canonical`."""
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def policy(self) -> RatingPolicy:
        """The engine policy this configuration describes (``version`` set to :meth:`version`)."""
        if self.k_factor.constant is not None:
            k = ConstantK(self.k_factor.constant)
        else:
            k = BandedK(tuple(tuple(b) for b in self.k_factor.bands), self.k_factor.top)  # type: ignore[arg-type]
            if k == BandedK(SEDMA_K.bands, SEDMA_K.top_k):
                k = SEDMA_K
        return RatingPolicy(
            k_factor=k,
            initial_rating=self.initial_rating,
            scale=self.scale,
            rounding=Rounding(self.rounding),
            performance=SedmaAdjustment() if self.performance == "sedma" else None,
            version=self.version(),
        )


class LaddersFile(BaseModel):
    """The whole ladders file: ``[ladders.<name>]`` tables."""

    model_config = ConfigDict(extra="forbid")
    ladders: dict[Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]*$", max_length=64)], LadderConfig]


class LadderConfigError(ValueError):
    """The ladders file is missing, not TOML, or does not validate (message names file and key)."""


def load_ladders(path: Path) -> dict[str, RatingPolicy]:
    """Mapping of ladder name to :class:`engine.RatingPolicy` read from ``path``.

    Raises :class:`LadderConfigError` naming the file and the offending key.
    """
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LadderConfigError(f"{path}: {exc}") from exc
    try:
        parsed = LaddersFile.model_validate(raw)
        return {name: cfg.policy() for name, cfg in parsed.ladders.items()}
    except ValueError as exc:
        raise LadderConfigError(f"{path}: {exc}") from exc


def load_policy_file(path: Path) -> RatingPolicy:
    """One ladder's policy from a file holding a single policy (the keys of a ladder table).

    Raises :class:`LadderConfigError` naming the file and the offending key.
    """
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LadderConfigError(f"{path}: {exc}") from exc
    try:
        return LadderConfig.model_validate(raw).policy()
    except ValueError as exc:
        raise LadderConfigError(f"{path}: {exc}") from exc
