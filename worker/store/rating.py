"""Store: the rating transaction (ledger check, ladder and player locks, rating, writes, dead letters of a batch)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from engine import PlayerState, RatingChange, RatingPolicy, rate
from worker.mapping import to_engine_match
from worker.store.dead_letters import _dead_letter_text
from worker.store.events import OUTBOX_CHANNEL, event_id_for, match_event
from worker.store.ladders import LADDER_LOCK_CLASS, policy_in_force


@dataclass(frozen=True, slots=True)
class Applied:
    """The match was applied; ``seq`` is its place in the ledger."""

    seq: int
    changes: tuple[RatingChange, ...]
    out_of_order: bool
    lock_wait_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The match was applied before with the same canonical payload: nothing changed."""


@dataclass(frozen=True, slots=True)
class Conflict:
    """The match id was applied before with another payload (``stored_hash``)."""

    stored_hash: str


@dataclass(frozen=True, slots=True)
class Redelivered:
    """This very message (same Celery task id) already ended somewhere: nothing is counted again."""


ApplyResult = Applied | Duplicate | Conflict | Redelivered


def _check_existing(cur: psycopg.Cursor, match_id: str, payload_hash: str, task_id: str | None) -> ApplyResult | None:
    """Classify a match id already in the ledger: redelivery, duplicate or conflict (None if absent)."""
    row = cur.execute("SELECT payload_hash, task_id FROM ledger WHERE match_id = %s", (match_id,)).fetchone()
    if row is None:
        return None
    stored_hash, applied_by = row
    if task_id is not None and applied_by == task_id:
        cur.execute("UPDATE ledger SET redeliveries = redeliveries + 1 WHERE match_id = %s", (match_id,))
        return Redelivered()
    if stored_hash != payload_hash:
        return Conflict(stored_hash)
    inserted = cur.execute(
        """INSERT INTO duplicate_deliveries (match_id, task_id) VALUES (%s, %s)
           ON CONFLICT (task_id) WHERE task_id IS NOT NULL DO NOTHING RETURNING id""",
        (match_id, task_id),
    ).fetchone()
    return Duplicate() if inserted else Redelivered()


def apply_match(
    conn: psycopg.Connection,
    payload: dict[str, Any],
    payload_hash: str,
    finished_at: datetime,
    policy: RatingPolicy,
    task_id: str | None = None,
    before_commit: Callable[[], None] | None = None,
    content: dict[str, Any] | None = None,
) -> ApplyResult:
    """Apply one validated match (canonical JSON ``payload``) exactly once, in one transaction.

    ``policy`` is the ladder's policy in this process's ladders file and ``content`` its canonical
    content; the match is rated under the policy in force for the ladder (:func:`policy_in_force`),
    which is ``policy`` unless a rebuild switched the ladder to another version.
    ``conn`` must be in autocommit mode (this function owns the transaction). Returns
    :class:`Applied`, :class:`Duplicate`, :class:`Conflict` or :class:`Redelivered`; a duplicate
    is recorded in ``duplicate_deliveries`` in the same transaction. ``before_commit`` runs inside
    the transaction after every write (the fault tests kill the process there). Raises ``psycopg.errors.LockNotAvailable``
    past ``lock_timeout``, and other ``psycopg.Error`` on database failures (nothing is written then).
    """
    match_id = payload["match_id"]
    match = to_engine_match(payload)
    with conn.cursor() as cur:
        applied = _apply_in_transaction(conn, cur, match, payload, payload_hash, finished_at, policy, task_id,
                                        before_commit, content)
        if applied is not None:
            return applied
        # A concurrent delivery of the same match id committed first: our transaction was rolled
        # back (no player rows of ours survive); classify this delivery against the stored one.
        with conn.transaction():
            existing = _check_existing(cur, match_id, payload_hash, task_id)
        assert existing is not None
        return existing


