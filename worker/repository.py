"""All SQL of the worker: the rating transaction, dead letters, read models. Parameterized always.

The rating transaction (DESIGN.md, "What it does"):

1. look the ``match_id`` up in the ledger: present with the same payload hash → a counted
   duplicate; with another hash → a ``conflicting_duplicate`` dead letter;
2. create missing player rows, then lock the match's player rows with
   ``SELECT ... ORDER BY player_id COLLATE "C" FOR UPDATE`` (one global lock order: no deadlock
   between two matches that share players, whatever order their sides list them in);
3. insert the ledger row (``ON CONFLICT DO NOTHING`` closes the race with a concurrent delivery
   of the same match); its ``seq``, taken while the locks are held, is the apply order;
4. rate with the engine, update the players, insert the history rows and one outbox row per
   player, ``NOTIFY`` the relay; commit.

Before step 2 the transaction takes the ladder's advisory lock in shared mode and reads the
ladder's row of ``ladders``: the policy in force and the current history generation. A rebuild
(:mod:`worker.rebuild`) switches both under the exclusive form of that lock, so every match is
rated either before the switch (and recomputed by the rebuild) or after it, under the new policy.

:func:`apply_batch` does the same for many matches in one transaction (with batching on, see
:mod:`worker.batching`): one look-up of every match id, the per-ladder shared advisory locks once
per distinct ladder, every player of the batch locked in one statement in the one global order
(ladder, player_id) ``COLLATE "C"``, the matches rated in queue order on in-memory states, and one
multi-row statement (``unnest`` of arrays, sent in binary) per table.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from engine import PlayerState, RatingChange, RatingPolicy, rate
from worker.mapping import to_engine_match
from worker.policies import PolicyUnavailable, cached_policy, policy_from_content

OUTBOX_CHANNEL = "ratings_outbox"
LADDER_LOCK_CLASS = 7_401
"""First key of the per-ladder advisory lock: every rating transaction takes it shared, a rebuild's
switch-over takes it exclusive (``pg_advisory_xact_lock(LADDER_LOCK_CLASS, hashtext(ladder))``)."""
EVENT_NAMESPACE = uuid.UUID("7d1c8f0e-3b7a-5c38-9a51-6f3e2b0d4c11")


REBUILD_EVENT_NAMESPACE = uuid.uuid5(EVENT_NAMESPACE, "rebuild")


def event_id_for(match_id: str, player_id: str) -> uuid.UUID:
    """Deterministic event id of the rating change of ``player_id`` in ``match_id`` (UUIDv5)."""
    return uuid.uuid5(EVENT_NAMESPACE, f"{match_id}\x1f{player_id}")


def rebuild_event_id(rebuild_id: int, player_id: str) -> uuid.UUID:
    """Deterministic event id of the ``rebuild`` event of ``player_id`` in rebuild ``rebuild_id``
    (UUIDv5 in a namespace of its own, so it never equals a match's :func:`event_id_for`)."""
    return uuid.uuid5(REBUILD_EVENT_NAMESPACE, f"{rebuild_id}\x1f{player_id}")


@dataclass(frozen=True, slots=True)
class LadderRecord:
    """A ladder's row of ``ladders``: the policy version in force, the current history
    ``generation`` (0 until the first rebuild), and the replay order: ``apply_order`` is
    ``"applied"`` (ledger ``seq``) or ``"finished-at"`` (rows with ``seq <= order_boundary`` by
    ``(finished_at, seq)``, then the rest by ``seq``)."""

    ladder: str
    policy_version: str
    generation: int
    apply_order: str
    order_boundary: int | None


def ladder_record(conn: psycopg.Connection | psycopg.Cursor, ladder: str) -> LadderRecord | None:
    """The ladder's row of ``ladders``, or ``None`` when no policy was recorded for it yet."""
    row = conn.execute(
        "SELECT ladder, policy_version, generation, apply_order, order_boundary FROM ladders WHERE ladder = %s",
        (ladder,),
    ).fetchone()
    return LadderRecord(*row) if row else None


def stored_policy(conn: psycopg.Connection | psycopg.Cursor, version: str) -> RatingPolicy:
    """The engine policy recorded as ``version`` in ``policies`` (cached per process).

    Raises :class:`worker.policies.PolicyUnavailable` when the version is not recorded or its
    content does not validate in this release.
    """
    policy = cached_policy(version)
    if policy is not None:
        return policy
    row = conn.execute("SELECT content FROM policies WHERE version = %s", (version,)).fetchone()
    if row is None:
        raise PolicyUnavailable(f"policy version {version} is named in `ladders` but not recorded in `policies`")
    return policy_from_content(version, row[0])


def record_policy(conn: psycopg.Connection | psycopg.Cursor, ladder: str, policy: RatingPolicy,
                  content: dict[str, Any]) -> None:
    """Keep ``content`` as policy ``policy.version`` in ``policies`` (no-op when already there)."""
    conn.execute(
        "INSERT INTO policies (version, ladder, content) VALUES (%s, %s, %s) ON CONFLICT (version) DO NOTHING",
        (policy.version, ladder, psycopg.types.json.Jsonb(content)),
    )


def policy_in_force(
    cur: psycopg.Cursor, ladder: str, configured: RatingPolicy, content: dict[str, Any] | None = None
) -> tuple[RatingPolicy, int]:
    """The policy to rate ``ladder`` under now and the current history generation.

    The version named in ``ladders`` wins (``configured`` when it is that version, else read from
    ``policies``). A ladder with no row yet gets one for ``configured`` when its ``content`` is
    given (the first worker to rate a ladder records its policy; a concurrent first one finds
    that row); without ``content`` it is rated under ``configured``, generation 0. Call it inside
    the rating transaction, after the ladder's shared advisory lock. Raises
    :class:`worker.policies.PolicyUnavailable` (transient) when the recorded policy cannot be read.
    """
    record = ladder_record(cur, ladder)
    if record is None:
        if content is None or not configured.version:
            return configured, 0
        record_policy(cur, ladder, configured, content)
        cur.execute(
            "INSERT INTO ladders (ladder, policy_version) VALUES (%s, %s) ON CONFLICT (ladder) DO NOTHING",
            (ladder, configured.version),
        )
        record = ladder_record(cur, ladder)
        assert record is not None
    if record.policy_version == configured.version:
        return configured, record.generation
    return stored_policy(cur, record.policy_version), record.generation


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


def match_event(event_id: uuid.UUID, match_id: str, ladder: str, change: RatingChange, sequence: int,
                games_played: int, out_of_order: bool, occurred_at: str) -> dict[str, Any]:
    """The RatingChanged v1 event (reason ``match``) of one player's ``change`` in one applied match.

    ``sequence`` is the player's event sequence (games played + rebuild events), ``games_played``
    the player's matches on the ladder including this one; ``occurred_at`` ISO 8601 text.
    """
    return {
        "schema_version": 1,
        "event_id": str(event_id),
        "reason": "match",
        "match_id": match_id,
        "ladder": ladder,
        "player_id": change.player_id,
        "rating_before": change.rating_before,
        "rating_after": change.rating_after,
        "delta": change.delta,
        "expected_score": change.expected_score,
        "actual_score": change.actual_score,
        "k_factor": change.k_factor,
        "sequence": sequence,
        "games_played": games_played,
        "out_of_order": out_of_order,
        "occurred_at": occurred_at,
    }


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


def record_policies(conn: psycopg.Connection, policies: dict[str, tuple[str, dict[str, Any]]]) -> None:
    """Store each ladder's policy content under its version (``{ladder: (version, content)}``);
    a version already stored is left as it is."""
    with conn.transaction():
        for ladder, (version, content) in policies.items():
            conn.execute(
                "INSERT INTO policies (version, ladder, content) VALUES (%s, %s, %s) ON CONFLICT (version) DO NOTHING",
                (version, ladder, psycopg.types.json.Jsonb(content)),
            )


# ---------------------------------------------------------------------------- batches


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


def _dead_letter_text(raw_body: str | bytes) -> tuple[str, str]:
    """``raw_body`` as stored: (text, ``utf-8`` or ``base64``)."""
    if isinstance(raw_body, bytes | bytearray):
        try:
            text, encoding = bytes(raw_body).decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(raw_body).decode("ascii"), "base64"
    else:
        text, encoding = raw_body, "utf-8"
    if "\x00" in text:  # PostgreSQL text cannot hold NUL: keep the exact bytes as base64
        text, encoding = base64.b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii"), "base64"
    return text, encoding


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


def insert_dead_letter(
    conn: psycopg.Connection,
    reason_code: str,
    detail: str,
    raw_body: str | bytes,
    match_id: str | None = None,
    task_id: str | None = None,
    content_type: str | None = None,
    headers: dict[str, Any] | None = None,
) -> int | None:
    """Record a message that will not be applied; return its id, or ``None`` when this task id
    was dead-lettered before (a redelivery: nothing new is recorded).

    ``raw_body`` is kept verbatim: text as is, bytes as UTF-8 text when they decode, else base64
    (``raw_encoding`` says which).
    """
    text, encoding = _dead_letter_text(raw_body)
    with conn.transaction():
        row = conn.execute(
            """
            INSERT INTO dead_letters (reason_code, detail, match_id, raw_body, raw_encoding, task_id,
                                      content_type, headers)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (task_id) WHERE task_id IS NOT NULL DO NOTHING RETURNING id
            """,
            (reason_code, detail.replace("\x00", "\\x00"), match_id, text, encoding, task_id, content_type,
             psycopg.types.json.Jsonb(headers) if headers is not None else None),
        ).fetchone()
    return row[0] if row else None


def dead_letter(conn: psycopg.Connection, dead_letter_id: int) -> dict[str, Any] | None:
    """One dead letter with every column, or ``None``."""
    return conn.cursor(row_factory=dict_row).execute(
        "SELECT * FROM dead_letters WHERE id = %s", (dead_letter_id,)
    ).fetchone()


def resolve_dead_letter(
    conn: psycopg.Connection, dead_letter_id: int, status: str, by: str, requeue_task_id: str | None = None
) -> bool:
    """Mark an open dead letter ``requeued`` or ``discarded`` by ``by`` now; False if not open."""
    row = conn.execute(
        """UPDATE dead_letters SET status = %s, resolved_at = now(), resolved_by = %s, requeue_task_id = %s
            WHERE id = %s AND status = 'open' RETURNING id""",
        (status, by, requeue_task_id, dead_letter_id),
    ).fetchone()
    return row is not None


# ---------------------------------------------------------------------------- read models


@dataclass(frozen=True, slots=True)
class Counts:
    """Message outcomes and events (each a count)."""

    applied: int
    duplicates: int
    dead_letters: int
    events: int
    unpublished_events: int

    @property
    def received(self) -> int:
        """Every message that ended somewhere: applied + duplicates + dead letters."""
        return self.applied + self.duplicates + self.dead_letters


def counts(conn: psycopg.Connection) -> Counts:
    """Current totals of the ledger, duplicate deliveries, dead letters and the outbox."""
    row = conn.execute(
        """
        SELECT (SELECT count(*) FROM ledger), (SELECT count(*) FROM duplicate_deliveries),
               (SELECT count(*) FROM dead_letters), (SELECT count(*) FROM outbox),
               (SELECT count(*) FROM outbox WHERE published_at IS NULL)
        """
    ).fetchone()
    return Counts(*row)


def leaderboard(conn: psycopg.Connection, ladder: str, top: int | None = None) -> list[dict[str, Any]]:
    """Players of ``ladder`` by rating (highest first, ties share a rank): rank, player_id,
    rating, games, wins, draws, losses, win_pct ((wins + draws / 2) / games × 100, one decimal: a
    draw counts as half a win), peak_rating. ``top``: only the first N rows (all when ``None``)."""
    rows = conn.cursor(row_factory=dict_row).execute(
        """
        SELECT rank() OVER (ORDER BY rating DESC) AS rank, player_id, rating,
               games_played AS games, wins, draws, losses,
               round(100.0 * (wins + 0.5 * draws) / nullif(games_played, 0), 1) AS win_pct, peak_rating
          FROM players WHERE ladder = %s
         ORDER BY rating DESC, player_id COLLATE "C" LIMIT %s
        """,
        (ladder, top),
    ).fetchall()
    return rows


def history(conn: psycopg.Connection, ladder: str, player_id: str) -> list[dict[str, Any]]:
    """Rating history of one player on one ladder, oldest first: the rows of the ladder's current
    generation (a rebuild's history once it switched over); ``sequence`` is the player's n-th match."""
    return conn.cursor(row_factory=dict_row).execute(
        """
        SELECT rc.sequence, rc.match_id, l.finished_at, rc.result, rc.rating_before,
               rc.rating_after, rc.rating_after - rc.rating_before AS delta,
               rc.expected_score, rc.actual_score, rc.k_factor
          FROM rating_changes rc JOIN ledger l ON l.seq = rc.ledger_seq
         WHERE rc.ladder = %(ladder)s AND rc.player_id = %(player)s
           AND rc.generation = coalesce((SELECT generation FROM ladders WHERE ladder = %(ladder)s), 0)
         ORDER BY rc.sequence
        """,
        {"ladder": ladder, "player": player_id},
    ).fetchall()


LEDGER_ORDER = {
    "applied": "ORDER BY seq",
    "finished-at": "ORDER BY seq > %(boundary)s, CASE WHEN seq <= %(boundary)s THEN finished_at END, seq",
}
"""SQL of each replay order: ``applied`` is the ledger's ``seq`` (the order workers committed);
``finished-at`` sorts the rows up to a rebuild's snapshot (``seq <= boundary``) by
``(finished_at, seq)`` and appends the later ones by ``seq``."""


def iter_ledger_rows(
    conn: psycopg.Connection, ladder: str, order: str, boundary: int | None = None,
    where: str = "", params: dict[str, Any] | None = None, batch_size: int = 5000,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Stream ``(seq, payload)`` of the ladder's ledger in ``order`` (a key of :data:`LEDGER_ORDER`)
    through a server-side cursor; ``where`` adds a condition (SQL with named ``params``).

    Raises ``KeyError`` for an unknown order.
    """
    sql = f"SELECT seq, payload FROM ledger WHERE ladder = %(ladder)s {where} {LEDGER_ORDER[order]}"
    with conn.transaction(), conn.cursor(name="ledger_replay") as cur:
        cur.itersize = batch_size
        cur.execute(sql, {"ladder": ladder, "boundary": boundary, **(params or {})})
        yield from cur


def iter_ledger(conn: psycopg.Connection, ladder: str, batch_size: int = 5000) -> Iterator[dict[str, Any]]:
    """Stream the ladder's ledger payloads in its replay order, through a server-side cursor.

    The replay order is the apply order (``seq``) unless a rebuild recorded another one in
    ``ladders`` (``--order finished-at``); ``verify`` and rebuilds replay in this order.
    """
    with conn.transaction():
        record = ladder_record(conn, ladder)
        order, boundary = (record.apply_order, record.order_boundary) if record else ("applied", None)
        for _, payload in iter_ledger_rows(conn, ladder, order, boundary, batch_size=batch_size):
            yield payload


def ledger_size(conn: psycopg.Connection, ladder: str) -> int:
    """Number of matches in the ladder's ledger (in the caller's snapshot)."""
    return conn.execute("SELECT count(*) FROM ledger WHERE ladder = %s", (ladder,)).fetchone()[0]


def stored_standings(conn: psycopg.Connection, ladder: str) -> dict[str, tuple[float, int]]:
    """Mapping of player id to (stored rating, games played) for ``ladder``."""
    rows = conn.execute(
        "SELECT player_id, rating, games_played FROM players WHERE ladder = %s", (ladder,)
    ).fetchall()
    return {pid: (rating, games) for pid, rating, games in rows}


def ladders_in_use(conn: psycopg.Connection) -> list[str]:
    """Ladders that have at least one player row."""
    return [r[0] for r in conn.execute("SELECT DISTINCT ladder FROM players ORDER BY 1").fetchall()]


def dead_letters(
    conn: psycopg.Connection, limit: int = 100, status: str | None = "open", reason_code: str | None = None
) -> list[dict[str, Any]]:
    """Dead letters, newest first, filtered by ``status`` (None: any) and ``reason_code``."""
    return conn.cursor(row_factory=dict_row).execute(
        """SELECT id, received_at, reason_code, status, match_id, detail, raw_body, raw_encoding,
                  resolved_at, resolved_by
             FROM dead_letters
            WHERE (%(status)s::text IS NULL OR status = %(status)s)
              AND (%(reason)s::text IS NULL OR reason_code = %(reason)s)
            ORDER BY id DESC LIMIT %(limit)s""",
        {"status": status, "reason": reason_code, "limit": limit},
    ).fetchall()


def dead_letter_counts(conn: psycopg.Connection, status: str = "open") -> dict[str, int]:
    """Dead letters of ``status`` by reason code."""
    return dict(
        conn.execute(
            "SELECT reason_code, count(*) FROM dead_letters WHERE status = %s GROUP BY 1 ORDER BY 1", (status,)
        ).fetchall()
    )


def event_payloads_json(payload: Any) -> str:
    """Compact JSON text of an outbox payload, as written to the stream."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def claim_unpublished(conn: psycopg.Connection, limit: int) -> list[tuple[int, str, Any]]:
    """Lock up to ``limit`` unpublished outbox rows (``SKIP LOCKED``: relays may run in parallel).

    Must run inside a transaction; returns ``(id, event_id, payload)`` in outbox order.
    """
    return conn.execute(
        """SELECT id, event_id::text, payload FROM outbox WHERE published_at IS NULL
            ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED""",
        (limit,),
    ).fetchall()


def mark_published(conn: psycopg.Connection, ids: Sequence[int]) -> None:
    """Mark outbox rows published (inside the transaction that claimed them)."""
    conn.execute("UPDATE outbox SET published_at = now() WHERE id = ANY(%s)", (list(ids),))


# ---------------------------------------------------------------------------- rebuilds (worker/rebuild.py)

REBUILD_LOCK_CLASS = 7_402
"""First key of the session advisory lock a rebuild holds on its ladder from start to end
(``pg_try_advisory_lock(REBUILD_LOCK_CLASS, hashtext(ladder))``): one rebuild per ladder."""

REBUILD_HISTORY_COPY = (
    "COPY rating_changes (ledger_seq, match_id, ladder, player_id, sequence, rating_before, rating_after, "
    "expected_score, actual_score, k_factor, result, event_id, occurred_at, generation, policy_version) FROM STDIN"
)
"""COPY statement for a rebuild's history rows (the column order of ``worker.rebuild.history_row``)."""


def try_rebuild_lock(conn: psycopg.Connection, ladder: str) -> bool:
    """Take the ladder's rebuild lock for this session; False when another session holds it."""
    return conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (REBUILD_LOCK_CLASS, ladder)).fetchone()[0]


