"""Store: the player row locks of the rating transaction, without head-of-line blocking.

A batch must not wait, with its other matches, for one player whose row another transaction holds
(an operator's session, a frozen worker). :func:`lock_players` locks every row at once when none
is busy, else waits a bounded time for them in the one global order, then takes the free rows and
reports the ones it could not lock (as typed :class:`PlayerRow` values);
:func:`engine.chronology.deferred_matches` then picks the matches of the batch that must wait for
a later transaction: those of a blocked player, and every later match of a player of a deferred
match (per-player queue order within the batch).
:func:`record_lock_waits` keeps the waits per player for ``ratings doctor`` and the metrics.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

import psycopg
import psycopg.errors

Key = tuple[str, str]
"""A player row's key: (ladder, player_id)."""



class PlayerRow(NamedTuple):
    """A locked ``players`` row as the rating transaction reads it (the columns of :data:`_ROWS`,
    in order): rating and peak in rating points, counts, the season of the last match, the events
    not caused by a match (``rebuild_events``), the last finished_at and the last order key, then
    the state of a model with uncertainty (``deviation`` in rating points, ``volatility``,
    ``last_played`` in seconds since the epoch; NULL under Elo)."""

    ladder: str
    player_id: str
    rating: float
    games_played: int
    last_finished_at: datetime | None
    peak_rating: float | None
    season: str | None
    rebuild_events: int
    wins: int
    draws: int
    losses: int
    last_order_at: datetime | None
    last_order_match: str | None
    deviation: float | None
    volatility: float | None
    last_played: float | None

    @property
    def key(self) -> Key:
        """The row's key, (ladder, player_id)."""
        return (self.ladder, self.player_id)


_ROWS = """
    SELECT p.ladder, p.player_id, p.rating, p.games_played, p.last_finished_at, p.peak_rating, p.season,
           p.rebuild_events, p.wins, p.draws, p.losses, p.last_order_at, p.last_order_match,
           p.deviation, p.volatility, p.last_played
      FROM players p JOIN unnest(%b::text[], %b::text[]) AS u(l, pid) ON p.ladder = u.l AND p.player_id = u.pid"""
_ORDER_AND_LOCK = """
     ORDER BY p.ladder COLLATE "C", p.player_id COLLATE "C"
       FOR UPDATE OF p"""
_SELECT = _ROWS + _ORDER_AND_LOCK

_FAST_SELECT = (_ROWS + """
     WHERE (SELECT bool_and(pg_try_advisory_xact_lock_shared(%b, hashtext(q))) FROM unnest(%b::text[]) AS q)"""
                + _ORDER_AND_LOCK + " SKIP LOCKED")
"""The fast path of :func:`lock_players`: the ladders' queue lock taken shared without waiting and,
only when got, every free row locked (``SKIP LOCKED``), in one statement."""

_UNQUEUED_SELECT = (_ROWS + """
     WHERE (SELECT count(pg_advisory_xact_lock_shared(%b, hashtext(q))) FROM unnest(%b::text[]) AS q) >= 0"""
                    + _ORDER_AND_LOCK)
"""The first wait of :func:`lock_players`: the ladders' queue lock taken shared (behind a
transaction that holds or awaits it exclusively), then every row in the global order, in one
statement."""

UNQUEUED_WAIT_MS = 100
"""How long a transaction whose rows other rating transactions hold waits for each of them in the
global order, without queueing the ladder, before it queues it (milliseconds): long enough for the
few milliseconds to a few tens a rating transaction holds its rows, short enough that a row held
for long (an operator's session) or a stream of transactions taking rows ahead of the waiter (hot
players) sends it to the queue soon."""


REMEMBER_BLOCKED_SECONDS = 10.0
"""How long this process remembers a row it could not lock in time. While a busy row of a batch is
remembered, the batch waits at most :data:`REMEMBERED_WAIT_MS` for its rows instead of the whole
``wait_ms``: a row held for minutes costs one full wait per process, not one per batch. A row
locked again is forgotten at once."""