def _apply_in_transaction(conn, cur, match, payload, payload_hash, finished_at, policy, task_id, before_commit,
                          content=None):
    """The rating transaction; ``None`` if a concurrent delivery of the match id won the race."""
    match_id = payload["match_id"]
    ladder = payload["ladder"]
    player_ids = sorted(set(match.player_ids()))
    with conn.transaction():
        existing = _check_existing(cur, match_id, payload_hash, task_id)
        if existing is not None:
            return existing
        # A rebuild of this ladder holds the exclusive form while it switches over. The policy and
        # generation are read by the next statement, so after the lock (a fresh snapshot).
        cur.execute("SELECT pg_advisory_xact_lock_shared(%s, hashtext(%s))", (LADDER_LOCK_CLASS, ladder))
        policy, generation = policy_in_force(cur, ladder, policy, content)
        cur.execute(
            """
            INSERT INTO players (ladder, player_id, rating, peak_rating)
            SELECT %(ladder)s, t.p, t.i, t.i
              FROM unnest(%(players)s::text[], %(initials)s::float8[]) AS t(p, i) ORDER BY t.p COLLATE "C"
            ON CONFLICT (ladder, player_id) DO NOTHING
            """,
            {"ladder": ladder, "players": player_ids, "initials": [policy.initial_for(p) for p in player_ids]},
        )
        lock_started = time.perf_counter()
        rows = cur.execute(
            """
            SELECT player_id, rating, games_played, last_finished_at, peak_rating, season, rebuild_events
              FROM players
             WHERE ladder = %s AND player_id = ANY(%s)
             ORDER BY player_id COLLATE "C" FOR UPDATE
            """,
            (ladder, player_ids),
        ).fetchall()
        lock_wait = time.perf_counter() - lock_started
        state = {pid: (games, last, rebuilds) for pid, _, games, last, _, _, rebuilds in rows}
        players = {
            pid: PlayerState(rating, games, peak, season) for pid, rating, games, _, peak, season, _ in rows
        }
        out_of_order = any(last is not None and finished_at < last for _, last, _ in state.values())
        inserted = cur.execute(
            """
            INSERT INTO ledger (match_id, ladder, payload_hash, payload, finished_at, out_of_order, task_id,
                                policy_version)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (match_id) DO NOTHING RETURNING seq
            """,
            (match_id, ladder, payload_hash, psycopg.types.json.Jsonb(payload), finished_at, out_of_order, task_id,
             policy.version or None),
        ).fetchone()
        if inserted is None:  # a concurrent delivery of the same match committed first
            raise psycopg.Rollback()
        seq = inserted[0]
        changes = rate(match, players, policy)
        occurred_at = datetime.now(UTC)
        player_rows, history_rows, outbox_rows = [], [], []
        for change in changes:
            games, _, rebuilds = state[change.player_id]
            sequence = games + 1  # the player's n-th match on the ladder: the history row's sequence
            event_sequence = sequence + rebuilds  # each rebuild that changed the rating took a number too
            event_id = event_id_for(match_id, change.player_id)
            player_rows.append(
                {
                    "rating": change.rating_after,
                    "games": sequence,
                    "win": change.result == "win",
                    "draw": change.result == "draw",
                    "loss": change.result == "loss",
                    "finished_at": finished_at,
                    "season": match.season,
                    "ladder": ladder,
                    "player_id": change.player_id,
                }
            )
            history_rows.append(
                (seq, match_id, ladder, change.player_id, sequence, change.rating_before,
                 change.rating_after, change.expected_score, change.actual_score, change.k_factor,
                 change.result, event_id, occurred_at, generation, policy.version or None)
            )
            event = match_event(event_id, match_id, ladder, change, event_sequence, sequence, out_of_order,
                                occurred_at.isoformat())
            outbox_rows.append((event_id, psycopg.types.json.Jsonb(event)))
        cur.executemany(
            """
            UPDATE players SET rating = %(rating)s, games_played = %(games)s,
                   wins = wins + %(win)s::int, draws = draws + %(draw)s::int,
                   losses = losses + %(loss)s::int,
                   peak_rating = greatest(peak_rating, %(rating)s),
                   last_finished_at = greatest(last_finished_at, %(finished_at)s),
                   season = coalesce(%(season)s, season),
                   updated_at = now()
             WHERE ladder = %(ladder)s AND player_id = %(player_id)s
            """,
            player_rows,
        )
        cur.executemany(
            """
            INSERT INTO rating_changes (ledger_seq, match_id, ladder, player_id, sequence,
                rating_before, rating_after, expected_score, actual_score, k_factor, result,
                event_id, occurred_at, generation, policy_version)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            """,
            history_rows,
        )
        cur.executemany("INSERT INTO outbox (event_id, payload) VALUES (%s, %s)", outbox_rows)
        cur.execute("SELECT pg_notify(%s, '')", (OUTBOX_CHANNEL,))
        if before_commit is not None:
            before_commit()
        return Applied(seq, changes, out_of_order, lock_wait)
    return None


