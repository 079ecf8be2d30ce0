-- Claims (docs/design.md §8). The operation key is the only unique index: the claim
-- protocol relies on it, and with `ON DUPLICATE KEY UPDATE` a second unique
-- index would turn a clash on *that* index into a silent no-op "duplicate".
-- Keys, fingerprints and holders are VARBINARY, not BINARY: BINARY pads with
-- zero bytes, which would hide a value of the wrong length from validation.
-- Text is utf8mb4 with a binary collation so it round-trips byte for byte.
CREATE TABLE toolgate_claims (
    operation_key    VARBINARY(32) NOT NULL,
    fingerprint      VARBINARY(32) NOT NULL,
    -- The proposal record, written once at claim time and never updated.
    tool             TEXT       NOT NULL,
    arguments        MEDIUMTEXT NOT NULL,
    scope            MEDIUMTEXT NOT NULL,
    version_seen     TEXT       NOT NULL,
    proposer         TEXT       NOT NULL,
    status           VARCHAR(16) NOT NULL,
    holder           VARBINARY(16) NOT NULL,
    lease_expires_at BIGINT     NOT NULL,
    claimed_at       BIGINT     NOT NULL,
    completed_at     BIGINT     NULL,
    resolution       VARCHAR(32) NULL,
    result           MEDIUMTEXT NULL,
    PRIMARY KEY (operation_key),
    -- Stuck claims: in flight past their lease. Not unique.
    KEY toolgate_claims_stuck (status, lease_expires_at),
    CONSTRAINT toolgate_claims_status CHECK (status IN ('in_flight', 'completed'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The audit log: one row per decision, append-only.
CREATE TABLE toolgate_audit (
    id            BIGINT NOT NULL AUTO_INCREMENT,
    at            BIGINT NOT NULL,
    actor         TEXT   NOT NULL,
    tool          TEXT   NULL,
    outcome       VARCHAR(64) NOT NULL,
    reason        VARCHAR(64) NULL,
    operation_key VARBINARY(32) NULL,
    fingerprint   VARBINARY(32) NULL,
    PRIMARY KEY (id),
    KEY toolgate_audit_key (operation_key, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TRIGGER toolgate_audit_no_update BEFORE UPDATE ON toolgate_audit
    FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'toolgate_audit is append-only';

CREATE TRIGGER toolgate_audit_no_delete BEFORE DELETE ON toolgate_audit
    FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'toolgate_audit is append-only';
