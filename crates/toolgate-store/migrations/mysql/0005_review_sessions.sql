-- Reviewer page logins (docs/http-api.md, review page): rows beside the
-- review items, so a reviewer signed in on one replica is signed in on every
-- other and stays signed in across restarts. Keyed by the SHA-256 of the
-- session token, never the token itself: a copy of the database signs nobody
-- in. Expired rows are removed whenever a session is opened.
CREATE TABLE toolgate_review_sessions (
    token_sha256 VARBINARY(32) NOT NULL PRIMARY KEY,
    principal    VARCHAR(256)  NOT NULL,
    csrf         VARCHAR(128)  NOT NULL,
    expires_at   BIGINT        NOT NULL,
    INDEX toolgate_review_sessions_expires (expires_at),
    CONSTRAINT toolgate_review_sessions_digest CHECK (LENGTH(token_sha256) = 32)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
