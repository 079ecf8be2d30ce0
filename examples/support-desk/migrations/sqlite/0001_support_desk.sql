-- The support-desk example's own tables, in the same database as the claims.
-- Tracked by their own migrations table (support_desk_migrations).
CREATE TABLE agents (
    id     TEXT    NOT NULL PRIMARY KEY,
    active INTEGER NOT NULL CHECK (active IN (0, 1))
) STRICT;

CREATE TABLE customers (
    id   TEXT NOT NULL PRIMARY KEY,
    name TEXT NOT NULL
) STRICT;

-- `version` advances with every write to the ticket: it is the precondition
-- the executor applies (docs/design.md invariant 9).
CREATE TABLE tickets (
    id          TEXT    NOT NULL PRIMARY KEY,
    customer_id TEXT    NOT NULL REFERENCES customers (id),
    assignee    TEXT    NOT NULL REFERENCES agents (id),
    version     INTEGER NOT NULL
) STRICT;

-- One row per applied credit. `operation_key` is unique so that
-- reconciliation can ask "did the write for this operation happen?".
CREATE TABLE credits (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_key BLOB    NOT NULL UNIQUE,
    ticket_id     TEXT    NOT NULL REFERENCES tickets (id),
    customer_id   TEXT    NOT NULL,
    agent_id      TEXT    NOT NULL,
    amount_minor  INTEGER NOT NULL,
    reason_code   TEXT    NOT NULL,
    version_seen  INTEGER NOT NULL
) STRICT;

CREATE INDEX credits_ticket ON credits (ticket_id);