def lock_ladder_exclusively(conn: psycopg.Connection, ladder: str) -> None:
    """Take the ladder's advisory lock in exclusive mode until the end of the transaction: wait for
    every rating transaction of the ladder in flight, and hold new ones off. Raises
    ``psycopg.errors.LockNotAvailable`` past the session's ``lock_timeout``."""
    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LADDER_LOCK_CLASS, ladder))


def start_rebuild(conn: psycopg.Connection, ladder: str, requested_by: str, order: str, policy_version: str,
                  previous: LadderRecord | None) -> int:
    """Close the ladder's rebuilds whose process ended (``running``: failed, nothing changed;
    ``switched``: done, ledger stamping unfinished), insert a ``running`` row; return its id.
    Call it holding the ladder's rebuild lock."""
    conn.execute(
        """UPDATE rebuilds SET status = CASE status WHEN 'running' THEN 'failed' ELSE 'done' END,
                  finished_at = now(),
                  error = coalesce(error, CASE status
                      WHEN 'running' THEN 'abandoned: its process ended before the switch-over; nothing was changed'
                      ELSE 'its process ended after the switch-over, before stamping every ledger row' END)
            WHERE ladder = %s AND status IN ('running', 'switched')""",
        (ladder,),
    )
    return conn.execute(
        """INSERT INTO rebuilds (ladder, requested_by, apply_order, policy_version, previous_policy_version,
                                 previous_generation)
           VALUES (%s, %s, %s, %s, %s, %s) RETURNING id""",
        (ladder, requested_by, order, policy_version, previous.policy_version if previous else None,
         previous.generation if previous else 0),
    ).fetchone()[0]


