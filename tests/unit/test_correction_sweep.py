"""A correction's sweep over only the later matches it touches (engine/chronology.py).

``plan_corrections`` reads the later matches' players (``later_match_players``) and keeps, with their
rows, only those sharing a player with the correction (``affected_players``): the others, the sweep
skips. Here, on generated ladders, the sweep over that subset gives what the sweep over every later
match gives, and both give what an independent replay of every match in order-key order gives.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import ConstantK, Match, Outcome, Participant, RatingPolicy
from engine.chronology import LaterMatch, LaterRow, affected_players, sweep
from engine.replay import Standing, replay, replay_changes
from tests.profiles import examples

POLICY = RatingPolicy(k_factor=ConstantK(30), initial_rating=1200.0)
PLAYERS = [f"p{n}" for n in range(7)]
T0 = datetime(2026, 5, 1, tzinfo=UTC)
OUTCOMES = list(Outcome)


def to_engine(payload: dict) -> Match:
    """The test's payload ``{"id", "a", "b", "o"}`` as an engine match."""
    return Match(payload["id"], (Participant(payload["a"]),), (Participant(payload["b"]),), Outcome(payload["o"]))


pairs = st.lists(st.sampled_from(PLAYERS), min_size=2, max_size=2, unique=True)
stored_matches = st.lists(st.tuples(pairs, st.sampled_from(OUTCOMES)), max_size=14)
batch_matches = st.lists(st.tuples(pairs, st.sampled_from(OUTCOMES), st.integers(0, 15)), min_size=1, max_size=4)


@settings(max_examples=examples(300), deadline=None)
@given(stored_matches, batch_matches)
def test_the_sweep_over_the_touched_later_matches_is_the_sweep_over_all_and_the_replay(stored, batch) -> None:
    # stored matches 10 minutes apart, in key order, with their history rows as the service writes them
    payloads = [{"id": f"s{i:02}", "a": a, "b": b, "o": o.value} for i, ((a, b), o) in enumerate(stored)]
    keys = [(T0 + timedelta(minutes=10 * i), p["id"]) for i, p in enumerate(payloads)]
    current: dict[str, Standing] = {}
    stored_rows: list[list[LaterRow]] = []
    for payload in payloads:
        em = to_engine(payload)
        peaks = {pid: current[pid].peak_rating if pid in current else None for pid in em.player_ids()}
        _, changes = next(replay_changes([em], POLICY, current))
        stored_rows.append([LaterRow(len(stored_rows) * 2 + n, c.player_id, current[c.player_id].games_played,
                                     c.rating_before, c.result, peaks[c.player_id], None)
                            for n, c in enumerate(changes)])
    # the batch: matches between (or after) the stored ones, 5 minutes past a stored one's time
    last = {}
    for key, payload in zip(keys, payloads):
        last[payload["a"]] = last[payload["b"]] = key
    entries = []
    for n, ((a, b), o, slot) in enumerate(batch):
        key = (T0 + timedelta(minutes=10 * slot + 5), f"b{n}")
        entries.append((n, key, to_engine({"id": f"b{n}", "a": a, "b": b, "o": o.value})))
    entries.sort(key=lambda e: e[1])
    late = [key for _, key, em in entries if any(p in last and key < last[p] for p in em.player_ids())]
    if late:
        since = min(late)
    else:
        since = max([k for _, k, _ in entries])  # nothing stored after: an empty correction
    later = [LaterMatch(i, p["id"], k, json.dumps(p), list(rows), (p["a"], p["b"]))
             for i, (p, k, rows) in enumerate(zip(payloads, keys, stored_rows)) if k > since]
    affected = affected_players([(k, em.player_ids()) for _, k, em in entries], later, since)
    touched = [m for m in later if not affected.isdisjoint(m.players)]

    def copy(standings: dict[str, Standing]) -> dict[str, Standing]:
        return {p: Standing(s.rating, s.games_played, s.peak_rating, s.season, s.wins, s.draws, s.losses)
                for p, s in standings.items()}

    everything = sweep(POLICY, entries, later, copy(current), to_engine)
    subset = sweep(POLICY, entries, touched, copy(current), to_engine)
    assert subset.batch == everything.batch
    assert [(m.match_id, r) for m, r in subset.rerated] == [(m.match_id, r) for m, r in everything.rerated]
    assert subset.standings == everything.standings
    assert {m.match_id for m, _ in subset.rerated} <= {m.match_id for m in touched}
    assert set(subset.standings) <= affected | {p for _, k, em in entries for p in em.player_ids()}

    # an independent replay of every match, stored and batch, in order-key order, from the start
    in_order = sorted([(k, to_engine(p)) for k, p in zip(keys, payloads)] + [(k, em) for _, k, em in entries],
                      key=lambda t: t[0])
    expected = replay([em for _, em in in_order], POLICY)
    for pid, standing in subset.standings.items():
        want = expected[pid]
        assert (standing.rating, standing.games_played, standing.wins, standing.draws, standing.losses) == (
            want.rating, want.games_played, want.wins, want.draws, want.losses), pid
        assert standing.peak_rating == want.peak_rating, pid
