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

OUTBOX_CHANNEL = "ratings_outbox"
LADDER_LOCK_CLASS = 7_401
"""First key of the per-ladder advisory lock: every rating transaction takes it shared, a rebuild's
switch-over takes it exclusive (``pg_advisory_xact_lock(LADDER_LOCK_CLASS, hashtext(ladder))``)."""
EVENT_NAMESPACE = uuid.UUID("7d1c8f0e-3b7a-5c38-9a51-6f3e2b0d4c11")


def event_id_for(match_id: str, player_id: str) -> uuid.UUID:
    """Deterministic event id of the rating change of ``player_id`` in ``match_id`` (UUIDv5)."""
    return uuid.uuid5(EVENT_NAMESPACE, f"{match_id}\x1f{player_id}")


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
) -> ApplyResult:
    """Apply one validated match (canonical JSON ``payload``) exactly once, in one transaction.

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
                                        before_commit)
        if applied is not None:
            return applied
        # A concurrent delivery of the same match id committed first: our transaction was rolled
        # back (no player rows of ours survive); classify this delivery against the stored one.
        with conn.transaction():
            existing = _check_existing(cur, match_id, payload_hash, task_id)
        assert existing is not None
        return existing


def _apply_in_transaction(conn, cur, match, payload, payload_hash, finished_at, policy, task_id, before_commit):
    """The rating transaction; ``None`` if a concurrent delivery of the match id won the race."""
    match_id = payload["match_id"]
    ladder = payload["ladder"]
    player_ids = sorted(set(match.player_ids()))
    with conn.transaction():
        existing = _check_existing(cur, match_id, payload_hash, task_id)
        if existing is not None:
            return existing
        # A rebuild of this ladder holds the exclusive form while it switches over.
        cur.execute("SELECT pg_advisory_xact_lock_shared(%s, hashtext(%s))", (LADDER_LOCK_CLASS, ladder))
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
            SELECT player_id, rating, games_played, last_finished_at, peak_rating, season FROM players
             WHERE ladder = %s AND player_id = ANY(%s)
             ORDER BY player_id COLLATE "C" FOR UPDATE
            """,
            (ladder, player_ids),
        ).fetchall()
        lock_wait = time.perf_counter() - lock_started
        state = {pid: (rating, games, last) for pid, rating, games, last, _, _ in rows}
        players = {
            pid: PlayerState(rating, games, peak, season) for pid, rating, games, _, peak, season in rows
        }
        out_of_order = any(last is not None and finished_at < last for _, _, last in state.values())
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
            _, games, last = state[change.player_id]
            sequence = games + 1
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
                 change.result, event_id, occurred_at)
            )
            event = {
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
                "games_played": sequence,
                "out_of_order": out_of_order,
                "occurred_at": occurred_at.isoformat(),
            }
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
                event_id, occurred_at)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
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
                "INSERT INTO policies (version, ladder, content) VALUES (%s, %s, %s) ON CONFLICT (version, ladder) DO NOTHING",
                (version, ladder, psycopg.types.json.Jsonb(content)),
            )


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
    if isinstance(raw_body, bytes | bytearray):
        try:
            text, encoding = bytes(raw_body).decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(raw_body).decode("ascii"), "base64"
    else:
        text, encoding = raw_body, "utf-8"
    if "\x00" in text:  # PostgreSQL text cannot hold NUL: keep the exact bytes as base64
        text, encoding = base64.b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii"), "base64"
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
    """Players of ``ladder`` by rating (highest first): rank, player_id, rating, games, wins,
    draws, losses, win_pct (wins / games × 100), peak_rating."""
    rows = conn.cursor(row_factory=dict_row).execute(
        """
        SELECT rank() OVER (ORDER BY rating DESC) AS rank, player_id, rating,
               games_played AS games, wins, draws, losses,
               round(100.0 * wins / nullif(games_played, 0), 1) AS win_pct, peak_rating
          FROM players WHERE ladder = %s
         ORDER BY rating DESC, player_id COLLATE "C" LIMIT %s
        """,
        (ladder, top),
    ).fetchall()
    return rows


def history(conn: psycopg.Connection, ladder: str, player_id: str) -> list[dict[str, Any]]:
    """Rating history of one player on one ladder, oldest first."""
    return conn.cursor(row_factory=dict_row).execute(
        """
        SELECT rc.sequence, rc.match_id, l.finished_at, rc.result, rc.rating_before,
               rc.rating_after, rc.rating_after - rc.rating_before AS delta,
               rc.expected_score, rc.actual_score, rc.k_factor
          FROM rating_changes rc JOIN ledger l ON l.seq = rc.ledger_seq
         WHERE rc.ladder = %s AND rc.player_id = %s ORDER BY rc.sequence
        """,
        (ladder, player_id),
    ).fetchall()


def iter_ledger(conn: psycopg.Connection, ladder: str, batch_size: int = 5000) -> Iterator[dict[str, Any]]:
    """Stream the ladder's ledger payloads in apply order, through a server-side cursor."""
    with conn.transaction(), conn.cursor(name="ledger_replay") as cur:
        cur.itersize = batch_size
        cur.execute("SELECT payload FROM ledger WHERE ladder = %s ORDER BY seq", (ladder,))
        for (payload,) in cur:
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
