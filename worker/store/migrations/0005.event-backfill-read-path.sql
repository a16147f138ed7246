-- depends: 0004.ladder-rebuilds
-- The consumers' backfill read path (`ratings events read`): a player's events kept in the outbox, by sequence.
CREATE INDEX outbox_player_sequence ON outbox ((payload->>'ladder'), (payload->>'player_id'), ((payload->>'sequence')::int));
-- `ratings outbox prune` deletes published rows older than the retention.
CREATE INDEX outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;
