"""The worker's boundary: wire payloads (canonical MatchFinished JSON) to engine dataclasses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine import FreeForAll, Match, Outcome, Participant, Performance

_NO_STATS = Performance()


def _participant(player: Mapping[str, Any]) -> Participant:
    stats = player.get("stats")
    if not stats:
        return Participant(player["player_id"], _NO_STATS)
    return Participant(
        player["player_id"],
        Performance(
            bad_moves=stats.get("bad_moves", 0),
            won_by_16=stats.get("won_by_16", 0),
            won_by_24=stats.get("won_by_24", 0),
            won_by_4_and_last=stats.get("won_by_4_and_last", 0),
        ),
    )


def to_engine_match(payload: Mapping[str, Any]) -> Match | FreeForAll:
    """An :class:`engine.Match` (or :class:`engine.FreeForAll` for ``sides``) from a validated
    MatchFinished v1 payload (a JSON mapping), with its optional ``home``, ``score`` and ``season``.

    Used both when a match is applied and when the ledger is replayed, so both see the same match.
    Raises ``KeyError`` if a required key is missing (the payload was not validated).
    """
    season = payload.get("season")
    if payload.get("sides") is not None:
        return FreeForAll(
            match_id=payload["match_id"],
            sides=tuple(tuple(_participant(p) for p in side["players"]) for side in payload["sides"]),
            placements=tuple(side["placement"] for side in payload["sides"]),
            season=season,
        )
    score = payload.get("score")
    return Match(
        match_id=payload["match_id"],
        side_a=tuple(_participant(p) for p in payload["side_a"]["players"]),
        side_b=tuple(_participant(p) for p in payload["side_b"]["players"]),
        outcome=Outcome(payload["outcome"]),
        home=payload.get("home"),
        scores=None if score is None else (score["side_a"], score["side_b"]),
        season=season,
    )