@dataclass(frozen=True, slots=True)
class BatchMatch:
    """A validated match of a batch: canonical JSON ``payload``, its sha256 ``payload_hash``, its
    ladder's ``policy``, the Celery ``task_id`` of the message that carried it."""

    payload: dict[str, Any]
    payload_hash: str
    finished_at: datetime
    policy: RatingPolicy
    task_id: str | None
    raw_body: str | None = None
    """The message as received (kept verbatim if it turns out to be a conflicting duplicate)."""
    payload_json: str | None = None
    """``payload`` as JSON text (the canonical JSON), if the caller has it: stored in the ledger."""
    content: dict[str, Any] | None = None
    """The canonical content of ``policy`` (recorded as the ladder's policy in force if none is yet)."""


@dataclass(frozen=True, slots=True)
class BatchDeadLetter:
    """A message of a batch that failed validation before the transaction: it becomes a dead letter
    (``reason_code``, ``detail``, the raw body as text or bytes) in the batch's transaction."""

    reason_code: str
    detail: str
    raw_body: str | bytes
    match_id: str | None
    task_id: str | None


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """A dead letter was recorded for this message (``reason_code``)."""

    reason_code: str


BatchEntry = BatchMatch | BatchDeadLetter


BatchResult = Applied | Duplicate | Redelivered | DeadLettered


"""What became of one entry of a batch. A conflicting duplicate is a :class:`DeadLettered` with
reason ``conflicting_duplicate``; a dead letter whose task id was recorded before is a
:class:`Redelivered`."""
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
) -> tuple[list[BatchResult], float | None]:
    """Apply a batch of messages, in queue order, in one transaction; return each entry's result
    (same order) and the seconds spent waiting for the player row locks (None if nothing applied).

    Inside the one transaction:

    1. every match id of the batch is looked up in the ledger at once; each entry is classified in
       queue order against the ledger *and the entries before it* (a second delivery of a match id
       in the same batch is a duplicate, or a conflict, or, same task id, a redelivery);
    2. the shared per-ladder advisory lock is taken once per distinct ladder (sorted), then the
       missing player rows of every match to apply are created and all the batch's player rows
       are locked in one statement, in the one global order (ladder, player_id) ``COLLATE "C"``;
    3. the matches are rated in queue order on in-memory player states, so a player in several
       matches sees the earlier ones' results; each gets its own ledger ``seq`` (taken after the
       locks, in queue order), history rows, and events whose per-player ``sequence`` grows by one
       per match;
    4. ledger, history, outbox, players, duplicate deliveries and dead letters are written with one
       multi-row statement each (``unnest`` of arrays sent in binary; ``COPY`` for the history and
       outbox rows), one ``NOTIFY``; ``before_commit`` runs, then COMMIT.

    ``conn`` must be in autocommit mode (this function owns the transaction). Raises
    :class:`LedgerRace` (after rolling back) when a concurrent transaction committed one of the
    batch's match ids first; ``psycopg.errors.LockNotAvailable`` past ``lock_timeout``; other
    ``psycopg.Error`` on database failures, and ``ValueError`` from the engine: nothing is written
    then.
    """
    results: list[BatchResult | None] = [None] * len(entries)
    with conn.transaction(), conn.cursor() as cur:
        lock_wait = _apply_batch_in_transaction(cur, entries, results)
        if before_commit is not None:
            before_commit()
    return results, lock_wait  # type: ignore[return-value]


def _apply_batch_in_transaction(cur: psycopg.Cursor, entries: Sequence[BatchEntry],
                                results: list[BatchResult | None]) -> float | None:
    match_ids = sorted({e.payload["match_id"] for e in entries if isinstance(e, BatchMatch)})
    stored: dict[str, tuple[str, str | None]] = {}
    if match_ids:
        stored = {mid: (h, t) for mid, h, t in cur.execute(
            "SELECT match_id, payload_hash, task_id FROM ledger WHERE match_id = ANY(%b)", (match_ids,))}

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
                results[i] = Redelivered()
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
            results[i] = Redelivered()
        elif prior_hash != entry.payload_hash:
            raw = entry.raw_body if entry.raw_body is not None else json.dumps(entry.payload, ensure_ascii=False)
            dead.append((i, "conflicting_duplicate", conflict_detail(match_id, prior_hash, entry.payload_hash),
                         raw, match_id, task_id))
        else:
            duplicates.append(i)

    lock_wait = _apply_matches(cur, [entries[i] for i in to_apply], [i for i in to_apply], results) \
        if to_apply else None

    # 4. the other outcomes, one statement each
    if duplicates:
        rows = cur.execute(
            """INSERT INTO duplicate_deliveries (match_id, task_id)
               SELECT m, t FROM unnest(%b::text[], %b::text[]) WITH ORDINALITY AS u(m, t, n) ORDER BY n
               ON CONFLICT (task_id) WHERE task_id IS NOT NULL DO NOTHING RETURNING task_id""",
            ([entries[i].payload["match_id"] for i in duplicates], [entries[i].task_id for i in duplicates]),
        ).fetchall()
        recorded = {t for (t,) in rows}
        for i in duplicates:
            task_id = entries[i].task_id
            results[i] = Duplicate() if task_id is None or task_id in recorded else Redelivered()
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
        for i, reason, *_rest, task_id in dead:
            results[i] = DeadLettered(reason) if task_id is None or task_id in recorded else Redelivered()
    if redelivered_applied:
        cur.execute(
            """UPDATE ledger l SET redeliveries = l.redeliveries + u.n
                 FROM (SELECT m, count(*)::int AS n FROM unnest(%b::text[]) AS m GROUP BY m) AS u
                WHERE l.match_id = u.m""",
            (redelivered_applied,),
        )
    return lock_wait


