-- Review items and approvals (docs/design.md §14, invariant 11): what a person
-- is asked to decide, and what they decided, are rows beside the claims, seen
-- by every replica and kept across restarts.
--
-- `id` is AUTOINCREMENT so that an id is never handed out twice, even after
-- the newest rows were removed by hand: a remembered id can never point at
-- another proposal. `kind` is the outcome code that opened the item.
-- Approval items (`pending_approval`) carry the tuple an approval is bound
-- to (operation key, fingerprint, version, policy digest), an expiry and the
-- number of distinct approvers needed; the claim that uses the approval sets
-- `consumed_at` in its own transaction. `open_grant` is a digest of that tuple
-- while the item is open or approved, NULL otherwise: its unique index keeps
-- one live approval item per proposal however many retries race.
CREATE TABLE toolgate_review_items (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at       INTEGER NOT NULL,
    kind             TEXT    NOT NULL,
    reason           TEXT    NULL,
    tool             TEXT    NULL,
    proposer         TEXT    NOT NULL,
    proposer_via     TEXT    NULL,
    operation_key    BLOB    NULL,
    fingerprint      BLOB    NULL,
    version_seen     TEXT    NULL,
    policy_digest    TEXT    NULL,
    scope            TEXT    NULL,
    decision         TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    approvals_needed INTEGER NOT NULL DEFAULT 0,
    expires_at       INTEGER NULL,
    consumed_at      INTEGER NULL,
    closed_at        INTEGER NULL,
    closed_by        TEXT    NULL,
    note             TEXT    NULL,
    open_grant       BLOB    NULL UNIQUE,
    CONSTRAINT toolgate_review_items_status CHECK (
        status IN ('open', 'approved', 'denied', 'expired', 'resolved', 'dismissed')
    )
);

CREATE INDEX toolgate_review_items_status ON toolgate_review_items (status, id);
CREATE INDEX toolgate_review_items_op ON toolgate_review_items (operation_key, fingerprint);

-- One vote per reviewer and item: approvers are distinct by construction.
CREATE TABLE toolgate_review_votes (
    item_id  INTEGER NOT NULL REFERENCES toolgate_review_items (id),
    reviewer TEXT    NOT NULL,
    verdict  TEXT    NOT NULL,
    at       INTEGER NOT NULL,
    note     TEXT    NULL,
    PRIMARY KEY (item_id, reviewer),
    CONSTRAINT toolgate_review_votes_verdict CHECK (verdict IN ('approve', 'deny'))
);