REMEMBERED_WAIT_MS = 50
"""The wait of a batch whose busy rows include a remembered one, in milliseconds (enough for a
row another worker's batch holds for its few milliseconds)."""

_blocked_until: dict[Key, float] = {}
"""Rows this process found held past the wait: key -> ``time.monotonic()`` it stops remembering."""


def forget_blocked() -> None:
    """Forget every row this process remembers as blocked (tests; a new process starts empty)."""
    _blocked_until.clear()


class _Busy(Exception):
    """Some rows were busy: undo the locks the first pass took (roll back to its savepoint)."""


@dataclass(slots=True)
class PlayerLocks:
    """What :func:`lock_players` got: the locked player ``rows`` (the ``players`` columns the rating
    transaction reads), the keys it could not lock (``blocked``), the seconds waited for the rows
    that were busy at first (``waits``, blocked ones included) and the total seconds spent locking
    (``seconds``)."""

    rows: list[PlayerRow] = field(default_factory=list)
    blocked: set[Key] = field(default_factory=set)
    waits: dict[Key, float] = field(default_factory=dict)
    seconds: float = 0.0


def _typed(rows: list[tuple]) -> list[PlayerRow]:
    return list(map(PlayerRow._make, rows))


def _set_lock_timeout(cur: psycopg.Cursor, ms: int) -> None:
    cur.execute("SELECT set_config('lock_timeout', %s, true)", (f"{max(1, int(ms))}ms",))


