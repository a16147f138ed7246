"""``ratings bench`` part: the Weng-Lin models' engine rate (no server), beside same-run baselines.

For each model, matches per second of :func:`engine.replay.replay` and of
:func:`engine.fast_replay.replay` over seeded 1v1 and 5v5 matches, beside the Elo policy replaying
the same matches in the same run (both paths) and, when openskill is installed (the ``test``
extra), openskill's own ``rate`` over them. ``ratings bench`` runs it in its engine part. Run alone with
``python -m worker.devtools.bench.weng_lin_speed [matches]``.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from typing import Any

from engine.fast_replay import replay as fast_replay
from engine.k_factor import ConstantK
from engine.model import Match, Outcome, Participant
from engine.policy import RatingPolicy
from engine.replay import replay
from engine.weng_lin import ALL_MODELS, WengLinPolicy
from worker.devtools.bench.common import best_rate

OPENSKILL_CLASSES = {
    "plackett_luce": "PlackettLuce",
    "bradley_terry_full": "BradleyTerryFull",
    "thurstone_mosteller_full": "ThurstoneMostellerFull",
    "bradley_terry_part": "BradleyTerryPart",
    "thurstone_mosteller_part": "ThurstoneMostellerPart",
}


def team_matches(count: int, team_size: int, players: int, seed: int) -> list[Match]:
    """``count`` seeded matches of ``team_size`` against ``team_size`` among ``players`` (distinct
    players in each match; side A wins 45 %, side B 45 %, draws 10 %; one minute apart)."""
    rng = random.Random(seed)
    matches = []
    for i in range(count):
        ids = [f"p{n:05d}" for n in rng.sample(range(players), 2 * team_size)]
        r = rng.random()
        outcome = Outcome.SIDE_A_WON if r < 0.45 else Outcome.SIDE_B_WON if r < 0.9 else Outcome.DRAW
        side_a = tuple(Participant(pid) for pid in ids[:team_size])
        side_b = tuple(Participant(pid) for pid in ids[team_size:])
        matches.append(Match(str(i), side_a, side_b, outcome, played_at=60.0 * i))
    return matches


def _openskill_rate(model_name: str, matches: list[Match], repeats: int) -> float | None:
    """openskill's ``rate`` over ``matches`` (its ratings kept in a dict), best of ``repeats``, or
    ``None`` when openskill is not installed."""
    try:
        import openskill.models as models
    except ImportError:
        return None
    model = getattr(models, OPENSKILL_CLASSES[model_name])()
    if model_name.endswith("_part"):
        model.window_size = 1  # the paper's neighbours
    ranks = {Outcome.SIDE_A_WON: [1, 2], Outcome.SIDE_B_WON: [2, 1], Outcome.DRAW: [1, 1]}

    def run() -> int:
        ratings: dict[str, Any] = {}
        for match in matches:
            sides = (match.side_a, match.side_b)
            teams = [[ratings.get(p.player_id) or model.rating() for p in side] for side in sides]
            rated = model.rate(teams, ranks=ranks[match.outcome])
            for side, new_side in zip((match.side_a, match.side_b), rated, strict=True):
                for participant, rating in zip(side, new_side, strict=True):
                    ratings[participant.player_id] = rating
        return len(matches)

    return best_rate(run, repeats)


def weng_lin_speed(matches: int = 20_000, repeats: int = 3, seed: int = 1,
                   models: Sequence[str] = ALL_MODELS) -> dict[str, Any]:
    """Matches per second (rounded) of each of ``models``' replay and fast replay for 1v1 and 5v5
    (``matches`` 1v1 matches, a fifth as many 5v5), with the Elo policy's replay and fast replay of
    the same matches and openskill's rate (or ``None``) measured in the same run, best of
    ``repeats``. Keys of each shape's row: ``elo_replay_per_s``, ``elo_fast_replay_per_s`` and, per
    model, ``<model>_replay_per_s``, ``<model>_fast_replay_per_s``, ``<model>_openskill_per_s``."""
    elo = RatingPolicy(k_factor=ConstantK(30.0))
    shapes = {
        "1v1": team_matches(matches, 1, 1000, seed),
        "5v5": team_matches(max(1, matches // 5), 5, 1000, seed + 1),
    }
    results: dict[str, Any] = {"matches_1v1": len(shapes["1v1"]), "matches_5v5": len(shapes["5v5"]),
                               "repeats": repeats, "unit": "matches per second"}
    for shape, shape_matches in shapes.items():
        def rate_of(fold: Any, policy: Any, ms: list[Match] = shape_matches) -> int:
            def run() -> int:
                fold(ms, policy)
                return len(ms)
            return round(best_rate(run, repeats))

        row: dict[str, Any] = {"elo_replay_per_s": rate_of(replay, elo),
                               "elo_fast_replay_per_s": rate_of(fast_replay, elo)}
        for model in models:
            policy = WengLinPolicy(model=model)
            row[f"{model}_replay_per_s"] = rate_of(replay, policy)
            row[f"{model}_fast_replay_per_s"] = rate_of(fast_replay, policy)
            openskill = _openskill_rate(model, shape_matches, repeats)
            row[f"{model}_openskill_per_s"] = None if openskill is None else round(openskill)
        results[shape] = row
    return results


def main(argv: list[str]) -> None:
    """Print :func:`weng_lin_speed`'s table (``argv[1]``: 1v1 matches, default 20,000)."""
    matches = int(argv[1]) if len(argv) > 1 else 20_000
    results = weng_lin_speed(matches)
    print(f"Weng-Lin engine speed (matches/s, best of {results['repeats']}; "
          f"{results['matches_1v1']} 1v1 and {results['matches_5v5']} 5v5 matches)")
    widths = (10, 10, 14, 10, 10, 14)
    print(f"{'model':<26} {'1v1 ours':>10} {'1v1 fast':>10} {'1v1 openskill':>14} {'5v5 ours':>10} "
          f"{'5v5 fast':>10} {'5v5 openskill':>14}")
    for model in ALL_MODELS:
        cells = [results[s][f"{model}_{k}_per_s"] for s in ("1v1", "5v5")
                 for k in ("replay", "fast_replay", "openskill")]
        print(f"{model:<26} " + " ".join(f"{'-' if c is None else c:>{w}}" for c, w in zip(cells, widths)))
    elo = [results[s][k] for s in ("1v1", "5v5") for k in ("elo_replay_per_s", "elo_fast_replay_per_s")]
    print(f"{'elo (same run baseline)':<26} {elo[0]:>10} {elo[1]:>10} {'':>14} {elo[2]:>10} {elo[3]:>10}")


if __name__ == "__main__":
    main(sys.argv)
