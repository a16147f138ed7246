-- Initial schema: ledger (idempotency), players, rating history, outbox, dead letters.

-- The ledger: one row per applied match. match_id is the idempotency key; seq is the apply
-- order (taken after the player rows are locked, so for any player it follows commit order).
CREATE TABLE ledger (
    seq           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    match_id      text        NOT NULL UNIQUE,
    ladder        text        NOT NULL,
    payload_hash  text        NOT NULL,
    payload       jsonb       NOT NULL,
    finished_at   timestamptz NOT NULL,
    applied_at    timestamptz NOT NULL DEFAULT now(),
    out_of_order  boolean     NOT NULL DEFAULT false,
    task_id       text
);
CREATE INDEX ledger_ladder_seq ON ledger (ladder, seq);

CREATE TABLE players (
    ladder            text             NOT NULL,
    player_id         text             NOT NULL,
    rating            double precision NOT NULL,
    games_played      integer          NOT NULL DEFAULT 0,
    wins              integer          NOT NULL DEFAULT 0,
    draws             integer          NOT NULL DEFAULT 0,
    losses            integer          NOT NULL DEFAULT 0,
    peak_rating       double precision NOT NULL,
    last_finished_at  timestamptz,
    updated_at        timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (ladder, player_id)
);
CREATE INDEX players_ladder_rating ON players (ladder, rating DESC);

CREATE TABLE rating_changes (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger_seq      bigint           NOT NULL REFERENCES ledger (seq),
    match_id        text             NOT NULL,
    ladder          text             NOT NULL,
    player_id       text             NOT NULL,
    sequence        integer          NOT NULL,
    rating_before   double precision NOT NULL,
    rating_after    double precision NOT NULL,
    expected_score  double precision NOT NULL,
    actual_score    double precision NOT NULL,
    k_factor        double precision NOT NULL,
    result          text             NOT NULL CHECK (result IN ('win', 'draw', 'loss')),
    event_id        uuid             NOT NULL UNIQUE,
    occurred_at     timestamptz      NOT NULL DEFAULT now(),
    UNIQUE (match_id, player_id),
    UNIQUE (ladder, player_id, sequence)
);

-- Transactional outbox: written in the rating transaction, published by the relay.
CREATE TABLE outbox (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id      uuid        NOT NULL UNIQUE,
    payload       jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz
);
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;

-- A message delivered again with the same canonical payload: counted, not applied.
CREATE TABLE duplicate_deliveries (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    match_id     text        NOT NULL,
    task_id      text,
    received_at  timestamptz NOT NULL DEFAULT now()
);

-- Every message that could not be applied, with its reason code and the raw body.
CREATE TABLE dead_letters (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    reason_code  text        NOT NULL,
    detail       text        NOT NULL,
    match_id     text,
    raw_body     text        NOT NULL,
    task_id      text,
    received_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dead_letters_reason ON dead_letters (reason_code);
