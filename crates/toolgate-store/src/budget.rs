//! Budget statements (docs/design.md §15), per dialect. Every statement
//! binds in the same order on every backend; only the placeholders, the
//! upsert and the number of statements a reservation takes differ.

/// How a dialect reserves an amount: add it to its counter (creating the
/// counter), then record the ledger row `reserved` only where the counter's
/// new sum is within the limit. The sum the decision reads is the one this
/// transaction's own write produced, on a row it holds locked, so no read
/// of a value another transaction may change decides it.
pub(crate) enum Reserve {
    /// Both in one statement (a data-modifying CTE): (key, budget, scope,
    /// window, amount, limit); the ledger rows it inserted.
    #[cfg(feature = "postgres")]
    Once(&'static str),
    /// Two statements: `add` (budget, scope, window, amount, amount), then
    /// `record` (key, amount, budget, scope, window, limit); the ledger rows
    /// `record` inserted.
    #[cfg(any(feature = "sqlite", feature = "mysql"))]
    AddThenRecord {
        add: &'static str,
        record: &'static str,
    },
}

/// One dialect's budget SQL.
pub(crate) struct BudgetSql {
    /// Adds the amount and records the reservation where the new sum is
    /// within the limit.
    pub(crate) reserve: Reserve,
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
    /// Removes a claim's released ledger rows before its next attempt
    /// reserves again under the same (key, budget): (key). Their amounts
    /// went back to the counters when they were released.
    pub(crate) forget_released: &'static str,
}

/// The ledger row of a reservation within its limit, read from the counter
/// this transaction has just added to (and so holds locked): (key, amount,
/// budget, scope, window, limit). SQLite and MySQL.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) const QMARK_RECORD: &str = "INSERT INTO toolgate_budget_reservations \
    (operation_key, budget, scope, window_start, amount, state) \
    SELECT ?, budget, scope, window_start, ?, 'reserved' FROM toolgate_budget_counters \
    WHERE budget = ? AND scope = ? AND window_start = ? AND used <= ?";

#[cfg(any(feature = "sqlite", feature = "mysql"))]
macro_rules! qmark_sql {
    ($add:expr, $used:expr, $sum:expr) => {
        BudgetSql {
            reserve: Reserve::AddThenRecord {
                add: $add,
                record: QMARK_RECORD,
            },
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
            forget_released: "DELETE FROM toolgate_budget_reservations \
                WHERE operation_key = ? AND state = 'released'",
        }
    };
}

/// SQLite's add (`Reserve::AddThenRecord`), which its writer runs by name.
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE_ADD: &str = "INSERT INTO toolgate_budget_counters \
    (budget, scope, window_start, used) VALUES (?, ?, ?, ?) \
    ON CONFLICT (budget, scope, window_start) DO UPDATE SET used = used + ?";

#[cfg(feature = "sqlite")]
pub(crate) const SQLITE: BudgetSql = qmark_sql!(
    SQLITE_ADD,
    "SELECT used FROM toolgate_budget_counters \
     WHERE budget = ? AND scope = ? AND window_start = ?",
    "SUM(amount)"
);

// The amount is bound twice rather than read back with VALUES(), which
// MySQL 8 deprecates. Under REPEATABLE READ the record's SELECT is a
// locking read, and a consistent one (READ COMMITTED) still sees this
// transaction's own write: either way the sum it tests is the one just
// written.
#[cfg(feature = "mysql")]
pub(crate) const MYSQL: BudgetSql = qmark_sql!(
    "INSERT INTO toolgate_budget_counters (budget, scope, window_start, used) \
     VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE used = used + ?",
    // Read by the reserving transaction after its own add, on the row it
    // holds locked; the locking read keeps that true if it is ever read
    // elsewhere (a plain SELECT under REPEATABLE READ reads a snapshot).
    "SELECT used FROM toolgate_budget_counters \
     WHERE budget = ? AND scope = ? AND window_start = ? LOCK IN SHARE MODE",
    // SUM of a BIGINT is a DECIMAL on MySQL.
    "CAST(SUM(amount) AS SIGNED)"
);

#[cfg(feature = "postgres")]
pub(crate) const POSTGRES: BudgetSql = BudgetSql {
    // One round trip: the upsert's RETURNING is the sum this statement
    // wrote, and the ledger row is inserted only where it is within $6.
    // Under REPEATABLE READ or SERIALIZABLE a concurrent add is a
    // serialization failure (a lost race), as the plain UPDATE's was.
    reserve: Reserve::Once(
        "WITH counter AS (\
            INSERT INTO toolgate_budget_counters AS c (budget, scope, window_start, used) \
            VALUES ($2, $3, $4, $5) \
            ON CONFLICT (budget, scope, window_start) DO UPDATE SET used = c.used + EXCLUDED.used \
            RETURNING c.used) \
        INSERT INTO toolgate_budget_reservations \
            (operation_key, budget, scope, window_start, amount, state) \
        SELECT $1, $2, $3, $4, $5, 'reserved' FROM counter WHERE counter.used <= $6",
    ),
    // Read by the reserving transaction after its own add; a locking read,
    // so it is the latest value whatever the isolation level.
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
    forget_released: "DELETE FROM toolgate_budget_reservations \
        WHERE operation_key = $1 AND state = 'released'",
};
