-- Reviewer page logins (docs/http-api.md, review page): rows beside the
-- review items, so a reviewer signed in on one replica is signed in on every
-- other and stays signed in across restarts. Keyed by the SHA-256 of the
-- session token, never the token itself: a copy of the database signs nobody
-- in. Expired rows are removed whenever a session is opened.
CREATE TABLE toolgate_review_sessions (
    token_sha256 BYTEA  NOT NULL PRIMARY KEY CHECK (length(token_sha256) = 32),
    principal    TEXT   NOT NULL,
    csrf         TEXT   NOT NULL,
    expires_at   BIGINT NOT NULL
);
CREATE INDEX toolgate_review_sessions_expires ON toolgate_review_sessions (expires_at);
