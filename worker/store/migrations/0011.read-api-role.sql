-- depends: 0010.player-uncertainty
-- A read-only role for the read API (`ratings api`): it reads the ladders, policies, players,
-- histories, corrections, annulments, the ledger, duplicate deliveries and dead letters, and
-- writes nothing. Operators grant it to the login user the API connects with (docs/api.md).
-- pg_read_all_stats lets the leaderboard see when the oldest open transaction started (its
-- pages' moment); granting it needs the ADMIN option on it, so it is skipped with a notice where
-- the migrating user lacks that.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ratings_api') THEN
        CREATE ROLE ratings_api NOLOGIN;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'cannot create role ratings_api (needs CREATEROLE); create it by hand';
END
$$;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ratings_api') THEN
        EXECUTE format('GRANT CONNECT ON DATABASE %I TO ratings_api', current_database());
        GRANT USAGE ON SCHEMA public TO ratings_api;
        GRANT SELECT ON ladders, policies, players, rating_changes, ledger, corrections, annulments,
                        duplicate_deliveries, dead_letters TO ratings_api;
    END IF;
END
$$;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ratings_api') THEN
        GRANT pg_read_all_stats TO ratings_api;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'cannot grant pg_read_all_stats to ratings_api; grant it by hand (leaderboard pages)';
END
$$;
