-- depends: 0008.outbox-pending
-- Throughput: a late match's correction finds the few stored matches it touches among the ladder's
-- later ones from the ledger alone. Before, it read every later match's history rows (a lookup in
-- rating_changes per match) only to learn their players: 400 to 900 matches per correction at 8
-- worker processes, for the 4 or so it re-rates.
--
-- The rating transaction fills the column; rows written before it (or by a worker of an older
-- version, which may run throughout the upgrade) stay NULL, and the correction's read takes their
-- players from their history rows (worker/store/chronology.py, later_match_players). No backfill.
ALTER TABLE ledger ADD COLUMN player_ids text[];
COMMENT ON COLUMN ledger.player_ids IS
    'The match''s player ids, as the engine lists them; NULL on rows written before migration 0009.';
