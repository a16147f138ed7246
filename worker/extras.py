"""Optional dependencies (pip extras): import one lazily, or fail with a message naming the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtra(ImportError):
    """An optional library is not installed; the message names the pip extra that brings it."""


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Import ``module`` (e.g. ``"xlsxwriter"``) and return it.

    Raises :class:`MissingExtra` (an ``ImportError``) when it is not installed, saying what needs it
    (``purpose``, e.g. ``"ratings export --format xlsx"``) and the command that installs the extra:
    ``pip install 'match-rating-worker[<extra>]'`` (``-e '.[<extra>]'`` from a checkout).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(
            f"{purpose} needs {module.split('.')[0]}, from the '{extra}' extra: "
            f"pip install 'match-rating-worker[{extra}]' (from a checkout: pip install -e '.[{extra}]')"
        ) from exc
