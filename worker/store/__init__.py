"""The store: all SQL of the service, split by concern (parameterized always).

All SQL of the worker: the rating transaction, dead letters, read models. Parameterized always.

The rating transaction, one path for 1 to N messages
(:func:`apply_batch`; a single message is a batch of one):

1. look every ``match_id`` up in the ledger: present with the same payload hash → a counted
   duplicate; with another hash → a ``conflicting_duplicate`` dead letter; the same task id again
   → a redelivery;
2. take each ladder's advisory lock in shared mode and read the ladder's policy in force and
   history generation (a rebuild, :mod:`worker.ops.rebuild`, switches both under the exclusive
   form); create missing player rows, then lock the batch's player rows: the free ones at once,
   the busy ones in one global order (ladder, player_id) ``COLLATE "C"`` within a bounded wait;
   matches whose rows stay held elsewhere are deferred with every later match of their players
   (:mod:`worker.store.locking`: no batch waits behind one player);
3. rate the matches with the engine's fold over typed player states, in chronological order with
   the stored matches a late match re-rates (:mod:`worker.store.corrections`, the correction path
   annulments take too), or in queue order on an arrival-order ladder;
4. insert the ledger rows (``ON CONFLICT DO NOTHING`` closes the race with a concurrent delivery
   of the same match; their ``seq``, taken while the locks are held, is the apply order), the
   history and the typed ``RatingChanged`` outbox rows, update the players, write duplicates and
   dead letters, ``NOTIFY`` the relay; commit.
"""

from worker.store.annulments import (  # noqa: F401
    AnnulmentBusy,
    AnnulmentRefused,
    AnnulmentResult,
    annul_matches,
    annulments,
)
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
    event_id_for,
    event_payloads_json,
    match_events_json,
    rating_changed_json,
    rebuild_event_id,
    take_unpublished,
)
from worker.store.ladders import (  # noqa: F401
    DEFAULT_ORDER,
    LADDER_LOCK_CLASS,
    LadderPolicy,
    LadderRecord,
    ladder_in_force,
    ladder_record,
    policy_in_force,
    record_policies,
    record_policy,
    stored_policy,
)
from worker.store.rating import (  # noqa: F401
    BatchDeadLetter,
    BatchEntry,
    BatchMatch,
    LedgerRace,
    TransactionTimeouts,
    apply_batch,
    conflict_detail,
    set_local_timeouts,
    transaction_timeouts,
)
from worker.store.read_models import (  # noqa: F401
    LEDGER_ORDER,
    Counts,
    correction_totals,
    counts,
    history,
    history_corrections,
    iter_ledger,
    iter_ledger_rows,
    ladders_in_use,
    leaderboard,
    ledger_size,
    placed_at_end_counts,
    player_states,
    stored_standings,
    stored_states,
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
