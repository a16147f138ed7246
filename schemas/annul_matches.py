"""The inbound contract of an annulment: one ``annul-matches`` message, schema version 1.

A game backend that voids matches (a cheater's games, a disputed result, a server bug) sends
``ratings.annul_matches`` with one of these, as an organiser runs ``ratings annul``. The worker
calls :func:`schemas.parsing.parse_annul_matches` on it and gets a valid, frozen
:class:`AnnulMatches` or an :class:`schemas.match_finished.InvalidMessage` with a reason code.

Standard library and pydantic only (see the import contract in pyproject.toml).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ._types import Id

MAX_ANNULLED_PER_MESSAGE = 1000
"""Most match ids one annulment message may name."""

MAX_REASON_LENGTH = 1000
"""Longest ``reason``, in characters."""


class AnnulMatches(BaseModel):
    """``{"schema_version": 1, "match_ids": [str, ...], "reason": str, "annulled_by": str}``.

    ``match_ids``: 1 to 1000 ids of matches already sent (opaque ids, as ``match_id`` of a
    match-finished message; a repeated id counts once). ``reason``: why, 1 to 1000 characters, not
    only blanks, kept on record. ``annulled_by``: who decides (a service or a person), an opaque id,
    kept on record. Annulling an annulled match does nothing.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, title="AnnulMatches")

    schema_version: Literal[1] = Field(description="Version of this contract: 1.")
    match_ids: list[Id] = Field(
        min_length=1, max_length=MAX_ANNULLED_PER_MESSAGE,
        description="The matches to annul: 1 to 1000 match ids (each as sent in its match-finished message).",
    )
    reason: str = Field(
        min_length=1, max_length=MAX_REASON_LENGTH, pattern=r"\S",
        description="Why the matches are annulled, kept on record: 1 to 1000 characters, not only blanks.",
    )
    annulled_by: Id = Field(description="Who annuls (a service or a person), kept on record.")
