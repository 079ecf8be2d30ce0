//! MySQL's and MariaDB's statements: the shared ones, and its own where the
//! dialect differs (upserts, locking reads, no `RETURNING`).

use crate::sql::shared::{self as s, budget_reserved, budget_used, insert_claim, review_insert};
use crate::sql::{BudgetSql, ClaimSql, IdemSql, Reserve, ReviewSql, Sql};

/// The conditional insert, public for the tests that pin the driver's
/// behaviour. `UPDATE operation_key = operation_key` changes nothing on a
/// duplicate; unlike `INSERT IGNORE` it does not also swallow other errors
/// (truncation, bad values) as warnings.
pub const INSERT_CLAIM: &str =
    insert_claim!("ON DUPLICATE KEY UPDATE operation_key = operation_key");

pub(crate) const SQL: Sql = Sql {
    claims: ClaimSql {
        insert: INSERT_CLAIM,
        select: s::SELECT_CLAIM,
        reopen: s::REOPEN_CLAIM,
        complete: s::COMPLETE,
        reconcile: s::RECONCILE,
        consume_grant: s::CONSUME_GRANT,
        list_stuck: s::LIST_STUCK,
        append_audit: s::APPEND_AUDIT,
        audit_trail: s::AUDIT_TRAIL,
        connection_id: "SELECT CAST(CONNECTION_ID() AS SIGNED) AS id",
    },
    budget: BudgetSql {
        // The amount is bound twice rather than read back with VALUES(),
        // which MySQL 8 deprecates. Under REPEATABLE READ the record's
        // SELECT is a locking read, and a consistent one (READ COMMITTED)
        // still sees this transaction's own write: either way the sum it
        // tests is the one just written.
        reserve: Reserve::AddThenRecord {
            add: "INSERT INTO toolgate_budget_counters (budget, scope, window_start, used) \
                VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE used = used + ?",
            record: s::BUDGET_RECORD,
        },
        // Read by the reserving transaction after its own add, on the row
        // it holds locked; the locking read keeps that true if it is ever
        // read elsewhere (a plain SELECT under REPEATABLE READ reads a
        // snapshot).
        used: concat!(budget_used!(), " LOCK IN SHARE MODE"),
        ledger_insert: s::BUDGET_LEDGER_INSERT,
        held: s::BUDGET_HELD,
        release: s::BUDGET_RELEASE,
        subtract: s::BUDGET_SUBTRACT,
        // SUM of a BIGINT is a DECIMAL on MySQL.
        reserved: budget_reserved!("CAST(SUM(amount) AS SIGNED)"),
        forget_released: s::BUDGET_FORGET_RELEASED,
    },
    review: ReviewSql {
        session_purge: s::SESSION_PURGE,
        session_insert: s::SESSION_INSERT,
        session_get: s::SESSION_GET,
        session_delete: s::SESSION_DELETE,
        by_grant: s::BY_GRANT,
        by_id: s::BY_ID,
        by_id_locked: s::BY_ID_LOCKED,
        list: s::LIST,
        denied: s::DENIED,
        by_dedup: s::BY_DEDUP,
        expire_one: s::EXPIRE_ONE,
        expire_all: s::EXPIRE_ALL,
        // A clash changes nothing (`id = id`).
        insert: review_insert!("ON DUPLICATE KEY UPDATE id = id"),
        open_of: s::OPEN_OF,
        open_all: s::OPEN_ALL,
        votes: s::VOTES,
        insert_vote: s::INSERT_VOTE,
        count_approvals: s::COUNT_APPROVALS,
        close: s::CLOSE,
        open_count: s::OPEN_COUNT,
        audit: s::REVIEW_AUDIT,
    },
    idempotency: IdemSql {
        insert: s::IDEM_INSERT,
        select: s::IDEM_SELECT,
        take_over: s::IDEM_TAKE_OVER,
        finish: s::IDEM_FINISH,
        forget: s::IDEM_FORGET,
        totals_add: "INSERT INTO toolgate_idempotency_totals (principal, answers, bytes) \
            VALUES (?, 1, ?) ON DUPLICATE KEY UPDATE answers = answers + 1, \
            bytes = bytes + VALUES(bytes)",
        totals_of: s::IDEM_TOTALS_OF,
        totals_sub: s::IDEM_TOTALS_SUB,
        oldest_of: s::IDEM_OLDEST_OF,
        expired: s::IDEM_EXPIRED,
        lapsed: s::IDEM_LAPSED,
        // No DELETE … RETURNING: the bytes are read first, in the same
        // transaction, with the row locked.
        lock_done: Some(
            "SELECT bytes FROM toolgate_idempotency \
             WHERE principal = ? AND idem_key = ? AND state = 'done' FOR UPDATE",
        ),
        delete_done: s::IDEM_DELETE_DONE,
        delete_lapsed: s::IDEM_DELETE_LAPSED,
    },
};
