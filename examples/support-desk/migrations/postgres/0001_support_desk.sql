-- The support-desk example's own tables, in the same database as the claims.
-- Tracked by their own migrations table (support_desk_migrations).
CREATE TABLE agents (
    id     TEXT    NOT NULL PRIMARY KEY,
    active BOOLEAN NOT NULL
);

CREATE TABLE customers (
    id   TEXT NOT NULL PRIMARY KEY,
    name TEXT NOT NULL
);

-- `version` advances with every write to the ticket: it is the precondition
-- the executor applies (docs/design.md invariant 9).
CREATE TABLE tickets (
    id          TEXT   NOT NULL PRIMARY KEY,
    customer_id TEXT   NOT NULL REFERENCES customers (id),
    assignee    TEXT   NOT NULL REFERENCES agents (id),
    version     BIGINT NOT NULL
);

-- One row per applied credit. `operation_key` is unique so that
-- reconciliation can ask "did the write for this operation happen?".
CREATE TABLE credits (
    id            BIGSERIAL PRIMARY KEY,
    operation_key BYTEA     NOT NULL UNIQUE,
    ticket_id     TEXT      NOT NULL REFERENCES tickets (id),
    customer_id   TEXT      NOT NULL,
    agent_id      TEXT      NOT NULL,
    amount_minor  BIGINT    NOT NULL,
    reason_code   TEXT      NOT NULL,
    version_seen  BIGINT    NOT NULL
);

CREATE INDEX credits_ticket ON credits (ticket_id);