def lock_players(cur: psycopg.Cursor, keys: Sequence[Key], wait_ms: int, lock_timeout_ms: int,
                 queue: bool = True) -> PlayerLocks:
    """Lock the ``players`` rows of ``keys`` (sorted (ladder, player_id), code point order as
    ``COLLATE "C"``; the rows exist) ``FOR UPDATE`` inside the caller's transaction, waiting about
    ``wait_ms`` milliseconds in all (the steps below say exactly) for rows other transactions hold.

    1. In a savepoint, the ladders' queue lock is taken shared without waiting, and one statement
       locks every free row (``SKIP LOCKED``): when the queue is free and no row is busy (the
       common case) that is all, no wait.
    2. Else the savepoint is rolled back (its locks released), and in a new one the queue lock is
       taken shared (waiting behind a transaction that holds or awaits it exclusively) and every
       row locked in the one global order, each lock waited for at most the smaller of ``wait_ms``
       and :data:`UNQUEUED_WAIT_MS` (not when ``queue`` is false, nor when a busy row is one this
       process remembers as blocked): rows other rating transactions hold are free within
       milliseconds, and the ladder's transactions that need none of the rows it holds go on
       meanwhile. Got: that is all.
    3. Else (that savepoint rolled back, the time spent taken from ``wait_ms``, which keeps at
       least :data:`REMEMBERED_WAIT_MS`, or ``wait_ms`` itself when smaller; each retry below
       waits at least :data:`REMEMBERED_WAIT_MS`) the ladders'
       queue lock is taken exclusively (:data:`QUEUE_LOCK_CLASS`; not when ``queue`` is false,
       as for more rows of a transaction that already holds it, nor when a session outside the
       service may be holding rows for long, :func:`_stuck_session`), so transactions on the fast
       path stop taking rows the waiter has not reached; then every row is locked in the one
       global order with ``lock_timeout`` = ``wait_ms`` (:data:`REMEMBERED_WAIT_MS` when a busy row
       is one this process found held within :data:`REMEMBER_BLOCKED_SECONDS`): transactions that
       wait, wait in one order; a lock other rating transactions hold is waited for again, up to
       ``lock_timeout_ms`` in all, unless a stuck session appears, each retry (and, with ``queue``
       false, the first wait: rows taken out of the global order) longer than the server's
       ``deadlock_timeout`` while no session outside the service may hold the rows
       (:func:`_wait_for`). The order is not the whole story: a new player's row (created before
       the locks) and a correction's rows beyond those it locked (``queue`` false) are held
       outside it, and can close a cycle, which the server's deadlock check then breaks. Got: the
       queue lock is kept to the commit.
    4. Past that wait (``LockNotAvailable``, or ``DeadlockDetected``), the savepoint is rolled back,
       the queue lock with it (the ladder is not held up by a transaction that defers), the free
       rows are locked without waiting (``SKIP LOCKED``) and the rows still busy are *blocked*
       (and remembered, unless a deadlock among rating transactions made them so): the caller
       defers their matches. Nothing waits after this step, so rows taken out of order here
       cannot close a cycle.

    ``lock_timeout`` is set back to ``lock_timeout_ms`` (``SET LOCAL``: nothing outlives the
    transaction). Raises other ``psycopg.Error`` as they come.
    """
    result = PlayerLocks()
    if not keys:
        return result
    started = time.perf_counter()
    conn = cur.connection
    args = ([k[0] for k in keys], [k[1] for k in keys])
    ladders = sorted({k[0] for k in keys})
    got: set[Key] = set()
    try:
        with conn.transaction():
            # A transaction that waited past its first, short wait holds its ladders' queue lock
            # exclusively: the others queue behind it instead of taking, without waiting, the rows it
            # has not reached yet (which starved it, and made its matches late by thousands).
            # One statement: the queue lock first (an InitPlan, run before the scan), then the rows;
            # no row when the queue is held.
            result.rows = _typed(cur.execute(_FAST_SELECT, (*args, QUEUE_LOCK_CLASS, ladders)).fetchall())
            got = {r.key for r in result.rows}
            if len(got) < len(keys):
                raise _Busy
    except _Busy:
        pass
    else:
        _forget(keys)
        result.seconds = time.perf_counter() - started
        return result
    busy = [k for k in keys if k not in got]
    now = time.monotonic()
    remembered = any(_blocked_until.get(k, 0.0) > now for k in busy)
    waited_from = time.perf_counter()
    if queue and not remembered:
        # Rows other rating transactions hold (they commit within milliseconds), or a waiter holding
        # the queue: first wait for the rows in the global order with the queue lock shared, a short
        # time, and only then queue the ladder. Queueing at once made every overlap of two batches
        # hold up all the ladder's other transactions: with 8 worker processes most batches overlap.
        try:
            with conn.transaction():
                _set_lock_timeout(cur, min(wait_ms, UNQUEUED_WAIT_MS))
                result.rows = _typed(cur.execute(_UNQUEUED_SELECT, (*args, QUEUE_LOCK_CLASS, ladders)).fetchall())
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
            # what is left of wait_ms, but never less than a remembered row's wait (a setting
            # below that: the setting); _wait_for's retries wait at least REMEMBERED_WAIT_MS each
            wait_ms = max(min(wait_ms, REMEMBERED_WAIT_MS), wait_ms - int((time.perf_counter() - waited_from) * 1000.0))
        else:
            _forget(keys)
            result.waits = {k: time.perf_counter() - waited_from for k in busy}
            _set_lock_timeout(cur, lock_timeout_ms)
            result.seconds = time.perf_counter() - started
            return result
    # Behind a session that may hold rows for long (an operator's, a frozen worker's) the waiter
    # does not queue the ladder: it waits its bounded time alone and defers, as before the queue.
    stuck = remembered or (queue and _stuck_session(cur))
    try:
        # One savepoint for the queue lock and the wait: giving up rolls it back, so a transaction
        # that defers releases the ladder's queue before it goes on with its other matches.
        with conn.transaction():
            if queue and not stuck:
                _wait_for(cur, _QUEUE, (QUEUE_LOCK_CLASS, ladders), wait_ms, lock_timeout_ms, waited_from, False)
            result.rows = _typed(_wait_for(cur, _SELECT, args,
                                           min(wait_ms, REMEMBERED_WAIT_MS) if remembered else wait_ms,
                                           lock_timeout_ms, waited_from, remembered, out_of_order=not queue))
    except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected) as exc:
        waited = time.perf_counter() - waited_from
        result.rows = _typed(cur.execute(_SELECT + " SKIP LOCKED", args).fetchall())
        got = {r.key for r in result.rows}
        result.blocked = {k for k in keys if k not in got}
        # a cycle with other rating transactions: their rows are free within milliseconds of this
        # one giving up, so later batches should not treat them as held for long
        if not isinstance(exc, psycopg.errors.DeadlockDetected) or _outside_session_open(cur):
            until = time.monotonic() + REMEMBER_BLOCKED_SECONDS
            for key in result.blocked:
                _blocked_until[key] = until
        _forget(got)
        result.waits = {k: waited for k in busy}
    else:
        waited = time.perf_counter() - waited_from
        _forget(keys)
        result.waits = {k: waited for k in busy}
    _set_lock_timeout(cur, lock_timeout_ms)
    result.seconds = time.perf_counter() - started
    return result


