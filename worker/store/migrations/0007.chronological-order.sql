-- depends: 0006.player-lock-waits
-- Ratings follow the order in which matches were played, not the order in which workers
-- commit. A ladder's replay order is (order_at, match_id COLLATE "C"), where order_at is the
-- earlier of the match's finished_at and the moment the service first applied it (applied_at, the
-- database's now()): a game server whose clock runs ahead cannot push its matches after real
-- matches received later. A match that arrives after a later match of one of its players is placed
-- in its position and the later matches it affects are re-rated in the same transaction (a
-- correction); past RATINGS_CORRECTION_MAX_MATCHES it is applied at the end and flagged
-- (placed_at_end), its order_at then being the end of its players' histories, so the stored ratings
-- stay the replay by order_at; `ratings rebuild --order finished-at` puts it back in its place.
ALTER TABLE ledger ADD COLUMN order_at timestamptz, ADD COLUMN placed_at_end boolean NOT NULL DEFAULT false;
UPDATE ledger SET order_at = least(finished_at, applied_at);
ALTER TABLE ledger ALTER COLUMN order_at SET NOT NULL;
-- "the ladder's matches after T", read by every correction
CREATE INDEX ledger_ladder_order ON ledger (ladder, order_at, match_id COLLATE "C");
CREATE INDEX ledger_placed_at_end ON ledger (ladder) WHERE placed_at_end;

-- One row per correction: the late match that caused it, how much it re-rated.
CREATE TABLE corrections (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ladder           text        NOT NULL,
    match_id         text        NOT NULL,           -- the late match placed in its chronological position
    kind             text        NOT NULL DEFAULT 'late' CHECK (kind IN ('late')),
    matches_rerated  integer     NOT NULL,
    players_changed  integer     NOT NULL,
    at               timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX corrections_ladder ON corrections (ladder, id DESC);

-- History stays a true record: a re-rated match's earlier rows are kept, marked superseded by the
-- correction that replaced them; readers show the rows with superseded_by NULL. Each row also keeps
-- the player's peak rating and season before the match, so a correction starts from the history
-- row at the late match's position instead of replaying the player's whole history.
ALTER TABLE rating_changes
    ADD COLUMN superseded_by bigint REFERENCES corrections (id),
    ADD COLUMN peak_before   double precision,
    ADD COLUMN season_before text;
ALTER TABLE rating_changes
    DROP CONSTRAINT rating_changes_match_player_generation_key,
    DROP CONSTRAINT rating_changes_ladder_generation_player_sequence_key;
CREATE UNIQUE INDEX rating_changes_match_player_generation ON rating_changes (match_id, player_id, generation)
    WHERE superseded_by IS NULL;
CREATE UNIQUE INDEX rating_changes_player_sequence ON rating_changes (ladder, generation, player_id, sequence)
    WHERE superseded_by IS NULL;

-- Each player's last match in the replay order, to tell a late match without reading the ledger.
ALTER TABLE players ADD COLUMN last_order_at timestamptz, ADD COLUMN last_order_match text;
UPDATE players SET last_order_at = last_finished_at, last_order_match = '' WHERE last_finished_at IS NOT NULL;

-- Chronological order is the default for new ladders; arrival order ('applied') stays an explicit
-- choice (`ratings rebuild --order applied`). Existing ladders keep the order they had.
ALTER TABLE ladders DROP CONSTRAINT IF EXISTS ladders_check;
ALTER TABLE ladders ALTER COLUMN apply_order SET DEFAULT 'finished-at';

-- Annulment: organisers void matches (`ratings annul`, or a `ratings.annul_matches` message). The
-- ledger keeps the original row, flagged; the replay leaves it out; its history rows are superseded
-- by an 'annulment' correction that re-rates what followed it; the annulment is on record here.
ALTER TABLE ledger ADD COLUMN annulled boolean NOT NULL DEFAULT false;
ALTER TABLE corrections DROP CONSTRAINT corrections_kind_check,
    ADD CONSTRAINT corrections_kind_check CHECK (kind IN ('late', 'annulment'));
CREATE TABLE annulments (
    match_id       text        PRIMARY KEY REFERENCES ledger (match_id),
    ladder         text        NOT NULL,
    reason         text        NOT NULL,
    annulled_by    text        NOT NULL,
    annulled_at    timestamptz NOT NULL DEFAULT now(),
    correction_id  bigint      REFERENCES corrections (id)
);

-- The workers write corrections (late matches, annulment messages) and the annulments.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ratings_worker') THEN
        GRANT SELECT, INSERT, UPDATE ON corrections TO ratings_worker;
        GRANT UPDATE ON rating_changes TO ratings_worker;
        GRANT SELECT, INSERT ON annulments TO ratings_worker;
        GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO ratings_worker;
    END IF;
END
$$;
