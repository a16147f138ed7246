"""The tests' reference for chronological order (``docs/decisions/0008-chronological-order.md``): a single-process chronological replay of published messages.

The engine's plain fold (:func:`engine.replay.replay`) over the messages sorted here by
``(finished_at, match_id)`` (match ids by code point, as the store's ``COLLATE "C"``): it never
reads the store's order key, its corrections or its history rows.
"""

from __future__ import annotations

import json

from engine.replay import replay
from schemas import parse_match_finished
from worker.bootstrap import load_ladder_policies
from worker.mapping import to_engine_match
from worker.settings import get_settings


def chronological_replay(messages: list[dict]) -> dict[tuple[str, str], tuple[float, int]]:
    """The chronological replay of ``messages`` (MatchFinished v1 dicts) under the ladders file's
    policies: mapping of (ladder, player_id) to (rating in rating points, games played)."""
    ladders = load_ladder_policies(get_settings())
    out = {}
    for ladder in sorted({m["ladder"] for m in messages}):
        mine = [parse_match_finished(m) for m in messages if m["ladder"] == ladder]
        mine.sort(key=lambda m: (m.finished_at, m.match_id.encode()))
        standings = replay((to_engine_match(json.loads(m.canonical_json())) for m in mine), ladders[ladder].policy)
        out.update({(ladder, pid): (s.rating, s.games_played) for pid, s in standings.items()})
    return out


def chronological_states(messages: list[dict]) -> dict[tuple[str, str], tuple]:
    """As :func:`chronological_replay`, with each player's whole state: mapping of (ladder,
    player_id) to (rating, games played, deviation, volatility, last_played); the last three
    ``None`` under Elo."""
    ladders = load_ladder_policies(get_settings())
    out = {}
    for ladder in sorted({m["ladder"] for m in messages}):
        mine = [parse_match_finished(m) for m in messages if m["ladder"] == ladder]
        mine.sort(key=lambda m: (m.finished_at, m.match_id.encode()))
        standings = replay((to_engine_match(json.loads(m.canonical_json())) for m in mine), ladders[ladder].policy)
        out.update({(ladder, pid): (s.rating, s.games_played, s.deviation, s.volatility, s.last_played)
                    for pid, s in standings.items()})
    return out
