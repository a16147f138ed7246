-- depends: 0002.redeliveries-and-dead-letter-tooling
-- Policies are versioned configuration: each applied match records the content hash of the
-- policy it was rated under, and the policy's canonical content is kept once per version.
CREATE TABLE policies (
    version     text        PRIMARY KEY,
    ladder      text        NOT NULL,
    content     jsonb       NOT NULL,
    first_used  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE ledger ADD COLUMN policy_version text;

-- Season regression needs each player's last season; FIDE K-factors read peak_rating.
ALTER TABLE players ADD COLUMN season text;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ratings_worker') THEN
        GRANT SELECT, INSERT ON policies TO ratings_worker;
    END IF;
END
$$;
