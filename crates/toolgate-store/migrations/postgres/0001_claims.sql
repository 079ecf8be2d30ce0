-- Claims (docs/design.md §8). The operation key is the only unique index: the claim
-- protocol relies on it, and a second unique index would let an insert fail
-- for a reason that is not "this operation is taken".
CREATE TABLE toolgate_claims (
    operation_key    BYTEA  NOT NULL PRIMARY KEY,
    fingerprint      BYTEA  NOT NULL,
    -- The proposal record, written once at claim time and never updated.
    tool             TEXT   NOT NULL,
    arguments        TEXT   NOT NULL,
    scope            TEXT   NOT NULL,
    version_seen     TEXT   NOT NULL,
    proposer         TEXT   NOT NULL,
    status           TEXT   NOT NULL CHECK (status IN ('in_flight', 'completed')),
    holder           BYTEA  NOT NULL,
    lease_expires_at BIGINT NOT NULL,
    claimed_at       BIGINT NOT NULL,
    completed_at     BIGINT,
    resolution       TEXT,
    result           TEXT
);

-- Stuck claims: in flight past their lease. Not unique.
CREATE INDEX toolgate_claims_stuck ON toolgate_claims (status, lease_expires_at);

-- The audit log: one row per decision, append-only.
CREATE TABLE toolgate_audit (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at            BIGINT NOT NULL,
    actor         TEXT   NOT NULL,
    tool          TEXT,
    outcome       TEXT   NOT NULL,
    reason        TEXT,
    operation_key BYTEA,
    fingerprint   BYTEA
);

CREATE INDEX toolgate_audit_key ON toolgate_audit (operation_key, id);

CREATE FUNCTION toolgate_audit_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'toolgate_audit is append-only';
END
$$;

CREATE TRIGGER toolgate_audit_no_change
    BEFORE UPDATE OR DELETE ON toolgate_audit
    FOR EACH ROW EXECUTE FUNCTION toolgate_audit_append_only();

CREATE TRIGGER toolgate_audit_no_truncate
    BEFORE TRUNCATE ON toolgate_audit
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate_audit_append_only();