_QUEUE = "SELECT count(pg_advisory_xact_lock(%b, hashtext(l))) FROM unnest(%b::text[]) AS l"


def _wait_for(cur: psycopg.Cursor, sql: str, params: tuple, wait_ms: int, lock_timeout_ms: int,
              waited_from: float, once: bool, out_of_order: bool = False) -> list[tuple]:
    """Run ``sql`` (a statement that waits for locks) in a savepoint with ``lock_timeout`` =
    ``wait_ms`` (each retry at least :data:`REMEMBERED_WAIT_MS`, and longer than the server's
    ``deadlock_timeout`` by :data:`DEADLOCK_CHECK_MARGIN_MS`; the first attempt too when
    ``out_of_order``: rows locked outside the global order; neither while a session outside the
    service may hold the rows, :func:`_outside_session_open`), again while what it waits for is held
    by rating transactions (they finish), up to ``lock_timeout_ms`` since ``waited_from``
    (``time.perf_counter()``); its rows. Raises ``LockNotAvailable`` at once when ``once``, past
    that budget, or when a stuck session may be what holds the locks (:func:`_stuck_session`);
    ``DeadlockDetected`` when the wait closes a cycle.

    Why longer than ``deadlock_timeout``: PostgreSQL looks for a cycle only in a lock wait that has
    lasted ``deadlock_timeout`` (1 s by default), and a wait cancelled by its ``lock_timeout`` first,
    or at the same moment, is never checked. Two rating transactions each waiting, in attempts of
    1 s or less, for a row the other holds (a correction's rows beyond those locked, taken out of
    the global order; a new player's row, created before the locks) then waited for each other
    attempt after attempt until the 5 s budget ran out, and every transaction behind them with them:
    every rating transaction of the ladder stalled, two backends alternately cancelled by their lock
    timeout once a second in the server's log."""
    attempt_ms = _checked_attempt_ms(cur, wait_ms, max(lock_timeout_ms, 1)) if out_of_order and not once else wait_ms
    while True:
        try:
            with cur.connection.transaction():
                _set_lock_timeout(cur, attempt_ms)
                return cur.execute(sql, params).fetchall()
        except psycopg.errors.LockNotAvailable:
            # Rows (or the queue) other rating transactions hold, a correction many and for longer,
            # are waited for, up to lock_timeout in all; a session stuck in a transaction is not.
            # Each retry waits a while: 1 ms ones (RATINGS_PLAYER_LOCK_WAIT_MS=0, or what is left of
            # a short one) would spin, a savepoint and two statements per millisecond.
            wait_ms = max(wait_ms, REMEMBERED_WAIT_MS)
            left_ms = lock_timeout_ms - (time.perf_counter() - waited_from) * 1000.0
            if once or wait_ms > left_ms or _stuck_session(cur):
                raise
            # a retry waits past deadlock_timeout when the budget allows, so that a cycle it closes
            # is found and broken (a lock taken meanwhile ends the wait at once: no time lost); not
            # while a session outside the service may be what holds the rows: it is seen as stuck
            # within STUCK_AFTER_MS, and RATINGS_PLAYER_LOCK_WAIT_MS bounds the wait behind it
            attempt_ms = _checked_attempt_ms(cur, wait_ms, left_ms)


