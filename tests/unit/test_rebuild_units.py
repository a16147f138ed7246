"""Pieces of `ratings rebuild` that need no server: rebuild events, history rows, stored policies."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest

from engine.replay import Standing, replay
from worker import store as repository
from worker.mapping import to_engine_match
from worker.ops.rebuild import ORDERS, _Fold, history_row
from worker.policy.config import config_of
from worker.policy.ladders import load_ladders
from worker.policy.stored import PolicyUnavailable, ladder_contents, policy_from_content
from worker.settings import DEFAULT_LADDERS_FILE

NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)


def payload(match_id, a, b, outcome="side_a_won"):
    side = lambda ps: {"players": [{"player_id": p} for p in ([ps] if isinstance(ps, str) else ps)]}  # noqa: E731
    return {"schema_version": 1, "match_id": match_id, "ladder": "elo", "finished_at": "2026-05-01T12:00:00Z",
            "side_a": side(a), "side_b": side(b), "outcome": outcome}


def test_rebuild_event_ids_are_deterministic_and_never_a_match_events_id():
    """Same rebuild and player: same id; another rebuild: another id; never event_id_for(...)."""
    assert repository.rebuild_event_id(3, "p") == repository.rebuild_event_id(3, "p")
    assert repository.rebuild_event_id(3, "p") != repository.rebuild_event_id(4, "p")
    assert repository.rebuild_event_id(3, "p") != repository.event_id_for("3", "p")
    assert repository.rebuild_event_id(3, "p") != repository.event_id_for("rebuild", "3\x1fp")


def test_the_fold_keeps_each_ledger_seq_with_its_match_and_matches_the_replay():
    """_Fold.run pairs every match with its own seq (1v1 and 2v2), and its standings equal
    engine.replay.replay over the same matches; history rows number each player's matches."""
    policy = load_ladders(DEFAULT_LADDERS_FILE)["elo"]
    rows = [(10, payload("a", "x", "y")), (12, payload("b", ["x", "z"], ["y", "w"], "draw")),
            (15, payload("c", "y", "x", "side_b_won"))]
    fold = _Fold(policy, {}, {})
    out = list(fold.run(iter(rows)))
    assert [(seq, m.match_id) for seq, m, _ in out] == [(10, "a"), (12, "b"), (15, "c")]
    expected = replay([to_engine_match(p) for _, p in rows], policy)
    assert {p: (s.rating, s.games_played) for p, s in fold.standings.items()} == \
        {p: (s.rating, s.games_played) for p, s in expected.items()}
    assert fold.matches == 3 and fold.last["x"][0] == "c" and fold.last["z"][0] == "b"
    seq, match, changes = out[2]
    row = history_row(seq, match, changes[0], "elo", Standing(1.0, games_played=3), NOW, 9, "v1")
    assert row[:5] == (15, "c", "elo", "y", 3) and row[11] is None and row[13:17] == (9, "v1", None, None)
    assert row[17:] == (None,) * 6  # an Elo change: no deviation, volatility or prior state
    assert ORDERS == ("applied", "finished-at")


def test_a_stored_policy_reads_back_as_the_file_policy_with_the_stored_version():
    """policies.content is the config's canonical(): it reads back to the same engine policy, for
    every model of the shipped ladders file."""
    contents = ladder_contents(DEFAULT_LADDERS_FILE)
    for ladder, policy in load_ladders(DEFAULT_LADDERS_FILE).items():
        assert config_of(contents[ladder]).version() == policy.version
        assert policy_from_content(policy.version, contents[ladder]) == policy


def test_a_policy_this_release_cannot_read_is_a_transient_error():
    """Content from a newer release (an unknown key) raises PolicyUnavailable, an OperationalError,
    so a worker retries and requeues the message instead of dead-lettering it."""
    content = {**ladder_contents(DEFAULT_LADDERS_FILE)["elo"], "rating_floor": 100}
    with pytest.raises(PolicyUnavailable) as raised:
        policy_from_content("from-the-future", content)
    assert isinstance(raised.value, psycopg.OperationalError)
