"""``ratings bench`` part: engine speed against elote and an inline Elo loop (no server)."""

from __future__ import annotations

import random
import time
from typing import Any

from worker.devtools.bench.common import BenchConfig, best_rate, progress
from worker.settings import get_settings

# --------------------------------------------------------------------------------------------
# part 4: engine speed


def _classic_pairs(count: int, players: int, seed: int) -> list[tuple[str, str, float]]:
    """``count`` seeded 1v1 results (player a, player b, a's score 1 / 0.5 / 0) among ``players``."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        a = rng.randrange(players)
        b = (a + 1 + rng.randrange(players - 1)) % players
        r = rng.random()
        pairs.append((f"p{a:05d}", f"p{b:05d}", 1.0 if r < 0.45 else 0.0 if r < 0.9 else 0.5))
    return pairs


def engine_speed(config: BenchConfig) -> dict[str, Any]:
    """Part 4: the engine's public call and replay paths against elote and an inline loop."""
    from engine import Match, Outcome, Participant, RatingPolicy, fast_replay, rate
    from engine.replay import replay
    from worker.mapping import to_engine_match
    from worker.ops.generate import generate_sedma_matches
    from worker.policy.ladders import load_ladders

    policies = load_ladders(get_settings().ladders_file)
    elo, sedma = policies["elo"], policies["sedma"]
    if not (isinstance(elo, RatingPolicy) and isinstance(sedma, RatingPolicy)):
        raise ValueError("the engine bench's ladders 'elo' and 'sedma' must be Elo policies")
    n = config.engine_matches
    repeats = config.repeats
    pairs = _classic_pairs(n, 1000, config.seed)
    outcome = {1.0: Outcome.SIDE_A_WON, 0.0: Outcome.SIDE_B_WON, 0.5: Outcome.DRAW}
    classic = [Match(str(i), (Participant(a),), (Participant(b),), outcome[s]) for i, (a, b, s) in enumerate(pairs)]
    sedma_count = max(1000, n // 4)
    sedma_1v1 = [to_engine_match(m.model_dump(mode="json"))
                 for m in generate_sedma_matches(sedma_count, players=1000, seed=config.seed, team_share=0.0)]
    sedma_mixed = [to_engine_match(m.model_dump(mode="json"))
                   for m in generate_sedma_matches(sedma_count, players=1000, seed=config.seed + 1, team_share=0.3)]
    standing = {p.player_id: 1200.0 + (i % 400) for i, m in enumerate(classic[:2000]) for p in m.side_a + m.side_b}
    sedma_standing = {pid: 1000.0 + (i % 900) for i, m in enumerate(sedma_1v1) for pid in m.player_ids()}

    def rate_all(matches, ratings, policy):
        def run():
            for m in matches:
                rate(m, ratings, policy)
            return len(matches)
        return run

    def replay_all(fn, matches, policy):
        def run():
            fn(matches, policy)
            return len(matches)
        return run

    def inline_loop():
        ratings: dict[str, float] = {}
        get = ratings.get
        for a, b, s in pairs:
            ra = get(a, 1200.0)
            rb = get(b, 1200.0)
            ea = 1.0 / (1.0 + 10.0 ** ((rb - ra) / 400.0))
            ratings[a] = ra + 30.0 * (s - ea)
            ratings[b] = rb + 30.0 * ((1.0 - s) - (1.0 - ea))
        return len(pairs)

    results: dict[str, Any] = {"matches": n, "sedma_matches": sedma_count, "repeats": repeats,
                               "unit": "matches per second"}
    progress.print("[bold]engine[/bold]: rate, replay, fast replay, elote, inline loop")
    results["classic_1v1"] = {
        "rate_per_s": best_rate(rate_all(classic, standing, elo), repeats),
        "replay_per_s": best_rate(replay_all(replay, classic, elo), repeats),
        "fast_replay_per_s": best_rate(replay_all(fast_replay.replay, classic, elo), repeats),
        "inline_loop_per_s": best_rate(inline_loop, repeats),
    }
    results["classic_1v1"]["elote_per_s"], results["elote_version"] = _elote_rate(pairs, repeats)
    results["sedma_1v1"] = {
        "rate_per_s": best_rate(rate_all(sedma_1v1, sedma_standing, sedma), repeats),
        "replay_per_s": best_rate(replay_all(replay, sedma_1v1, sedma), repeats),
        "fast_replay_per_s": best_rate(replay_all(fast_replay.replay, sedma_1v1, sedma), repeats),
    }
    results["sedma_mixed_30pct_2v2"] = {
        "replay_per_s": best_rate(replay_all(replay, sedma_mixed, sedma), repeats),
        "fast_replay_per_s": best_rate(replay_all(fast_replay.replay, sedma_mixed, sedma), repeats),
    }
    def rating_and_games(standings):
        return {p: (s.rating.hex(), s.games_played) for p, s in standings.items()}

    results["fast_replay_identical"] = all(
        rating_and_games(fast_replay.replay(ms, pol)) == rating_and_games(replay(ms, pol))
        for ms, pol in ((classic, elo), (sedma_1v1, sedma), (sedma_mixed, sedma))
    )
    results.update(_model_speed(pairs, elo, config))
    from engine.weng_lin import MODELS
    from worker.devtools.bench.weng_lin_speed import weng_lin_speed

    # A tenth of the matches, as the Glicko-2 paths without their own fold: rates are per second
    # whatever the count, and openskill's rate beside ours is slow.
    progress.print("[bold]engine[/bold]: Weng-Lin models beside Elo, 1v1 and 5v5")
    results["weng_lin"] = weng_lin_speed(max(1000, n // 10), repeats, config.seed + 3, MODELS)
    for group in ("classic_1v1", "sedma_1v1", "sedma_mixed_30pct_2v2"):
        results[group] = {k: (round(v) if isinstance(v, float) else v) for k, v in results[group].items()}
    return results


def _model_speed(pairs: list[tuple[str, str, float]], elo: Any, config: BenchConfig) -> dict[str, Any]:
    """Each model's engine rate in the same run: Glicko-2 (lichess defaults) beside the Elo
    ladder's policy, 1v1 (the same pairs as the classic figures, a match every 0 to 10 minutes)
    and 5v5 (seeded sides of 1,000 players). The paths without a fast fold (engine.rate, replay,
    5v5) run on a tenth of the matches (a twentieth for 5v5) so that the bench stays short; rates
    are per second whatever the count. ``glicko2_fast_replay_identical``: the Glicko-2 fast fold
    gave engine.replay's standings, every field bit for bit, on the 1v1 and the 5v5 matches."""
    from engine import Match, Outcome, Participant, fast_replay, rate
    from engine.glicko2 import Glicko2Policy
    from engine.replay import replay

    glicko2 = Glicko2Policy()
    rng = random.Random(config.seed + 2)
    outcome = {1.0: Outcome.SIDE_A_WON, 0.0: Outcome.SIDE_B_WON, 0.5: Outcome.DRAW}
    at = 1_600_000_000.0
    one_v_one = []
    for i, (a, b, s) in enumerate(pairs):
        at += rng.random() * 600
        one_v_one.append(Match(str(i), (Participant(a),), (Participant(b),), outcome[s], played_at=at))
    teams = []
    for i in range(max(200, len(pairs) // 20)):
        at += rng.random() * 600
        ids = [f"p{j:05d}" for j in rng.sample(range(1000), 10)]
        teams.append(Match(str(i), tuple(map(Participant, ids[:5])), tuple(map(Participant, ids[5:])),
                           rng.choice(list(Outcome)), played_at=at))
    short = one_v_one[:max(1000, len(one_v_one) // 10)]
    states = {pid: standing.state() for pid, standing in replay(short, glicko2).items()}
    repeats = config.repeats

    def timed(fn: Any, matches: list[Any], policy: Any) -> float:
        def run() -> int:
            fn(matches, policy)
            return len(matches)
        return round(best_rate(run, repeats))

    def cpu(fn: Any, matches: list[Any], policy: Any) -> float:
        """Matches per second of this process's CPU time, best of ``repeats``: on a machine shared
        with other work the wall-clock rate measures the share of a core the run got as well."""
        best = 0.0
        for _ in range(max(1, repeats)):
            started = time.process_time()
            fn(matches, policy)
            elapsed = time.process_time() - started
            best = max(best, len(matches) / elapsed if elapsed > 0 else float("inf"))
        return round(best)

    def rate_all() -> int:
        for m in short:
            rate(m, states, glicko2)
        return len(short)

    progress.print("[bold]engine[/bold]: Glicko-2 beside Elo, 1v1 and 5v5")
    identical = all(fast_replay.replay(ms, glicko2) == replay(ms, glicko2) for ms in (short, teams))
    return {
        "glicko2_1v1": {"rate_per_s": round(best_rate(rate_all, repeats)),
                        "replay_per_s": timed(replay, short, glicko2),
                        "fast_replay_per_s": timed(fast_replay.replay, one_v_one, glicko2),
                        "elo_fast_replay_per_s": timed(fast_replay.replay, one_v_one, elo),
                        "fast_replay_per_cpu_s": cpu(fast_replay.replay, one_v_one, glicko2),
                        "elo_fast_replay_per_cpu_s": cpu(fast_replay.replay, one_v_one, elo)},
        "glicko2_5v5": {"replay_per_s": timed(replay, teams, glicko2),
                        "fast_replay_per_s": timed(fast_replay.replay, teams, glicko2),
                        "elo_fast_replay_per_s": timed(fast_replay.replay, teams, elo)},
        "glicko2_fast_replay_identical": identical,
    }


def _elote_rate(pairs: list[tuple[str, str, float]], repeats: int) -> tuple[float | None, str | None]:
    """elote's ``EloCompetitor`` over ``pairs`` (K 30, initial 1200): best rate of ``repeats`` runs
    (matches per second) and elote's version; ``(None, None)`` when elote is not installed."""
    try:
        from elote import EloCompetitor
    except ImportError:
        progress.print("[yellow]elote is not installed[/yellow] (pip install -e '.[bench]'): no elote figure")
        return None, None
    from importlib.metadata import version

    def elote_loop():
        competitors: dict[str, EloCompetitor] = {}
        for a, b, s in pairs:
            ca = competitors.get(a)
            if ca is None:
                ca = competitors[a] = EloCompetitor(initial_rating=1200, k_factor=30)
            cb = competitors.get(b)
            if cb is None:
                cb = competitors[b] = EloCompetitor(initial_rating=1200, k_factor=30)
            if s == 1.0:
                ca.beat(cb)
            elif s == 0.0:
                cb.beat(ca)
            else:
                ca.tied(cb)
        return len(pairs)

    return best_rate(elote_loop, repeats), version("elote")
