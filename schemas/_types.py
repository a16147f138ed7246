"""Field types shared by the wire contracts: opaque ids and ladder names.

Standard library and pydantic only (see the import contract in pyproject.toml).
"""

from __future__ import annotations

import unicodedata
from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

ID_MAX_LENGTH = 128
LADDER_MAX_LENGTH = 64
LADDER_PATTERN = r"^[a-z0-9][a-z0-9_.-]*$"

# Unicode general categories an id may not contain, with the words used in error messages.
# Cc: C0/C1 control characters (tab, newline, NUL, ...).
# Cf: invisible format characters (zero-width space/joiner, bidi overrides, BOM): two ids that
#     differ only by one of them look identical to a person.
# Cs: lone surrogates (a JSON "\ud800" escape decodes to one): not encodable as UTF-8.
# Zl, Zp: the line and paragraph separators U+2028 and U+2029.
_FORBIDDEN_CATEGORIES = {
    "Cc": "control",
    "Cf": "invisible format",
    "Cs": "surrogate",
    "Zl": "line separator",
    "Zp": "paragraph separator",
}


def _forbidden_bmp_class() -> str:
    """The forbidden categories' code points of the Basic Multilingual Plane as a regex class body
    of ``\\uXXXX`` ranges (portable: ECMA-262 and Python read them alike)."""
    ranges: list[list[int]] = []
    for code in range(0x10000):
        if unicodedata.category(chr(code)) in _FORBIDDEN_CATEGORIES:
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    return "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges)


ID_PATTERN = f"^[^{_forbidden_bmp_class()}]+$"
"""JSON Schema pattern of an id: no forbidden character of the Basic Multilingual Plane. The few
forbidden characters above it (invisible format characters such as U+E0001) are checked by the
worker and listed in the contract's description (a portable pattern cannot name them)."""


ID_RULES = (
    "Opaque id, compared exactly: 1 to 128 Unicode characters taken as sent (no trimming, case "
    "folding or normalization). Printable text of any script is fine, spaces and apostrophes "
    "included, e.g. \"Côte d'Ivoire\". Rejected: control characters (Cc), invisible format "
    "characters (Cf), lone surrogates (Cs) and the line/paragraph separators (Zl, Zp); the pattern "
    "states them for the Basic Multilingual Plane."
)


def forbidden_id_character(value: str) -> tuple[int, str, str] | None:
    """Return (position, code point like "U+0009", kind) of the first forbidden character, or None."""
    if value.isprintable():  # fast path: printable strings hold none of the forbidden categories
        return None
    for position, char in enumerate(value):
        kind = _FORBIDDEN_CATEGORIES.get(unicodedata.category(char))
        if kind is not None:
            return position, f"U+{ord(char):04X}", kind
    return None


def is_valid_id(value: object) -> bool:
    """True if value is a str that satisfies the id rules (used to report a match_id safely)."""
    return (
        isinstance(value, str)
        and 1 <= len(value) <= ID_MAX_LENGTH
        and forbidden_id_character(value) is None
    )


def _check_id_characters(value: str) -> str:
    found = forbidden_id_character(value)
    if found is not None:
        position, code_point, kind = found
        raise PydanticCustomError(
            "id_character",
            "String should not contain {kind} characters; found {code_point} at position {position}",
            {"kind": kind, "code_point": code_point, "position": position},
        )
    return value


Id = Annotated[
    str,
    Field(
        min_length=1,
        max_length=ID_MAX_LENGTH,
        description=ID_RULES,
        json_schema_extra={"pattern": ID_PATTERN},
    ),
    AfterValidator(_check_id_characters),
]

TEXT_FORBIDDEN_CLASS = r"\u0000\ud800-\udfff"
"""Regex class body of what free text may not hold: U+0000 (PostgreSQL's ``text`` cannot store
it: "invalid byte sequence for encoding UTF8: 0x00") and lone surrogates (not encodable as UTF-8
at all; a JSON ``"\ud800"`` escape decodes to one)."""

TEXT_RULES = "U+0000 (NUL) and lone surrogates are refused: PostgreSQL text cannot hold them."


def forbidden_text_character(value: str) -> tuple[int, str] | None:
    """Return (position, code point like "U+0000") of the first character free text may not hold
    (:data:`TEXT_FORBIDDEN_CLASS`), or None."""
    for position, char in enumerate(value):
        if char == "\x00" or "\ud800" <= char <= "\udfff":
            return position, f"U+{ord(char):04X}"
    return None


def check_text_characters(value: str) -> str:
    """Pydantic after-validator of free text: refuses what :func:`forbidden_text_character` finds
    (error type ``text_character``, reason code ``invalid_text``)."""
    found = forbidden_text_character(value)
    if found is not None:
        position, code_point = found
        raise PydanticCustomError(
            "text_character",
            "String should not contain {code_point}, which PostgreSQL text cannot store; found at position {position}",
            {"code_point": code_point, "position": position},
        )
    return value


LadderName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=LADDER_MAX_LENGTH,
        pattern=LADDER_PATTERN,
        description=(
            "Ladder (rating pool) name: 1 to 64 characters of a-z, 0-9, '_', '.', '-', starting with a "
            "letter or digit, e.g. \"sedma-ranked\"."
        ),
    ),
]