def fail_rebuild(conn: psycopg.Connection, rebuild_id: int, error: str) -> None:
    """Record ``error`` on a rebuild; a ``running`` one becomes ``failed`` (a switched one stays)."""
    conn.execute(
        """UPDATE rebuilds SET status = CASE status WHEN 'running' THEN 'failed' ELSE status END,
                  finished_at = now(), error = %s WHERE id = %s""",
        (error[:2000], rebuild_id),
    )


def ledger_last_seq(conn: psycopg.Connection, ladder: str) -> int:
    """The highest ``seq`` of the ladder's ledger (0 when empty): one index probe."""
    return conn.execute("SELECT coalesce(max(seq), 0) FROM ledger WHERE ladder = %s", (ladder,)).fetchone()[0]


def ledger_count(conn: psycopg.Connection, ladder: str, up_to_seq: int) -> int:
    """How many rows of the ladder's ledger have ``seq <= up_to_seq``."""
    return conn.execute("SELECT count(*) FROM ledger WHERE ladder = %s AND seq <= %s", (ladder, up_to_seq)).fetchone()[0]


def ledger_rows_after(conn: psycopg.Connection, ladder: str, after_seq: int,
                      up_to_seq: int | None = None) -> list[tuple[int, dict[str, Any]]]:
    """``(seq, payload)`` of the ladder's ledger rows with ``after_seq < seq <= up_to_seq`` (no upper
    bound when ``None``), by ``seq``."""
    return conn.execute(
        """SELECT seq, payload FROM ledger
            WHERE ladder = %s AND seq > %s AND (%s::bigint IS NULL OR seq <= %s) ORDER BY seq""",
        (ladder, after_seq, up_to_seq, up_to_seq),
    ).fetchall()


