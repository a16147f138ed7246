-- depends: 0005.event-backfill-read-path
-- Lock waits per player, so that a player whose held row keeps deferring matches is visible: one
-- row per player row a rating transaction found locked by another transaction, written in that
-- rating transaction. Append-only (no unique key, so a writer
-- never waits on another), read by `ratings doctor` and the worker's metrics (the hottest waits);
-- rows older than a day are pruned by the rating path itself (a bounded, non-waiting DELETE).
CREATE TABLE player_lock_waits (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ladder text NOT NULL,
    player_id text NOT NULL,
    waited_ms double precision NOT NULL,          -- milliseconds the transaction waited for this row
    deferred_matches integer NOT NULL,            -- matches of the batch deferred because of this row (0: it was locked in time)
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX player_lock_waits_at ON player_lock_waits (at);
