"""Store: annulment of matches (issue 18), with the rating transaction's correction machinery.

An organiser voids matches (a cheater's games, a disputed result, a server bug). In one
transaction, per ladder: the ladder's shared advisory lock (as a rating transaction), the players
the annulment touches read without locks, then locked in the one global order and read again (if
the set grew meanwhile, the transaction runs again); the stored matches from the earliest annulled
one on are swept again without the annulled ones (:func:`worker.store.chronology.sweep`); the
annulled matches' history rows and those of the re-rated ones are superseded by one
``annulment`` correction, whose ``correction`` events tell consumers each player's new rating; the
ledger keeps the original rows, flagged ``annulled``; ``annulments`` records who, when and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from engine.replay import Standing
from worker.mapping import to_engine_match
from worker.store.chronology import affected_players, later_matches, sweep
from worker.store.corrections import record_correction, write_rating_rows
from worker.store.events import correction_events_json
from worker.store.ladders import LADDER_LOCK_CLASS, LadderPolicy, ladder_in_force
from worker.store.locking import lock_players
from worker.store.rating import DEFAULT_TIMEOUTS, LedgerRace, TransactionTimeouts, set_local_timeouts
from worker.store.rebuilds import REBUILD_LOCK_CLASS

NO_LIMIT = 2**31 - 1


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


def _annul(cur: psycopg.Cursor, ids: list[str], reason: str, by: str, ladders: Mapping[str, LadderPolicy],
           limits: TransactionTimeouts) -> AnnulmentResult:
    found = {mid: (ladder, at, annulled) for mid, ladder, at, annulled in cur.execute(
        "SELECT match_id, ladder, order_at, annulled FROM ledger WHERE match_id = ANY(%b)", (ids,))}
    result = AnnulmentResult(unknown=[m for m in ids if m not in found],
                             already=[m for m in ids if m in found and found[m][2]])
    todo: dict[str, list[str]] = {}
    for mid in ids:
        if mid in found and not found[mid][2]:
            todo.setdefault(found[mid][0], []).append(mid)
    if not todo:
        return result
    names = sorted(todo)
    for ladder in names:
        if ladder not in ladders:
            raise AnnulmentRefused(f"ladder {ladder!r} of match {todo[ladder][0]!r} is not configured here")
        free = cur.execute("SELECT pg_try_advisory_xact_lock(%s, hashtext(%s))", (REBUILD_LOCK_CLASS, ladder))
        if not free.fetchone()[0]:
            raise AnnulmentBusy(f"a rebuild of ladder {ladder!r} is running; annul after it finishes")
    cur.execute("SELECT count(pg_advisory_xact_lock_shared(%b, hashtext(l))) FROM unnest(%b::text[]) AS l",
                (LADDER_LOCK_CLASS, names))
    occurred_at = datetime.now(UTC)
    for ladder in names:
        policy, generation, order = ladder_in_force(cur, ladder, ladders[ladder].policy, ladders[ladder].content)
        if order == "applied":
            raise AnnulmentRefused(f"ladder {ladder!r} is rated in arrival order; annulment needs the chronological "
                                   f"order: run `ratings rebuild --ladder {ladder} --order finished-at` first")
        gone = todo[ladder]
        since = min((found[m][1], m) for m in gone)
        later = later_matches(cur, ladder, since, generation, NO_LIMIT, inclusive=True)
        affected = affected_players([], later, since, gone)
        locks = lock_players(cur, sorted((ladder, p) for p in affected), limits.lock_timeout_ms, limits.lock_timeout_ms)
        if locks.blocked:
            raise psycopg.errors.LockNotAvailable(f"player rows of ladder {ladder!r} held by another transaction")
        later = later_matches(cur, ladder, since, generation, NO_LIMIT, inclusive=True)
        if affected_players([], later, since, gone) - affected:
            raise LedgerRace("the players the annulment touches grew under the locks")
        current: dict[str, Standing] = {}
        keys: dict[str, Any] = {}
        extra: dict[str, int] = {}
        for _lad, pid, rating, games, _last, peak, season, rebuilds, wins, draws, losses, at, mid in locks.rows:
            current[pid] = Standing(rating, games, peak, season, wins, draws, losses)
            keys[pid] = (at, mid) if at is not None else None
            extra[pid] = rebuilds
        done = sweep(policy, [], later, current, to_engine_match, gone)
        announced = {(ladder, pid): (st.rating, st.games_played, st.games_played + extra[pid])
                     for pid, st in current.items()}
        history: list[tuple] = []
        corrections: list[dict[str, Any]] = []
        superseded: list[tuple[int, int]] = []
        dropped = [m for m in later if m.match_id in set(gone)]
        correction_id = record_correction(cur, ladder, since[1], "annulment", done, announced, generation,
                                          policy.version or None, occurred_at, history, corrections, superseded,
                                          dropped)
        players = [(ladder, pid, st, None, keys.get(pid), announced[(ladder, pid)][2] - st.games_played)
                   for pid, st in sorted(done.standings.items())]
        cur.execute("UPDATE ledger SET annulled = true WHERE match_id = ANY(%b)", (gone,))
        cur.execute("INSERT INTO annulments (match_id, ladder, reason, annulled_by, correction_id) "
                    "SELECT m, %b, %b, %b, %b FROM unnest(%b::text[]) AS m", (ladder, reason, by, correction_id, gone))
        write_rating_rows(cur, history, [(e["event_id"], j, None) for e, j in
                                         zip(corrections, correction_events_json(corrections, occurred_at))],
                          superseded, players)
        result.annulled.extend(gone)
        result.rerated[ladder] = len(done.rerated)
        result.players_changed[ladder] = len(corrections)
    return result


def annulments(conn: psycopg.Connection, ladder: str | None = None) -> list[tuple]:
    """The annulments on record, newest first: (match_id, ladder, reason, annulled_by, annulled_at)."""
    return conn.execute(
        "SELECT match_id, ladder, reason, annulled_by, annulled_at FROM annulments "
        "WHERE %(ladder)s::text IS NULL OR ladder = %(ladder)s ORDER BY annulled_at DESC, match_id",
        {"ladder": ladder}).fetchall()
