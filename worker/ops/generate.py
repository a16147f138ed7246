"""Operations: seeded, plausible Sedma matches (`ratings generate`) for demos, tests, evaluation and load."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from schemas import MatchFinished


def _stats(rng: random.Random, won: bool) -> dict[str, int]:
    """Per-player Sedma statistics: winners win more rounds by 16/24; anyone makes bad moves."""
    rounds = rng.randint(1, 5) if won else rng.randint(0, 2)
    won_by_16 = sum(rng.random() < 0.35 for _ in range(rounds))
    won_by_24 = sum(rng.random() < 0.15 for _ in range(rounds))
    won_by_4_and_last = sum(rng.random() < 0.25 for _ in range(rounds))
    bad_moves = min(int(rng.expovariate(0.7)), 20)
    return {"bad_moves": bad_moves, "won_by_16": won_by_16, "won_by_24": won_by_24,
            "won_by_4_and_last": won_by_4_and_last}


def generate_sedma_matches(
    count: int,
    players: int = 200,
    seed: int = 7,
    ladder: str = "sedma",
    team_share: float = 0.3,
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC),
    id_prefix: str = "sedma",
) -> Iterator[MatchFinished]:
    """``count`` Sedma matches, 1v1 and (with probability ``team_share``) 2v2.

    Players ``p0001``... are drawn with a skewed (Zipf-like, weight 1/rank) popularity, so some
    players appear often. Match ids are ``<id_prefix>-<seed>-<n>``; finished_at advances by
    1-120 seconds per match from ``start``. The same arguments give the same matches.
    """
    rng = random.Random(seed)
    ids = [f"p{i:04d}" for i in range(1, players + 1)]
    cum_weights = list(itertools.accumulate(1.0 / rank for rank in range(1, players + 1)))  # as choices() sums them
    at = start
    for n in range(count):
        size = 2 if rng.random() < team_share and players >= 4 else 1
        chosen: list[str] = []
        while len(chosen) < 2 * size:
            pick = rng.choices(ids, cum_weights=cum_weights)[0]
            if pick not in chosen:
                chosen.append(pick)
        a_won = rng.random() < 0.5
        at += timedelta(seconds=rng.randint(1, 120))
        side_a = [{"player_id": p, "stats": _stats(rng, a_won)} for p in chosen[:size]]
        side_b = [{"player_id": p, "stats": _stats(rng, not a_won)} for p in chosen[size:]]
        yield MatchFinished(
            schema_version=1,
            match_id=f"{id_prefix}-{seed}-{n}",
            ladder=ladder,
            finished_at=at,
            side_a={"players": side_a},
            side_b={"players": side_b},
            outcome="side_a_won" if a_won else "side_b_won",
        )
