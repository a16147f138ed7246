"""Store: the rating transaction, one path for 1 to N messages.

Ledger check, ladder and player locks, rating, writes, dead letters, in one transaction."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import NamedTuple

import psycopg

from engine import FreeForAll, Match
from engine.chronology import OrderKey, Rated, Sweep, affected_players, deferred_matches, order_key, sweep
from worker.mapping import to_engine_match
from worker.outcome import Handled, Outcome
from worker.store.batch import (  # noqa: F401  (the batch's types: re-exported)
    BatchDeadLetter,
    BatchEntry,
    BatchMatch,
    classify,
    conflict_detail,
    record_dead_letters,
    record_duplicates,
)
from worker.store.connection import raise_if_connection_lost
from worker.store.corrections import (  # noqa: F401  (LedgerRace, CorrectionGrew: re-exported)
    BatchPlayers,
    CorrectionGrew,
    CorrectionPlan,
    CorrectionStart,
    HistoryRow,
    LedgerRace,
    LedgerRow,
    RatingRows,
    changed_players,
    keys_to_lock,
    model_columns,
    plan_corrections,
    record_corrections,
    settle_corrections,
    write_rating_rows,
)
from worker.store.events import event_id_for
from worker.store.ladders import LadderPolicy
from worker.store.locking import Key, PlayerLocks, lock_players, record_lock_waits
from worker.store.players import Announced, Player, Players, initial_state, last_keys
from worker.store.players import optional_float as _float
from worker.store.transaction import (  # noqa: F401  (TransactionTimeouts, transaction_timeouts: re-exported)
    DEFAULT_TIMEOUTS,
    LadderInForce,
    TransactionTimeouts,
    lock_ladders,
    set_local_timeouts,
    transaction_timeouts,
)


def apply_batch(
    conn: psycopg.Connection,
    entries: Sequence[BatchEntry],
    before_commit: Callable[[], None] | None = None,
    timeouts: TransactionTimeouts | None = None,
    before_correction_commit: Callable[[], None] | None = None,
) -> tuple[list[Handled], float | None]:
    """Apply 1 to N messages, in queue order, in one transaction: the only rating transaction.

    Returns each entry's :class:`worker.outcome.Handled` (same order) and the seconds spent waiting
    for the player row locks (None if no match was applied). Inside the one transaction
    (exactly once, events, no deadlock):

    1. every match id is looked up in the ledger at once; each entry is classified in queue order
       against the ledger *and the entries before it*: a match id seen with the same payload is a
       ``duplicate`` (recorded in ``duplicate_deliveries``), with another payload a
       ``conflicting_duplicate`` dead letter, and a task id seen before (in the ledger, the
       duplicate deliveries, the dead letters or earlier in the batch) is ``redelivered``;
    2. the shared per-ladder advisory lock is taken once per distinct ladder (sorted), and the
       policy in force and history generation of each ladder read after it; the missing player
       rows are created and the batch's player rows locked by
       :func:`worker.store.locking.lock_players`: at once when none is busy (``SKIP LOCKED`` in a
       savepoint); else all of them in the one global order (ladder, player_id) ``COLLATE "C"``,
       waiting at most ``timeouts.player_lock_wait_ms``, then the free ones without waiting. A
       match with a row still held by another
       transaction is *deferred* (:data:`worker.outcome.Outcome.DEFERRED`, reason ``player_locked``,
       the held rows in ``blocked_players``), and so is every later match of the batch sharing a
       player with a deferred one (per-player queue order); the busy rows' waits are appended to
       ``player_lock_waits``;
    3. each ladder's matches are rated by the engine's fold over typed player states
       (:class:`worker.store.players.Player`, whose :class:`engine.replay.Standing` the engine rates
       from): in order-key order merged with the stored matches a late match's correction re-rates
       (:func:`engine.chronology.sweep`; the same correction path as an annulment's,
       :mod:`worker.store.corrections`), or in queue order on an arrival-order ladder, so a player
       in several matches sees the earlier ones' results; each match gets its own
       ledger ``seq`` (queue order, after the locks), history rows, and typed
       :class:`schemas.RatingChanged` events whose per-player ``sequence`` grows by one per match;
    4. ledger, history and outbox rows, the players' new states and the ``NOTIFY`` go in one
       statement (:func:`worker.store.corrections.write_rating_rows`: data-modifying ``WITH``
       clauses over ``unnest`` of arrays sent in binary); duplicate deliveries and dead letters
       one multi-row statement each; ``before_correction_commit`` runs when the transaction
       re-rated stored matches (a correction), then ``before_commit``, then COMMIT. A transaction
       that applies matches without waiting is 10 statements, BEGIN and COMMIT included.

    ``timeouts`` (milliseconds) are applied first with ``SET LOCAL``, in the ledger lookup's
    statement (:func:`set_local_timeouts`; they end with the transaction:
    no session state, so the connection may come through PgBouncer in transaction mode), with
    ``idle_in_transaction_session_timeout`` (a frozen caller loses its session and locks), the
    server's TCP keepalives and the planner settings :data:`worker.store.transaction.KEYED_PLANS`
    (joins by index, whatever the statistics).

    ``conn`` must be in autocommit mode (this function owns the transaction). Raises
    :class:`LedgerRace` (after rolling back) when a concurrent transaction committed one of the
    batch's match ids first; ``psycopg.errors.LockNotAvailable`` past ``lock_timeout``;
    :class:`worker.store.connection.ConnectionLost` (an ``OperationalError``) when the connection
    broke under another error class (the server ended a frozen session, seen through PgBouncer); other
    ``psycopg.Error`` on database failures; :class:`engine.UnratableMatch` or ``ValueError`` from
    the engine; :class:`pydantic.ValidationError` if an event breaks the contract: nothing is
    written then.
    """
    results: list[Handled | None] = [None] * len(entries)
    try:
        with conn.transaction(), conn.cursor() as cur:
            match_ids = sorted({e.payload["match_id"] for e in entries if isinstance(e, BatchMatch)})
            stored = set_local_timeouts(cur, timeouts, match_ids)
            lock_wait = _classify_and_apply(cur, entries, stored, results, timeouts or DEFAULT_TIMEOUTS)
            if before_correction_commit is not None and any(r is not None and r.rerated for r in results):
                before_correction_commit()
            if before_commit is not None:
                before_commit()
    except psycopg.Error as exc:  # e.g. the session ended by idle_in_transaction_session_timeout
        raise_if_connection_lost(conn, exc)
        raise
    handled = [r for r in results if r is not None]
    if len(handled) != len(entries):  # a result shifted to another entry would ack the wrong message
        raise RuntimeError(f"{len(entries) - len(handled)} entries of the batch ended without a result")
    return handled, lock_wait


def _classify_and_apply(cur: psycopg.Cursor, entries: Sequence[BatchEntry], stored: dict[str, tuple[str, str | None]],
                        results: list[Handled | None], limits: TransactionTimeouts) -> float | None:
    """Steps 1 to 4 of :func:`apply_batch` (``stored``: the batch's match ids already in the ledger,
    ``{match_id: (payload_hash, task_id)}``); fills ``results``; returns the lock wait in seconds."""
    sorted_out = classify(entries, stored, results)
    to_apply = sorted_out.to_apply
    lock_wait = _apply_matches(
        cur, [e for i in to_apply if isinstance(e := entries[i], BatchMatch)], to_apply, results,
        limits) if to_apply else None
    record_duplicates(cur, entries, sorted_out.duplicates, results)
    record_dead_letters(cur, sorted_out.dead, results)
    if sorted_out.redelivered_applied:
        cur.execute(
            """UPDATE ledger l SET redeliveries = l.redeliveries + u.n
                 FROM (SELECT m, count(*)::int AS n FROM unnest(%b::text[]) AS m GROUP BY m) AS u
                WHERE l.match_id = u.m""",
            (sorted_out.redelivered_applied,),
        )
    return lock_wait


@dataclass(slots=True)
class _Pending:
    """A match of the batch to apply: its ``entry``, the engine's ``match`` and its ``players``,
    its place in the results (``position``), its order key (``key``, None on an arrival-order
    ladder), whether it is ``late`` and placed ``at_end``, and what the engine made of it."""

    entry: BatchMatch
    match: Match | FreeForAll
    position: int
    ladder: str
    match_id: str
    players: tuple[str, ...]
    key: OrderKey | None = None
    late: bool = False
    at_end: bool = False
    rated: Rated | None = None

    @classmethod
    def of(cls, entry: BatchMatch, position: int) -> _Pending:
        match = to_engine_match(entry.payload)
        return cls(entry, match, position, entry.payload["ladder"], entry.payload["match_id"], match.player_ids())

    def keys(self) -> list[Key]:
        """The match's player rows, (ladder, player_id)."""
        return [(self.ladder, pid) for pid in self.players]