REBUILD_STAGING_COLUMNS = ("player_id", "rating", "games_played", "wins", "draws", "losses", "peak_rating", "season",
                           "event_id", "last_match_id", "expected_score", "actual_score", "k_factor")
"""Columns of the temporary ``rebuild_players`` table: a player's replayed standing, the id of the
``rebuild`` event that would announce a change, and the player's last match in the new history."""


def create_rebuild_staging(conn: psycopg.Connection) -> None:
    """The temporary table ``rebuild_players`` (dropped at commit) for a rebuild's new standings."""
    conn.execute(
        """CREATE TEMP TABLE rebuild_players (
               player_id text PRIMARY KEY, rating double precision NOT NULL, games_played integer NOT NULL,
               wins integer NOT NULL, draws integer NOT NULL, losses integer NOT NULL,
               peak_rating double precision NOT NULL, season text,
               event_id uuid NOT NULL, last_match_id text NOT NULL, expected_score double precision NOT NULL,
               actual_score double precision NOT NULL, k_factor double precision NOT NULL) ON COMMIT DROP"""
    )


def stage_players(conn: psycopg.Connection, rows: Sequence[tuple], upsert: bool = False) -> None:
    """Write rows of :data:`REBUILD_STAGING_COLUMNS` into ``rebuild_players``: COPY, or ``upsert``
    over rows already staged."""
    columns = ", ".join(REBUILD_STAGING_COLUMNS)
    if not upsert:
        with conn.cursor().copy(f"COPY rebuild_players ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        return
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in REBUILD_STAGING_COLUMNS[1:])
    conn.cursor().executemany(
        f"""INSERT INTO rebuild_players ({columns}) VALUES ({", ".join(["%s"] * len(REBUILD_STAGING_COLUMNS))})
            ON CONFLICT (player_id) DO UPDATE SET {updates}""",
        rows,
    )


