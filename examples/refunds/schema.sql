SET client_min_messages = warning;
-- The shop's own tables, in a schema of their own (`shop`), apart from
-- toolgate's claim store. toolgate only READS them (entities and the order's
-- version); the shop's webhook (shop.py) is the only writer.
DROP SCHEMA IF EXISTS shop CASCADE;
CREATE SCHEMA shop;

CREATE TABLE shop.customers (
    id   integer PRIMARY KEY,
    name text NOT NULL
);

CREATE TABLE shop.agents (
    id       text PRIMARY KEY,
    team     text NOT NULL,
    disabled boolean NOT NULL DEFAULT false
);

CREATE TABLE shop.orders (
    id             integer PRIMARY KEY,
    customer_id    integer NOT NULL REFERENCES shop.customers (id),
    team           text NOT NULL,
    total_minor    integer NOT NULL,
    refunded_minor integer NOT NULL DEFAULT 0,
    -- Moved by every change to the order: the precondition of each refund.
    version        integer NOT NULL DEFAULT 1
);

-- One row per idempotency key toolgate sent (`<operation key>` for an
-- operation's first attempt, `<operation key>.<n>` after it), written by
-- whichever comes first: the refund (with its result) or a status request
-- (with none: a fence). The primary key makes the two exclusive, so a status
-- answer of "not applied" stays true for good: a refund arriving after it
-- fails on the key and is refused (410 fenced), never committed.
CREATE TABLE shop.webhook_keys (
    idempotency_key text PRIMARY KEY,
    -- NULL: fenced by a status request; nothing may be written under the key.
    result          text NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- One row per refund applied. A second delivery of the same refund finds
-- its key's result and answers with it instead of refunding twice.
CREATE TABLE shop.refunds (
    id              serial PRIMARY KEY,
    order_id        integer NOT NULL REFERENCES shop.orders (id),
    amount_minor    integer NOT NULL,
    reason          text NOT NULL,
    agent           text NOT NULL,
    idempotency_key text NOT NULL UNIQUE REFERENCES shop.webhook_keys (idempotency_key),
    result          text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

INSERT INTO shop.customers (id, name) VALUES (501, 'Ines'), (502, 'Olu');
INSERT INTO shop.agents (id, team, disabled) VALUES
    ('agent-ana', 'eu', false),
    ('agent-ben', 'us', false),
    ('agent-cal', 'eu', true);
INSERT INTO shop.orders (id, customer_id, team, total_minor) VALUES
    (1001, 501, 'eu', 12000),
    (1002, 501, 'eu', 4000),
    (1003, 502, 'us', 9000),
    (1004, 502, 'eu', 15000),
    (1005, 501, 'eu', 8000),
    (1006, 502, 'eu', 3000);
