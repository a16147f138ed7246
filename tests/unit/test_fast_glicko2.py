"""``engine.fast_glicko2`` against ``engine.replay`` under a Glicko-2 policy: the same standings,
bit for bit (an equivalence test of two folds; the Glicko-2 update itself is checked against the
paper and hand calculations in ``test_glicko2.py``)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

import engine.fast_replay as fast_replay
from engine.fast_glicko2 import Glicko2Replayer
from engine.glicko2 import Glicko2Policy
from engine.model import FreeForAll, Match, Outcome, Participant
from engine.replay import Standing, replay

POLICIES = [
    Glicko2Policy(),
    Glicko2Policy(initial_deviation=350.0, initial_volatility=0.06, tau=0.5, max_rating_change=None),
    Glicko2Policy(tau=0.3, min_deviation=60.0, max_rating_change=40.0, periods_per_day=5.0),
]


def bits(standings: dict[str, Standing]) -> dict[str, tuple[object, ...]]:
    """Each standing's fields, floats as hex: equal only when every bit is."""
    def h(x: object) -> object:
        return x.hex() if isinstance(x, float) else x
    return {pid: tuple(h(getattr(s, f)) for f in Standing.__slots__) for pid, s in standings.items()}  # type: ignore[attr-defined]


def ledger(count: int, players: int, seed: int, mixed: bool) -> list[Match | FreeForAll]:
    """Seeded matches in time order: 1v1 with draws, and when ``mixed`` also 2v2, uneven teams,
    three-side free-for-all, partial play, seasons, matches without a time, and repeated times."""
    rng = random.Random(seed)
    t = 1_600_000_000.0
    out: list[Match | FreeForAll] = []
    for i in range(count):
        t += rng.choice([0.0, rng.random() * 3 * 86_400, rng.random() * 200 * 86_400])
        at: float | None = None if mixed and rng.random() < 0.03 else t
        season = f"s{int(t // 30_000_000)}" if mixed and rng.random() < 0.5 else None
        outcome = rng.choice([Outcome.SIDE_A_WON, Outcome.SIDE_B_WON, Outcome.DRAW])
        ids = [f"p{j}" for j in rng.sample(range(players), 5)]
        shape = rng.random() if mixed else 0.0
        if shape < 0.7:
            weight = rng.choice([1.0, 0.5, 0.25]) if mixed and rng.random() < 0.1 else 1.0
            out.append(Match(str(i), (Participant(ids[0], weight=weight),), (Participant(ids[1]),), outcome,
                             season=season, played_at=at))
        elif shape < 0.85:
            out.append(Match(str(i), (Participant(ids[0]), Participant(ids[1])),
                             (Participant(ids[2]), Participant(ids[3]), Participant(ids[4], weight=0.5)),
                             outcome, season=season, played_at=at))
        else:
            out.append(FreeForAll(str(i), ((Participant(ids[0]),), (Participant(ids[1]), Participant(ids[2])),
                                           (Participant(ids[3]),)), tuple(rng.choice([1, 2, 2, 3]) for _ in range(3)),
                                  season=season, played_at=at))
    return out


def test_1v1_ledgers_replay_to_the_same_bits() -> None:
    """3,000 1v1 matches among 60 players (players meet again, deviations grow and shrink)."""
    matches = ledger(3000, 60, 1, mixed=False)
    for policy in POLICIES:
        assert bits(fast_replay.replay(matches, policy)) == bits(replay(matches, policy))


def test_mixed_ledgers_replay_to_the_same_bits() -> None:
    """Teams, free-for-all, partial play, seasons and matches without a time go through the
    general path on the same standings, interleaved with the fast 1v1 path."""
    matches = ledger(2000, 40, 2, mixed=True)
    for policy in POLICIES:
        assert bits(fast_replay.replay(matches, policy)) == bits(replay(matches, policy))


def test_feeding_in_pieces_is_feeding_at_once() -> None:
    """Feeding a ledger in several calls gives the standings of one call."""
    matches = ledger(900, 30, 3, mixed=True)
    replayer = Glicko2Replayer(POLICIES[0])
    for start in range(0, 900, 250):
        replayer.feed(matches[start:start + 250])
    assert replayer.matches == 900
    assert bits(replayer.standings()) == bits(replay(matches, POLICIES[0]))
    assert replayer.ratings() == {p: (s.rating, s.games_played) for p, s in replay(matches, POLICIES[0]).items()}


def test_the_factory_picks_the_glicko2_replayer() -> None:
    """engine.fast_replay.replayer hands a Glicko-2 policy to Glicko2Replayer."""
    assert isinstance(fast_replay.replayer(Glicko2Policy()), Glicko2Replayer)


@given(st.integers(0, 10_000), st.integers(3, 12), st.booleans(), st.sampled_from(POLICIES))
@settings(max_examples=40, deadline=None)
def test_generated_ledgers_replay_to_the_same_bits(seed: int, players: int, mixed: bool,
                                                    policy: Glicko2Policy) -> None:
    """Any seeded ledger, few players (so the same ones meet often), either shape mix."""
    matches = ledger(60, max(players, 5), seed, mixed)
    assert bits(fast_replay.replay(matches, policy)) == bits(replay(matches, policy))


def test_a_policy_without_a_fast_fold_replays_through_the_policy() -> None:
    """ChangesReplayer (the fold for other models) gives engine.replay's standings, fed in pieces."""
    matches = ledger(300, 20, 4, mixed=True)
    folded = fast_replay.ChangesReplayer(POLICIES[1]).feed(matches[:100]).feed(matches[100:])
    assert folded.matches == 300
    assert bits(folded.standings()) == bits(replay(matches, POLICIES[1]))
    assert folded.ratings() == {p: (s.rating, s.games_played) for p, s in folded.standings().items()}
