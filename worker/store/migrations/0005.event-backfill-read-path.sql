-- depends: 0004.ladder-rebuilds
-- The consumers' backfill read path (`ratings events read`): a player's events kept in the outbox, by sequence.
CREATE INDEX outbox_player_sequence ON outbox ((payload->>'ladder'), (payload->>'player_id'), ((payload->>'sequence')::int));
-- `ratings outbox prune` deletes published rows older than the retention.
CREATE INDEX outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;

-- A read-only role for consumers' backfill: reads the events the outbox keeps and the players' current
-- ratings, writes nothing. Operators grant it to the login user a consumer's backfill connects with.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ratings_reader') THEN
        CREATE ROLE ratings_reader NOLOGIN;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'cannot create role ratings_reader (needs CREATEROLE); create it by hand';
END
$$;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ratings_reader') THEN
        EXECUTE format('GRANT CONNECT ON DATABASE %I TO ratings_reader', current_database());
        GRANT USAGE ON SCHEMA public TO ratings_reader;
        GRANT SELECT ON outbox, players TO ratings_reader;
    END IF;
END
$$;
