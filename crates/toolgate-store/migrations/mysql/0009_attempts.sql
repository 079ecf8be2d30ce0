-- Attempts of one operation (docs/design.md invariant 8). A claim reconciled
-- as not applied was fenced downstream (its idempotency key refused for good),
-- so the same operation may run again, as a new attempt: the row is replaced
-- by the next attempt's proposal, holder and lease, and `attempt` goes up by
-- one. Attempt 1 is sent downstream with the operation key's hex as its
-- idempotency key, attempt n >= 2 with `<hex>.<n>`. Existing rows are
-- attempt 1, which is what they were.
--
-- Audit entries name the attempt they are about (NULL for entries about no
-- claim in particular, and for entries written before this migration).
ALTER TABLE toolgate_claims ADD COLUMN attempt BIGINT NOT NULL DEFAULT 1,
    ADD CONSTRAINT toolgate_claims_attempt CHECK (attempt >= 1);
ALTER TABLE toolgate_audit ADD COLUMN attempt BIGINT NULL;