def _apply_matches(cur: psycopg.Cursor, matches: list[BatchMatch], positions: list[int],
                   results: list[Handled | None], limits: TransactionTimeouts) -> float:
    """Steps 2 to 4 of :func:`apply_batch` for the matches to apply (queue order): lock, plan, rate,
    build the rows, write. Fills ``results`` at ``positions``; returns the lock wait in seconds.
    Raises :class:`LedgerRace`, and :class:`CorrectionGrew` (a subclass) when a correction's players
    cannot all be locked."""
    pending = [_Pending.of(m, p) for m, p in zip(matches, positions)]
    # lock: the ladders, then the players (and those a late match's correction re-rates)
    ladders, received_at = lock_ladders(cur, _configured(pending))
    _stamp_order_keys(pending, ladders, received_at)
    locks = _lock_players(cur, pending, ladders, limits)
    pending = _defer_blocked(cur, pending, locks, results)
    if not pending:
        return locks.players.seconds
    # plan: the corrections again under the locks; which matches are late, which go at the end
    players = {row.key: Player.from_row(row) for row in locks.players.rows}
    plans = settle_corrections(cur, players, lambda now: _late_starts(pending, last_keys(now), limits),
                               _batch_players(pending), ladders, limits)
    _place_late(pending, players, plans, received_at)
    # rate, build the rows, write
    sweeps = _rate(pending, players, plans, ladders)
    rows = _build_rows(cur, pending, players, plans, sweeps, ladders, received_at, results)
    _write(cur, rows, pending, results)
    return locks.players.seconds


