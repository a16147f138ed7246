"""Store: the rating transaction's own settings, applied with ``SET LOCAL`` in its first statement,
and its ladder locks.

Timeouts and keepalives (:class:`TransactionTimeouts`), the planner settings (:data:`KEYED_PLANS`),
the ledger lookup that shares their round trip (:func:`set_local_timeouts`), and the ladders'
shared lock with the policy in force read after it (:func:`lock_ladders`), for rating and
annulment alike. Nothing outlives
the transaction: no session state, so a connection may come through PgBouncer in transaction mode."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from engine.policy import AnyPolicy
from worker.store.ladders import LADDER_LOCK_CLASS, LadderPolicy, ladder_in_force, ladder_records
from worker.store.locking import RATING_APPLICATION


@dataclass(frozen=True, slots=True)
class TransactionTimeouts:
    """``lock_timeout`` and ``statement_timeout`` of one transaction, in milliseconds (0: none)."""

    lock_timeout_ms: int
    statement_timeout_ms: int
    player_lock_wait_ms: int = 1000
    """Most milliseconds one transaction waits in all for player rows other transactions hold
    before it defers their matches (:func:`worker.store.locking.lock_players`)."""
    idle_in_transaction_ms: int = 0
    """``idle_in_transaction_session_timeout``: the server ends the session (and its locks) when
    the worker stops sending inside the transaction this long (frozen, paused, cut off); 0: none."""
    tcp_keepalives_idle_s: int = 0
    """Server-side TCP keepalives of the session during the transaction (``tcp_keepalives_idle``,
    ``_interval``, ``_count``; seconds, seconds, probes); 0: the server's defaults."""
    tcp_keepalives_interval_s: int = 0
    tcp_keepalives_count: int = 0
    correction_max_matches: int = 2000
    """Most stored matches of a ladder that may follow a late match for it to be placed in its
    chronological position (``RATINGS_CORRECTION_MAX_MATCHES``); past it the match goes at the end."""


GENERIC_PLANS = (("plan_cache_mode", "force_generic_plan"),)
"""The rating transaction's statements run with their generic plan (``SET LOCAL``), on a connection
that prepares them only: PostgreSQL applies ``plan_cache_mode`` to the extended protocol's unnamed
statement too, which would then be planned without its parameters at every execution."""


DEFAULT_TIMEOUTS = TransactionTimeouts(lock_timeout_ms=5000, statement_timeout_ms=30000)
"""Limits of a transaction whose caller gave none (tools and tests)."""


KEYED_PLANS = (("enable_hashjoin", "off"), ("enable_mergejoin", "off"), ("enable_seqscan", "off"), ("jit", "off"))
"""Planner settings of the rating transaction (``SET LOCAL``): joins by nested loop, so each of the
batch's rows is found through its index; tables read through an index wherever one serves
(``enable_seqscan``); no JIT compilation. On a connection that prepares its statements
(psycopg's ``prepare_threshold`` set) :data:`GENERIC_PLANS` too.

With prepared statements (``RATINGS_DATABASE_PREPARED_STATEMENTS``,
:func:`worker.store.pool.open_pool`) a statement is parsed and planned once per connection, not once
per transaction (as long as its transactions commit: psycopg deallocates every prepared statement of
the connection after a ``ROLLBACK``, to a savepoint too, as when a player row is busy): on one
connection, transactions of one match took 2.1 and 2.7 ms of PostgreSQL's CPU against 3.9 and 4.7 ms
without, of ten matches 0.56 and 0.65 ms per match against 0.70 and 0.91 (two runs each of
``bench/transaction_cost.py``). A generic plan is made without the parameters and kept until the
tables' statistics change (an ``ANALYZE``, a ``VACUUM``): made while the statistics of ``players``
said a few rows, it read the table whole, and on a server whose autovacuum is off it kept doing so
as the table grew (``tests/integration/test_round_trips.py`` fails when a batch reads ``players``
sequentially); with ``enable_seqscan`` off the plan made on a small table looks rows up by index as
on a big one (a table without a usable index is still scanned, at a cost the planner inflates: JIT,
which that cost would trigger, is off). The planner settings change plans, never results.

Every statement of the transaction joins a batch (at most ``RATINGS_BATCH_SIZE`` matches, a few
hundred rows of ``unnest``) to tables keyed by it (``players`` by ladder and player id, ``ledger``
by match id, ``rating_changes`` by match). Left to its statistics, the planner hashed the whole
``players`` table for the ``UPDATE ... FROM unnest`` and the creation of new player rows once the
table held some tens of thousands of rows and too few for its index to look cheaper (about 33,000
in a bench run: 510 sequential scans reading 7 million rows for 20,000 matches; with these
settings PostgreSQL's CPU per match over the worker child's fell from 1.21-1.37 to 0.96-1.03 in
``ratings bench``). A ladder of millions of players plans index lookups anyway; a fresh or small one
paid a scan of the table per statement. ``later_matches`` (:mod:`worker.store.chronology`) solved
the same problem for one query with ``LATERAL ... OFFSET 0``; these settings hold for every
statement of the transaction and end with it (no session state, PgBouncer's transaction mode).

A statement of the transaction must therefore not join a relation without an index on the join key
(a nested loop would rescan it per row): the write statement looks its new ledger rows up in a
``jsonb`` map of its ``INSERT ... RETURNING`` (:mod:`worker.store.corrections`), not by a join to it."""


