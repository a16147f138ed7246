-- depends: 0007.chronological-order
-- The outbox without its second write, for throughput. An event row is written once, in the rating
-- transaction, and never updated: which rows the relay has still to publish is kept apart, in
-- outbox_pending (one small row per event, filled by a statement-level trigger from the rows each
-- INSERT or COPY adds), and the relay deletes an event's pending row in the transaction in which it
-- publishes it. Before, the relay's `UPDATE outbox SET published_at = now()` wrote every event a
-- second time: a new heap tuple and an entry in each of the outbox's indexes (the primary key, the
-- event id, the backfill's expression index over the payload, the published-at index), not HOT since
-- published_at was indexed.
--
-- Upgrading: stop the old relays before migrating (a relay of the old version marks rows published
-- with the column this migration drops); workers of either version may run throughout.
CREATE TABLE outbox_pending (id bigint PRIMARY KEY);
COMMENT ON TABLE outbox_pending IS
    'Ids of outbox rows not yet on the stream (the relay deletes them as it publishes; see outbox_pending_add).';
INSERT INTO outbox_pending (id) SELECT id FROM outbox WHERE published_at IS NULL;

CREATE FUNCTION outbox_pending_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_pending (id) SELECT id FROM added;
    RETURN NULL;
END
$$;
CREATE TRIGGER outbox_pending_add AFTER INSERT ON outbox REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_pending_add();

-- Retention (`ratings outbox prune`) goes by the time an event was written: a BRIN index, which
-- costs next to nothing per insert, on a column that grows with the row id.
DROP INDEX outbox_unpublished;
DROP INDEX outbox_published_at;
ALTER TABLE outbox DROP COLUMN published_at;
CREATE INDEX outbox_created_at ON outbox USING brin (created_at);

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ratings_worker') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_pending TO ratings_worker;  -- UPDATE: the relay locks rows FOR UPDATE
    END IF;
END
$$;
