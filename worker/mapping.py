"""The worker's boundary: wire payloads (canonical MatchFinished JSON) to engine dataclasses."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from engine import FreeForAll, Match, Outcome, Participant, Performance

_NO_STATS = Performance()
PERFORMANCE_CACHE_LIMIT = 4096
"""Distinct :class:`engine.Performance` values :func:`to_engine_match` shares before it starts over."""
_performances: dict[tuple[int, int, int, int], Performance] = {(0, 0, 0, 0): _NO_STATS}


def _performance(stats: Mapping[str, Any]) -> Performance:
    """The :class:`engine.Performance` of a player's ``stats``: one shared object per distinct value.

    A ledger repeats few distinct performances (the counts are small), so matches that share
    one object take less memory, skip a frozen dataclass's construction, and leave
    :mod:`engine.fast_replay`, which reads every participant's performance, a few hundred objects
    to reach instead of two per match (measured: 4.62 against 6.18 µs per match mapped, 289
    against 417 bytes held, a faster replay of matches mapped one by one).
    Performance is immutable, so sharing is invisible to its readers. Only counts that are plain
    ``int`` (what the schema's validator gives) are shared: ``True``, ``1.0`` or a value that cannot
    be hashed, in a ledger row that skipped validation, get an object of their own with exactly
    the values given, as before the cache. At most :data:`PERFORMANCE_CACHE_LIMIT` values are kept
    (then the cache starts over).
    """
    bad_moves = stats.get("bad_moves", 0)
    won_by_16 = stats.get("won_by_16", 0)
    won_by_24 = stats.get("won_by_24", 0)
    won_by_4_and_last = stats.get("won_by_4_and_last", 0)
    if not (type(bad_moves) is int and type(won_by_16) is int and type(won_by_24) is int
            and type(won_by_4_and_last) is int):  # True == 1 == 1.0: equal keys, other values
        return Performance(bad_moves, won_by_16, won_by_24, won_by_4_and_last)
    key = (bad_moves, won_by_16, won_by_24, won_by_4_and_last)
    performance = _performances.get(key)
    if performance is None:
        if len(_performances) >= PERFORMANCE_CACHE_LIMIT:
            _performances.clear()
            _performances[0, 0, 0, 0] = _NO_STATS
        performance = _performances[key] = Performance(*key)
    return performance


def _participant(player: Mapping[str, Any]) -> Participant:
    stats = player.get("stats")
    weight = player.get("weight")
    performance = _performance(stats) if stats else _NO_STATS
    if weight is None:
        return Participant(player["player_id"], performance)
    return Participant(player["player_id"], performance, float(weight))


def played_at(finished_at: str | datetime) -> float:
    """The match's time in seconds since the Unix epoch, from its ``finished_at`` (the ledger
    payload's RFC 3339 text, or an aware datetime): the time models with uncertainty grow a
    deviation by. Taken from the match itself, so a replay of the ledger, in any process at any
    time, computes the same value. Raises ``ValueError`` for a text that is not a date-time."""
    if isinstance(finished_at, str):
        finished_at = datetime.fromisoformat(finished_at)
    return finished_at.timestamp()


def to_engine_match(payload: Mapping[str, Any]) -> Match | FreeForAll:
    """An :class:`engine.Match` (or :class:`engine.FreeForAll` for ``sides``) from a validated
    MatchFinished v1 payload (a JSON mapping), with its optional ``home``, ``score`` and ``season``,
    each player's optional partial-play ``weight`` (default 1), and ``played_at`` from its
    ``finished_at`` (:func:`played_at`).

    Used both when a match is applied and when the ledger is replayed, so both see the same match.
    Raises ``KeyError`` if a required key is missing (the payload was not validated); a payload
    without ``finished_at`` (built by hand, never a ledger row) has no ``played_at``.
    """
    season = payload.get("season")
    finished_at = payload.get("finished_at")
    at = None if finished_at is None else played_at(finished_at)
    if payload.get("sides") is not None:
        return FreeForAll(
            match_id=payload["match_id"],
            sides=tuple(tuple(_participant(p) for p in side["players"]) for side in payload["sides"]),
            placements=tuple(side["placement"] for side in payload["sides"]),
            season=season,
            played_at=at,
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
        played_at=at,
    )
