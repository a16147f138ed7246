"""Store: annulment of matches, a correction that removes matches, through the rating
transaction's correction path.

An organiser voids matches (a cheater's games, a disputed result, a server bug). In one
transaction: the ladders' shared lock and their policy in force (:func:`lock_ladders`, as a rating
transaction), per ladder a correction that starts at the earliest annulled match and drops the
annulled ones (:class:`worker.store.corrections.CorrectionStart`), planned from the rows as
committed, the players it touches locked in the one global order, planned again under the locks
until that set stops growing (:func:`worker.store.corrections.settle_corrections`), the stored
matches from that point swept again without the annulled ones (:func:`engine.chronology.sweep`),
recorded as one ``annulment`` correction per ladder whose ``correction`` events tell consumers each
player's new rating, and written by the rating transaction's writer
(:func:`worker.store.corrections.write_rating_rows`). The ledger keeps the original rows, flagged
``annulled``; ``annulments`` records who, when and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

import psycopg

from engine.chronology import OrderKey, Sweep, sweep
from worker.mapping import to_engine_match
from worker.store.corrections import (
    NO_LIMIT,
    CorrectionPlan,
    CorrectionStart,
    LedgerRace,
    RatingRows,
    changed_players,
    keys_to_lock,
    plan_corrections,
    record_corrections,
    settle_corrections,
    write_rating_rows,
)
from worker.store.ladders import LadderPolicy
from worker.store.locking import lock_players
from worker.store.players import Player, Players
from worker.store.rebuilds import REBUILD_LOCK_CLASS
from worker.store.transaction import (
    DEFAULT_TIMEOUTS,
    LadderInForce,
    TransactionTimeouts,
    lock_ladders,
    one_row,
    set_local_timeouts,
)


class AnnulmentRefused(Exception):
    """The annulment cannot run now or at all; the message says why and what to do."""


class AnnulmentBusy(AnnulmentRefused):
    """The annulment cannot run now (a rebuild of the ladder runs; its players kept changing under
    it): the same annulment later will run."""


@dataclass(frozen=True)
class AnnulmentResult:
    """What an annulment did: the match ids ``annulled`` now, those ``already`` annulled (a no-op),
    those ``unknown`` (not in the ledger), per ladder the matches ``rerated`` and the players whose
    rating changed (``players_changed``, each told by a ``correction`` event)."""

    annulled: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    rerated: dict[str, int] = field(default_factory=dict)
    players_changed: dict[str, int] = field(default_factory=dict)


def annul_matches(conn: psycopg.Connection, match_ids: Sequence[str], reason: str, annulled_by: str,
                  ladders: Mapping[str, LadderPolicy], timeouts: TransactionTimeouts | None = None,
                  attempts: int = 5) -> AnnulmentResult:
    """Annul ``match_ids`` (see the module docstring), ``reason`` and ``annulled_by`` on record.

    ``ladders`` are the configured ladders (their policies, as a rating transaction gets them).
    Annulling an annulled match is a no-op; an unknown id is reported, not an error. ``conn`` must
    be in autocommit mode. Raises :class:`AnnulmentRefused` for a ladder in arrival order (annul
    needs the chronological order) or an unconfigured one, :class:`AnnulmentBusy` (a subclass) while
    a rebuild of the ladder runs or its players kept changing; ``psycopg.Error`` on
    database failures (nothing is written then).
    """
    if not reason.strip():
        raise AnnulmentRefused("give the reason for the annulment (--reason)")
    for _ in range(attempts):
        try:
            with conn.transaction(), conn.cursor() as cur:
                set_local_timeouts(cur, timeouts or DEFAULT_TIMEOUTS)
                return _annul(cur, sorted(set(match_ids)), reason, annulled_by, ladders, timeouts or DEFAULT_TIMEOUTS)
        except LedgerRace:
            continue
    raise AnnulmentBusy(f"the players the annulment touches kept changing under it ({attempts} attempts); "
                           "try again")


class _Named(NamedTuple):
    """A ledger row an annulment names: its ``ladder``, when it is ordered and whether it is
    ``annulled`` already."""

    match_id: str
    ladder: str
    order_at: datetime
    annulled: bool

    @property
    def key(self) -> OrderKey:
        """The match's order key."""
        return (self.order_at, self.match_id)


