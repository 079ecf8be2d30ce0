-- Review items and approvals (docs/design.md §14, invariant 11): what a person
-- is asked to decide, and what they decided, are rows beside the claims, seen
-- by every replica and kept across restarts.
--
-- `id` is AUTO_INCREMENT and rows are never deleted, so an id is never handed
-- out twice, restarts included: a remembered id can never point at another
-- proposal. `kind` is the outcome code that opened the item. Approval items
-- (`pending_approval`) carry the tuple an approval is bound to (operation key,
-- fingerprint, version, policy digest), an expiry and the number of distinct
-- approvers needed; the claim that uses the approval sets `consumed_at` in its
-- own transaction. `open_grant` is a digest of that tuple while the item is
-- open or approved, NULL otherwise: its unique index keeps one live approval
-- item per proposal however many retries race. Binary columns are VARBINARY
-- and text is utf8mb4 with a binary collation, as in 0001.
CREATE TABLE toolgate_review_items (
    id               BIGINT      NOT NULL AUTO_INCREMENT,
    created_at       BIGINT      NOT NULL,
    kind             VARCHAR(32) NOT NULL,
    reason           VARCHAR(64) NULL,
    tool             TEXT        NULL,
    proposer         TEXT        NOT NULL,
    proposer_via     TEXT        NULL,
    operation_key    VARBINARY(32) NULL,
    fingerprint      VARBINARY(32) NULL,
    version_seen     TEXT        NULL,
    policy_digest    TEXT        NULL,
    scope            MEDIUMTEXT  NULL,
    decision         MEDIUMTEXT  NOT NULL,
    status           VARCHAR(16) NOT NULL,
    approvals_needed INT         NOT NULL DEFAULT 0,
    expires_at       BIGINT      NULL,
    consumed_at      BIGINT      NULL,
    closed_at        BIGINT      NULL,
    closed_by        TEXT        NULL,
    note             TEXT        NULL,
    open_grant       VARBINARY(32) NULL,
    PRIMARY KEY (id),
    UNIQUE KEY toolgate_review_items_open_grant (open_grant),
    KEY toolgate_review_items_status (status, id),
    KEY toolgate_review_items_op (operation_key, fingerprint),
    CONSTRAINT toolgate_review_items_status CHECK (
        status IN ('open', 'approved', 'denied', 'expired', 'resolved', 'dismissed')
    )
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One vote per reviewer and item: approvers are distinct by construction.
-- A reviewer is a key id, at most 255 characters.
CREATE TABLE toolgate_review_votes (
    item_id  BIGINT       NOT NULL,
    reviewer VARCHAR(256) NOT NULL,
    verdict  VARCHAR(16)  NOT NULL,
    at       BIGINT       NOT NULL,
    note     TEXT         NULL,
    PRIMARY KEY (item_id, reviewer),
    CONSTRAINT toolgate_review_votes_item FOREIGN KEY (item_id) REFERENCES toolgate_review_items (id),
    CONSTRAINT toolgate_review_votes_verdict CHECK (verdict IN ('approve', 'deny'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
