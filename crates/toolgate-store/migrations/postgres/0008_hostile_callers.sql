-- A review queue bounded against hostile callers, grants that serve only
-- their proposer, and an Idempotency-Key memory with per-principal quotas
-- (docs/http-api.md, "The review queue" and "Idempotency-Key").
--
-- Review items:
-- `consumed_by`: the principal whose claim used an approval (always the
--   item's proposer: the claim's UPDATE requires it).
-- `queue_principal`: the key an item counts against in the queue's caps
--   (`proposer_via` when a key acted for a user, else `proposer`).
-- `dedup`: for a rejection, the SHA-256 of (principal, kind, reason,
--   window): unique, so a rejection opens at most one item per principal,
--   reason and window however many requests race. NULL for other kinds.
-- `summary`: what a listing shows of the decision, at most 2 KiB (the
--   decision itself when it fits). Rows written before this migration get
--   their decision when it fits and a bare `{"truncated": true}` otherwise.
-- `open_grant` digests now include the proposer: a live approval item
-- written before this migration is not found by its proposer's retry,
-- which opens a new one (the old one expires unused).
ALTER TABLE toolgate_review_items ADD COLUMN consumed_by TEXT NULL;
ALTER TABLE toolgate_review_items ADD COLUMN queue_principal TEXT NULL;
ALTER TABLE toolgate_review_items ADD COLUMN dedup BYTEA NULL;
ALTER TABLE toolgate_review_items ADD COLUMN summary TEXT NULL;
UPDATE toolgate_review_items SET
    queue_principal = COALESCE(proposer_via, proposer),
    summary = CASE WHEN octet_length(decision) <= 2048 THEN decision
                   ELSE '{"truncated":true}' END;
CREATE INDEX toolgate_review_items_queue ON toolgate_review_items (queue_principal, status);
CREATE UNIQUE INDEX toolgate_review_items_dedup ON toolgate_review_items (dedup);

-- Each principal's running totals of finished Idempotency-Key answers
-- (`answers`, `bytes` as counted against the quota): updated in the same
-- transaction as the rows, so a request never counts or sums the table.
CREATE TABLE toolgate_idempotency_totals (
    principal TEXT   NOT NULL PRIMARY KEY,
    answers   BIGINT NOT NULL CHECK (answers >= 0),
    bytes     BIGINT NOT NULL CHECK (bytes >= 0)
);
INSERT INTO toolgate_idempotency_totals (principal, answers, bytes)
    SELECT principal, COUNT(*), COALESCE(SUM(bytes), 0)
    FROM toolgate_idempotency WHERE state = 'done' GROUP BY principal;
-- A principal's finished answers, oldest first (its quota's eviction).
CREATE INDEX toolgate_idempotency_principal_done
    ON toolgate_idempotency (principal, state, finished_at);