def switch_players(conn: psycopg.Connection, ladder: str, occurred_at: datetime) -> tuple[int, int]:
    """The swap, in one statement: write the staged standings over the ladder's ``players`` rows
    that differ, and put one ``rebuild`` rating-changed event in the outbox for each player whose
    rating changed (:class:`schemas.RatingChanged`: ``rating_before`` the stored rating, the
    player's next event sequence, ``match_id``/``expected_score``/``actual_score``/``k_factor`` of
    the player's last match in the new history); wake the relay. Returns ``(rows written, events)``.
    Call it holding the ladder's exclusive lock (the old values are read in the same statement).
    """
    conn.execute("SET LOCAL extra_float_digits = 3")  # float8 -> jsonb keeps every bit (shortest exact form)
    written, events = conn.execute(
        """
        WITH written AS (
            UPDATE players p
               SET rating = n.rating, games_played = n.games_played, wins = n.wins, draws = n.draws,
                   losses = n.losses, peak_rating = n.peak_rating, season = n.season,
                   rebuild_events = p.rebuild_events + (n.rating <> o.rating)::int, updated_at = now()
              FROM rebuild_players n, players o
             WHERE p.ladder = %(ladder)s AND p.player_id = n.player_id
               AND o.ladder = p.ladder AND o.player_id = p.player_id
               AND (o.rating, o.games_played, o.wins, o.draws, o.losses, o.peak_rating, o.season)
                   IS DISTINCT FROM (n.rating, n.games_played, n.wins, n.draws, n.losses, n.peak_rating, n.season)
            RETURNING p.player_id, o.rating AS rating_before, p.rating AS rating_after, p.games_played,
                      p.games_played + p.rebuild_events AS sequence
        ), events AS (
            INSERT INTO outbox (event_id, payload)
            SELECT n.event_id, jsonb_build_object(
                       'schema_version', 1, 'event_id', n.event_id::text, 'reason', 'rebuild',
                       'match_id', n.last_match_id, 'ladder', %(ladder)s::text, 'player_id', w.player_id,
                       'rating_before', w.rating_before, 'rating_after', w.rating_after,
                       'delta', w.rating_after - w.rating_before, 'expected_score', n.expected_score,
                       'actual_score', n.actual_score, 'k_factor', n.k_factor, 'sequence', w.sequence,
                       'games_played', w.games_played, 'out_of_order', false, 'occurred_at', %(occurred_at)s::text)
              FROM written w JOIN rebuild_players n USING (player_id)
             WHERE w.rating_before <> w.rating_after
             ORDER BY w.player_id COLLATE "C"
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM written), (SELECT count(*) FROM events)
        """,
        {"ladder": ladder, "occurred_at": occurred_at.isoformat()},
    ).fetchone()
    if events:
        conn.execute("SELECT pg_notify(%s, '')", (OUTBOX_CHANNEL,))
    return written, events


