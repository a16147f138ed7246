"""The inbound contract of an annulment: one ``annul-matches`` message, schema version 1.

A game backend that voids matches (a cheater's games, a disputed result, a server bug) sends
``ratings.annul_matches`` with one of these, as an organiser runs ``ratings annul``. The worker
calls :func:`schemas.parsing.parse_annul_matches` on it and gets a valid, frozen
:class:`AnnulMatches` or an :class:`schemas.match_finished.InvalidMessage` with a reason code.

Standard library and pydantic only (see the import contract in pyproject.toml).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ._types import TEXT_FORBIDDEN_CLASS, TEXT_RULES, Id, check_text_characters

MAX_ANNULLED_PER_MESSAGE = 1000
"""Most match ids one annulment message may name."""

MAX_REASON_LENGTH = 1000
"""Longest ``reason``, in characters."""

REASON_PATTERN = f"^[^{TEXT_FORBIDDEN_CLASS}]*[^\\s{TEXT_FORBIDDEN_CLASS}][^{TEXT_FORBIDDEN_CLASS}]*$"
"""JSON Schema pattern of ``reason``: not only blanks, and no character PostgreSQL text cannot
store (U+0000, lone surrogates). The worker checks the same with ``\\S`` (``schema_violation``)
and :func:`schemas._types.check_text_characters` (``invalid_text``)."""

Reason = Annotated[
    str,
    Field(
        min_length=1, max_length=MAX_REASON_LENGTH, pattern=r"\S",
        json_schema_extra={"pattern": REASON_PATTERN},
        description=("Why the matches are annulled, kept on record: 1 to 1000 characters, not only blanks. "
                     + TEXT_RULES),
    ),
    AfterValidator(check_text_characters),
]


class AnnulMatches(BaseModel):
    """``{"schema_version": 1, "match_ids": [str, ...], "reason": str, "annulled_by": str}``.

    ``match_ids``: 1 to 1000 ids of matches already sent (opaque ids, as ``match_id`` of a
    match-finished message; a repeated id counts once). ``reason``: why, 1 to 1000 characters, not
    only blanks, no U+0000 or lone surrogate (``invalid_text``: PostgreSQL text cannot hold them),
    kept on record. ``annulled_by``: who decides (a service or a person), an opaque id,
    kept on record. Annulling an annulled match does nothing.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, title="AnnulMatches")

    schema_version: Literal[1] = Field(description="Version of this contract: 1.")
    match_ids: list[Id] = Field(
        min_length=1, max_length=MAX_ANNULLED_PER_MESSAGE,
        description="The matches to annul: 1 to 1000 match ids (each as sent in its match-finished message).",
    )
    reason: Reason
    annulled_by: Id = Field(description="Who annuls (a service or a person), kept on record.")
