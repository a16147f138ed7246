"""Store: the rating transaction, one path for 1 to N messages.

Ledger check, ladder and player locks, rating, writes, dead letters, in one transaction."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from engine.replay import Standing
from worker.mapping import to_engine_match
from worker.outcome import Handled, Outcome
from worker.store.chronology import (
    OrderKey,
    Rated,
    Sweep,
    affected_players,
    order_key,
    sweep,
)
from worker.store.connection import raise_if_connection_lost
from worker.store.corrections import plan_corrections, record_correction, write_rating_rows
from worker.store.dead_letters import _dead_letter_text
from worker.store.events import (
    correction_events_json,
    event_id_for,
    match_events_json,
)
from worker.store.ladders import LADDER_LOCK_CLASS, LadderPolicy, ladder_in_force, ladder_records
from worker.store.locking import deferred_matches, lock_players, record_lock_waits
from worker.store.transaction import (  # noqa: F401  (TransactionTimeouts, transaction_timeouts: re-exported)
    DEFAULT_TIMEOUTS,
    TransactionTimeouts,
    set_local_timeouts,
    transaction_timeouts,
)


@dataclass(frozen=True, slots=True)
class BatchMatch:
    """A validated match of a batch: canonical JSON ``payload``, its sha256 ``payload_hash``, its
    ladder's configured policy (``ladder_policy``), the Celery ``task_id`` of the message that carried it."""

    payload: dict[str, Any]
    payload_hash: str
    finished_at: datetime
    ladder_policy: LadderPolicy
    task_id: str | None
    raw_body: str | bytes | None = None
    """The message as received (kept verbatim if it turns out to be a conflicting duplicate)."""
    payload_json: str | None = None
    """``payload`` as JSON text (the canonical JSON), if the caller has it: stored in the ledger."""


@dataclass(frozen=True, slots=True)
class BatchDeadLetter:
    """A message of a batch that failed before the transaction (validation, or a permanent error of
    its own): it becomes a dead letter (``reason_code``, ``detail``, the raw body as text or bytes)
    in the batch's transaction."""

    reason_code: str
    detail: str
    raw_body: str | bytes
    match_id: str | None
    task_id: str | None


BatchEntry = BatchMatch | BatchDeadLetter


class LedgerRace(Exception):
    """A concurrent transaction committed a match id this batch was about to apply; the batch
    rolled back and is classified again (the caller retries it)."""


def conflict_detail(match_id: str, stored_hash: str, payload_hash: str) -> str:
    """The dead-letter detail of a ``conflicting_duplicate``: what happened and what to change."""
    return (f"match_id {match_id!r} was already applied with another payload (stored sha256 {stored_hash}, "
            f"this one {payload_hash}); a match id must never be reused for a different match")


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
    (DESIGN.md invariants 1, 4 and 5):

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
       ``player_lock_waits`` (issue 15);
    3. each ladder's matches are rated in queue order by the engine's fold
       (:func:`engine.replay.replay_changes`) over typed player states (:class:`engine.replay.Standing`),
       so a player in several matches sees the earlier ones' results; each match gets its own
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
    return results, lock_wait  # type: ignore[return-value]