def set_local_timeouts(cur: psycopg.Cursor, timeouts: TransactionTimeouts | None,
                       match_ids: Sequence[str] = ()) -> dict[str, tuple[str, str | None]]:
    """Apply ``timeouts`` to the current transaction only (``set_config(..., true)``, i.e. ``SET
    LOCAL``): nothing outlives the transaction, which PgBouncer's transaction mode requires. The
    transaction's ``application_name`` becomes :data:`worker.store.locking.RATING_APPLICATION`, so
    a rating transaction waiting for rows can tell a peer from a stuck session; the server's TCP
    keepalives are set too (ignored on a Unix socket).

    The planner settings :data:`KEYED_PLANS` are applied with them, ``timeouts`` or not, and
    :data:`GENERIC_PLANS` on a connection that prepares statements.

    In the same statement (one round trip), the ledger rows of ``match_ids`` are read: returns
    ``{match_id: (payload_hash, task_id)}`` of those already applied. ``timeouts`` None: the
    lookup and the planner settings alone (the session's timeouts stay in force)."""
    plans = KEYED_PLANS + (GENERIC_PLANS if cur.connection.prepare_threshold is not None else ())
    names: list[str] = [name for name, _ in plans]
    values: list[str] = [value for _, value in plans]
    if timeouts is not None:
        names += ["lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout", "application_name"]
        values += [f"{int(timeouts.lock_timeout_ms)}ms", f"{int(timeouts.statement_timeout_ms)}ms",
                  f"{int(timeouts.idle_in_transaction_ms)}ms", RATING_APPLICATION]
        for name, value in (("tcp_keepalives_idle", timeouts.tcp_keepalives_idle_s),
                            ("tcp_keepalives_interval", timeouts.tcp_keepalives_interval_s),
                            ("tcp_keepalives_count", timeouts.tcp_keepalives_count)):
            if value:
                names.append(name)
                values.append(str(int(value)))
    # the settings first (left to right), then the lookup, which needs none of them
    # never prepared: it is planned under the session's settings (the SET LOCAL takes effect as it runs),
    # where a generic plan kept from a small ledger could read the table whole
    row = cur.execute(
        "SELECT count(set_config(n, v, true)), (SELECT array_agg(ARRAY[match_id, payload_hash, task_id]) "
        "FROM ledger WHERE match_id = ANY(%b)) FROM unnest(%b::text[], %b::text[]) AS s(n, v)",
        (list(match_ids), names, values), prepare=False).fetchone()
    return {mid: (h, t) for mid, h, t in (one_row(row)[1] or [])}


def one_row(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """The row of a statement that always returns one (an aggregate, ``SHOW``, a ``RETURNING`` of
    one inserted row). Raises ``psycopg.DataError`` if it returned none."""
    if row is None:
        raise psycopg.DataError("a statement that returns one row returned none")
    return row


def transaction_timeouts(conn: psycopg.Connection, timeouts: TransactionTimeouts) -> tuple[str, str]:
    """``SHOW lock_timeout`` and ``SHOW statement_timeout`` inside a transaction that applied
    ``timeouts`` as the rating transaction does (rolled back; for checks and tests)."""
    with conn.transaction(force_rollback=True), conn.cursor() as cur:
        set_local_timeouts(cur, timeouts)
        lock = one_row(cur.execute("SHOW lock_timeout").fetchone())[0]
        statement = one_row(cur.execute("SHOW statement_timeout").fetchone())[0]
    return lock, statement


@dataclass(frozen=True, slots=True)
class LadderInForce:
    """A ladder as a transaction rates it, read under its shared lock: the ``policy`` in force, the
    history ``generation`` and the replay ``order`` (``"applied"``: arrival order; else
    chronological)."""

    policy: AnyPolicy
    generation: int
    order: str

    @property
    def chronological(self) -> bool:
        """True when the ladder replays in order-key order (not in arrival order)."""
        return self.order != "applied"


def lock_ladders(cur: psycopg.Cursor, configured: Mapping[str, LadderPolicy]) -> tuple[dict[str, LadderInForce],
                                                                                      datetime]:
    """Take each ladder's shared advisory lock (sorted; a rebuild holds the exclusive form while it
    switches over) and read, after it (a fresh snapshot), each ladder's policy in force, history
    generation and replay order (:func:`worker.store.ladders.ladder_in_force`; ``configured``: the
    policies this process was configured with, recorded for a ladder that has none yet). Returns
    them by ladder, and the database's ``now()`` (the transaction's start). Two statements."""
    ladders = sorted(configured)
    received_at = one_row(cur.execute(
        "SELECT count(pg_advisory_xact_lock_shared(%b, hashtext(l))), now() FROM unnest(%b::text[]) AS l",
        (LADDER_LOCK_CLASS, ladders)).fetchone())[1]
    records = ladder_records(cur, ladders)
    in_force = {}
    for ladder in ladders:
        policy, generation, order = ladder_in_force(cur, ladder, configured[ladder].policy,
                                                    configured[ladder].content, records)
        in_force[ladder] = LadderInForce(policy, generation, order)
    return in_force, received_at