def _stamp_order_keys(pending: Sequence[_Pending], ladders: dict[str, LadderInForce], received_at: datetime) -> None:
    """Give each match of a chronological ladder its order key (:func:`engine.chronology.order_key`)."""
    for p in pending:
        if ladders[p.ladder].chronological:
            p.key = order_key(p.entry.finished_at, received_at, p.match_id)


def _configured(pending: Sequence[_Pending]) -> dict[str, LadderPolicy]:
    """Each ladder's configured policy, as the batch's first match of it carried it."""
    configured: dict[str, LadderPolicy] = {}
    for p in pending:
        configured.setdefault(p.ladder, p.entry.ladder_policy)
    return configured


@dataclass(slots=True)
class _Locked:
    """What :func:`_lock_players` got: the ``players`` locks and the corrections planned before them."""

    players: PlayerLocks
    plans: dict[str, CorrectionPlan]


def _lock_players(cur: psycopg.Cursor, pending: Sequence[_Pending], ladders: dict[str, LadderInForce],
                  limits: TransactionTimeouts) -> _Locked:
    """Create the missing player rows, plan the corrections from the rows as committed (no lock,
    no history rows read: only which players they touch), then lock the batch's players and those
    (:func:`worker.store.locking.lock_players`). Rows another transaction holds are waited for a
    bounded time, then reported blocked: never the whole batch behind one player."""
    batch_keys = {key for p in pending for key in p.keys()}
    last_keys = _create_players(cur, sorted(batch_keys), ladders)
    plans = plan_corrections(cur, _late_starts(pending, last_keys, limits), _batch_players(pending), ladders,
                             payloads=False)
    locks = lock_players(cur, sorted(batch_keys | keys_to_lock(plans)), limits.player_lock_wait_ms,
                         limits.lock_timeout_ms)
    return _Locked(locks, plans)