def _apply_matches(cur: psycopg.Cursor, matches: list[BatchMatch], positions: list[int],
                   results: list[BatchResult | None]) -> float:
    """Steps 2 to 4 of :func:`apply_batch` for the matches to apply (queue order); fills ``results``
    at ``positions``; returns the lock wait in seconds. Raises :class:`LedgerRace`."""
    engine_matches = [to_engine_match(m.payload) for m in matches]
    configured: dict[str, BatchMatch] = {}
    keys: set[tuple[str, str]] = set()
    for m, em in zip(matches, engine_matches):
        ladder = m.payload["ladder"]
        configured.setdefault(ladder, m)
        keys.update((ladder, pid) for pid in em.player_ids())
    ladders = sorted(configured)
    order = sorted(keys)  # (ladder, player_id): Python compares code points, as COLLATE "C" (UTF-8 bytes)
    # A rebuild of a ladder holds the exclusive form while it switches over; the policy in force
    # and the history generation are read after the lock (as in the one-match transaction).
    cur.execute("SELECT count(pg_advisory_xact_lock_shared(%b, hashtext(l))) FROM unnest(%b::text[]) AS l",
                (LADDER_LOCK_CLASS, ladders))
    in_force = {ladder: policy_in_force(cur, ladder, configured[ladder].policy, configured[ladder].content)
                for ladder in ladders}
    policies = {ladder: policy for ladder, (policy, _) in in_force.items()}
    cur.execute(
        """
        INSERT INTO players (ladder, player_id, rating, peak_rating)
        SELECT l, p, r, r FROM unnest(%b::text[], %b::text[], %b::float8[]) AS u(l, p, r)
         ORDER BY l COLLATE "C", p COLLATE "C"
        ON CONFLICT (ladder, player_id) DO NOTHING
        """,
        ([k[0] for k in order], [k[1] for k in order], [float(policies[k[0]].initial_for(k[1])) for k in order]),
    )
    lock_started = time.perf_counter()
    rows = cur.execute(
        """
        SELECT p.ladder, p.player_id, p.rating, p.games_played, p.last_finished_at, p.peak_rating, p.season,
               p.rebuild_events
          FROM players p JOIN unnest(%b::text[], %b::text[]) AS u(l, pid) ON p.ladder = u.l AND p.player_id = u.pid
         ORDER BY p.ladder COLLATE "C", p.player_id COLLATE "C"
           FOR UPDATE OF p
        """,
        ([k[0] for k in order], [k[1] for k in order]),
    ).fetchall()
    lock_wait = time.perf_counter() - lock_started
    # rating, games, last finished_at, peak, season, wins, draws, losses (those three: this batch's),
    # rebuild events (a player's event sequence is games played + rebuild events)
    state = {(lad, pid): [rating, games, last, peak, season, 0, 0, 0, rebuilds]
             for lad, pid, rating, games, last, peak, season, rebuilds in rows}

    # 3. rate in queue order on the in-memory states
    occurred_at = datetime.now(UTC)
    occurred_text = occurred_at.isoformat()
    ledger_rows: list[tuple] = []
    rated: list[tuple[BatchMatch, Any, tuple[RatingChange, ...], bool, list[int]]] = []
    for m, em in zip(matches, engine_matches):
        ladder = m.payload["ladder"]
        finished_at = m.finished_at
        mine = [(pid, state[(ladder, pid)]) for pid in em.player_ids()]
        out_of_order = any(s[2] is not None and finished_at < s[2] for _, s in mine)
        changes = rate(em, {pid: PlayerState(s[0], s[1], s[3], s[4]) for pid, s in mine}, policies[ladder])
        sequences = []
        for change in changes:
            s = state[(ladder, change.player_id)]
            s[0] = change.rating_after
            s[1] += 1
            s[2] = finished_at if s[2] is None or finished_at > s[2] else s[2]
            s[3] = change.rating_after if s[3] is None or change.rating_after > s[3] else s[3]
            s[4] = em.season if em.season is not None else s[4]
            s[5 + ("win", "draw", "loss").index(change.result)] += 1
            sequences.append(s[1])
        rated.append((m, em, changes, out_of_order, sequences))
        ledger_rows.append((m.payload["match_id"], ladder, m.payload_hash,
                            m.payload_json or json.dumps(m.payload, ensure_ascii=False, separators=(",", ":")),
                            finished_at,
                            out_of_order, m.task_id, policies[ladder].version or None))

    # 4. the ledger first: its seq (apply order) is taken in queue order, after the locks
    cols = list(zip(*ledger_rows))
    inserted = cur.execute(
        """
        INSERT INTO ledger (match_id, ladder, payload_hash, payload, finished_at, out_of_order, task_id,
                            policy_version)
        SELECT m, l, h, p::jsonb, f, o, t, v
          FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::timestamptz[], %b::bool[],
                      %b::text[], %b::text[]) WITH ORDINALITY AS u(m, l, h, p, f, o, t, v, n)
         ORDER BY n
        ON CONFLICT (match_id) DO NOTHING RETURNING match_id, seq
        """,
        [list(c) for c in cols],
    ).fetchall()
    if len(inserted) != len(ledger_rows):  # a concurrent delivery of one of these match ids won
        raise LedgerRace(f"{len(ledger_rows) - len(inserted)} match id(s) committed concurrently")
    seqs = dict(inserted)
    history: list[tuple] = []
    outbox: list[tuple] = []
    for (m, em, changes, out_of_order, sequences), position in zip(rated, positions):
        match_id = m.payload["match_id"]
        ladder = m.payload["ladder"]
        seq = seqs[match_id]
        generation = in_force[ladder][1]
        version = policies[ladder].version or None
        for change, sequence in zip(changes, sequences):
            event_id = event_id_for(match_id, change.player_id)
            history.append((seq, match_id, ladder, change.player_id, sequence, float(change.rating_before),
                            float(change.rating_after), float(change.expected_score), float(change.actual_score),
                            float(change.k_factor), change.result, event_id, occurred_at, generation, version))
            event = match_event(event_id, match_id, ladder, change, sequence + state[(ladder, change.player_id)][8],
                                sequence, out_of_order, occurred_text)
            outbox.append((event_id, json.dumps(event, ensure_ascii=False, separators=(",", ":"))))
        results[position] = Applied(seq, changes, out_of_order, 0.0)
    # History and outbox rows go in by COPY: no conflict is possible once the ledger rows are in
    # (their unique keys derive from the match ids), and COPY is the cheapest way in for many rows.
    with cur.copy("COPY rating_changes (ledger_seq, match_id, ladder, player_id, sequence, rating_before, "
                  "rating_after, expected_score, actual_score, k_factor, result, event_id, occurred_at, "
                  "generation, policy_version) FROM STDIN") as copy:
        for row in history:
            copy.write_row(row)
    with cur.copy("COPY outbox (event_id, payload) FROM STDIN") as copy:
        for row in outbox:
            copy.write_row(row)
    players = [(k, state[k]) for k in order]
    for _, s in players:
        s[0] = float(s[0])
        s[3] = float(s[3])
    cur.execute(
        """
        UPDATE players p SET rating = u.rating, games_played = u.games,
               wins = p.wins + u.w, draws = p.draws + u.d, losses = p.losses + u.l,
               peak_rating = greatest(p.peak_rating, u.peak),
               last_finished_at = greatest(p.last_finished_at, u.last),
               season = u.season, updated_at = now()
          FROM unnest(%b::text[], %b::text[], %b::float8[], %b::int[], %b::int[], %b::int[], %b::int[],
                      %b::float8[], %b::timestamptz[], %b::text[])
               AS u(ladder, player_id, rating, games, w, d, l, peak, last, season)
         WHERE p.ladder = u.ladder AND p.player_id = u.player_id
        """,
        ([k[0] for k, _ in players], [k[1] for k, _ in players], [s[0] for _, s in players],
         [s[1] for _, s in players], [s[5] for _, s in players], [s[6] for _, s in players],
         [s[7] for _, s in players], [s[3] for _, s in players], [s[2] for _, s in players],
         [s[4] for _, s in players]),
    )
    cur.execute("SELECT pg_notify(%b, '')", (OUTBOX_CHANNEL,))
    return lock_wait
