"""``ratings rebuild``: recompute a ladder from its ledger under a policy, then switch over atomically.

Workers keep applying matches during a rebuild. Every rating transaction takes the ladder's
advisory lock in shared mode and reads the ladder's row of ``ladders`` (policy in force, history
generation) after it; the rebuild takes the exclusive form twice, each time briefly:

1. **Snapshot barrier.** Under the exclusive lock (so no rating transaction of the ladder is in
   flight), a REPEATABLE READ snapshot is opened and the ladder's highest ledger ``seq`` read:
   every row with ``seq <=`` it is in the snapshot, every later row commits after it.
2. **Replay, outside the lock.** The snapshot's ledger is replayed with
   :func:`engine.replay.replay_changes` under the new policy, in apply order (``seq``) or by
   ``(finished_at, seq)``. Its history rows are written as a new generation of ``rating_changes``
   (generation = the rebuild's id, ``event_id`` NULL) and the new standings into a temporary
   table, all in one transaction that stays open: readers and workers do not see them. Then the
   matches committed meanwhile are replayed on top, in ``seq`` order, in up to
   :data:`CATCH_UP_PASSES` passes, each up to a fresh barrier like the first.
3. **Switch-over, inside the lock**, still in that transaction: the matches committed since the
   last pass are replayed on top, in ``seq`` order; the changed
   ``players`` rows are updated; one ``rebuild`` event per player whose rating changed goes to
   the outbox with the player's next sequence; the catch-up rows of the ledger get the new
   ``policy_version``; ``ladders`` names the new policy, generation and order; COMMIT. Workers
   waiting on the lock meanwhile hit ``lock_timeout`` at worst, a transient error they retry (and
   past their retries requeue): nothing is lost, and they rate under the new policy afterwards.
4. **Stamping, outside the lock.** The snapshot's ledger rows get the new ``policy_version`` in
   batches (the history rows carry it from the switch on).

A rebuild killed before the commit of step 3 leaves the ladder exactly as it was (its rows
were never committed); one killed later leaves it switched, with some ledger rows still naming
the older version until the next rebuild stamps them. One rebuild per ladder runs at a time (a
session advisory lock). Each writes a row of ``rebuilds`` (who, when, policy, order, counts).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from engine import FreeForAll, Match, RatingChange
from engine.chronology import Prior, first_prior, prior_of, sweep
from engine.policy import AnyPolicy
from engine.replay import Standing, replay_changes
from worker import store as repository
from worker.mapping import to_engine_match
from worker.service.faults import FaultInjector
from worker.store import chronology
from worker.store.corrections import model_columns

ORDERS = ("applied", "finished-at")
"""Replay orders: ``applied`` (the ledger's ``seq``, the order workers committed) and
``finished-at`` (``(finished_at, seq)``; matches applied after the rebuild's snapshot follow in
``seq`` order)."""

CATCH_UP_PASSES = 3
"""Catch-up passes outside the lock after the snapshot's replay (each up to a fresh barrier)."""

CATCH_UP_ENOUGH = 100
"""A catch-up pass that found fewer matches than this is the last one before the switch-over."""

LOCK_TIMEOUT_MS = 60_000
"""How long the rebuild waits for the ladder's exclusive lock (milliseconds) before giving up."""

ProgressCallback = Callable[[str, int, int | None], None]
"""``progress(phase, done, total)``: phase ``"replay"`` (matches) or ``"stamp"`` (ledger seq range)."""


class RebuildError(Exception):
    """A rebuild could not run or was refused; the message says what to do."""


@dataclass(frozen=True)
class RebuildReport:
    """What one rebuild did. Counts are numbers of rows; durations are seconds.

    ``matches_replayed`` includes ``catch_up_matches`` (committed after the snapshot, replayed on
    top of it), of which ``caught_up_in_lock`` inside the switch-over; ``players_updated`` are ``players``
    rows written at
    the switch-over (any stored value differed), ``players_changed`` those whose rating changed,
    each announced by one ``rebuild`` event (``events_emitted``). ``lock_held_seconds`` is how long
    the ladder's exclusive lock was held at the switch-over, ``barrier_seconds`` at the snapshot.
    """

    rebuild_id: int
    ladder: str
    apply_order: str
    policy_version: str
    previous_policy_version: str | None
    generation: int
    previous_generation: int
    snapshot_seq: int
    matches_replayed: int
    catch_up_matches: int
    caught_up_in_lock: int
    players: int
    players_updated: int
    players_changed: int
    events_emitted: int
    ledger_rows_stamped: int
    barrier_seconds: float
    replay_seconds: float
    lock_wait_seconds: float
    lock_held_seconds: float
    duration_seconds: float

    def as_dict(self) -> dict[str, Any]:
        """Every field, for JSON output."""
        return asdict(self)


@dataclass
class _Fold:
    """The replay's running state: standings per player and each player's last change."""

    policy: AnyPolicy
    standings: dict[str, Standing]
    last: dict[str, tuple[str, RatingChange]]
    matches: int = 0
    before: dict[str, tuple[float | None, str | None, Prior]] = field(default_factory=dict)
    """Peak rating, season and :class:`engine.chronology.Prior` before the match :meth:`run` yielded
    last, per player (absent: new)."""

    def run(self, rows: Iterable[tuple[int, dict[str, Any]]]
            ) -> Iterator[tuple[int, Match | FreeForAll, tuple[RatingChange, ...]]]:
        """Replay ``(seq, payload)`` rows in the order given; yield ``(seq, match, changes)``."""
        seqs: deque[int] = deque()
        befores: deque[dict[str, tuple[float | None, str | None, Prior]]] = deque()
        standings = self.standings

        def matches() -> Iterator[Match | FreeForAll]:
            for seq, payload in rows:
                seqs.append(seq)
                match = to_engine_match(payload)
                # each player's peak and season before the match, kept in its history row
                befores.append({pid: (s.peak_rating, s.season, prior_of(s)) for pid in match.player_ids()
                                if (s := standings.get(pid)) is not None})
                yield match

        for match, changes in replay_changes(matches(), self.policy, self.standings):
            self.matches += 1
            self.before = befores.popleft()
            for change in changes:
                self.last[change.player_id] = (match.match_id, change)
            yield seqs.popleft(), match, changes


def history_row(seq: int, match: Match | FreeForAll, change: RatingChange, ladder: str, standing: Standing,
                 occurred_at: datetime, generation: int, version: str,
                 before: tuple[float | None, str | None, Prior] | None = None) -> tuple:
    """A ``rating_changes`` row of a rebuilt generation, in the column order of
    :data:`worker.store.REBUILD_HISTORY_COPY`: ``sequence`` is the player's n-th match on the
    ladder (``standing`` after the match), ``event_id`` NULL (a rebuilt row announces no event);
    ``before`` the player's peak rating, season and prior state before the match (a correction
    starts from them; ``None`` for a player's first match)."""
    peak, season, prior = before if before is not None else (None, None, first_prior(change))
    return (seq, match.match_id, ladder, change.player_id, standing.games_played, change.rating_before,
            change.rating_after, change.expected_score, change.actual_score, change.k_factor, change.result,
            None, occurred_at, generation, version, peak, season, *model_columns(change, prior))


def rebuild_ladder(
    database_url: str,
    ladder: str,
    policy: AnyPolicy,
    content: dict[str, Any],
    order: str | None = None,
    requested_by: str = "unknown",
    progress: ProgressCallback | None = None,
    faults: FaultInjector | None = None,
    stamp_batch: int = 50_000,
) -> RebuildReport:
    """Recompute ``ladder`` from its ledger under ``policy`` and switch over (see the module docstring).

    ``policy`` and ``content`` are the ladder's policy in the ladders file and its canonical
    content (recorded in ``policies``); ``order`` is one of :data:`ORDERS`, or ``None`` for the
    order the ladder is replayed in now (``applied`` unless a rebuild chose ``finished-at``).
    ``requested_by`` is recorded in ``rebuilds``. Safe while workers run.

    Raises :class:`RebuildError` when another rebuild of the ladder runs, when the ladder's lock
    cannot be had within :data:`LOCK_TIMEOUT_MS`, or for a policy without a version; ``ValueError``
    for an unknown order; ``psycopg.Error`` on database failures (the rebuild's row then says
    ``failed``, and the ladder is unchanged unless the switch-over had committed).
    """
    if order is not None and order not in ORDERS:
        raise ValueError(f"unknown order {order!r}: use one of {', '.join(ORDERS)}")
    if not policy.version:
        raise RebuildError("the policy has no version: pass a policy read from the ladders file")
    started = time.perf_counter()
    options = f"-c lock_timeout={LOCK_TIMEOUT_MS}"
    with psycopg.connect(database_url, autocommit=True, options=options) as control:
        if not repository.try_rebuild_lock(control, ladder):
            raise RebuildError(f"a rebuild of ladder {ladder!r} is already running (see `ratings rebuilds`); "
                               "wait for it to finish")
        previous = repository.ladder_record(control, ladder)
        order = order or (previous.apply_order if previous else repository.DEFAULT_ORDER)
        repository.record_policy(control, ladder, policy, content)
        rebuild_id = repository.start_rebuild(control, ladder, requested_by, order, policy.version, previous)
        try:
            return _rebuild(database_url, control, options, rebuild_id, ladder, policy, order, previous,
                            progress, faults or FaultInjector(None), stamp_batch, started)
        except BaseException as exc:
            try:
                repository.fail_rebuild(control, rebuild_id, f"{type(exc).__name__}: {exc}")
            except psycopg.Error:
                pass
            if isinstance(exc, psycopg.errors.LockNotAvailable):
                raise RebuildError(f"could not take ladder {ladder!r}'s lock within {LOCK_TIMEOUT_MS / 1000:g} s: "
                                   "a long transaction holds it; try again") from exc
            raise


def _rebuild(database_url, control, options, rebuild_id, ladder, policy, order, previous, progress, faults,
             stamp_batch, started) -> RebuildReport:
    progress = progress or (lambda phase, done, total: None)
    barrier_seconds = 0.0
    occurred_at = datetime.now(UTC)
    fold = _Fold(policy, {}, {})
    version = policy.version
    with psycopg.connect(database_url, autocommit=True, options=options) as writer, \
            psycopg.connect(database_url, autocommit=True) as snap:
        snap.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        snap.read_only = True
        with writer.transaction():
            repository.create_rebuild_staging(writer)
            with snap.transaction():
                # 1. Snapshot barrier: no rating transaction of the ladder is in flight as the snapshot opens.
                barrier_started = time.perf_counter()
                with control.transaction():
                    repository.lock_ladder_exclusively(control, ladder)
                    snapshot_seq = repository.ledger_last_seq(snap, ladder)
                barrier_seconds = time.perf_counter() - barrier_started
                total = repository.ledger_count(snap, ladder, snapshot_seq)
                # 2. Replay the snapshot outside the lock, into uncommitted rows of a new generation.
                replay_started = time.perf_counter()
                progress("replay", 0, total)
                rows: Iterable[tuple[int, dict[str, Any]]]
                # finished-at: matches placed at the end past the correction bound go back in their place
                rows = repository.iter_ledger_rows(snap, ladder, "finished-at-restored" if order == "finished-at"
                                                   else order, snapshot_seq, "AND seq <= %(snapshot)s",
                                                   {"snapshot": snapshot_seq})
                if order == "finished-at":
                    chronology.restore_placed_at_end(writer, ladder, snapshot_seq)
                with writer.cursor().copy(repository.REBUILD_HISTORY_COPY) as copy:
                    for seq, match, changes in fold.run(rows):
                        for change in changes:
                            copy.write_row(history_row(seq, match, change, ladder, fold.standings[change.player_id],
                                                       occurred_at, rebuild_id, version,
                                                       fold.before.get(change.player_id)))
                        if fold.matches % 2000 == 0:
                            progress("replay", fold.matches, total)
            progress("replay", fold.matches, total)
            repository.stage_players(writer, _standing_rows(fold, rebuild_id, fold.standings))
            # Matches committed meanwhile, still outside the lock: each pass reads up to a fresh
            # barrier, so the switch-over only replays what arrived during the last pass.
            caught = snapshot_seq
            for _ in range(CATCH_UP_PASSES):
                pass_started = time.perf_counter()
                with control.transaction():
                    repository.lock_ladder_exclusively(control, ladder)
                    upto = repository.ledger_last_seq(control, ladder)
                barrier_seconds = max(barrier_seconds, time.perf_counter() - pass_started)
                rows = repository.ledger_rows_after(writer, ladder, caught, upto)
                _catch_up(writer, fold, rows, ladder, occurred_at, rebuild_id, order)
                caught = upto
                if len(rows) < CATCH_UP_ENOUGH:
                    break
            replay_seconds = time.perf_counter() - replay_started
            faults.hit("rebuild_before_switch")

            # 3. Switch-over under the exclusive lock: catch up, swap, announce, point `ladders` at it.
            lock_started = time.perf_counter()
            repository.lock_ladder_exclusively(writer, ladder)
            locked = time.perf_counter()
            in_lock = repository.ledger_rows_after(writer, ladder, caught)
            _catch_up(writer, fold, in_lock, ladder, occurred_at, rebuild_id, order)
            written, events = repository.switch_players(writer, ladder, occurred_at)
            stamped = repository.stamp_ledger(writer, ladder, version, caught)
            catch_up = fold.matches - total
            repository.set_ladder_record(writer, ladder, version, rebuild_id, order,
                                         snapshot_seq if order == "finished-at" else None)
            lock_wait = locked - lock_started
            repository.update_rebuild(
                writer, rebuild_id, status="switched", snapshot_seq=snapshot_seq, matches_replayed=fold.matches,
                catch_up_matches=catch_up, players=len(fold.standings), players_changed=events,
                events_emitted=events, lock_wait_seconds=lock_wait,
            )
        lock_held = time.perf_counter() - locked
    faults.hit("rebuild_after_switch")

    # 4. Stamp the snapshot's ledger rows with the new version, in batches, outside the lock.
    low = 0
    progress("stamp", 0, caught)
    while low < caught:
        high = min(low + stamp_batch, caught)
        stamped += repository.stamp_ledger(control, ladder, version, low, high)
        low = high
        progress("stamp", low, caught)
    duration = time.perf_counter() - started
    repository.update_rebuild(control, rebuild_id, status="done", ledger_rows_stamped=stamped,
                              lock_held_seconds=lock_held, duration_seconds=duration)
    return RebuildReport(
        rebuild_id=rebuild_id, ladder=ladder, apply_order=order, policy_version=version,
        previous_policy_version=previous.policy_version if previous else None, generation=rebuild_id,
        previous_generation=previous.generation if previous else 0, snapshot_seq=snapshot_seq,
        matches_replayed=fold.matches, catch_up_matches=catch_up, caught_up_in_lock=len(in_lock),
        players=len(fold.standings),
        players_updated=written, players_changed=events, events_emitted=events,
        ledger_rows_stamped=stamped, barrier_seconds=barrier_seconds, replay_seconds=replay_seconds,
        lock_wait_seconds=lock_wait, lock_held_seconds=lock_held, duration_seconds=duration,
    )


def _catch_up(writer: psycopg.Connection, fold: _Fold, rows: list[tuple[int, dict[str, Any]]], ladder: str,
              occurred_at: datetime, rebuild_id: int, order: str = "applied") -> None:
    """Replay ``(seq, payload)`` rows on top of ``fold``: their history rows go into the new
    generation, the standings of their players over the staged ones. In ``finished-at`` order the
    rows are placed in their chronological position among those already replayed, re-rating what
    follows them as the rating transaction's correction does (:func:`_catch_up_in_order`)."""
    if not rows:
        return
    if order == "finished-at":
        _catch_up_in_order(writer, fold, rows, ladder, occurred_at, rebuild_id)
        return
    touched: dict[str, None] = {}
    with writer.cursor().copy(repository.REBUILD_HISTORY_COPY) as copy:
        for seq, match, changes in fold.run(iter(rows)):
            for change in changes:
                touched[change.player_id] = None
                copy.write_row(history_row(seq, match, change, ladder, fold.standings[change.player_id],
                                           occurred_at, rebuild_id, fold.policy.version,
                                           fold.before.get(change.player_id)))
    repository.stage_players(writer, _standing_rows(fold, rebuild_id, touched), upsert=True)


def _catch_up_in_order(writer: psycopg.Connection, fold: _Fold, rows: list[tuple[int, dict[str, Any]]],
                       ladder: str, occurred_at: datetime, rebuild_id: int) -> None:
    """The chronological catch-up: the rows committed since the snapshot are merged, by order key,
    with the new generation's rows that follow the earliest of them (uncommitted, this transaction's
    own), and every match sharing a player with a placed one is re-rated
    (:func:`engine.chronology.sweep`); the replaced rows are deleted, never having been seen."""
    keys = chronology.ledger_keys(writer, [seq for seq, _ in rows])
    batch = sorted(((keys[seq], seq, payload) for seq, payload in rows), key=lambda t: t[0])
    since = batch[0][0]
    with writer.cursor() as cur:
        later = chronology.later_matches(cur, ladder, since, rebuild_id, 2**31 - 1)
    done = sweep(fold.policy, [(i, key, to_engine_match(p)) for i, (key, _, p) in enumerate(batch)],
                            later, fold.standings, to_engine_match)
    chronology.drop_history_rows(writer, [r.row_id for m, _ in done.rerated for r in m.rows])
    placed = [(key, seq, payload["match_id"], done.batch[i]) for i, (key, seq, payload) in enumerate(batch)]
    placed += [(m.key, m.seq, m.match_id, again) for m, again in done.rerated]
    placed.sort(key=lambda t: t[0])
    with writer.cursor().copy(repository.REBUILD_HISTORY_COPY) as copy:
        for _, seq, match_id, rated in placed:
            for change, games, peak, season, prior in zip(rated.changes, rated.games, rated.peaks_before,
                                                          rated.seasons_before, rated.priors):
                fold.last[change.player_id] = (match_id, change)
                copy.write_row((seq, match_id, ladder, change.player_id, games, change.rating_before,
                                change.rating_after, change.expected_score, change.actual_score, change.k_factor,
                                change.result, None, occurred_at, rebuild_id, fold.policy.version, peak, season,
                                *model_columns(change, prior)))
    fold.standings.update(done.standings)
    fold.matches += len(rows)
    repository.stage_players(writer, _standing_rows(fold, rebuild_id, done.standings), upsert=True)


def _standing_rows(fold: _Fold, rebuild_id: int, player_ids) -> list[tuple]:
    """Rows of :data:`worker.store.REBUILD_STAGING_COLUMNS` for ``player_ids``: the replayed
    standing, the rebuild event id, and the player's last match in the new history."""
    rows = []
    for pid in player_ids:
        s = fold.standings[pid]
        match_id, last = fold.last[pid]
        rows.append((pid, s.rating, s.games_played, s.wins, s.draws, s.losses,
                     s.peak_rating if s.peak_rating is not None else s.rating, s.season,
                     repository.rebuild_event_id(rebuild_id, pid), match_id, last.expected_score,
                     last.actual_score, last.k_factor, s.deviation, s.volatility, s.last_played))
    return rows
