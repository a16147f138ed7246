"""The store: all SQL of the service, split by concern (parameterized always).

All SQL of the worker: the rating transaction, dead letters, read models. Parameterized always.

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
(:mod:`worker.ops.rebuild`) switches both under the exclusive form of that lock, so every match is
rated either before the switch (and recomputed by the rebuild) or after it, under the new policy.

:func:`apply_batch` does the same for many matches in one transaction (with batching on, see
:mod:`worker.service.batching`): one look-up of every match id, the per-ladder shared advisory locks once
per distinct ladder, every player of the batch locked in one statement in the one global order
(ladder, player_id) ``COLLATE "C"``, the matches rated in queue order on in-memory states, and one
multi-row statement (``unnest`` of arrays, sent in binary) per table.
"""

from worker.store.dead_letters import (  # noqa: F401
    _dead_letter_text,
    dead_letter,
    dead_letter_counts,
    dead_letters,
    insert_dead_letter,
    resolve_dead_letter,
)
from worker.store.events import (  # noqa: F401
    EVENT_NAMESPACE,
    OUTBOX_CHANNEL,
    REBUILD_EVENT_NAMESPACE,
    claim_unpublished,
    event_id_for,
    event_payloads_json,
    mark_published,
    match_event,
    rebuild_event_id,
)
from worker.store.ladders import (  # noqa: F401
    LADDER_LOCK_CLASS,
    LadderRecord,
    ladder_record,
    policy_in_force,
    record_policies,
    record_policy,
    stored_policy,
)
from worker.store.rating import (  # noqa: F401
    Applied,
    ApplyResult,
    BatchDeadLetter,
    BatchEntry,
    BatchMatch,
    BatchResult,
    Conflict,
    DeadLettered,
    Duplicate,
    LedgerRace,
    Redelivered,
    _apply_batch_in_transaction,
    _apply_in_transaction,
    _apply_matches,
    _check_existing,
    apply_batch,
    apply_match,
    conflict_detail,
)
from worker.store.read_models import (  # noqa: F401
    LEDGER_ORDER,
    Counts,
    counts,
    history,
    iter_ledger,
    iter_ledger_rows,
    ladders_in_use,
    leaderboard,
    ledger_size,
    stored_standings,
)
from worker.store.rebuilds import (  # noqa: F401
    REBUILD_HISTORY_COPY,
    REBUILD_LOCK_CLASS,
    REBUILD_STAGING_COLUMNS,
    create_rebuild_staging,
    fail_rebuild,
    ledger_count,
    ledger_last_seq,
    ledger_rows_after,
    lock_ladder_exclusively,
    rebuilds,
    set_ladder_record,
    stage_players,
    stamp_ledger,
    start_rebuild,
    switch_players,
    try_rebuild_lock,
    update_rebuild,
)
