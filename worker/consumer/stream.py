"""The rating-changed stream consumer: one member of a Redis consumer group that never misses an event
and never stalls.

Each :meth:`RatingEventConsumer.poll`:

1. takes over entries another member left pending longer than ``claim_idle_ms`` (XAUTOCLAIM: a dead
   member's work);
2. re-reads this member's own pending entries (a restart after a crash, a takeover; after a handler
   failure only the failed entry); entries the stream no longer holds (trimmed by MAXLEN, or XDEL)
   come back without fields: they are acknowledged and the consumer first catches up from the
   database (a *reconcile*, below). The first pending entries a process finds, and any it took
   over, also start with a reconcile: the member that read them may have died inside one (a
   reconcile runs before the entries that revealed a loss are acknowledged, so they stay pending
   until it completes, and whoever handles them next completes it);
3. only when nothing is pending, reads new entries; in the same MULTI it reads the group's last
   delivered id and the stream's first entry, so it knows when entries it never received were trimmed
   (reconcile first again);
4. for each event, in stream order: drops it when its ``event_id`` was handled or its ``sequence`` is
   not above the last one handled for its (ladder, player) (at-least-once delivery, see
   :mod:`worker.consumer.state`); on a gap (``sequence`` > last + 1) fetches the missing events from
   the backfill, or the player's snapshot if the outbox no longer keeps them; then calls the handler
   and acknowledges; a handler exception stops the batch (per-player order) and the entry is retried;
5. poison: the entry at the head of the pending list is *parked* when its handler failed
   ``max_deliveries`` times in this process, or when it was delivered more than ``max_deliveries``
   times (members died handling it): added with its error to the stream ``{stream}:{group}:parked``
   and acknowledged, so the group goes on (counted in :attr:`PollReport.parked`, logged at ERROR).

A reconcile reads every player's snapshot, then per ladder with a player behind the events the outbox
keeps after the lowest sequence needed, and brings each player behind up to the snapshot's sequence
(events when they are contiguous, else the snapshot then the later events). Its cost grows with the
players and with the events kept (``RATINGS_OUTBOX_RETENTION_DAYS``); it runs only after entries were
lost to trimming or deletion.

Server versions: Redis >= 6.2. Before 7.0 XAUTOCLAIM returns deleted entries as claimed entries
without fields; since 7.0 it drops them from the pending list and returns their ids apart
(redis/redis#10227). Both count as trimmed entries here.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from worker.consumer.backfill import Backfill
from worker.consumer.state import ConsumerState, MemoryState

log = logging.getLogger(__name__)

STREAM = "ratings.rating-changed"
"""Default stream name (``RATINGS_STREAM``)."""


@dataclass
class PollReport:
    """What the consumer did so far (cumulative over polls): entries ``read``, events ``handled``,
    ``duplicates`` dropped, ``claimed`` from other members, ``trimmed`` entries found without content,
    ``backfilled`` events handled from the backfill, ``snapshots`` applied, ``parked`` poison entries,
    ``failures`` of the handler, ``reconciles`` run, and the ``gaps`` seen as (ladder, player, last, got)."""

    read: int = 0
    handled: int = 0
    duplicates: int = 0
    claimed: int = 0
    trimmed: int = 0
    backfilled: int = 0
    snapshots: int = 0
    parked: int = 0
    failures: int = 0
    reconciles: int = 0
    gaps: list[tuple[str, str, int, int]] = field(default_factory=list)


def _text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


def _id_tuple(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def raw_reply(client: redis.Redis, *args: Any) -> Any:
    """Send one command on a connection of ``client``'s pool and return its reply as the server gives
    it, without redis-py's reply parser (which, for ``XAUTOCLAIM ... JUSTID``, drops the next cursor
    and parses the ids as entries). The connection is dropped on any error, as redis-py does."""
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        conn.send_command(*args)
        return conn.read_response()
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


def check_block_below_socket_timeout(client: redis.Redis, block_ms: int) -> None:
    """Raise ``ValueError`` when a blocking read of ``block_ms`` milliseconds would reach the
    client's ``socket_timeout`` (seconds; redis-py's default is 5 s from 8.0, none before): an idle
    stream would then look like a dead server (``TimeoutError`` at every poll). The socket timeout is
    what notices a Redis that froze (no reset, no answer): keep it, and keep the block time below it."""
    timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
    if timeout is not None and block_ms / 1000 >= timeout:
        raise ValueError(f"block_ms={block_ms} reaches the Redis client's socket_timeout ({timeout:g} s): "
                         "an idle stream would time out; block for less (1000 ms by default)")


class RatingEventConsumer:
    """Member ``consumer`` of consumer group ``group`` on ``stream``.

    ``handle(event)`` receives each RatingChanged event (a dict, as in ``schemas/json/rating_changed.v1.json``;
    on a ladder of a model with uncertainty it also has ``deviation_after`` and, Glicko-2, ``volatility_after``,
    with their ``_before`` in a match's event: read them with ``event.get`` so one handler serves every ladder);
    it may raise, and the entry is then delivered again on the next poll until ``max_deliveries``.
    ``on_snapshot(row)`` receives a player's current state (``ladder``, ``player_id``, ``rating``,
    ``sequence``, ``games_played``) when the events it missed are no longer kept; without it the
    consumer only advances its sequence. ``state`` defaults to a :class:`MemoryState`; ``backfill``
    (optional, e.g. :class:`worker.consumer.CliBackfill`) fills gaps and trimmed entries. Without a
    backfill, gaps are only recorded in :attr:`report`.

    ``claim_idle_ms``: pending entries of other members idle this long (milliseconds) are taken over.
    The group is created at id ``0`` (the whole stream) if it does not exist.
    """

    def __init__(self, client: redis.Redis, handle: Callable[[dict[str, Any]], None], *,
                 stream: str = STREAM, group: str = "consumers", consumer: str = "consumer-1",
                 state: ConsumerState | None = None, backfill: Backfill | None = None,
                 on_snapshot: Callable[[dict[str, Any]], None] | None = None,
                 claim_idle_ms: int = 30_000, max_deliveries: int = 5):
        self.client, self.handle, self.on_snapshot = client, handle, on_snapshot
        self.stream, self.group, self.consumer = stream, group, consumer
        self.state: ConsumerState = state if state is not None else MemoryState()
        self.backfill = backfill
        self.claim_idle_ms, self.max_deliveries = claim_idle_ms, max_deliveries
        self.parked_stream = f"{stream}:{group}:parked"
        self.report = PollReport()
        self._claim_cursor = "0-0"
        # True until this process has reconciled once after finding entries pending for it (its own
        # left by a dead process, or taken over): their reader may have died inside a reconcile.
        self._inherited_pending = True
        self._failures: dict[str, tuple[int, str]] = {}
        try:
            client.xgroup_create(stream, group, id="0", mkstream=True)
        except redis.ResponseError as exc:  # BUSYGROUP: the group exists already
            if "BUSYGROUP" not in str(exc):
                raise

    # ------------------------------------------------------------------ polling
    def poll(self, count: int = 100, block_ms: int = 1000) -> int:
        """Take over, re-read and read up to ``count`` entries each, and handle them; return how many
        entries were read (0: nothing to do after waiting up to ``block_ms`` milliseconds for new entries).

        Raises redis errors (connection; a Redis that froze: ``redis.TimeoutError`` after the
        client's ``socket_timeout``, so keep one: redis-py's default is 5 s from 8.0, none before) and backfill errors;
        ``ValueError`` when ``block_ms`` reaches the socket timeout. A handler's exception is caught,
        counted in :attr:`report` and the entry stays pending.
        """
        entries: list[tuple[str, dict | None]] = []
        reconcile = False
        claimed, deleted = self._autoclaim(count)
        self.report.claimed += len(claimed)
        if claimed:
            self._inherited_pending = True
        if deleted:
            self.report.trimmed += len(deleted)
            reconcile = True
        # After a handler failure only the failed entry is read again (the ones behind it keep their
        # delivery count); after a restart or a takeover, the whole pending list in order.
        pending: Any = self.client.xreadgroup(self.group, self.consumer, {self.stream: "0"},
                                         count=1 if self._failures else count)
        entries = [(_text(i), f) for i, f in (pending[0][1] if pending else [])]
        redelivered = bool(entries)
        if not redelivered:
            self._inherited_pending = False  # nothing pending for this member: nothing inherited
        elif self._inherited_pending and not self._failures and self.backfill is not None:
            reconcile = True
        if not entries:
            entries, trimmed_before = self._read_new(count)
            reconcile = reconcile or trimmed_before
        if not entries and not reconcile:
            self._wait(block_ms)
            return 0
        self.report.read += len(entries)
        gone = [entry_id for entry_id, fields in entries if not fields]  # the stream no longer holds them
        live = [(entry_id, fields) for entry_id, fields in entries if fields]
        if gone:
            self.report.trimmed += len(gone)
            self.client.xack(self.stream, self.group, *gone)
        if reconcile or gone:
            # Catch up with the database first: the entries below then mostly turn out to be duplicates.
            self.reconcile()
            self._inherited_pending = False
        for index, (entry_id, fields) in enumerate(live):
            if redelivered and index == 0 and self._poisoned(entry_id):
                self._park(entry_id, fields)
                continue
            try:
                event = json.loads(_text(fields.get(b"payload", fields.get("payload"))))
                self._deliver(event)
            except Exception as exc:  # noqa: BLE001 - any handler failure: retried, then parked
                self.report.failures += 1
                n, _ = self._failures.get(entry_id, (0, ""))
                self._failures[entry_id] = (n + 1, f"{type(exc).__name__}: {exc}")
                log.warning("event entry %s failed (%s); it stays pending", entry_id, self._failures[entry_id][1])
                break  # keep per-player order: retry this entry before any later one
            self.client.xack(self.stream, self.group, entry_id)
            self._failures.pop(entry_id, None)
        return max(len(live) + len(gone), 1)

    def run_until_idle(self, count: int = 100, block_ms: int = 200) -> PollReport:
        """Poll until a poll finds nothing to do; return :attr:`report`."""
        while self.poll(count=count, block_ms=block_ms):
            pass
        return self.report

    def _autoclaim(self, count: int) -> tuple[list[str], list[str]]:
        """XAUTOCLAIM entries idle ``claim_idle_ms`` (JUSTID: claimed ids, then read as own pending);
        returns (claimed ids, ids of deleted entries dropped by the server, Redis >= 7.0)."""
        # The server's reply as it is: [next cursor, claimed ids, deleted ids (Redis >= 7.0)]. Not
        # through EVAL: a least-privilege consumer may run XAUTOCLAIM on the stream, not scripts on it.
        reply = raw_reply(self.client, "XAUTOCLAIM", self.stream, self.group, self.consumer, self.claim_idle_ms,
                          self._claim_cursor, "COUNT", count, "JUSTID")
        self._claim_cursor = _text(reply[0])
        claimed = [_text(i) for i in reply[1]]
        deleted = [_text(i) for i in reply[2]] if len(reply) > 2 else []
        if claimed or deleted:
            log.info("claimed %d entries idle over %d ms (%d deleted)", len(claimed), self.claim_idle_ms, len(deleted))
        return claimed, deleted

    def _read_new(self, count: int) -> tuple[list[tuple[str, dict | None]], bool]:
        """Read new entries; True with them when entries the group never received were trimmed or deleted.

        In the same MULTI as the read: the group's last delivered id, the stream's first entry and
        XINFO STREAM. A loss: the first entry read is the stream's first entry and above the last
        delivered id (a false alarm when the last delivered entry itself was trimmed costs one reconcile,
        never an event); on Redis >= 7.0 also ``max-deleted-entry-id`` above the last delivered id
        (XDEL), and for a new group, ``entries-added`` above the stream's length (Redis 6.2: a new
        group reconciles once).
        """
        pipe = self.client.pipeline(transaction=True)
        pipe.xinfo_groups(self.stream)
        pipe.xinfo_stream(self.stream)
        pipe.xreadgroup(self.group, self.consumer, {self.stream: ">"}, count=count)
        pipe.xrange(self.stream, count=1)
        groups, info, reply, first = pipe.execute()
        last = next((_text(g.get("last-delivered-id")) for g in groups if _text(g["name"]) == self.group), "0-0")
        entries = [(_text(i), f) for i, f in (reply[0][1] if reply else [])]
        head = _id_tuple(_text(first[0][0])) if first else None
        # Entries after `last` were trimmed exactly when the next one read is now the stream's first entry
        # (MAXLEN trims from the head); false alarm when `last` itself was trimmed and nothing after it.
        lost = bool(entries and head is not None and head > _id_tuple(last) and head == _id_tuple(entries[0][0]))
        added = info.get("entries-added")  # Redis >= 7.0
        if last == "0-0" and added is not None:  # a new group: lost what was ever removed
            lost = bool(entries) and int(added) > int(info["length"])
        max_deleted = info.get("max-deleted-entry-id")  # Redis >= 7.0: XDEL (not MAXLEN trims)
        if max_deleted is not None and _id_tuple(_text(max_deleted)) > _id_tuple(last):
            lost = True
        return entries, lost

    def _wait(self, block_ms: int) -> None:
        """Block up to ``block_ms`` for a new entry without taking it (XREAD, no group)."""
        if block_ms > 0:
            check_block_below_socket_timeout(self.client, block_ms)
            self.client.xread({self.stream: "$"}, count=1, block=block_ms)

    def _poisoned(self, entry_id: str) -> bool:
        """True when the entry at the head of this member's pending list failed ``max_deliveries`` times in
        this process, or was delivered more than ``max_deliveries`` times (members died handling it)."""
        if self._failures.get(entry_id, (0, ""))[0] >= self.max_deliveries:
            return True
        rows = self.client.xpending_range(self.stream, self.group, min=entry_id, max=entry_id, count=1)
        return bool(rows) and int(rows[0]["times_delivered"]) > self.max_deliveries

    def _park(self, entry_id: str, fields: dict) -> None:
        """Add the entry with its error to :attr:`parked_stream` and acknowledge it."""
        rows = self.client.xpending_range(self.stream, self.group, min=entry_id, max=entry_id, count=1)
        deliveries = int(rows[0]["times_delivered"]) if rows else 0
        failures, error = self._failures.pop(
            entry_id, (0, "delivered too often without success (members died handling it)"))
        self.client.xadd(self.parked_stream, {
            "entry_id": entry_id, "event_id": _text(fields.get(b"event_id", fields.get("event_id"))),
            "payload": _text(fields.get(b"payload", fields.get("payload"))), "error": error,
            "consumer": self.consumer, "deliveries": deliveries, "failures": failures,
        })
        self.client.xack(self.stream, self.group, entry_id)
        self.report.parked += 1
        log.error("parked event entry %s on %s after %d deliveries: %s",
                  entry_id, self.parked_stream, deliveries, error)

    # ------------------------------------------------------------------ events
    def _deliver(self, event: dict[str, Any]) -> None:
        ladder, player, sequence = event["ladder"], event["player_id"], int(event["sequence"])
        last = self.state.last_sequence(ladder, player)
        if sequence <= last or self.state.seen(str(event["event_id"])):
            self.report.duplicates += 1
            return
        if sequence > last + 1:
            self.report.gaps.append((ladder, player, last, sequence))
            log.info("gap for %s/%s: last sequence %d, got %d", ladder, player, last, sequence)
            if self.backfill is not None:
                missing = [e for e in self.backfill.events(ladder, player, last) if int(e["sequence"]) < sequence]
                self._catch_up(ladder, player, last, missing)
                if sequence <= self.state.last_sequence(ladder, player):
                    self.report.duplicates += 1
                    return
        self._apply(event)

    def _apply(self, event: dict[str, Any]) -> None:
        self.handle(event)
        self.state.record(event)
        self.report.handled += 1

    def _catch_up(self, ladder: str, player: str, last: int, events: list[dict[str, Any]],
                  snapshot: dict[str, Any] | None = None) -> None:
        """Bring (ladder, player) from sequence ``last`` forward with ``events`` (that player's events
        kept by the outbox, any order); when they do not start at ``last + 1`` (pruned), apply the
        player's snapshot first (``snapshot`` or read from the backfill)."""
        events = sorted((e for e in events if int(e["sequence"]) > last), key=lambda e: int(e["sequence"]))
        if not events or int(events[0]["sequence"]) != last + 1:
            if snapshot is None and self.backfill is not None:
                snapshot = next(iter(self.backfill.snapshot(ladder, player)), None)
            if snapshot is not None and int(snapshot["sequence"]) > last:
                if self.on_snapshot is not None:
                    self.on_snapshot(snapshot)
                self.state.advance(ladder, player, int(snapshot["sequence"]))
                self.report.snapshots += 1
                last = int(snapshot["sequence"])
        for e in events:
            seq = int(e["sequence"])
            if seq <= last:
                continue
            if seq != last + 1:
                break  # the rest arrives on the stream (or the next reconcile)
            self._apply(e)
            self.report.backfilled += 1
            last = seq

    def reconcile(self) -> None:
        """Catch every player up with the database after entries were lost to trimming (needs a backfill;
        without one only counted in :attr:`report`)."""
        self.report.reconciles += 1
        if self.backfill is None:
            log.warning("entries were trimmed before this group read them and no backfill is configured")
            return
        snapshots = {(s["ladder"], s["player_id"]): s for s in self.backfill.snapshot()}
        behind: dict[str, dict[str, int]] = defaultdict(dict)  # ladder -> player -> last sequence held
        for (ladder, player), snap in snapshots.items():
            last = self.state.last_sequence(ladder, player)
            if int(snap["sequence"]) > last:
                behind[ladder][player] = last
        for ladder, players in sorted(behind.items()):
            # One read per ladder, from the lowest sequence a player behind needs.
            events = defaultdict(list)
            for e in self.backfill.events(ladder, None, min(players.values())):
                if e["player_id"] in players:
                    events[e["player_id"]].append(e)
            for player, last in sorted(players.items()):
                mine = events.get(player, [])
                contiguous = any(int(e["sequence"]) == last + 1 for e in mine)
                self._catch_up(ladder, player, last, mine, None if contiguous else snapshots[(ladder, player)])
        log.info("reconciled with the database: %d players behind of %d",
                 sum(len(p) for p in behind.values()), len(snapshots))