DEADLOCK_CHECK_MARGIN_MS = 250
"""How much longer than the server's ``deadlock_timeout`` a retried lock wait lasts (milliseconds):
the deadlock check runs when a wait reaches ``deadlock_timeout``; a ``lock_timeout`` equal to it
cancels the wait first."""


def _checked_attempt_ms(cur: psycopg.Cursor, wait_ms: int, cap_ms: float) -> int:
    """A lock wait's ``lock_timeout`` (milliseconds) long enough for the server's deadlock check:
    ``wait_ms``, raised to ``deadlock_timeout`` + :data:`DEADLOCK_CHECK_MARGIN_MS` but not past
    ``cap_ms`` (the budget left); ``wait_ms`` itself while a session outside the service may hold
    the rows (:func:`_outside_session_open`)."""
    if _outside_session_open(cur):
        return wait_ms
    return int(min(max(wait_ms, _deadlock_timeout_ms(cur) + DEADLOCK_CHECK_MARGIN_MS), cap_ms))


def _deadlock_timeout_ms(cur: psycopg.Cursor) -> int:
    """The server's ``deadlock_timeout`` for this session, in milliseconds."""
    row = cur.execute("SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout'").fetchone()
    return int(row[0]) if row else 1000


QUEUE_LOCK_CLASS = 7_403
"""First key of the per-ladder advisory lock that queues rating transactions which must wait for
player rows (:func:`lock_players`): shared on the fast path (tried, never waited for) and in the
first, short wait (waited for, behind an exclusive holder or waiter), kept shared to the commit when
either gets the rows; exclusive while waiting past that and to the commit once the rows are got,
released at once by a transaction that gives up and defers."""

RATING_APPLICATION = "ratings-rating"
"""``application_name`` of a rating transaction (``SET LOCAL``), so a waiting one can tell its peers."""

STUCK_AFTER_MS = 500
"""A session idle inside a transaction this long, or another application's transaction open this
long, may be what holds the rows a rating transaction waits for: it defers instead of waiting on."""


def _stuck_session(cur: psycopg.Cursor) -> bool:
    """True when another session of this database is idle inside a transaction, or runs a
    transaction of another application, for :data:`STUCK_AFTER_MS` or longer (an operator's
    session, a frozen worker): the rows may be held for long, so the batch defers their matches.
    Otherwise the rows are held by rating transactions, which finish: the caller waits on."""
    return _session_open_for(cur, STUCK_AFTER_MS, STUCK_AFTER_MS)


def _session_open_for(cur: psycopg.Cursor, idle_ms: int, other_ms: int) -> bool:
    """True when another session of this database is idle inside a transaction for ``idle_ms`` or
    longer, or runs a transaction of another application than the rating transaction's for
    ``other_ms`` or longer."""
    # pg_stat_activity is read once per transaction unless the snapshot is cleared, and now() is
    # the transaction's start: a session that became stuck while this one waited would go unseen.
    cur.execute("SELECT pg_stat_clear_snapshot()")
    row = cur.execute(
        """SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                           WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
                             AND backend_type = 'client backend'  -- not autovacuum: it holds no player row
                             AND ((state LIKE 'idle in transaction%%'
                                   AND state_change < clock_timestamp() - make_interval(secs => %s))
                                  OR (coalesce(application_name, '') <> %s
                                      AND xact_start < clock_timestamp() - make_interval(secs => %s))))""",
        (idle_ms / 1000.0, RATING_APPLICATION, other_ms / 1000.0)).fetchone()
    return bool(row and row[0])


