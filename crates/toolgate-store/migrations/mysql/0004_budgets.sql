-- Budgets (docs/design.md §15). A counter per (budget, scope values, window):
-- `used` changes only by a conditional UPDATE inside a claim's transaction
-- (`used + amount <= limit`) or by a release guarded by the ledger row.
CREATE TABLE toolgate_budget_counters (
    budget       VARCHAR(64) NOT NULL,
    -- SHA-256 (hex) of the budget's `per` values, never the values themselves.
    scope        VARCHAR(64) NOT NULL,
    window_start BIGINT      NOT NULL,
    used         BIGINT      NOT NULL,
    PRIMARY KEY (budget, scope, window_start),
    CONSTRAINT toolgate_budget_counters_used CHECK (used >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The ledger: what each claim reserved, and whether it still holds it.
-- `over_limit` is a reservation an approval let past the limit.
CREATE TABLE toolgate_budget_reservations (
    operation_key VARBINARY(32) NOT NULL,
    budget        VARCHAR(64)   NOT NULL,
    scope         VARCHAR(64)   NOT NULL,
    window_start  BIGINT        NOT NULL,
    amount        BIGINT        NOT NULL,
    state         VARCHAR(16)   NOT NULL,
    PRIMARY KEY (operation_key, budget),
    CONSTRAINT toolgate_budget_reservations_amount CHECK (amount >= 0),
    CONSTRAINT toolgate_budget_reservations_state CHECK (state IN ('reserved', 'over_limit', 'released'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
