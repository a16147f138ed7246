"""Store: a rating transaction's corrections (issue 18): which stored matches the batch's late
matches re-rate (:func:`plan_corrections`), and what a correction writes (:func:`record_correction`,
and :func:`write_rating_rows`, the one writer of rating and correction rows, for late matches and
annulments alike).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from engine import RatingChange
from worker.store.chronology import (
    LaterMatch,
    OrderKey,
    Sweep,
    affected_players,
    histories_in_order,
    later_match_players,
    read_rows,
)
from worker.store.events import OUTBOX_CHANNEL, correction_event_id


@dataclass(slots=True)
class CorrectionPlan:
    """A ladder's correction: the earliest late match (``cause``) and its order key (``since``),
    the stored matches after it with a player it touches (``later``, key order), the players it
    touches (``affected``), and whether it is past the bound (``at_end``: the late matches are
    applied at the end and flagged)."""

    cause: str
    since: OrderKey
    later: list[LaterMatch]
    affected: set[str]
    at_end: bool


def plan_corrections(cur: psycopg.Cursor, matches: Sequence[Any], engine_matches: Sequence[Any],
                     match_keys: Sequence[OrderKey | None], last_keys: dict[tuple[str, str], OrderKey],
                     in_force: dict[str, tuple[Any, int, str]], bound: int,
                     games: dict[tuple[str, str], int] | None = None,
                     payloads: bool = True) -> dict[str, CorrectionPlan]:
    """Per chronological ladder with a late match in the batch (its order key below the last key of
    one of its players in ``last_keys``): the correction to make. ``matches`` are the batch's
    :class:`worker.store.rating.BatchMatch` (their ``payload``), ``engine_matches`` the engine's
    matches, ``match_keys`` their order keys (None: a ladder in arrival order), ``in_force`` per
    ladder (policy, generation, order), ``bound`` the most stored matches that may follow the late
    match (past it, ``at_end``).

    Per such ladder, one read of the later matches' players (:func:`later_match_players`, at most
    ``bound`` + 1) gives the players the correction touches (:func:`affected_players`); the plan's
    ``later`` keeps only the matches with one of them (the others a sweep skips, and no player it
    enters has a row in them). With ``games`` (the locked rows' games played) or ``payloads``, one
    more statement reads those matches' history rows and payloads (:func:`read_rows`), and with
    ``games`` a correction whose players' histories are not in replay order from that point
    (:func:`histories_in_order`) goes at the end. Without either (the read before the locks) the
    plan's matches have no rows: ``affected`` and ``later``'s players are what the locks need."""
    since: dict[str, tuple[OrderKey, str]] = {}
    for m, em, key in zip(matches, engine_matches, match_keys):
        if key is None:
            continue
        ladder = m.payload["ladder"]
        if any(key < last_keys.get((ladder, pid), key) for pid in em.player_ids()):
            if ladder not in since or key < since[ladder][0]:
                since[ladder] = (key, m.payload["match_id"])
    plans: dict[str, CorrectionPlan] = {}
    for ladder, (key, cause) in since.items():
        generation = in_force[ladder][1]
        later = later_match_players(cur, ladder, key, generation, bound + 1)
        if len(later) > bound:
            plans[ladder] = CorrectionPlan(cause, key, [], set(), True)
            continue
        batch = [(k, em.player_ids()) for m, em, k in zip(matches, engine_matches, match_keys)
                 if k is not None and m.payload["ladder"] == ladder]
        affected = affected_players(batch, later, key)  # type: ignore[arg-type]
        later = [m for m in later if not affected.isdisjoint(m.players)]
        if games is not None or payloads:
            later = read_rows(cur, later, generation, payloads)
        if games is not None and not histories_in_order(
                later, affected, {pid: n for (lad, pid), n in games.items() if lad == ladder}):
            plans[ladder] = CorrectionPlan(cause, key, [], set(), True)
            continue
        plans[ladder] = CorrectionPlan(cause, key, later, affected, False)
    return plans


def record_correction(cur: psycopg.Cursor, ladder: str, cause: str, kind: str, done: Sweep,
                      announced: dict[tuple[str, str], tuple[float, int, int]], generation: int,
                      version: str | None, occurred_at: datetime, history: list[tuple],
                      corrections: list[dict[str, Any]], superseded: list[tuple[int, int]],
                      dropped: Sequence[LaterMatch] = ()) -> int:
    """Record one correction of ``ladder`` (a ``corrections`` row of ``kind``, ``late`` or
    ``annulment``, caused by match ``cause``) from a :class:`worker.store.chronology.Sweep`: the
    re-rated matches' new history rows go to ``history`` (announcing no event), their earlier rows
    and those of the ``dropped`` (annulled) matches to ``superseded`` with the correction's id, and
    one ``correction`` event per player whose stored (rating, games) differs from what its last
    event announced (``announced``: player key -> (rating, games, event sequence), updated) to
    ``corrections``. Returns the correction's id."""
    last_change: dict[str, tuple[str, RatingChange]] = {}
    for stored, again in done.rerated:
        for change, sequence, peak, season in zip(again.changes, again.games, again.peaks_before,
                                                  again.seasons_before):
            history.append((stored.seq, stored.match_id, ladder, change.player_id, sequence,
                            float(change.rating_before), float(change.rating_after),
                            float(change.expected_score), float(change.actual_score), float(change.k_factor),
                            change.result, None, occurred_at, generation, version, peak, season))
            last_change[change.player_id] = (stored.match_id, change)
    changed = [(pid, st, announced[(ladder, pid)]) for pid, st in sorted(done.standings.items())
               if (st.rating, st.games_played) != announced[(ladder, pid)][:2]]
    correction_id = cur.execute(
        "INSERT INTO corrections (ladder, match_id, kind, matches_rerated, players_changed) "
        "VALUES (%s, %s, %s, %s, %s) RETURNING id",
        (ladder, cause, kind, len(done.rerated), len(changed))).fetchone()[0]
    superseded += [(r.row_id, correction_id) for stored, _ in done.rerated for r in stored.rows]
    superseded += [(r.row_id, correction_id) for stored in dropped for r in stored.rows]
    for pid, st, (rating, _, number) in changed:
        match_id, change = last_change.get(pid) or (cause, _no_change(pid, st.rating))
        announced[(ladder, pid)] = (st.rating, st.games_played, number + 1)
        corrections.append({"event_id": correction_event_id(correction_id, pid), "match_id": match_id,
                            "ladder": ladder, "player_id": pid, "rating_before": rating,
                            "rating_after": st.rating, "change": change, "sequence": number + 1,
                            "games_played": st.games_played})
    return correction_id


def _no_change(player_id: str, rating: float) -> RatingChange:
    """The stand-in change of a player whose every later match was annulled (no match re-rated):
    expected and actual score 0.5, K-factor 0."""
    return RatingChange(player_id, rating, rating, 0.5, 0.5, 0.0, "draw")


def write_rating_rows(cur: psycopg.Cursor, history: list[tuple], outbox: list[tuple[Any, str, str | None]],
                      superseded: list[tuple[int, int]], players: list[tuple],
                      ledger: list[tuple] | None = None) -> dict[str, int]:
    """The writes of a rating or correction transaction: mark the ``superseded`` history rows
    ((row id, correction id)) first, then one statement (one round trip, data-modifying ``WITH``
    clauses) inserts the new ``ledger`` rows ((match_id, ladder, payload_hash, payload JSON, finished_at,
    order_at, out_of_order, placed_at_end, task_id, policy_version, player ids as a JSON array), in
    apply order; ``ON CONFLICT
    (match_id) DO NOTHING``), the new ``history`` rows (17 columns, the
    ``rating_changes`` ones; a first column ``None`` takes the ``seq`` of the ledger row of its
    match id inserted here), the ``outbox`` rows ((event id, JSON, the match id of the new ledger
    row the event belongs to or ``None``)) in order, updates the ``players`` rows ((ladder,
    player_id, Standing, last finished_at, last order key, extra events)) and wakes the relay
    (``NOTIFY``).

    Returns ``{match_id: seq}`` of the ledger rows inserted: fewer than ``ledger`` when a concurrent
    transaction committed one of the match ids first. The history and outbox rows of such a match
    are left out (their keys derive from the match id: they would collide with the winner's), so
    the statement succeeds and the caller raises and rolls back. Raises ``psycopg.Error`` on
    database failures."""
    if superseded:  # before the new rows: the current row of a (match, player) is unique
        cur.execute("UPDATE rating_changes r SET superseded_by = u.c FROM unnest(%b::bigint[], %b::bigint[]) "
                    "AS u(i, c) WHERE r.id = u.i", ([i for i, _ in superseded], [c for _, c in superseded]))
    ledger = ledger or []
    columns = [list(c) for c in zip(*ledger)] if ledger else [[] for _ in range(11)]
    history_columns = [list(c) for c in zip(*history)] if history else [[] for _ in range(17)]
    history_columns[0] = [None if s is None else int(s) for s in history_columns[0]]
    row = cur.execute(
        _WRITE,
        [*columns, *history_columns, [e for e, _, _ in outbox], [j for _, j, _ in outbox], [m for _, _, m in outbox],
         [p[0] for p in players], [p[1] for p in players], [float(p[2].rating) for p in players],
         [p[2].games_played for p in players], [p[2].wins for p in players], [p[2].draws for p in players],
         [p[2].losses for p in players], [float(p[2].peak_rating) for p in players], [p[3] for p in players],
         [p[2].season for p in players], [p[4][0] if p[4] else None for p in players],
         [p[4][1] if p[4] else None for p in players], [p[5] for p in players], OUTBOX_CHANNEL],
    ).fetchone()
    return dict(zip(row[0], row[1]))


_WRITE = """
WITH led AS (
    INSERT INTO ledger (match_id, ladder, payload_hash, payload, finished_at, order_at, out_of_order,
                        placed_at_end, task_id, policy_version, player_ids)
    SELECT m, l, h, p::jsonb, f, a, o, e, t, v, ARRAY(SELECT jsonb_array_elements_text(pi::jsonb))
      FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::timestamptz[], %b::timestamptz[],
                  %b::bool[], %b::bool[], %b::text[], %b::text[], %b::text[])
           WITH ORDINALITY AS u(m, l, h, p, f, a, o, e, t, v, pi, n)
     ORDER BY n
    ON CONFLICT (match_id) DO NOTHING RETURNING match_id, seq),
-- the ledger seq of each match inserted above, by match id: a lookup per history and outbox row
-- (a join to led itself would be a nested loop over it: the transaction plans no hash joins)
seqs AS (SELECT coalesce(jsonb_object_agg(match_id, seq), '{}') AS by_match FROM led),
hist AS (
    INSERT INTO rating_changes (ledger_seq, match_id, ladder, player_id, sequence, rating_before, rating_after,
                                expected_score, actual_score, k_factor, result, event_id, occurred_at,
                                generation, policy_version, peak_before, season_before)
    SELECT coalesce(u.s, (seqs.by_match ->> u.m)::bigint), u.m, u.l, u.pid, u.q, u.rb, u.ra, u.es, u.acs, u.k, u.r,
           u.eid, u.at, u.g, u.v, u.pk, u.sn
      FROM unnest(%b::bigint[], %b::text[], %b::text[], %b::text[], %b::int[], %b::float8[], %b::float8[],
                  %b::float8[], %b::float8[], %b::float8[], %b::text[], %b::uuid[], %b::timestamptz[], %b::bigint[],
                  %b::text[], %b::float8[], %b::text[])
           WITH ORDINALITY AS u(s, m, l, pid, q, rb, ra, es, acs, k, r, eid, at, g, v, pk, sn, n)
     CROSS JOIN seqs
     WHERE u.s IS NOT NULL OR seqs.by_match ? u.m
     ORDER BY u.n),
ev AS (
    INSERT INTO outbox (event_id, payload)
    SELECT e, p::jsonb FROM unnest(%b::uuid[], %b::text[], %b::text[]) WITH ORDINALITY AS u(e, p, m, n)
     WHERE u.m IS NULL OR (SELECT by_match FROM seqs) ? u.m
     ORDER BY n),
pl AS (
    UPDATE players p SET rating = u.rating, games_played = u.games, wins = u.w, draws = u.d, losses = u.l,
           peak_rating = u.peak, last_finished_at = greatest(p.last_finished_at, u.last),
           last_order_at = u.oat, last_order_match = u.omid, rebuild_events = u.extra,
           season = u.season, updated_at = now()
      FROM unnest(%b::text[], %b::text[], %b::float8[], %b::int[], %b::int[], %b::int[], %b::int[],
                  %b::float8[], %b::timestamptz[], %b::text[], %b::timestamptz[], %b::text[], %b::int[])
           AS u(ladder, player_id, rating, games, w, d, l, peak, last, season, oat, omid, extra)
     WHERE p.ladder = u.ladder AND p.player_id = u.player_id)
SELECT coalesce((SELECT array_agg(match_id ORDER BY seq) FROM led), '{}'),
       coalesce((SELECT array_agg(seq ORDER BY seq) FROM led), '{}'),
       pg_notify(%b, '')
"""