def _create_players(cur: psycopg.Cursor, keys: list[Key], ladders: dict[str, LadderInForce]) -> dict[Key, OrderKey]:
    """Create the missing rows of ``keys`` (sorted, at their policy's initial rating) and read,
    without locks, the last order key of those that have one: a late match's correction reads the
    players it will touch before locking them all in order. One statement."""
    initial = [initial_state(ladders[ladder].policy, pid) for ladder, pid in keys]
    return {(r.ladder, r.player_id): (r.last_order_at, r.last_order_match) for r in map(_LastKey._make, cur.execute(
        """
        WITH u AS (SELECT * FROM unnest(%b::text[], %b::text[], %b::float8[], %b::float8[], %b::float8[])
                        AS u(l, p, r, d, v)),
             ins AS (INSERT INTO players (ladder, player_id, rating, peak_rating, deviation, volatility)
                     SELECT l, p, r, r, d, v FROM u
                      WHERE NOT EXISTS (SELECT 1 FROM players x WHERE x.ladder = u.l AND x.player_id = u.p)
                      ORDER BY l COLLATE "C", p COLLATE "C"
                     ON CONFLICT (ladder, player_id) DO NOTHING)
        SELECT x.ladder, x.player_id, x.last_order_at, x.last_order_match
          FROM u CROSS JOIN LATERAL (  -- one index lookup per player: OFFSET 0 keeps the planner from
                 -- reading the table whole when few rows have an order key (a Seq Scan, materialized)
                 SELECT * FROM players x WHERE x.ladder = u.l AND x.player_id = u.p AND x.last_order_at IS NOT NULL
                 OFFSET 0) AS x
        """,
        # (ladder, player_id) sorted: Python compares code points, as COLLATE "C" (UTF-8 bytes)
        ([k[0] for k in keys], [k[1] for k in keys], [float(s.rating) for s in initial],
         [_float(s.deviation) for s in initial], [_float(s.volatility) for s in initial]),
    ))}


class _LastKey(NamedTuple):
    """A row of :func:`_create_players`: a player's last order key."""

    ladder: str
    player_id: str
    last_order_at: datetime
    last_order_match: str


def _late_starts(pending: Sequence[_Pending], last_keys: dict[Key, OrderKey],
                 limits: TransactionTimeouts) -> list[CorrectionStart]:
    """Per chronological ladder with a late match (its order key below the last key of one of its
    players in ``last_keys``): where its correction starts, the earliest late match."""
    since: dict[str, tuple[OrderKey, str]] = {}
    for p in pending:
        key = p.key
        if key is None or not any(key < last_keys.get((p.ladder, pid), key) for pid in p.players):
            continue
        if p.ladder not in since or key < since[p.ladder][0]:
            since[p.ladder] = (key, p.match_id)
    return [CorrectionStart(ladder, cause, key, "late", limits.correction_max_matches)
            for ladder, (key, cause) in since.items()]


def _batch_players(pending: Sequence[_Pending]) -> BatchPlayers:
    """Per ladder, the (order key, player ids) of the batch's matches on a chronological ladder."""
    out: dict[str, list[tuple[OrderKey, tuple[str, ...]]]] = {}
    for p in pending:
        if p.key is not None:
            out.setdefault(p.ladder, []).append((p.key, p.players))
    return out


def _defer_blocked(cur: psycopg.Cursor, pending: list[_Pending], locks: _Locked,
                   results: list[Handled | None]) -> list[_Pending]:
    """Defer the matches that need a row another transaction still holds
    (:func:`engine.chronology.deferred_matches`), record the lock waits, and return the matches
    left to apply.

    A match from a correction's start on needs every row the correction re-rates because of it (its
    players and the stored matches after the start that share one with them), not the rows the
    batch's other matches bring in: it waits with the matches sharing them, the rest of the ladder
    goes on."""
    blocked = locks.players.blocked
    if not blocked:
        record_lock_waits(cur, locks.players.waits, {})
        return pending

    def rows_of(p: _Pending) -> list[Key]:
        plan = locks.plans.get(p.ladder)
        touched: set[str] = set(p.players)
        if plan is not None and p.key is not None and p.key >= plan.since:
            touched = affected_players([(p.key, touched)], plan.later, plan.since)
        return [(p.ladder, pid) for pid in touched]

    deferred = set(deferred_matches([rows_of(p) for p in pending], blocked))
    deferred_by: dict[Key, int] = {}
    for n in sorted(deferred):
        p = pending[n]
        blockers = sorted(set(p.keys()) & blocked)
        for key in blockers:
            deferred_by[key] = deferred_by.get(key, 0) + 1
        results[p.position] = Handled(Outcome.DEFERRED, "player_locked", p.match_id, p.ladder,
                                      blocked_players=tuple(f"{lad}/{pid}" for lad, pid in blockers))
    record_lock_waits(cur, locks.players.waits, deferred_by)
    return [p for n, p in enumerate(pending) if n not in deferred]