def _classify_and_apply(cur: psycopg.Cursor, entries: Sequence[BatchEntry], stored: dict[str, tuple[str, str | None]],
                        results: list[Handled | None], limits: TransactionTimeouts) -> float | None:
    """Steps 1 to 4 of :func:`apply_batch` (``stored``: the batch's match ids already in the ledger,
    ``{match_id: (payload_hash, task_id)}``); fills ``results``; returns the lock wait in seconds."""

    # 1. classify in queue order
    seen_tasks: set[str] = set()
    to_apply: list[int] = []
    in_batch: dict[str, tuple[str, str | None]] = {}
    redelivered_applied: list[str] = []
    duplicates: list[int] = []
    dead: list[tuple[int, str, str, str | bytes, str | None, str | None]] = []
    for i, entry in enumerate(entries):
        task_id = entry.task_id
        if task_id is not None:
            if task_id in seen_tasks:  # the same message twice in one batch (requeued meanwhile)
                results[i] = Handled(Outcome.REDELIVERED, None, entry.match_id if isinstance(entry, BatchDeadLetter)
                                     else entry.payload["match_id"])
                continue
            seen_tasks.add(task_id)
        if isinstance(entry, BatchDeadLetter):
            dead.append((i, entry.reason_code, entry.detail, entry.raw_body, entry.match_id, task_id))
            continue
        match_id = entry.payload["match_id"]
        prior = in_batch.get(match_id) or stored.get(match_id)
        if prior is None:
            in_batch[match_id] = (entry.payload_hash, task_id)
            to_apply.append(i)
            continue
        prior_hash, applied_by = prior
        if task_id is not None and applied_by == task_id:
            redelivered_applied.append(match_id)
            results[i] = Handled(Outcome.REDELIVERED, None, match_id, entry.payload["ladder"])
        elif prior_hash != entry.payload_hash:
            raw = entry.raw_body if entry.raw_body is not None else json.dumps(entry.payload, ensure_ascii=False)
            dead.append((i, "conflicting_duplicate", conflict_detail(match_id, prior_hash, entry.payload_hash),
                         raw, match_id, task_id))
        else:
            duplicates.append(i)

    lock_wait = _apply_matches(
        cur, [e for i in to_apply if isinstance(e := entries[i], BatchMatch)], to_apply, results,
        limits) if to_apply else None

    # the other outcomes, one statement each
    if duplicates:
        rows = cur.execute(
            """INSERT INTO duplicate_deliveries (match_id, task_id)
               SELECT m, t FROM unnest(%b::text[], %b::text[]) WITH ORDINALITY AS u(m, t, n) ORDER BY n
               ON CONFLICT (task_id) WHERE task_id IS NOT NULL DO NOTHING RETURNING task_id""",
            ([entries[i].payload["match_id"] for i in duplicates], [entries[i].task_id for i in duplicates]),
        ).fetchall()
        recorded = {t for (t,) in rows}
        for i in duplicates:
            entry = entries[i]
            outcome = Outcome.DUPLICATE if entry.task_id is None or entry.task_id in recorded else Outcome.REDELIVERED
            results[i] = Handled(outcome, None, entry.payload["match_id"], entry.payload["ladder"])
    if dead:
        texts = [_dead_letter_text(raw) for _, _, _, raw, _, _ in dead]
        rows = cur.execute(
            """INSERT INTO dead_letters (reason_code, detail, match_id, raw_body, raw_encoding, task_id)
               SELECT r, d, m, b, e, t
                 FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[])
                      WITH ORDINALITY AS u(r, d, m, b, e, t, n) ORDER BY n
               ON CONFLICT (task_id) WHERE task_id IS NOT NULL DO NOTHING RETURNING task_id""",
            ([d[1] for d in dead], [d[2].replace("\x00", "\\x00") for d in dead], [d[4] for d in dead],
             [t for t, _ in texts], [e for _, e in texts], [d[5] for d in dead]),
        ).fetchall()
        recorded = {t for (t,) in rows}
        for i, reason, _detail, _raw, match_id, task_id in dead:
            results[i] = (Handled(Outcome.DEAD_LETTER, reason, match_id) if task_id is None or task_id in recorded
                          else Handled(Outcome.REDELIVERED, reason, match_id))
    if redelivered_applied:
        cur.execute(
            """UPDATE ledger l SET redeliveries = l.redeliveries + u.n
                 FROM (SELECT m, count(*)::int AS n FROM unnest(%b::text[]) AS m GROUP BY m) AS u
                WHERE l.match_id = u.m""",
            (redelivered_applied,),
        )
    return lock_wait


