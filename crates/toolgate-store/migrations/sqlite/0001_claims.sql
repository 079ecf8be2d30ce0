-- Claims (docs/design.md §8). The operation key is the only unique index: the claim
-- protocol relies on it, and a second unique index would let an insert fail
-- (or, on MySQL, silently update) for a reason that is not "this operation is
-- taken".
CREATE TABLE toolgate_claims (
    operation_key    BLOB    NOT NULL PRIMARY KEY,
    fingerprint      BLOB    NOT NULL,
    -- The proposal record, written once at claim time and never updated.
    tool             TEXT    NOT NULL,
    arguments        TEXT    NOT NULL,
    scope            TEXT    NOT NULL,
    version_seen     TEXT    NOT NULL,
    proposer         TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('in_flight', 'completed')),
    holder           BLOB    NOT NULL,
    lease_expires_at INTEGER NOT NULL,
    claimed_at       INTEGER NOT NULL,
    completed_at     INTEGER,
    resolution       TEXT,
    result           TEXT
) STRICT, WITHOUT ROWID;

-- Stuck claims: in flight past their lease. Not unique.
CREATE INDEX toolgate_claims_stuck ON toolgate_claims (status, lease_expires_at);

-- The audit log: one row per decision, append-only.
CREATE TABLE toolgate_audit (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    at            INTEGER NOT NULL,
    actor         TEXT    NOT NULL,
    tool          TEXT,
    outcome       TEXT    NOT NULL,
    reason        TEXT,
    operation_key BLOB,
    fingerprint   BLOB
) STRICT;

CREATE INDEX toolgate_audit_key ON toolgate_audit (operation_key, id);

CREATE TRIGGER toolgate_audit_no_update BEFORE UPDATE ON toolgate_audit
BEGIN
    SELECT RAISE(ABORT, 'toolgate_audit is append-only');
END;

CREATE TRIGGER toolgate_audit_no_delete BEFORE DELETE ON toolgate_audit
BEGIN
    SELECT RAISE(ABORT, 'toolgate_audit is append-only');
END;
