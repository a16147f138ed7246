-- depends: 0009.ledger-player-ids
-- Rating models with uncertainty (Glicko-2, Weng-Lin): each player keeps the model's state beside
-- its rating. deviation is in rating points (Glicko-2's RD, Weng-Lin's sigma); volatility is
-- Glicko-2's sigma; last_played is the time of the player's last match in seconds since the Unix
-- epoch (the match's finished_at: its own time, never a worker's clock), from which the deviation
-- grows until the next match. All NULL on Elo ladders. Stored as written, never grown: the
-- deviation a reader shows at a moment is computed on read.
ALTER TABLE players
    ADD COLUMN deviation   double precision,
    ADD COLUMN volatility  double precision,
    ADD COLUMN last_played double precision;

-- History rows carry the before and after of each field, as the events do (deviation_before is
-- the deviation the match was rated from: the stored one grown to the match's time). A correction
-- re-enters a player at a stored match from that match's row: prior_deviation and
-- prior_last_played are the player's stored state before the match, before any growth.
ALTER TABLE rating_changes
    ADD COLUMN deviation_before   double precision,
    ADD COLUMN deviation_after    double precision,
    ADD COLUMN volatility_before  double precision,
    ADD COLUMN volatility_after   double precision,
    ADD COLUMN prior_deviation    double precision,
    ADD COLUMN prior_last_played  double precision;
