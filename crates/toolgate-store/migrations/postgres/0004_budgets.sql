-- Budgets (docs/design.md §15). A counter per (budget, scope values, window):
-- `used` changes only by a conditional UPDATE inside a claim's transaction
-- (`used + amount <= limit`) or by a release guarded by the ledger row.
CREATE TABLE toolgate_budget_counters (
    budget       TEXT   NOT NULL,
    -- SHA-256 (hex) of the budget's `per` values, never the values themselves.
    scope        TEXT   NOT NULL,
    window_start BIGINT NOT NULL,
    used         BIGINT NOT NULL CHECK (used >= 0),
    PRIMARY KEY (budget, scope, window_start)
);

-- The ledger: what each claim reserved, and whether it still holds it.
-- `over_limit` is a reservation an approval let past the limit.
CREATE TABLE toolgate_budget_reservations (
    operation_key BYTEA  NOT NULL,
    budget        TEXT   NOT NULL,
    scope         TEXT   NOT NULL,
    window_start  BIGINT NOT NULL,
    amount        BIGINT NOT NULL CHECK (amount >= 0),
    state         TEXT   NOT NULL CHECK (state IN ('reserved', 'over_limit', 'released')),
    PRIMARY KEY (operation_key, budget)
);
