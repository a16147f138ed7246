"""Store: leaderboards and predictions of ladders rated by a model with uncertainty (read side
only), as the CLI and the read API show them.

A leaderboard ranks by the policy's conservative rating at a moment (Glicko-2: rating - 2 RD;
Weng-Lin: mu - 3 sigma; ``conservative_k`` in the policy file), with each player's deviation grown
to that moment (computed on read from the stored state and the time of the player's last match,
never written), a provisional mark and a rank only for rankable players (deviation within the
ladder's bound and a match within ``inactive_days``): :class:`worker.policy.uncertainty.LeaderboardRules`.
A prediction gives each side's win probability, the draw probability where the model has one and
the match quality (:func:`engine.predict.predict`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import psycopg

from engine.model import PlayerState
from engine.policy import AnyPolicy
from engine.predict import Prediction, predict
from worker.policy.uncertainty import LeaderboardRules, leaderboard_rules
from worker.store.ladders import stored_policy
from worker.store.players import initial_state
from worker.store.policy_records import policy_content, policy_version_in_force
from worker.store.read_models import StoredState


class BoardRow(NamedTuple):
    """A leaderboard row: ``rank`` (``None`` when not rankable), the player, the ``conservative``
    rating it is ranked by, ``rating`` and ``deviation`` (grown to the moment shown; rating points),
    ``games``, and the ``provisional`` and ``inactive`` marks."""

    rank: int | None
    player_id: str
    conservative: float
    rating: float
    deviation: float
    games: int
    provisional: bool
    inactive: bool


def engine_state(stored: StoredState) -> PlayerState:
    """The engine's :class:`engine.model.PlayerState` of a stored state."""
    return PlayerState(stored.rating, stored.games_played, None, None, stored.deviation, stored.volatility,
                       stored.last_played)


def recorded_policy(conn: psycopg.Connection, ladder: str) -> tuple[AnyPolicy, LeaderboardRules | None] | None:
    """The policy recorded in force on ``ladder`` (its ``ladders`` row; what a reader without the
    ladders file, the read API, goes by) and its :class:`LeaderboardRules` (``None`` for Elo), or
    ``None`` for a ladder with no recorded policy. Raises
    :class:`worker.policy.stored.PolicyUnavailable` when the version's content is not recorded or
    does not validate in this release."""
    version = policy_version_in_force(conn, ladder)
    if version is None:
        return None
    policy = stored_policy(conn, version)
    return policy, leaderboard_rules(policy, policy_content(conn, version))


def board(states: Mapping[str, StoredState], rules: LeaderboardRules, at: float, top: int | None = None
          ) -> list[BoardRow]:
    """The leaderboard at ``at`` (seconds since the epoch): rankable players by conservative rating
    (highest first; equal values share a rank; ties listed by player id), then the players not
    rankable (provisional or inactive), unranked, in the same order. ``top``: the first N rows."""
    rows = []
    for pid, stored in states.items():
        if stored.games_played == 0:
            continue  # a row made for a match that was deferred or annulled: nothing to show
        shown = rules.shown(engine_state(stored), at)
        rows.append((not shown.rankable, -shown.conservative, pid, shown, stored))
    rows.sort(key=lambda t: (t[0], t[1], t[2].encode()))
    out: list[BoardRow] = []
    rank = 0
    previous: float | None = None
    for n, (unrankable, _, pid, shown, stored) in enumerate(rows, 1):
        if not unrankable and shown.conservative != previous:
            rank, previous = n, shown.conservative
        out.append(BoardRow(None if unrankable else rank, pid, shown.conservative, stored.rating, shown.deviation,
                            stored.games_played, shown.provisional, shown.inactive))
    return out[:top] if top is not None else out


MARKS = ("provisional", "rankable", "inactive")
"""A leaderboard row's marks, in this order, by the names ``ratings leaderboard --json``/``--csv`` give them."""


def marks(row: BoardRow) -> dict[str, bool]:
    """Each of :data:`MARKS` and whether it applies to ``row`` (``rankable``: the row has a rank)."""
    return {"provisional": row.provisional, "rankable": row.rank is not None, "inactive": row.inactive}


def status(row: BoardRow) -> str:
    """The marks that apply to ``row``, comma-separated in :data:`MARKS` order: ``"rankable"``,
    ``"provisional"``, ``"provisional, inactive"``; ``""`` when none does (a deviation between the
    rankable and the provisional bound: no longer provisional, not yet ranked)."""
    applies = marks(row)
    return ", ".join(m for m in MARKS if applies[m])


def board_row_dict(row: BoardRow) -> dict[str, Any]:
    """A leaderboard row as JSON-ready data (``ratings leaderboard --json`` on a ladder with uncertainty)."""
    return row._asdict()


def prediction(sides: Sequence[Sequence[str]], states: Mapping[str, StoredState], policy: AnyPolicy,
               at: float | None) -> Prediction:
    """The :class:`engine.predict.Prediction` of a proposed match of ``sides`` (player ids) on a
    ladder of ``policy`` as of ``at`` (seconds since the epoch): each player from its stored state,
    a player without one from the policy's initial state. Raises ``ValueError`` for fewer than two
    sides, an empty side or a player on two sides."""
    seen: set[str] = set()
    for side in sides:
        for pid in side:
            if pid in seen:
                raise ValueError(f"player {pid!r} is on more than one side")
            seen.add(pid)
    return predict([[engine_state(states[p]) if p in states else initial_state(policy, p) for p in side]
                    for side in sides], policy, at)


def prediction_dict(sides: Sequence[Sequence[str]], result: Prediction) -> dict[str, Any]:
    """A prediction as JSON-ready data: the sides, each win probability, draw probability, quality."""
    return {"sides": [list(s) for s in sides], "win_probabilities": list(result.win_probabilities),
            "draw_probability": result.draw_probability, "quality": result.quality}
