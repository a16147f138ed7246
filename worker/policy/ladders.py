"""Ladder configuration: which rating policy each ladder uses, read from a TOML file.

.. code-block:: toml

    [ladders.sedma]
    policy = "policies/sedma.toml"   # a policy file, relative to this file

    [ladders.club]                   # or the policy's keys inline
    k_factor = { constant = 24 }
    match_shapes = { sides = 2, players_per_side = [1, 2] }   # 1v1 and 2v2 (default: 1v1 only)

A ladder not listed is a dead letter with reason code ``unknown_ladder``. Policy files are
described in :mod:`worker.policy.config`; ``match_shapes`` (the shapes the ladder rates, not part
of its policy) in :mod:`worker.policy.shapes`.
"""

from __future__ import annotations

import re
from pathlib import Path

from engine.policy import AnyPolicy
from worker.policy.config import LoadedPolicy, PolicyConfigError, load_policy, read_toml, validate_policy
from worker.policy.shapes import SHAPES_KEY

LadderConfigError = PolicyConfigError
"""Raised for a missing, non-TOML or invalid ladders or policy file (file, line and key named)."""

_LADDER_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


def load_ladder_policies(path: Path) -> dict[str, LoadedPolicy]:
    """Ladder name to :class:`worker.policy.config.LoadedPolicy`, from the ladders file ``path``.

    Raises :class:`LadderConfigError` naming the file, line and key at fault.
    """
    path = Path(path)
    raw, text = read_toml(path)
    unknown = sorted(set(raw) - {"ladders"})
    if unknown or not isinstance(raw.get("ladders"), dict):
        raise LadderConfigError(f"{path}: needs a [ladders.<name>] table per ladder and nothing else"
                                + (f" (unknown keys: {', '.join(unknown)})" if unknown else ""))
    loaded: dict[str, LoadedPolicy] = {}
    for name, table in raw["ladders"].items():
        if not _LADDER_NAME.match(name) or len(name) > 64:
            raise LadderConfigError(
                f"{path}: ladders.{name}: a ladder name matches ^[a-z0-9][a-z0-9_.-]*$ (64 characters at most)")
        if not isinstance(table, dict):
            raise LadderConfigError(f"{path}: ladders.{name}: must be a table")
        table = {key: value for key, value in table.items() if key != SHAPES_KEY}  # the ladder's, not its policy's
        if "policy" in table:
            extra = sorted(set(table) - {"policy", "description"})
            if extra:
                raise LadderConfigError(
                    f"{path}: ladders.{name}: `policy = \"file\"` and inline policy keys ({', '.join(extra)}) "
                    "cannot be combined"
                )
            if not isinstance(table["policy"], str):
                raise LadderConfigError(f"{path}: ladders.{name}.policy: must be a file name")
            loaded[name] = load_policy(path.parent / table["policy"])
        else:
            config = validate_policy(table, path, text, ("ladders", name))
            loaded[name] = LoadedPolicy(config.build(), config, path)
    return loaded


def load_ladders(path: Path) -> dict[str, AnyPolicy]:
    """Mapping of ladder name to its engine policy (``version`` set) read from ``path``.

    Raises :class:`LadderConfigError` naming the file and the offending key.
    """
    return {name: loaded.policy for name, loaded in load_ladder_policies(path).items()}


def load_policy_file(path: Path) -> AnyPolicy:
    """One policy from a policy file. Raises :class:`LadderConfigError` naming file, line and key."""
    return load_policy(Path(path)).policy
