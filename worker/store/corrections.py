"""Store: the correction path of the rating transaction and of annulments, and the one writer.

A correction re-rates the stored matches a change of the past affects: a late match placed in its
chronological position (``late``), or annulled matches left out (``annulment``). Both go through the
same steps: where it starts (:class:`CorrectionStart`), which stored matches and players it touches
(:func:`plan_corrections`, before the locks and under them), the players locked until that set
stops growing (:func:`settle_corrections`), the sweep (:func:`engine.chronology.sweep`), what it
records (:func:`record_corrections`) and the one write (:func:`write_rating_rows`) of rating and
correction rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

import psycopg

from engine import RatingChange
from engine.chronology import (
    LaterMatch,
    OrderKey,
    Prior,
    Sweep,
    affected_players,
    histories_in_order,
)
from worker.store.chronology import later_match_players, read_rows
from worker.store.events import OUTBOX_CHANNEL, correction_event_id, correction_events_json, match_events_json
from worker.store.locking import Key, lock_players
from worker.store.players import Announced, Player, Players
from worker.store.transaction import LadderInForce, TransactionTimeouts, one_row

MAX_LOCK_ROUNDS = 10
"""Rounds of extra player locks a correction may take under the locks before the transaction runs again."""

NO_LIMIT = 2**31 - 1
"""The bound of a correction that may not be placed at the end (an annulment): every later match."""


class LedgerRace(Exception):
    """A concurrent transaction committed a match id this batch was about to apply; the batch
    rolled back and is classified again (the caller retries it)."""


class CorrectionGrew(LedgerRace):
    """Under the locks, a correction found it must re-rate players another transaction holds, or
    their set kept growing (matches committed between its first read and its locks): the
    transaction rolls back and runs again."""


class HistoryRow(NamedTuple):
    """A ``rating_changes`` row to insert (its columns, in order): ``ledger_seq`` None takes the seq
    of the ledger row of ``match_id`` inserted by the same write; ratings in rating points, scores in
    [0, 1]; ``event_id`` None for a re-rated match's row (a correction announces it). The last six
    (``None`` under Elo) are a model with uncertainty's: the change's deviation and volatility before
    and after (:class:`engine.RatingChange`), and the player's stored deviation and last match time
    before the match (:class:`engine.chronology.Prior`), from which a correction re-enters it."""

    ledger_seq: int | None
    match_id: str
    ladder: str
    player_id: str
    sequence: int
    rating_before: float
    rating_after: float
    expected_score: float
    actual_score: float
    k_factor: float
    result: str
    event_id: uuid.UUID | None
    occurred_at: datetime
    generation: int
    policy_version: str | None
    peak_before: float | None
    season_before: str | None
    deviation_before: float | None = None
    deviation_after: float | None = None
    volatility_before: float | None = None
    volatility_after: float | None = None
    prior_deviation: float | None = None
    prior_last_played: float | None = None


def model_columns(change: RatingChange, prior: Prior) -> tuple[float | None, ...]:
    """The last six columns of a :class:`HistoryRow` (in order) for ``change``, rated from ``prior``."""
    return (_float(change.deviation_before), _float(change.deviation_after), _float(change.volatility_before),
            _float(change.volatility_after), _float(prior.deviation), _float(prior.last_played))


class LedgerRow(NamedTuple):
    """A ``ledger`` row to insert (its columns, in order; ``player_ids`` a JSON array's text)."""

    match_id: str
    ladder: str
    payload_hash: str
    payload: str
    finished_at: datetime
    order_at: datetime
    out_of_order: bool
    placed_at_end: bool
    task_id: str | None
    policy_version: str | None
    player_ids: str


@dataclass(slots=True)
class RatingRows:
    """What one rating or correction transaction writes: new ``ledger`` rows (apply order), new
    ``history`` rows, the ``match_events`` and ``correction_events`` (field dicts, see
    :func:`worker.store.events.match_events_json`), the ``superseded`` history rows ((row id,
    correction id)) and the ``players`` whose state changed; ``occurred_at``, the time of its
    history rows and events (aware)."""

    occurred_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    ledger: list[LedgerRow] = field(default_factory=list)
    history: list[HistoryRow] = field(default_factory=list)
    match_events: list[dict[str, Any]] = field(default_factory=list)
    correction_events: list[dict[str, Any]] = field(default_factory=list)
    superseded: list[tuple[int, int]] = field(default_factory=list)
    players: list[Player] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CorrectionStart:
    """Where a ladder's correction starts: the match that causes it (``cause``: the earliest late
    match, or the earliest annulled one) and its order key ``since``; ``kind`` ``late`` or
    ``annulment``; the ``dropped`` (annulled) match ids; ``bound``, the most stored matches that may
    follow ``since`` for the correction to run (past it, a late match goes at the end)."""

    ladder: str
    cause: str
    since: OrderKey
    kind: str
    bound: int
    dropped: tuple[str, ...] = ()


@dataclass(slots=True)
class CorrectionPlan:
    """A ladder's correction: its ``start``, the stored matches from it on with a player it touches
    (``later``, key order), the players it touches (``affected``), and whether it is past the bound
    (``at_end``: the late matches are applied at the end and flagged, nothing is re-rated)."""

    start: CorrectionStart
    later: list[LaterMatch]
    affected: set[str]
    at_end: bool

    @property
    def cause(self) -> str:
        """The match id the correction is recorded against."""
        return self.start.cause

    @property
    def since(self) -> OrderKey:
        """The order key the correction starts from."""
        return self.start.since


BatchPlayers = Mapping[str, Sequence[tuple[OrderKey, Iterable[str]]]]
"""Per ladder, the (order key, player ids) of the batch's matches on a chronological ladder."""


def plan_corrections(cur: psycopg.Cursor, starts: Iterable[CorrectionStart], batch: BatchPlayers,
                     ladders: Mapping[str, LadderInForce], games: Mapping[Key, int] | None = None,
                     payloads: bool = True) -> dict[str, CorrectionPlan]:
    """Per correction start: the correction to make (by ladder). ``batch``: the batch's matches
    whose players a late match's correction touches too; ``ladders``: each ladder in force (its
    history generation).

    Per start, one read of the later matches' players (:func:`later_match_players`, at most
    ``bound`` + 1; the annulled match itself included) gives the players the correction touches
    (:func:`engine.chronology.affected_players`); the plan's ``later`` keeps only the matches with
    one of them (the others a sweep skips). With ``games`` (the locked rows' games played) or
    ``payloads``, one more statement reads those matches' history rows and payloads
    (:func:`read_rows`), and with ``games`` a late match's correction whose players' histories are
    not in replay order from that point (:func:`engine.chronology.histories_in_order`) goes at the
    end. Without either (the read before the locks) the plan's matches have no rows: ``affected``
    and ``later``'s players are what the locks need."""
    plans: dict[str, CorrectionPlan] = {}
    for start in starts:
        generation = ladders[start.ladder].generation
        later = later_match_players(cur, start.ladder, start.since, generation, start.bound + 1,
                                    inclusive=bool(start.dropped))
        if len(later) > start.bound:
            plans[start.ladder] = CorrectionPlan(start, [], set(), True)
            continue
        affected = affected_players(batch.get(start.ladder, ()), later, start.since, start.dropped)
        later = [m for m in later if not affected.isdisjoint(m.players)]
        if games is not None or payloads:
            later = read_rows(cur, later, generation, payloads)
        if games is not None and start.kind == "late" and not histories_in_order(
                later, affected, {pid: n for (lad, pid), n in games.items() if lad == start.ladder}):
            plans[start.ladder] = CorrectionPlan(start, [], set(), True)
            continue
        plans[start.ladder] = CorrectionPlan(start, later, affected, False)
    return plans


def keys_to_lock(plans: Mapping[str, CorrectionPlan]) -> set[Key]:
    """The player rows the corrections touch, (ladder, player_id)."""
    return {(ladder, pid) for ladder, plan in plans.items() for pid in plan.affected}


def settle_corrections(cur: psycopg.Cursor, players: Players, starts_of: Callable[[Players], list[CorrectionStart]],
                       batch: BatchPlayers, ladders: Mapping[str, LadderInForce],
                       limits: TransactionTimeouts) -> dict[str, CorrectionPlan]:
    """Under the locks: the corrections planned again (:func:`plan_corrections`) from what is
    committed now, where ``starts_of`` gives them from the locked ``players``. Players a correction
    now needs beyond those locked (matches committed between the read before the locks and the
    locks) are locked too and added to ``players``, out of the global order (a deadlock, if it
    happens, is a transient error retried), until the set stops growing: running the whole
    transaction again instead would race the other workers again.

    Raises :class:`CorrectionGrew` when such a row is held by another transaction past
    ``limits.player_lock_wait_ms``, or the set still grows after :data:`MAX_LOCK_ROUNDS` rounds."""
    for _ in range(MAX_LOCK_ROUNDS):
        games = {key: p.standing.games_played for key, p in players.items()}
        plans = plan_corrections(cur, starts_of(players), batch, ladders, games)
        grown = keys_to_lock(plans) - players.keys()
        if not grown:
            return plans
        # queue=False: this transaction holds its ladders' queue lock already (shared or exclusive);
        # asking for it exclusively again while peers hold it shared could close a cycle with them
        more = lock_players(cur, sorted(grown), limits.player_lock_wait_ms, limits.lock_timeout_ms, queue=False)
        if more.blocked:
            raise CorrectionGrew(f"a correction needs {len(more.blocked)} player row(s) another transaction holds")
        players.update((row.key, Player.from_row(row)) for row in more.rows)
    raise CorrectionGrew(f"the players a correction needs kept growing ({MAX_LOCK_ROUNDS} rounds)")


def record_corrections(cur: psycopg.Cursor, plans: Mapping[str, CorrectionPlan], sweeps: Mapping[str, Sweep],
                       announced: dict[Key, Announced], ladders: Mapping[str, LadderInForce],
                       rows: RatingRows) -> dict[str, tuple[int, int]]:
    """Record each ladder's correction that re-rated a stored match or dropped an annulled one
    (:func:`record_correction`). Returns per such ladder (correction id, players told by an event)."""
    recorded: dict[str, tuple[int, int]] = {}
    for ladder, plan in sorted(plans.items()):
        done = sweeps.get(ladder)
        if done is None or not (done.rerated or plan.start.dropped):
            continue
        told = len(rows.correction_events)
        correction_id = record_correction(cur, plan, done, announced, ladders[ladder], rows)
        recorded[ladder] = (correction_id, len(rows.correction_events) - told)
    return recorded


def record_correction(cur: psycopg.Cursor, plan: CorrectionPlan, done: Sweep, announced: dict[Key, Announced],
                      ladder_in_force: LadderInForce, rows: RatingRows) -> int:
    """Record one correction of a ladder (a ``corrections`` row of the plan's ``kind``, caused by
    its ``cause``) from what the sweep did (``done``): the re-rated matches' new history rows go to
    ``rows.history`` (announcing no event), their earlier rows and those of the dropped (annulled)
    matches to ``rows.superseded`` with the correction's id, and one ``correction`` event per
    player whose state differs from what its last event announced (``announced``, updated) to
    ``rows.correction_events``. Returns the correction's id."""
    ladder, start = plan.start.ladder, plan.start
    version = ladder_in_force.policy.version or None
    last_change: dict[str, tuple[str, RatingChange]] = {}
    for stored, again in done.rerated:
        for change, sequence, peak, season, prior in zip(again.changes, again.games, again.peaks_before,
                                                         again.seasons_before, again.priors):
            rows.history.append(HistoryRow(
                stored.seq, stored.match_id, ladder, change.player_id, sequence, float(change.rating_before),
                float(change.rating_after), float(change.expected_score), float(change.actual_score),
                float(change.k_factor), change.result, None, rows.occurred_at, ladder_in_force.generation, version,
                peak, season, *model_columns(change, prior)))
            last_change[change.player_id] = (stored.match_id, change)
    changed = [(pid, st, announced[(ladder, pid)]) for pid, st in sorted(done.standings.items())
               if (st.rating, st.games_played) != announced[(ladder, pid)][:2]]
    correction_id = one_row(cur.execute(
        "INSERT INTO corrections (ladder, match_id, kind, matches_rerated, players_changed) "
        "VALUES (%s, %s, %s, %s, %s) RETURNING id",
        (ladder, start.cause, start.kind, len(done.rerated), len(changed))).fetchone())[0]
    dropped = [m for m in plan.later if m.match_id in start.dropped]
    rows.superseded += [(r.row_id, correction_id) for stored, _ in done.rerated for r in stored.rows]
    rows.superseded += [(r.row_id, correction_id) for stored in dropped for r in stored.rows]
    for pid, st, told in changed:
        match_id, change = last_change.get(pid) or (start.cause, _no_change(pid, st.rating))
        announced[(ladder, pid)] = Announced(st.rating, st.games_played, told.sequence + 1)
        rows.correction_events.append({
            "event_id": correction_event_id(correction_id, pid), "match_id": match_id, "ladder": ladder,
            "player_id": pid, "rating_before": told.rating, "rating_after": st.rating, "change": change,
            "sequence": told.sequence + 1, "games_played": st.games_played, "standing": st})
    return correction_id


def _no_change(player_id: str, rating: float) -> RatingChange:
    """The stand-in change of a player whose every later match was annulled (no match re-rated):
    expected and actual score 0.5, K-factor 0."""
    return RatingChange(player_id, rating, rating, 0.5, 0.5, 0.0, "draw")


def changed_players(players: Players, sweeps: Mapping[str, Sweep], announced: Mapping[Key, Announced]) -> list[Player]:
    """The players a sweep rated, sorted by key, with their new ``standing`` and the events they
    were sent beyond their matches (``extra_events``: last announced sequence - games played)."""
    out = []
    for key in sorted((ladder, pid) for ladder, done in sweeps.items() for pid in done.standings):
        player, standing = players[key], sweeps[key[0]].standings[key[1]]
        player.standing = standing
        player.extra_events = announced[key].sequence - standing.games_played
        out.append(player)
    return out


def write_rating_rows(cur: psycopg.Cursor, rows: RatingRows) -> dict[str, int]:
    """The writes of a rating or correction transaction: mark the ``rows.superseded`` history rows
    ((row id, correction id)) first, then one statement (one round trip, data-modifying ``WITH``
    clauses) inserts the new ledger rows (apply order; ``ON CONFLICT (match_id) DO NOTHING``), the
    new history rows (a ``ledger_seq`` None takes the ``seq`` of the ledger row of its match id
    inserted here), the outbox rows (the match events, then the correction events, as JSON validated
    against the contract), updates the players' rows and wakes the relay
    (``NOTIFY``).

    Returns ``{match_id: seq}`` of the ledger rows inserted: fewer than ``rows.ledger`` when a
    concurrent transaction committed one of the match ids first. The history and outbox rows of such
    a match are left out (their keys derive from the match id: they would collide with the winner's),
    so the statement succeeds and the caller raises and rolls back. Raises ``psycopg.Error`` on
    database failures; :class:`pydantic.ValidationError` if an event breaks the contract."""
    superseded = rows.superseded
    if superseded:  # before the new rows: the current row of a (match, player) is unique
        cur.execute("UPDATE rating_changes r SET superseded_by = u.c FROM unnest(%b::bigint[], %b::bigint[]) "
                    "AS u(i, c) WHERE r.id = u.i", ([i for i, _ in superseded], [c for _, c in superseded]))
    outbox = (match_events_json(rows.match_events, rows.occurred_at)
              + correction_events_json(rows.correction_events, rows.occurred_at))
    event_ids = [e["event_id"] for e in rows.match_events] + [e["event_id"] for e in rows.correction_events]
    owners = [e["match_id"] for e in rows.match_events] + [None] * len(rows.correction_events)
    columns = [list(c) for c in zip(*rows.ledger)] if rows.ledger else [[] for _ in LedgerRow._fields]
    history_columns = [list(c) for c in zip(*rows.history)] if rows.history else [[] for _ in HistoryRow._fields]
    history_columns[0] = [None if s is None else int(s) for s in history_columns[0]]
    players = rows.players
    states = [p.standing for p in players]
    row = cur.execute(
        _WRITE,
        [*columns, *history_columns, event_ids, outbox, owners,
         [p.ladder for p in players], [p.player_id for p in players], [float(s.rating) for s in states],
         [s.games_played for s in states], [s.wins for s in states], [s.draws for s in states],
         [s.losses for s in states], [_float(s.peak_rating) for s in states],
         [p.last_finished_at for p in players], [s.season for s in states],
         [p.last_key[0] if p.last_key else None for p in players],
         [p.last_key[1] if p.last_key else None for p in players], [p.extra_events for p in players],
         [_float(s.deviation) for s in states], [_float(s.volatility) for s in states],
         [_float(s.last_played) for s in states],
         OUTBOX_CHANNEL],
    ).fetchone()
    inserted = one_row(row)
    return dict(zip(inserted[0], inserted[1]))


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


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
                                generation, policy_version, peak_before, season_before, deviation_before,
                                deviation_after, volatility_before, volatility_after, prior_deviation,
                                prior_last_played)
    SELECT coalesce(u.s, (seqs.by_match ->> u.m)::bigint), u.m, u.l, u.pid, u.q, u.rb, u.ra, u.es, u.acs, u.k, u.r,
           u.eid, u.at, u.g, u.v, u.pk, u.sn, u.db, u.da, u.vb, u.va, u.pd, u.plp
      FROM unnest(%b::bigint[], %b::text[], %b::text[], %b::text[], %b::int[], %b::float8[], %b::float8[],
                  %b::float8[], %b::float8[], %b::float8[], %b::text[], %b::uuid[], %b::timestamptz[], %b::bigint[],
                  %b::text[], %b::float8[], %b::text[], %b::float8[], %b::float8[], %b::float8[], %b::float8[],
                  %b::float8[], %b::float8[])
           WITH ORDINALITY
                AS u(s, m, l, pid, q, rb, ra, es, acs, k, r, eid, at, g, v, pk, sn, db, da, vb, va, pd, plp, n)
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
           season = u.season, deviation = u.dev, volatility = u.vol, last_played = u.lp, updated_at = now()
      FROM unnest(%b::text[], %b::text[], %b::float8[], %b::int[], %b::int[], %b::int[], %b::int[],
                  %b::float8[], %b::timestamptz[], %b::text[], %b::timestamptz[], %b::text[], %b::int[],
                  %b::float8[], %b::float8[], %b::float8[])
           AS u(ladder, player_id, rating, games, w, d, l, peak, last, season, oat, omid, extra, dev, vol, lp)
     WHERE p.ladder = u.ladder AND p.player_id = u.player_id)
SELECT coalesce((SELECT array_agg(match_id ORDER BY seq) FROM led), '{}'),
       coalesce((SELECT array_agg(seq ORDER BY seq) FROM led), '{}'),
       pg_notify(%b, '')
"""