def stamp_ledger(conn: psycopg.Connection, ladder: str, version: str, after_seq: int,
                 up_to_seq: int | None = None) -> int:
    """Set ``policy_version`` on the ladder's ledger rows with ``after_seq < seq <= up_to_seq``
    (no upper bound when ``None``) that name another version; return how many."""
    return conn.execute(
        """UPDATE ledger SET policy_version = %(version)s
            WHERE ladder = %(ladder)s AND seq > %(low)s AND (%(high)s::bigint IS NULL OR seq <= %(high)s)
              AND policy_version IS DISTINCT FROM %(version)s""",
        {"version": version, "ladder": ladder, "low": after_seq, "high": up_to_seq},
    ).rowcount


def set_ladder_record(conn: psycopg.Connection, ladder: str, version: str, generation: int, order: str,
                      boundary: int | None) -> None:
    """Make ``version``, ``generation`` and the replay order current for ``ladder`` (the switch)."""
    conn.execute(
        """
        INSERT INTO ladders (ladder, policy_version, generation, apply_order, order_boundary)
        VALUES (%(ladder)s, %(version)s, %(generation)s, %(order)s, %(boundary)s)
        ON CONFLICT (ladder) DO UPDATE SET policy_version = EXCLUDED.policy_version,
            generation = EXCLUDED.generation, apply_order = EXCLUDED.apply_order,
            order_boundary = EXCLUDED.order_boundary, updated_at = now()
        """,
        {"ladder": ladder, "version": version, "generation": generation, "order": order, "boundary": boundary},
    )


