"""The match shapes a ladder rates, declared in the ladders file; any other shape is a dead letter.

A shape is the number of sides and the number of players of each side, written ``1v1``, ``2v2``,
``1v8`` (two sides) or ``1v1v1`` (a free-for-all of three sides). A ladder declares the shapes it
rates in its table of the ladders file:

.. code-block:: toml

    [ladders.sedma]
    policy = "policies/sedma.toml"
    match_shapes = { sides = 2, players_per_side = [1, 2], uneven = false }   # 1v1 and 2v2

* ``sides``: the number of sides, an integer or ``[least, most]`` (2 to 16); 3 or more sides is a
  free-for-all (the ``sides`` form of a match), so ``sides = 2`` refuses every free-for-all;
* ``players_per_side``: an integer or ``[least, most]`` (1 to 8);
* ``uneven``: whether the sides of one match may differ in size (``1v2``); default ``false``.

A ladder that declares nothing rates **1v1 only** (``sides = 2, players_per_side = 1``): Elo is a
two-player model by nature, and a refused match is a dead letter kept whole that ``ratings
dead-letters requeue`` applies once the ladder declares its shape, whereas a match rated by
mistake has already moved ratings and sent events. A match of another shape is a dead letter with
reason code ``unsupported_match_shape`` and a detail naming the shape seen and the shapes allowed
(what FAForever's validity states do for its phantom games).

The declaration is the ladder's, not its policy's: it decides which matches enter the ledger, not
how a match in the ledger is rated, so it is not part of the policy's version, and changing it
needs no rebuild. Matches already in the ledger stay there (annulments, corrections, rebuilds and
``verify`` replay the ledger as it is); only new matches are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator, model_validator

from schemas.match_finished import MAX_PLAYERS_PER_SIDE, MAX_SIDES, MatchFinished
from worker.policy.config import PolicyConfigError, describe_errors, read_toml

SHAPES_KEY = "match_shapes"
"""The key of a ladder's table that declares its match shapes."""

REASON_CODE = "unsupported_match_shape"
"""The dead-letter reason code of a match whose shape its ladder does not rate."""

_MAX_SHAPES_LISTED = 8


def _range(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    return value


class MatchShapesConfig(BaseModel):
    """The ``match_shapes`` table of a ladder (see the module docstring); the defaults are 1v1."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    sides: tuple[int, int] = (2, 2)
    players_per_side: tuple[int, int] = (1, 1)
    uneven: bool = False

    _as_range = field_validator("sides", "players_per_side", mode="before")(_range)

    @field_validator("sides", "players_per_side")
    @classmethod
    def _within_the_contract(cls, value: tuple[int, int], info: ValidationInfo) -> tuple[int, int]:
        low, high = _LIMITS[info.field_name or ""]
        least, most = value
        if not low <= least <= most <= high:
            raise ValueError(f"must be an integer or [least, most] with {low} <= least <= most <= {high}, "
                             f"got [{least}, {most}]")
        return value

    @model_validator(mode="after")
    def _possible(self) -> MatchShapesConfig:
        if self.uneven and self.players_per_side[0] == self.players_per_side[1]:
            raise ValueError("`uneven = true` needs a range of players_per_side: with one size every match is even")
        return self


_LIMITS = {"sides": (2, MAX_SIDES), "players_per_side": (1, MAX_PLAYERS_PER_SIDE)}
"""What the match contract allows, which a declaration must stay within."""


@dataclass(frozen=True)
class MatchShapes:
    """The shapes a ladder rates: ``sides`` and ``players_per_side`` as inclusive ``(least, most)``
    ranges, ``uneven``: whether one match's sides may differ in size."""

    sides: tuple[int, int] = (2, 2)
    players_per_side: tuple[int, int] = (1, 1)
    uneven: bool = False

    def allows(self, side_sizes: Sequence[int]) -> bool:
        """Whether a match whose sides hold ``side_sizes`` players (one count per side) is rated."""
        return (self.sides[0] <= len(side_sizes) <= self.sides[1]
                and all(self.players_per_side[0] <= n <= self.players_per_side[1] for n in side_sizes)
                and (self.uneven or len(set(side_sizes)) <= 1))

    def describe(self) -> str:
        """The allowed shapes in words: listed (``1v1, 2v2``) when there are few, else as ranges."""
        counts = range(self.sides[0], self.sides[1] + 1)
        sizes = range(self.players_per_side[0], self.players_per_side[1] + 1)
        if not self.uneven and len(counts) * len(sizes) <= _MAX_SHAPES_LISTED:
            return ", ".join(shape_name([size] * count) for count in counts for size in sizes)
        sides = _span(self.sides, "side")
        players = _span(self.players_per_side, "player")
        return f"{sides} of {players} each" + ("" if self.uneven else ", all sides the same size")

    def refusal(self, side_sizes: Sequence[int], ladder: str) -> str | None:
        """``None`` when the shape is rated, else the dead letter's detail (shape seen, shapes allowed,
        what to change)."""
        if self.allows(side_sizes):
            return None
        return (f"a {shape_name(side_sizes)} match is not rated on ladder {ladder!r}, which rates "
                f"{self.describe()}. Fix: send it to a ladder that rates this shape, or declare the shape in "
                f"the ladder's `{SHAPES_KEY}` (ladders file) and requeue the dead letter")


ONE_V_ONE = MatchShapes()
"""What a ladder that declares nothing rates: two sides of one player."""


def shape_name(side_sizes: Sequence[int]) -> str:
    """``1v8`` for two sides of 1 and 8 players, ``1v1v1`` for a free-for-all of three."""
    return "v".join(str(n) for n in side_sizes)


def _span(bounds: tuple[int, int], noun: str) -> str:
    least, most = bounds
    return f"{least} {noun}{'s' * (least != 1)}" if least == most else f"{least} to {most} {noun}s"


def shapes_from_table(table: dict[str, Any], path: Path, text: str, prefix: tuple[str, ...]) -> MatchShapes:
    """The :class:`MatchShapes` of one ladder's table (``ONE_V_ONE`` when it declares none).

    Raises :class:`worker.policy.config.PolicyConfigError` naming file, line and key.
    """
    raw = table.get(SHAPES_KEY)
    if raw is None:
        return ONE_V_ONE
    if not isinstance(raw, dict):
        raise PolicyConfigError(f"{path}: {'.'.join(prefix + (SHAPES_KEY,))}: must be a table like "
                                "{ sides = 2, players_per_side = [1, 2], uneven = false }")
    try:
        config = MatchShapesConfig.model_validate(raw)
    except ValidationError as exc:
        raise PolicyConfigError(describe_errors(exc, path, text, prefix + (SHAPES_KEY,))) from None
    return MatchShapes(config.sides, config.players_per_side, config.uneven)


def load_ladder_shapes(path: Path) -> dict[str, MatchShapes]:
    """Ladder name to the :class:`MatchShapes` it rates, from the ladders file at ``path``.

    Raises :class:`worker.policy.config.PolicyConfigError` for an unreadable file or a bad
    declaration (the rest of the file is checked by :func:`worker.policy.ladders.load_ladder_policies`).
    """
    raw, text = read_toml(Path(path))
    ladders = raw.get("ladders")
    if not isinstance(ladders, dict):
        return {}
    return {name: shapes_from_table(table, Path(path), text, ("ladders", name))
            for name, table in ladders.items() if isinstance(table, dict)}


def match_side_sizes(match: MatchFinished) -> list[int]:
    """Players per side of ``match``, side by side (``side_a``, ``side_b``, or ``sides`` in order)."""
    return [len(side.players) for _, side in match.all_sides()]

