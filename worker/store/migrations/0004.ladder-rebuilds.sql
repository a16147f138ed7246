-- depends: 0003.policy-versions-and-seasons
-- `ratings rebuild`: recompute a ladder from its ledger under a policy, into new history rows,
-- and switch over atomically while workers keep applying matches.

-- The policy in force for each ladder, which generation of its history is current, and the order
-- its ledger is replayed in. A worker reads this row under the ladder's shared advisory lock in
-- every rating transaction; a rebuild changes it under the exclusive lock, so every match commits
-- either before the switch (and is recomputed by the rebuild) or after it (rated under the new
-- policy into the new generation). A worker records its own configured policy here the first
-- time it rates a match of a ladder that has no row yet.
CREATE TABLE ladders (
    ladder          text        PRIMARY KEY,
    policy_version  text        NOT NULL REFERENCES policies (version),
    generation      bigint      NOT NULL DEFAULT 0,
    apply_order     text        NOT NULL DEFAULT 'applied' CHECK (apply_order IN ('applied', 'finished-at')),
    -- With apply_order 'finished-at': ledger rows of the ladder with seq <= order_boundary are replayed
    -- by (finished_at, seq), then the later ones by seq (matches applied since the rebuild's snapshot).
    order_boundary  bigint,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (apply_order = 'applied' OR order_boundary IS NOT NULL)
);

-- One row per rebuild, for operators: who, when, which policy and order, what it did. The id is
-- also the generation of the history rows the rebuild writes.
CREATE TABLE rebuilds (
    id                       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ladder                   text        NOT NULL,
    requested_by             text        NOT NULL,
    status                   text        NOT NULL DEFAULT 'running'
                                         CHECK (status IN ('running', 'switched', 'done', 'failed')),
    started_at               timestamptz NOT NULL DEFAULT now(),
    switched_at              timestamptz,
    finished_at              timestamptz,
    apply_order              text        NOT NULL CHECK (apply_order IN ('applied', 'finished-at')),
    policy_version           text        NOT NULL REFERENCES policies (version),
    previous_policy_version  text,
    previous_generation      bigint,
    snapshot_seq             bigint,
    matches_replayed         integer,
    catch_up_matches         integer,
    players                  integer,
    players_changed          integer,
    events_emitted           integer,
    ledger_rows_stamped      bigint,
    lock_wait_seconds        double precision,
    lock_held_seconds        double precision,
    duration_seconds         double precision,
    error                    text
);
CREATE INDEX rebuilds_ladder ON rebuilds (ladder, id DESC);

-- History rows belong to a generation of their ladder (0 until its first rebuild); readers show the
-- generation named in `ladders`. A rebuild writes its rows as a new generation and keeps the old
-- ones (superseded). Rows it writes announce no event of their own (event_id NULL): the rebuild
-- emits one `rebuild` event per player whose rating changed instead.
ALTER TABLE rating_changes
    ADD COLUMN generation     bigint NOT NULL DEFAULT 0,
    ADD COLUMN policy_version text,
    ALTER COLUMN event_id DROP NOT NULL;
ALTER TABLE rating_changes
    DROP CONSTRAINT rating_changes_match_id_player_id_key,
    DROP CONSTRAINT rating_changes_ladder_player_id_sequence_key,
    ADD CONSTRAINT rating_changes_match_player_generation_key UNIQUE (match_id, player_id, generation),
    ADD CONSTRAINT rating_changes_ladder_generation_player_sequence_key UNIQUE (ladder, generation, player_id, sequence);

-- A player's event sequence is games_played + rebuild_events: each applied match and each rebuild
-- that changed the player's rating takes the next number, so consumers see no gap.
ALTER TABLE players ADD COLUMN rebuild_events integer NOT NULL DEFAULT 0;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ratings_worker') THEN
        GRANT SELECT, INSERT, UPDATE ON ladders, rebuilds TO ratings_worker;
        GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO ratings_worker;
    END IF;
END
$$;
