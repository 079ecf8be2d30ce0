-- Who performs the write a claim stands for (docs/design.md §13): `in_process`,
-- `client` or `webhook`. Reconciliation asks only that executor, and a `client`
-- claim is closed only by an explicit answer (invariant 13).
--
-- Existing rows become `in_process`. That is what they were, except claims won
-- by the HTTP sidecar's client mode before this migration: those were client
-- executed but are recorded here as `in_process`, so their reconciliation may
-- still ask the server's executor. An operator with such stuck claims should
-- close them with an explicit answer (`toolgate claims reconcile --applied` or
-- `--not-applied`). The column has no CHECK: an unknown value is reported as a
-- corrupt row when read, like every other column.
ALTER TABLE toolgate_claims ADD COLUMN executor TEXT NOT NULL DEFAULT 'in_process';

-- The key that named the actor, when a key allowed to act for users did
-- (actor delegation); NULL when the actor authenticated itself.
ALTER TABLE toolgate_audit ADD COLUMN via TEXT;