MAYBE_STUCK_AFTER_MS = 100
"""Another application's transaction open this long may be an operator's session that will be seen
as stuck (:data:`STUCK_AFTER_MS`): a rating transaction's lock waits stay short meanwhile, so it
sees that in time (:func:`_outside_session_open`)."""

MAYBE_FROZEN_AFTER_MS = 400
"""A session idle inside its transaction this long may be a frozen worker about to be seen as
stuck; shorter idle spells are a rating transaction's own work between two statements (tens to
a few hundred milliseconds under load), which must not keep the waits short."""


def _outside_session_open(cur: psycopg.Cursor) -> bool:
    """True when another application's transaction has been open :data:`MAYBE_STUCK_AFTER_MS`, or a
    session idle in its transaction :data:`MAYBE_FROZEN_AFTER_MS`: the rows waited for may be held
    by a session outside the service (or a frozen one), and the wait stays within
    ``RATINGS_PLAYER_LOCK_WAIT_MS`` (no longer attempt for the deadlock check)."""
    return _session_open_for(cur, MAYBE_FROZEN_AFTER_MS, MAYBE_STUCK_AFTER_MS)


def _forget(keys: Iterable[Key]) -> None:
    if _blocked_until:
        for key in keys:
            _blocked_until.pop(key, None)


def record_lock_waits(cur: psycopg.Cursor, waits: dict[Key, float], deferred_by: dict[Key, int]) -> None:
    """Append one ``player_lock_waits`` row per player row the transaction found busy: the
    milliseconds waited and how many matches it deferred for it (``deferred_by``). Append-only
    (never waits on another writer); about one call in 100 also deletes up to 1,000 rows older
    than a day, skipping rows another transaction holds (never waits either)."""
    if not waits:
        return
    keys = sorted(waits)
    cur.execute(
        """INSERT INTO player_lock_waits (ladder, player_id, waited_ms, deferred_matches)
           SELECT * FROM unnest(%b::text[], %b::text[], %b::float8[], %b::int[])""",
        ([k[0] for k in keys], [k[1] for k in keys], [waits[k] * 1000.0 for k in keys],
         [deferred_by.get(k, 0) for k in keys]),
    )
    if random.random() < 0.01:  # noqa: S311 - not security: spreads the pruning over transactions
        cur.execute("""DELETE FROM player_lock_waits WHERE id IN (
                           SELECT id FROM player_lock_waits WHERE at < now() - interval '1 day'
                            LIMIT 1000 FOR UPDATE SKIP LOCKED)""")


@dataclass(frozen=True, slots=True)
class HotPlayer:
    """A player whose row rating transactions found locked within a window: ``waits`` (rows),
    ``waited_seconds`` in all, ``deferred_matches`` in all, the ``last`` time (ISO 8601, UTC)."""

    ladder: str
    player_id: str
    waits: int
    waited_seconds: float
    deferred_matches: int
    last: str


def hottest_lock_waits(conn: psycopg.Connection, window_seconds: float, limit: int = 5) -> list[HotPlayer]:
    """The ``limit`` players with the most matches deferred (then the longest waits) in the last
    ``window_seconds``, from ``player_lock_waits``."""
    rows = conn.execute(
        """SELECT ladder, player_id, count(*), sum(waited_ms) / 1000.0, sum(deferred_matches), max(at)
             FROM player_lock_waits WHERE at > now() - make_interval(secs => %s)
            GROUP BY ladder, player_id
            ORDER BY sum(deferred_matches) DESC, sum(waited_ms) DESC, ladder, player_id LIMIT %s""",
        (float(window_seconds), int(limit)),
    ).fetchall()
    return [HotPlayer(r.ladder, r.player_id, int(r.waits), float(r.waited_seconds), int(r.deferred_matches),
                      r.last.isoformat()) for r in map(_HotRow._make, rows)]


class _HotRow(NamedTuple):
    """A row of :func:`hottest_lock_waits`'s query."""

    ladder: str
    player_id: str
    waits: int
    waited_seconds: float
    deferred_matches: int
    last: datetime