def _place_late(pending: Sequence[_Pending], players: Players, plans: dict[str, CorrectionPlan],
                received_at: datetime) -> None:
    """Mark the late matches: one that finished before an applied match of one of its players
    (arrival order), or whose order key is below a player's last one (chronological). Past the
    correction's bound they go at the end: their order key becomes the end of their players'
    histories (after the later of ``received_at`` and their players' last keys)."""
    end_at: dict[str, datetime] = {}
    for p in pending:
        mine = [players[key] for key in p.keys()]
        if p.key is None:
            last_finished = [pl.last_finished_at for pl in mine]
            p.late = any(last is not None and p.entry.finished_at < last for last in last_finished)
        else:
            p.late = any(pl.last_key is not None and p.key < pl.last_key for pl in mine)
        plan = plans.get(p.ladder)
        p.at_end = p.late and plan is not None and plan.at_end
        if p.at_end:
            after = max([received_at, end_at.get(p.ladder, received_at)]
                        + [pl.last_key[0] + _TICK for pl in mine if pl.last_key is not None])
            end_at[p.ladder] = after
            p.key = (after, p.match_id)


def _rate(pending: Sequence[_Pending], players: Players, plans: dict[str, CorrectionPlan],
          ladders: dict[str, LadderInForce]) -> dict[str, Sweep]:
    """Step 3: rate each ladder's matches with the engine, in order key order (chronological) merged
    with the stored matches a correction re-rates (:func:`engine.chronology.sweep`), or in queue
    order (arrival order), from the locked players' states. The sweep of each ladder, its batch
    entries by index in that order."""
    sweeps: dict[str, Sweep] = {}
    for ladder, in_force in ladders.items():
        mine = [p for p in pending if p.ladder == ladder]
        if in_force.chronological:
            mine.sort(key=attrgetter("key"))  # every match of a chronological ladder has its key
        plan = plans.get(ladder)
        current = {key[1]: pl.standing for key, pl in players.items() if key[0] == ladder}
        sweeps[ladder] = sweep(in_force.policy, [(n, p.key, p.match) for n, p in enumerate(mine)],
                               plan.later if plan is not None and not plan.at_end else [], current,
                               to_engine_match)
        for n, p in enumerate(mine):
            p.rated = sweeps[ladder].batch[n]
    return sweeps


def _build_rows(cur: psycopg.Cursor, pending: Sequence[_Pending], players: Players,
                plans: dict[str, CorrectionPlan], sweeps: dict[str, Sweep], ladders: dict[str, LadderInForce],
                received_at: datetime, results: list[Handled | None]) -> RatingRows:
    """What the transaction writes: the ledger rows, the matches' history rows and events, each
    correction's rows and events (its ``corrections`` row is inserted here: its id keys them) and the
    players' new states. Sets each applied match's result (its ledger seq comes with the write)."""
    rows = _ledger_rows(pending, players, ladders, received_at)
    rows.occurred_at = datetime.now(UTC)
    announced = {key: p.announced() for key, p in players.items()}
    _match_rows(pending, sweeps, announced, ladders, rows, results, received_at)
    for ladder in record_corrections(cur, plans, sweeps, announced, ladders, rows):
        _count_rerated(pending, plans[ladder], len(sweeps[ladder].rerated), results)
    rows.players = changed_players(players, sweeps, announced)
    return rows


