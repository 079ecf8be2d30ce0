//! Budget statements (docs/design.md §15), per dialect. Every statement
//! binds in the same order on every backend; only the placeholders and the
//! insert that ignores a duplicate differ.

/// One dialect's budget SQL.
pub(crate) struct BudgetSql {
    /// Creates a counter at 0 unless it exists: (budget, scope, window).
    pub(crate) counter: &'static str,
    /// Adds within the limit: (amount, budget, scope, window, amount, limit).
    pub(crate) add_within: &'static str,
    /// Adds beyond the limit (an approval): (amount, budget, scope, window).
    pub(crate) add_beyond: &'static str,
    /// A counter's `used`: (budget, scope, window).
    pub(crate) used: &'static str,
    /// A ledger row: (key, budget, scope, window, amount, state).
    pub(crate) ledger_insert: &'static str,
    /// A claim's held reservations: (key).
    pub(crate) held: &'static str,
    /// Releases one held reservation: (key, budget).
    pub(crate) release: &'static str,
    /// Gives an amount back: (amount, budget, scope, window).
    pub(crate) subtract: &'static str,
    /// Held amounts per budget (`budget`, `reserved`): no binds.
    pub(crate) reserved: &'static str,
}

macro_rules! qmark_sql {
    ($counter:expr, $used:expr, $sum:expr) => {
        BudgetSql {
            counter: $counter,
            add_within: "UPDATE toolgate_budget_counters SET used = used + ? \
                WHERE budget = ? AND scope = ? AND window_start = ? AND used + ? <= ?",
            add_beyond: "UPDATE toolgate_budget_counters SET used = used + ? \
                WHERE budget = ? AND scope = ? AND window_start = ?",
            used: $used,
            reserved: concat!(
                "SELECT budget, ",
                $sum,
                " AS reserved FROM toolgate_budget_reservations \
                 WHERE state IN ('reserved', 'over_limit') GROUP BY budget ORDER BY budget"
            ),
            ledger_insert: "INSERT INTO toolgate_budget_reservations \
                (operation_key, budget, scope, window_start, amount, state) \
                VALUES (?, ?, ?, ?, ?, ?)",
            held: "SELECT budget, scope, window_start, amount FROM toolgate_budget_reservations \
                WHERE operation_key = ? AND state IN ('reserved', 'over_limit') ORDER BY budget",
            release: "UPDATE toolgate_budget_reservations SET state = 'released' \
                WHERE operation_key = ? AND budget = ? AND state IN ('reserved', 'over_limit')",
            subtract: "UPDATE toolgate_budget_counters SET used = used - ? \
                WHERE budget = ? AND scope = ? AND window_start = ?",
        }
    };
}

#[cfg(feature = "sqlite")]
pub(crate) const SQLITE: BudgetSql = qmark_sql!(
    "INSERT INTO toolgate_budget_counters (budget, scope, window_start, used) \
     VALUES (?, ?, ?, 0) ON CONFLICT (budget, scope, window_start) DO NOTHING",
    "SELECT used FROM toolgate_budget_counters \
     WHERE budget = ? AND scope = ? AND window_start = ?",
    "SUM(amount)"
);

// Not INSERT IGNORE, which would also turn other errors into warnings.
#[cfg(feature = "mysql")]
pub(crate) const MYSQL: BudgetSql = qmark_sql!(
    "INSERT INTO toolgate_budget_counters (budget, scope, window_start, used) \
     VALUES (?, ?, ?, 0) ON DUPLICATE KEY UPDATE used = used",
    // A locking read: under REPEATABLE READ a plain SELECT reads the
    // transaction's snapshot, which may predate the counter's latest value
    // (or the row itself) that the refused UPDATE saw.
    "SELECT used FROM toolgate_budget_counters \
     WHERE budget = ? AND scope = ? AND window_start = ? LOCK IN SHARE MODE",
    // SUM of a BIGINT is a DECIMAL on MySQL.
    "CAST(SUM(amount) AS SIGNED)"
);

#[cfg(feature = "postgres")]
pub(crate) const POSTGRES: BudgetSql = BudgetSql {
    counter: "INSERT INTO toolgate_budget_counters (budget, scope, window_start, used) \
        VALUES ($1, $2, $3, 0) ON CONFLICT (budget, scope, window_start) DO NOTHING",
    add_within: "UPDATE toolgate_budget_counters SET used = used + $1 \
        WHERE budget = $2 AND scope = $3 AND window_start = $4 AND used + $5 <= $6",
    add_beyond: "UPDATE toolgate_budget_counters SET used = used + $1 \
        WHERE budget = $2 AND scope = $3 AND window_start = $4",
    // A locking read, so the value reported is the one the UPDATE saw
    // whatever the isolation level.
    used: "SELECT used FROM toolgate_budget_counters \
        WHERE budget = $1 AND scope = $2 AND window_start = $3 FOR SHARE",
    // SUM of a BIGINT is a NUMERIC on PostgreSQL.
    reserved: "SELECT budget, CAST(SUM(amount) AS BIGINT) AS reserved \
        FROM toolgate_budget_reservations \
        WHERE state IN ('reserved', 'over_limit') GROUP BY budget ORDER BY budget",
    ledger_insert: "INSERT INTO toolgate_budget_reservations \
        (operation_key, budget, scope, window_start, amount, state) \
        VALUES ($1, $2, $3, $4, $5, $6)",
    held: "SELECT budget, scope, window_start, amount FROM toolgate_budget_reservations \
        WHERE operation_key = $1 AND state IN ('reserved', 'over_limit') ORDER BY budget",
    release: "UPDATE toolgate_budget_reservations SET state = 'released' \
        WHERE operation_key = $1 AND budget = $2 AND state IN ('reserved', 'over_limit')",
    subtract: "UPDATE toolgate_budget_counters SET used = used - $1 \
        WHERE budget = $2 AND scope = $3 AND window_start = $4",
};
