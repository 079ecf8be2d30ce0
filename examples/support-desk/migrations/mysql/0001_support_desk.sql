-- The support-desk example's own tables, in the same database as the claims.
-- Tracked by their own migrations table (support_desk_migrations).
CREATE TABLE agents (
    id     VARCHAR(128) NOT NULL PRIMARY KEY,
    active BOOLEAN      NOT NULL
) ENGINE = InnoDB;

CREATE TABLE customers (
    id   VARCHAR(128) NOT NULL PRIMARY KEY,
    name VARCHAR(256) NOT NULL
) ENGINE = InnoDB;

-- `version` advances with every write to the ticket: it is the precondition
-- the executor applies (docs/design.md invariant 9).
CREATE TABLE tickets (
    id          VARCHAR(128) NOT NULL PRIMARY KEY,
    customer_id VARCHAR(128) NOT NULL,
    assignee    VARCHAR(128) NOT NULL,
    version     BIGINT       NOT NULL,
    FOREIGN KEY (customer_id) REFERENCES customers (id),
    FOREIGN KEY (assignee) REFERENCES agents (id)
) ENGINE = InnoDB;

-- One row per applied credit. `operation_key` is unique so that
-- reconciliation can ask "did the write for this operation happen?".
CREATE TABLE credits (
    id            BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    operation_key VARBINARY(32) NOT NULL UNIQUE,
    ticket_id     VARCHAR(128)  NOT NULL,
    customer_id   VARCHAR(128)  NOT NULL,
    agent_id      VARCHAR(128)  NOT NULL,
    amount_minor  BIGINT        NOT NULL,
    reason_code   VARCHAR(64)   NOT NULL,
    version_seen  BIGINT        NOT NULL,
    INDEX credits_ticket (ticket_id),
    FOREIGN KEY (ticket_id) REFERENCES tickets (id)
) ENGINE = InnoDB;