def _annul(cur: psycopg.Cursor, ids: list[str], reason: str, by: str, configured: Mapping[str, LadderPolicy],
           limits: TransactionTimeouts) -> AnnulmentResult:
    """The annulment's transaction (see the module docstring): refuse, lock, plan, re-rate, write."""
    found = {r.match_id: r for r in map(_Named._make, cur.execute(
        "SELECT match_id, ladder, order_at, annulled FROM ledger WHERE match_id = ANY(%b)", (ids,)))}
    result = AnnulmentResult(unknown=[m for m in ids if m not in found],
                             already=[m for m in ids if m in found and found[m].annulled])
    todo: dict[str, list[str]] = {}
    for mid in ids:
        if mid in found and not found[mid].annulled:
            todo.setdefault(found[mid].ladder, []).append(mid)
    if not todo:
        return result
    _refuse_busy_or_unknown(cur, todo, configured)
    ladders, _ = lock_ladders(cur, {ladder: configured[ladder] for ladder in todo})
    _refuse_arrival_order(ladders)
    starts = [CorrectionStart(ladder, since[1], since, "annulment", NO_LIMIT, tuple(gone))
              for ladder, gone in sorted(todo.items()) for since in [min(found[m].key for m in gone)]]
    # planned from the rows as committed (the players it touches), then those locked in the global order
    plans = plan_corrections(cur, starts, {}, ladders, payloads=False)
    locks = lock_players(cur, sorted(keys_to_lock(plans)), limits.lock_timeout_ms, limits.lock_timeout_ms)
    if locks.blocked:
        raise psycopg.errors.LockNotAvailable(f"player rows of ladder(s) {', '.join(sorted(todo))} "
                                              "held by another transaction")
    players = {row.key: Player.from_row(row) for row in locks.rows}
    plans = settle_corrections(cur, players, lambda _: starts, {}, ladders, limits)
    sweeps = _rerate(plans, players, ladders)
    rows = RatingRows()
    announced = {key: p.announced() for key, p in players.items()}
    recorded = record_corrections(cur, plans, sweeps, announced, ladders, rows)
    _record_annulments(cur, todo, recorded, reason, by)
    rows.players = changed_players(players, sweeps, announced)
    write_rating_rows(cur, rows)
    for ladder, gone in sorted(todo.items()):
        result.annulled.extend(gone)
        result.rerated[ladder] = len(sweeps[ladder].rerated)
        result.players_changed[ladder] = recorded[ladder][1]
    return result


def _refuse_busy_or_unknown(cur: psycopg.Cursor, todo: Mapping[str, list[str]],
                            configured: Mapping[str, LadderPolicy]) -> None:
    """Raise :class:`AnnulmentRefused` for a ladder not configured here, :class:`AnnulmentBusy`
    while a rebuild of one runs (its rebuild lock is tried, never waited for)."""
    for ladder in sorted(todo):
        if ladder not in configured:
            raise AnnulmentRefused(f"ladder {ladder!r} of match {todo[ladder][0]!r} is not configured here")
        free = cur.execute("SELECT pg_try_advisory_xact_lock(%s, hashtext(%s))", (REBUILD_LOCK_CLASS, ladder))
        if not one_row(free.fetchone())[0]:
            raise AnnulmentBusy(f"a rebuild of ladder {ladder!r} is running; annul after it finishes")


def _refuse_arrival_order(ladders: Mapping[str, LadderInForce]) -> None:
    """Raise :class:`AnnulmentRefused` for a ladder in arrival order: annulment needs the
    chronological order."""
    for ladder, in_force in ladders.items():
        if not in_force.chronological:
            raise AnnulmentRefused(f"ladder {ladder!r} is rated in arrival order; annulment needs the chronological "
                                   f"order: run `ratings rebuild --ladder {ladder} --order finished-at` first")


def _rerate(plans: Mapping[str, CorrectionPlan], players: Players,
            ladders: Mapping[str, LadderInForce]) -> dict[str, Sweep]:
    """Each ladder's stored matches from its correction's start swept again without the annulled
    ones, from the locked players' states."""
    sweeps: dict[str, Sweep] = {}
    for ladder, plan in plans.items():
        current = {key[1]: p.standing for key, p in players.items() if key[0] == ladder}
        sweeps[ladder] = sweep(ladders[ladder].policy, [], plan.later, current, to_engine_match, plan.start.dropped)
    return sweeps


def _record_annulments(cur: psycopg.Cursor, todo: Mapping[str, list[str]], recorded: Mapping[str, tuple[int, int]],
                       reason: str, by: str) -> None:
    """Flag the annulled matches in the ledger and record each annulment with its correction."""
    named = [(mid, ladder, recorded[ladder][0]) for ladder in sorted(todo) for mid in todo[ladder]]
    gone = [mid for mid, _, _ in named]
    cur.execute("UPDATE ledger SET annulled = true WHERE match_id = ANY(%b)", (gone,))
    cur.execute("INSERT INTO annulments (match_id, ladder, reason, annulled_by, correction_id) "
                "SELECT m, l, %b, %b, c FROM unnest(%b::text[], %b::text[], %b::bigint[]) AS u(m, l, c)",
                (reason, by, gone, [ladder for _, ladder, _ in named], [c for _, _, c in named]))


class AnnulmentRecord(NamedTuple):
    """An annulment on record: the ``match_id``, its ``ladder``, the ``reason``, who annulled it
    (``annulled_by``) and when (``annulled_at``, UTC)."""

    match_id: str
    ladder: str
    reason: str
    annulled_by: str
    annulled_at: datetime


def annulments(conn: psycopg.Connection, ladder: str | None = None) -> list[AnnulmentRecord]:
    """The annulments on record, newest first."""
    rows = conn.execute(
        "SELECT match_id, ladder, reason, annulled_by, annulled_at FROM annulments "
        "WHERE %(ladder)s::text IS NULL OR ladder = %(ladder)s ORDER BY annulled_at DESC, match_id",
        {"ladder": ladder}).fetchall()
    return [AnnulmentRecord._make(r) for r in rows]