def _apply_matches(cur: psycopg.Cursor, matches: list[BatchMatch], positions: list[int],  # noqa: C901  (restructured by the rating transaction work)
                   results: list[Handled | None], limits: TransactionTimeouts) -> float:
    """Steps 2 to 4 of :func:`apply_batch` for the matches to apply (queue order); fills ``results``
    at ``positions``; returns the lock wait in seconds. Raises :class:`LedgerRace`, and
    :class:`CorrectionGrew` (a subclass) when the players a correction touches grew between the read
    before the locks and the read under them."""
    engine_matches = [to_engine_match(m.payload) for m in matches]
    configured: dict[str, LadderPolicy] = {}
    keys: set[tuple[str, str]] = set()
    for m, em in zip(matches, engine_matches):
        ladder = m.payload["ladder"]
        configured.setdefault(ladder, m.ladder_policy)
        keys.update((ladder, pid) for pid in em.player_ids())
    ladders = sorted(configured)
    # A rebuild of a ladder holds the exclusive form while it switches over; the policy in force,
    # the history generation and the replay order are read after the lock (a fresh snapshot).
    received_at = cur.execute(
        "SELECT count(pg_advisory_xact_lock_shared(%b, hashtext(l))), now() FROM unnest(%b::text[]) AS l",
        (LADDER_LOCK_CLASS, ladders)).fetchone()[1]
    records = ladder_records(cur, ladders)
    in_force = {ladder: ladder_in_force(cur, ladder, configured[ladder].policy, configured[ladder].content, records)
                for ladder in ladders}
    policies = {ladder: policy for ladder, (policy, _, _) in in_force.items()}
    chronological = {ladder for ladder, (_, _, order) in in_force.items() if order != "applied"}
    match_keys: list[OrderKey | None] = [
        order_key(m.finished_at, received_at, m.payload["match_id"]) if m.payload["ladder"] in chronological
        else None for m in matches]
    order = sorted(keys)  # (ladder, player_id): Python compares code points, as COLLATE "C" (UTF-8 bytes)
    # Creates the missing rows and reads, without locks, the last order key of the batch's players:
    # a late match's correction reads the players it will touch before locking them all in order.
    last_keys = {(lad, pid): (at, mid) for lad, pid, at, mid in cur.execute(
        """
        WITH u AS (SELECT * FROM unnest(%b::text[], %b::text[], %b::float8[]) AS u(l, p, r)),
             ins AS (INSERT INTO players (ladder, player_id, rating, peak_rating)
                     SELECT l, p, r, r FROM u
                      WHERE NOT EXISTS (SELECT 1 FROM players x WHERE x.ladder = u.l AND x.player_id = u.p)
                      ORDER BY l COLLATE "C", p COLLATE "C"
                     ON CONFLICT (ladder, player_id) DO NOTHING)
        SELECT x.ladder, x.player_id, x.last_order_at, x.last_order_match
          FROM u CROSS JOIN LATERAL (  -- one index lookup per player: OFFSET 0 keeps the planner from
                 -- reading the table whole when few rows have an order key (a Seq Scan, materialized)
                 SELECT * FROM players x WHERE x.ladder = u.l AND x.player_id = u.p AND x.last_order_at IS NOT NULL
                 OFFSET 0) AS x
        """,
        ([k[0] for k in order], [k[1] for k in order], [float(policies[k[0]].initial_for(k[1])) for k in order]),
    )}
    plans = plan_corrections(cur, matches, engine_matches, match_keys, last_keys, in_force,
                             limits.correction_max_matches, payloads=False)
    extra = sorted({(lad, pid) for lad, plan in plans.items() for pid in plan.affected} - keys)
    # Rows another transaction holds are waited for a bounded time, then their matches deferred
    # (worker/store/locking.py): never the whole batch behind one player.
    locks = lock_players(cur, sorted(keys | set(extra)), limits.player_lock_wait_ms, limits.lock_timeout_ms)
    rows, lock_wait = locks.rows, locks.seconds
    if locks.blocked:
        # A match from a correction's start on needs every row the correction re-rates because of
        # it (its players and the stored matches after the start that share one with them, as
        # affected_players reckons for the whole batch), not the rows the batch's other matches
        # bring in: it waits with the matches sharing them, the rest of the ladder goes on.
        def rows_of(m: BatchMatch, em: Any, key: OrderKey | None) -> list[tuple[str, str]]:
            ladder = m.payload["ladder"]
            plan = plans.get(ladder)
            touched = set(em.player_ids())
            if plan is not None and key is not None and key >= plan.since:
                touched = affected_players([(key, touched)], plan.later, plan.since)
            return [(ladder, pid) for pid in touched]

        deferred = set(deferred_matches([rows_of(m, em, k) for m, em, k in zip(matches, engine_matches, match_keys)],
                                        locks.blocked))
        deferred_by: dict[tuple[str, str], int] = {}
        for n in sorted(deferred):
            m = matches[n]
            blockers = sorted({(m.payload["ladder"], pid) for pid in engine_matches[n].player_ids()} & locks.blocked)
            for key in blockers:
                deferred_by[key] = deferred_by.get(key, 0) + 1
            results[positions[n]] = Handled(Outcome.DEFERRED, "player_locked", m.payload["match_id"],
                                            m.payload["ladder"],
                                            blocked_players=tuple(f"{lad}/{pid}" for lad, pid in blockers))
        keep = [n for n in range(len(matches)) if n not in deferred]
        matches = [matches[n] for n in keep]
        engine_matches = [engine_matches[n] for n in keep]
        positions = [positions[n] for n in keep]
        match_keys = [match_keys[n] for n in keep]
        record_lock_waits(cur, locks.waits, deferred_by)
        if not matches:
            return lock_wait
    else:
        record_lock_waits(cur, locks.waits, {})
    # Typed player states per ladder, and what the engine does not track: the last finished_at, the
    # last order key, and the extra events (a player's event sequence is games played + extra events:
    # rebuild and correction events).
    # Under the locks: the corrections again, from what is committed now. Players a correction now
    # needs beyond those locked (matches committed between the read and the locks) are locked too,
    # out of the global order (a deadlock, if it happens, is a transient error retried), until the
    # set stops growing: retrying the whole batch instead would race the other workers again.
    locked = {(r[0], r[1]) for r in rows}
    for _ in range(MAX_LOCK_ROUNDS):
        last_keys = {(r[0], r[1]): (r[11], r[12]) for r in rows if r[11] is not None}
        plans = plan_corrections(cur, matches, engine_matches, match_keys, last_keys, in_force,
                                 limits.correction_max_matches, {(r[0], r[1]): r[3] for r in rows})
        grown = {(lad, pid) for lad, plan in plans.items() for pid in plan.affected} - locked
        if not grown:
            break
        # queue=False: this transaction holds its ladders' queue lock already (shared or exclusive);
        # asking for it exclusively again while peers hold it shared could close a cycle with them
        more = lock_players(cur, sorted(grown), limits.player_lock_wait_ms, limits.lock_timeout_ms, queue=False)
        if more.blocked:
            raise CorrectionGrew(f"a correction needs {len(more.blocked)} player row(s) another transaction holds")
        rows = rows + more.rows
        locked |= grown
    else:
        raise CorrectionGrew(f"the players a correction needs kept growing ({MAX_LOCK_ROUNDS} rounds)")
    standings: dict[str, dict[str, Standing]] = {ladder: {} for ladder in ladders}
    last_finished: dict[tuple[str, str], datetime | None] = {}
    extra_events: dict[tuple[str, str], int] = {}
    for lad, pid, rating, games, last, peak, season, rebuilds, wins, draws, losses, _at, _mid in rows:
        standings[lad][pid] = Standing(rating, games, peak, season, wins, draws, losses)
        last_finished[(lad, pid)] = last
        extra_events[(lad, pid)] = rebuilds

    # Late matches: one that finished before an applied match of one of its players (arrival
    # order), or whose order key is below a player's last one (chronological). Past the bound they
    # go at the end: their order key becomes the end of their players' histories.
    late_flags: list[bool] = []
    at_end_flags: list[bool] = []
    end_at: dict[str, datetime] = {}
    for n, (m, em, mkey) in enumerate(zip(matches, engine_matches, match_keys)):
        ladder = m.payload["ladder"]
        pids = em.player_ids()
        if mkey is None:
            late = any(last is not None and m.finished_at < last
                       for last in (last_finished[(ladder, p)] for p in pids))
        else:
            late = any((ladder, p) in last_keys and mkey < last_keys[(ladder, p)] for p in pids)
        plan = plans.get(ladder)
        at_end = late and plan is not None and plan.at_end
        if at_end:
            after = max([received_at, end_at.get(ladder, received_at)]
                        + [last_keys[(ladder, p)][0] + _TICK for p in pids if (ladder, p) in last_keys])
            end_at[ladder] = after
            match_keys[n] = (after, m.payload["match_id"])
        late_flags.append(late)
        at_end_flags.append(at_end)

    # 3. rate each ladder's matches: in order key order (chronological) merged with the stored matches
    # a late match affects, or in queue order (arrival order)
    by_ladder: dict[str, list[int]] = {ladder: [] for ladder in ladders}
    for n, m in enumerate(matches):
        by_ladder[m.payload["ladder"]].append(n)
    rated: list[Rated | None] = [None] * len(matches)
    sweeps: dict[str, Sweep] = {}
    for ladder, numbers in by_ladder.items():
        if ladder in chronological:
            numbers.sort(key=lambda n: match_keys[n])  # type: ignore[arg-type, return-value]
        plan = plans.get(ladder)
        done = sweep(policies[ladder], [(n, match_keys[n], engine_matches[n]) for n in numbers],
                     plan.later if plan is not None and not plan.at_end else [], standings[ladder], to_engine_match)
        sweeps[ladder] = done
        for i, n in enumerate(numbers):
            rated[n] = done.batch[i]
    ledger_rows: list[tuple] = []
    new_keys = dict(last_keys)
    for m, em, mkey, late, at_end in zip(matches, engine_matches, match_keys, late_flags, at_end_flags):
        ladder = m.payload["ladder"]
        finished_at = m.finished_at
        if mkey is not None:
            for pid in em.player_ids():
                if (ladder, pid) not in new_keys or mkey > new_keys[(ladder, pid)]:
                    new_keys[(ladder, pid)] = mkey
        for pid in em.player_ids():
            last = last_finished[(ladder, pid)]
            if last is None or finished_at > last:
                last_finished[(ladder, pid)] = finished_at
        ledger_rows.append((m.payload["match_id"], ladder, m.payload_hash,
                            m.payload_json or json.dumps(m.payload, ensure_ascii=False, separators=(",", ":")),
                            finished_at, mkey[0] if mkey is not None else min(finished_at, received_at),
                            late, at_end, m.task_id, policies[ladder].version or None,
                            json.dumps(em.player_ids(), ensure_ascii=False)))

    occurred_at = datetime.now(UTC)
    history: list[tuple] = []
    events: list[dict[str, Any]] = []
    announced: dict[tuple[str, str], tuple[float, int, int]] = {}  # rating, games, sequence last announced
    for ladder in ladders:
        for pid, st in standings[ladder].items():
            key = (ladder, pid)
            announced[key] = (st.rating, st.games_played, st.games_played + extra_events.get(key, 0))
    order_in_ladder = sorted(range(len(matches)), key=lambda n: (matches[n].payload["ladder"],
                                                                 match_keys[n] or (received_at, ""), n))
    for n in order_in_ladder:
        m, got, late, at_end = matches[n], rated[n], late_flags[n], at_end_flags[n]
        assert got is not None
        match_id = m.payload["match_id"]
        ladder = m.payload["ladder"]
        generation = in_force[ladder][1]
        version = policies[ladder].version or None
        for change, sequence, peak, season in zip(got.changes, got.games, got.peaks_before, got.seasons_before):
            event_id = event_id_for(match_id, change.player_id)
            history.append((None, match_id, ladder, change.player_id, sequence, float(change.rating_before),
                            float(change.rating_after), float(change.expected_score), float(change.actual_score),
                            float(change.k_factor), change.result, event_id, occurred_at, generation, version,
                            peak, season))
            key = (ladder, change.player_id)
            _, games, number = announced[key]
            announced[key] = (change.rating_after, games + 1, number + 1)
            events.append({
                "event_id": event_id, "match_id": match_id, "ladder": ladder, "change": change,
                "sequence": number + 1, "games_played": games + 1, "out_of_order": late,
            })
        results[positions[n]] = Handled(Outcome.APPLIED, None, match_id, ladder, late, 0, got.changes,
                                        placed_at_end=at_end)
    corrections: list[dict[str, Any]] = []
    superseded: list[tuple[int, int]] = []
    for ladder in ladders:
        done = sweeps[ladder]
        if not done.rerated:
            continue
        plan = plans[ladder]
        record_correction(cur, ladder, plan.cause, "late", done, announced, in_force[ladder][1],
                          policies[ladder].version or None, occurred_at, history, corrections, superseded)
        for n in by_ladder[ladder]:
            if results[positions[n]] is not None and matches[n].payload["match_id"] == plan.cause:
                results[positions[n]] = dataclasses.replace(results[positions[n]],  # type: ignore[type-var]
                                                           rerated=len(done.rerated))
    outbox = match_events_json(events, occurred_at) + correction_events_json(corrections, occurred_at)
    touched = sorted({(lad, pid) for lad in ladders for pid in sweeps[lad].standings})
    players = [(lad, pid, sweeps[lad].standings[pid], last_finished.get((lad, pid)), new_keys.get((lad, pid)),
                announced[(lad, pid)][2] - sweeps[lad].standings[pid].games_played) for lad, pid in touched]
    # 4. one statement writes it all; the ledger's seq (apply order) is taken in queue order, after the locks
    owners = [e["match_id"] for e in events] + [None] * len(corrections)  # a correction's: stored matches
    seqs = write_rating_rows(cur, history, list(zip([e["event_id"] for e in events + corrections], outbox, owners)),
                             superseded, players, ledger_rows)
    if len(seqs) != len(ledger_rows):  # a concurrent delivery of one of these match ids won
        raise LedgerRace(f"{len(ledger_rows) - len(seqs)} match id(s) committed concurrently")
    for n, position in enumerate(positions):
        results[position] = dataclasses.replace(results[position],  # type: ignore[type-var]
                                                seq=seqs[matches[n].payload["match_id"]])
    return lock_wait


MAX_LOCK_ROUNDS = 10
"""Rounds of extra player locks a correction may take under the locks before the batch runs again."""

_TICK = timedelta(microseconds=1)
"""PostgreSQL's timestamp resolution: a match placed at the end goes this much after its players' last."""


class CorrectionGrew(LedgerRace):
    """Under the locks, a correction found it must re-rate players it had not locked (matches
    committed between its first read and its locks): the batch rolls back and runs again."""