def update_rebuild(conn: psycopg.Connection, rebuild_id: int, **fields: Any) -> None:
    """Set columns of a ``rebuilds`` row; ``status='switched'`` or ``'done'`` also stamps its time."""
    allowed = {"status", "snapshot_seq", "matches_replayed", "catch_up_matches", "players", "players_changed",
               "events_emitted", "ledger_rows_stamped", "lock_wait_seconds", "lock_held_seconds", "duration_seconds"}
    unknown = set(fields) - allowed
    if unknown:
        raise ValueError(f"not a rebuilds column: {sorted(unknown)}")
    sets = [f"{name} = %({name})s" for name in fields]
    if fields.get("status") == "switched":
        sets.append("switched_at = now()")
    if fields.get("status") == "done":
        sets.append("finished_at = now()")
    conn.execute(f"UPDATE rebuilds SET {', '.join(sets)} WHERE id = %(id)s", {**fields, "id": rebuild_id})


def rebuilds(conn: psycopg.Connection, ladder: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
    """The latest rows of ``rebuilds`` (newest first), of ``ladder`` or of every ladder."""
    return conn.cursor(row_factory=dict_row).execute(
        """SELECT * FROM rebuilds WHERE (%(ladder)s::text IS NULL OR ladder = %(ladder)s)
            ORDER BY id DESC LIMIT %(limit)s""",
        {"ladder": ladder, "limit": limit},
    ).fetchall()
