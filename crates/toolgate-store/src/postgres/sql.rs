//! PostgreSQL's statements: the shared ones numbered `$1`, `$2`, …, and its
//! own where the dialect differs.

use crate::sql::shared::{self as s, budget_reserved, budget_used, review_insert};
use crate::sql::{BudgetSql, ClaimSql, IdemSql, Reserve, ReviewSql, Sql, numbered};

pub(crate) const SQL: Sql = Sql {
    claims: ClaimSql {
        insert: numbered!(s::INSERT_CLAIM_OR_NOTHING),
        select: numbered!(s::SELECT_CLAIM),
        reopen: numbered!(s::REOPEN_CLAIM),
        complete: numbered!(s::COMPLETE),
        reconcile: numbered!(s::RECONCILE),
        consume_grant: numbered!(s::CONSUME_GRANT),
        list_stuck: numbered!(s::LIST_STUCK),
        append_audit: numbered!(s::APPEND_AUDIT),
        audit_trail: numbered!(s::AUDIT_TRAIL),
        connection_id: "SELECT CAST(pg_backend_pid() AS BIGINT) AS id",
    },
    budget: BudgetSql {
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
        // Read by the reserving transaction after its own add; a locking
        // read, so it is the latest value whatever the isolation level.
        used: numbered!(concat!(budget_used!(), " FOR SHARE")),
        ledger_insert: numbered!(s::BUDGET_LEDGER_INSERT),
        held: numbered!(s::BUDGET_HELD),
        release: numbered!(s::BUDGET_RELEASE),
        subtract: numbered!(s::BUDGET_SUBTRACT),
        // SUM of a BIGINT is a NUMERIC on PostgreSQL.
        reserved: budget_reserved!("CAST(SUM(amount) AS BIGINT)"),
        forget_released: numbered!(s::BUDGET_FORGET_RELEASED),
    },
    review: ReviewSql {
        session_purge: numbered!(s::SESSION_PURGE),
        session_insert: numbered!(s::SESSION_INSERT),
        session_get: numbered!(s::SESSION_GET),
        session_delete: numbered!(s::SESSION_DELETE),
        by_grant: numbered!(s::BY_GRANT),
        by_id: numbered!(s::BY_ID),
        by_id_locked: numbered!(s::BY_ID_LOCKED),
        list: numbered!(s::LIST),
        denied: numbered!(s::DENIED),
        by_dedup: numbered!(s::BY_DEDUP),
        expire_one: numbered!(s::EXPIRE_ONE),
        expire_all: numbered!(s::EXPIRE_ALL),
        // A clash inserts nothing and returns no row.
        insert: numbered!(review_insert!("ON CONFLICT DO NOTHING RETURNING id")),
        open_of: numbered!(s::OPEN_OF),
        open_all: numbered!(s::OPEN_ALL),
        votes: numbered!(s::VOTES),
        insert_vote: numbered!(s::INSERT_VOTE),
        count_approvals: numbered!(s::COUNT_APPROVALS),
        close: numbered!(s::CLOSE),
        open_count: numbered!(s::OPEN_COUNT),
        audit: numbered!(s::REVIEW_AUDIT),
    },
    idempotency: IdemSql {
        insert: numbered!(s::IDEM_INSERT),
        select: numbered!(s::IDEM_SELECT),
        take_over: numbered!(s::IDEM_TAKE_OVER),
        finish: numbered!(s::IDEM_FINISH),
        forget: numbered!(s::IDEM_FORGET),
        totals_add: "INSERT INTO toolgate_idempotency_totals (principal, answers, bytes) \
            VALUES ($1, 1, $2) ON CONFLICT (principal) DO UPDATE SET \
            answers = toolgate_idempotency_totals.answers + 1, \
            bytes = toolgate_idempotency_totals.bytes + EXCLUDED.bytes",
        totals_of: numbered!(s::IDEM_TOTALS_OF),
        totals_sub: numbered!(s::IDEM_TOTALS_SUB),
        oldest_of: numbered!(s::IDEM_OLDEST_OF),
        expired: numbered!(s::IDEM_EXPIRED),
        lapsed: numbered!(s::IDEM_LAPSED),
        lock_done: None,
        delete_done: numbered!(s::IDEM_DELETE_DONE_RETURNING),
        delete_lapsed: numbered!(s::IDEM_DELETE_LAPSED),
    },
};
