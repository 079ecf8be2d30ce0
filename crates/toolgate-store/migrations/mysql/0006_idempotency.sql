-- The Idempotency-Key memory (docs/http-api.md): one row per (principal,
-- key), so a repeat reaching any replica, or arriving after a restart, finds
-- the first request. `running` rows hold a lease (the request timeout and a
-- margin) that a later request with the same payload may take over once it
-- has passed; `done` rows keep a final answer (status, media type, outcome,
-- body; `bytes` is what it counts against the byte cap). `payload` is the
-- SHA-256 of the request body. Never an authority (design invariant 12).
CREATE TABLE toolgate_idempotency (
    principal    VARCHAR(256)  NOT NULL,
    idem_key     VARCHAR(255)  NOT NULL,
    payload      VARBINARY(32) NOT NULL,
    runner       VARCHAR(64)   NOT NULL,
    state        VARCHAR(16)   NOT NULL,
    lease_until  BIGINT        NOT NULL,
    finished_at  BIGINT        NULL,
    status       INT           NULL,
    content_type VARCHAR(64)   NULL,
    outcome      VARCHAR(64)   NULL,
    body         LONGBLOB      NULL,
    bytes        BIGINT        NOT NULL DEFAULT 0,
    PRIMARY KEY (principal, idem_key),
    INDEX toolgate_idempotency_done (state, finished_at),
    CONSTRAINT toolgate_idempotency_state CHECK (state IN ('running', 'done'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