def _ledger_rows(pending: Sequence[_Pending], players: Players, ladders: dict[str, LadderInForce],
                 received_at: datetime) -> RatingRows:
    """The batch's ledger rows (queue order), and each player's last finished_at and order key
    moved on by its matches."""
    rows = RatingRows()
    for p in pending:
        for key in p.keys():
            player = players[key]
            if p.key is not None and (player.last_key is None or p.key > player.last_key):
                player.last_key = p.key
            if player.last_finished_at is None or p.entry.finished_at > player.last_finished_at:
                player.last_finished_at = p.entry.finished_at
        m = p.entry
        rows.ledger.append(LedgerRow(
            p.match_id, p.ladder, m.payload_hash,
            m.payload_json or json.dumps(m.payload, ensure_ascii=False, separators=(",", ":")), m.finished_at,
            p.key[0] if p.key is not None else min(m.finished_at, received_at), p.late, p.at_end, m.task_id,
            ladders[p.ladder].policy.version or None, json.dumps(p.players, ensure_ascii=False)))
    return rows


def _match_rows(pending: Sequence[_Pending], sweeps: dict[str, Sweep], announced: dict[Key, Announced],
                ladders: dict[str, LadderInForce], rows: RatingRows, results: list[Handled | None],
                received_at: datetime) -> None:
    """The batch's history rows and ``match`` events (by ladder, in order key order, then queue
    order), each player's event ``sequence`` growing by one per match from what it was last
    announced (``announced``, updated); each match's result (applied)."""
    order = sorted(range(len(pending)), key=lambda n: (pending[n].ladder, pending[n].key or (received_at, ""), n))
    for n in order:
        p = pending[n]
        got = p.rated
        assert got is not None
        in_force = ladders[p.ladder]
        version = in_force.policy.version or None
        for change, sequence, peak, season, prior in zip(got.changes, got.games, got.peaks_before, got.seasons_before,
                                                         got.priors):
            event_id = event_id_for(p.match_id, change.player_id)
            rows.history.append(HistoryRow(
                None, p.match_id, p.ladder, change.player_id, sequence, float(change.rating_before),
                float(change.rating_after), float(change.expected_score), float(change.actual_score),
                float(change.k_factor), change.result, event_id, rows.occurred_at, in_force.generation, version,
                peak, season, *model_columns(change, prior)))
            key = (p.ladder, change.player_id)
            told = announced[key]
            announced[key] = Announced(change.rating_after, told.games + 1, told.sequence + 1)
            rows.match_events.append({
                "event_id": event_id, "match_id": p.match_id, "ladder": p.ladder, "change": change,
                "sequence": told.sequence + 1, "games_played": told.games + 1, "out_of_order": p.late,
            })
        results[p.position] = Handled(Outcome.APPLIED, None, p.match_id, p.ladder, p.late, 0, got.changes,
                                      placed_at_end=p.at_end)


def _count_rerated(pending: Sequence[_Pending], plan: CorrectionPlan, rerated: int,
                   results: list[Handled | None]) -> None:
    """The result of the match that caused a correction carries the stored matches it re-rated."""
    for p in pending:
        handled = results[p.position]
        if handled is not None and p.match_id == plan.cause:
            results[p.position] = dataclasses.replace(handled, rerated=rerated)


def _write(cur: psycopg.Cursor, rows: RatingRows, pending: Sequence[_Pending], results: list[Handled | None]) -> None:
    """Step 4: one statement writes it all (:func:`worker.store.corrections.write_rating_rows`);
    the ledger's seq (apply order) is taken in queue order, after the locks, and set on each
    match's result. Raises :class:`LedgerRace` when a concurrent delivery of one of these match ids
    committed first."""
    seqs = write_rating_rows(cur, rows)
    if len(seqs) != len(rows.ledger):
        raise LedgerRace(f"{len(rows.ledger) - len(seqs)} match id(s) committed concurrently")
    for p in pending:
        handled = results[p.position]
        assert handled is not None
        results[p.position] = dataclasses.replace(handled, seq=seqs[p.match_id])


_TICK = timedelta(microseconds=1)
"""PostgreSQL's timestamp resolution: a match placed at the end goes this much after its players' last."""
