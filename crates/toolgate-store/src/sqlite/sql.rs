//! SQLite's statements: the shared ones, and its own where the dialect
//! differs (upserts, `MAX` for `GREATEST`, no locking clauses: its writer
//! runs one unit at a time).

use crate::sql::shared::{self as s, budget_reserved, budget_used, review_insert};
use crate::sql::{BudgetSql, ClaimSql, IdemSql, Reserve, ReviewSql, Sql};

/// The budget's add, which the writer runs by name.
pub(crate) const BUDGET_ADD: &str = "INSERT INTO toolgate_budget_counters \
    (budget, scope, window_start, used) VALUES (?, ?, ?, ?) \
    ON CONFLICT (budget, scope, window_start) DO UPDATE SET used = used + ?";

pub(crate) const SQL: Sql = Sql {
    claims: ClaimSql {
        insert: s::INSERT_CLAIM_OR_NOTHING,
        select: s::SELECT_CLAIM,
        reopen: s::REOPEN_CLAIM,
        complete: s::COMPLETE,
        reconcile: s::RECONCILE,
        consume_grant: s::CONSUME_GRANT,
        list_stuck: s::LIST_STUCK,
        append_audit: s::APPEND_AUDIT,
        audit_trail: s::AUDIT_TRAIL,
        connection_id: "SELECT -1 AS id",
    },
    budget: BudgetSql {
        reserve: Reserve::AddThenRecord {
            add: BUDGET_ADD,
            record: s::BUDGET_RECORD,
        },
        used: budget_used!(),
        ledger_insert: s::BUDGET_LEDGER_INSERT,
        held: s::BUDGET_HELD,
        release: s::BUDGET_RELEASE,
        subtract: s::BUDGET_SUBTRACT,
        reserved: budget_reserved!("SUM(amount)"),
        forget_released: s::BUDGET_FORGET_RELEASED,
    },
    review: ReviewSql {
        session_purge: s::SESSION_PURGE,
        session_insert: s::SESSION_INSERT,
        session_get: s::SESSION_GET,
        session_delete: s::SESSION_DELETE,
        by_grant: s::BY_GRANT,
        by_id: s::BY_ID,
        // The writer runs one unit at a time: the unit is the lock.
        by_id_locked: s::BY_ID,
        list: s::LIST,
        denied: s::DENIED,
        by_dedup: s::BY_DEDUP,
        expire_one: s::EXPIRE_ONE,
        expire_all: s::EXPIRE_ALL,
        insert: review_insert!("ON CONFLICT DO NOTHING"),
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
        // A duplicate changes nothing: the writer runs the insert and the
        // read as one unit.
        insert: "INSERT INTO toolgate_idempotency \
            (principal, idem_key, payload, runner, state, lease_until) \
            VALUES (?, ?, ?, ?, 'running', ?) ON CONFLICT (principal, idem_key) DO NOTHING",
        select: s::IDEM_SELECT,
        take_over: s::IDEM_TAKE_OVER,
        finish: s::IDEM_FINISH,
        forget: s::IDEM_FORGET,
        totals_add: "INSERT INTO toolgate_idempotency_totals (principal, answers, bytes) \
            VALUES (?, 1, ?) ON CONFLICT (principal) DO UPDATE SET answers = answers + 1, \
            bytes = bytes + excluded.bytes",
        totals_of: s::IDEM_TOTALS_OF,
        totals_sub: "UPDATE toolgate_idempotency_totals SET answers = MAX(answers - ?, 0), \
            bytes = MAX(bytes - ?, 0) WHERE principal = ?",
        oldest_of: s::IDEM_OLDEST_OF,
        expired: s::IDEM_EXPIRED,
        lapsed: s::IDEM_LAPSED,
        lock_done: None,
        delete_done: s::IDEM_DELETE_DONE_RETURNING,
        delete_lapsed: s::IDEM_DELETE_LAPSED,
    },
};
