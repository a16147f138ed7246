-- depends: 0001.initial-schema
-- A Celery message keeps its task id when it is redelivered (worker crash before the ack), while a
-- re-publication gets a new one. Counting by task id makes "published = applied + duplicates +
-- dead letters" exact: a redelivery of a message that already ended somewhere adds nothing.
ALTER TABLE ledger ADD COLUMN redeliveries integer NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX ledger_task_id ON ledger (task_id) WHERE task_id IS NOT NULL;
CREATE UNIQUE INDEX duplicate_deliveries_task_id ON duplicate_deliveries (task_id) WHERE task_id IS NOT NULL;
CREATE UNIQUE INDEX dead_letters_task_id ON dead_letters (task_id) WHERE task_id IS NOT NULL;

-- Dead-letter tooling: the raw message as received, and who requeued or discarded it, and when.
ALTER TABLE dead_letters
    ADD COLUMN content_type     text,
    ADD COLUMN headers          jsonb,
    ADD COLUMN raw_encoding     text NOT NULL DEFAULT 'utf-8' CHECK (raw_encoding IN ('utf-8', 'base64')),
    ADD COLUMN status           text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'requeued', 'discarded')),
    ADD COLUMN resolved_at      timestamptz,
    ADD COLUMN resolved_by      text,
    ADD COLUMN requeue_task_id  text;
CREATE INDEX dead_letters_open ON dead_letters (id) WHERE status = 'open';

-- A role for the worker and the relay: read and write the service's tables, never alter them.
-- Operators grant it to the login user the workers connect with (docs/operators/security.md). Creating a role
-- needs CREATEROLE; where the migrating user lacks it, the role is skipped with a notice.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ratings_worker') THEN
        CREATE ROLE ratings_worker NOLOGIN;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'cannot create role ratings_worker (needs CREATEROLE); create it by hand';
END
$$;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ratings_worker') THEN
        EXECUTE format('GRANT CONNECT ON DATABASE %I TO ratings_worker', current_database());
        GRANT USAGE ON SCHEMA public TO ratings_worker;
        GRANT SELECT, INSERT, UPDATE ON ledger, players, rating_changes, outbox, duplicate_deliveries, dead_letters TO ratings_worker;
        GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO ratings_worker;
    END IF;
END
$$;
