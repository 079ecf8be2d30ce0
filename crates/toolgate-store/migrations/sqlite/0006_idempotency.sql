-- The Idempotency-Key memory (docs/http-api.md): one row per (principal,
-- key), so a repeat reaching any replica, or arriving after a restart, finds
-- the first request. `running` rows hold a lease (the request timeout and a
-- margin) that a later request with the same payload may take over once it
-- has passed; `done` rows keep a final answer (status, media type, outcome,
-- body; `bytes` is what it counts against the byte cap). `payload` is the
-- SHA-256 of the request body. Never an authority (design invariant 12).
CREATE TABLE toolgate_idempotency (
    principal    TEXT    NOT NULL,
    idem_key     TEXT    NOT NULL,
    payload      BLOB    NOT NULL CHECK (length(payload) = 32),
    runner       TEXT    NOT NULL,
    state        TEXT    NOT NULL CHECK (state IN ('running', 'done')),
    lease_until  INTEGER NOT NULL,
    finished_at  INTEGER NULL,
    status       INTEGER NULL,
    content_type TEXT    NULL,
    outcome      TEXT    NULL,
    body         BLOB    NULL,
    bytes        INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (principal, idem_key)
) STRICT, WITHOUT ROWID;
CREATE INDEX toolgate_idempotency_done ON toolgate_idempotency (state, finished_at);
