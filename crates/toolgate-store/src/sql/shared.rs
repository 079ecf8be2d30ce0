//! The statements whose text every dialect that uses them agrees on,
//! written once with `?` placeholders (PostgreSQL numbers them with
//! `numbered!`). Each backend's `sql.rs` names the ones it takes.

// ---- Claims ----

/// A claim row's columns, in the order `rows::claim` reads them.
macro_rules! claim_columns {
    () => {
        "operation_key, fingerprint, tool, arguments, \
         scope, version_seen, proposer, status, holder, lease_expires_at, claimed_at, \
         completed_at, resolution, result, executor, attempt"
    };
}

/// The conditional insert, up to the dialect's clause that makes a
/// duplicate key change nothing.
macro_rules! insert_claim {
    ($on_duplicate:literal) => {
        concat!(
            "INSERT INTO toolgate_claims \
             (operation_key, fingerprint, tool, arguments, scope, version_seen, proposer, \
              status, holder, lease_expires_at, claimed_at, executor) \
             VALUES (?, ?, ?, ?, ?, ?, ?, 'in_flight', ?, ?, ?, ?) ",
            $on_duplicate
        )
    };
}
pub(crate) use insert_claim;

/// PostgreSQL's and SQLite's conditional insert.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) const INSERT_CLAIM_OR_NOTHING: &str =
    insert_claim!("ON CONFLICT (operation_key) DO NOTHING");

pub(crate) const SELECT_CLAIM: &str = concat!(
    "SELECT ",
    claim_columns!(),
    " FROM toolgate_claims WHERE operation_key = ?"
);
/// The next attempt over a row reconciled as not applied, only while
/// it is still that attempt. Binds: fingerprint, tool, arguments,
/// scope, version_seen, proposer, holder, lease_expires_at, claimed_at,
/// executor, the new attempt, key, the closed attempt.
pub(crate) const REOPEN_CLAIM: &str = "UPDATE toolgate_claims \
    SET fingerprint = ?, tool = ?, arguments = ?, scope = ?, version_seen = ?, \
    proposer = ?, status = 'in_flight', holder = ?, lease_expires_at = ?, claimed_at = ?, \
    executor = ?, attempt = ?, completed_at = NULL, resolution = NULL, result = NULL \
    WHERE operation_key = ? AND status = 'completed' \
    AND resolution = 'reconciled_not_applied' AND attempt = ?";
pub(crate) const COMPLETE: &str = "UPDATE toolgate_claims \
    SET status = 'completed', completed_at = ?, resolution = 'executed', result = ? \
    WHERE operation_key = ? AND status = 'in_flight' AND holder = ? \
    AND lease_expires_at > ?";
/// Binds: consumed_at, consumed_by, id, now, key, fingerprint, version,
/// digest, proposer, via (or ''), id, proposer, via (or ''). A grant
/// serves only its proposer (and the key that named them), never one
/// of the item's voters.
pub(crate) const CONSUME_GRANT: &str = "UPDATE toolgate_review_items \
    SET consumed_at = ?, consumed_by = ? \
    WHERE id = ? AND status = 'approved' AND consumed_at IS NULL AND expires_at > ? \
    AND operation_key = ? AND fingerprint = ? AND version_seen = ? AND policy_digest = ? \
    AND proposer = ? AND COALESCE(proposer_via, '') = ? \
    AND NOT EXISTS (SELECT 1 FROM toolgate_review_votes v \
        WHERE v.item_id = ? AND v.reviewer IN (?, ?))";
pub(crate) const RECONCILE: &str = "UPDATE toolgate_claims \
    SET status = 'completed', completed_at = ?, resolution = ?, result = ? \
    WHERE operation_key = ? AND status = 'in_flight' AND lease_expires_at <= ?";
pub(crate) const LIST_STUCK: &str = concat!(
    "SELECT ",
    claim_columns!(),
    " FROM toolgate_claims WHERE status = 'in_flight' AND lease_expires_at <= ? \
    ORDER BY lease_expires_at, operation_key LIMIT ?"
);
pub(crate) const APPEND_AUDIT: &str = "INSERT INTO toolgate_audit \
    (at, actor, tool, outcome, reason, operation_key, fingerprint, via, attempt) \
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)";
pub(crate) const AUDIT_TRAIL: &str = "SELECT at, actor, tool, outcome, reason, \
    operation_key, fingerprint, via, attempt FROM toolgate_audit WHERE operation_key = ? \
    ORDER BY id LIMIT ?";

// ---- Budgets ----

/// The ledger row of a reservation within its limit, read from the counter
/// this transaction has just added to (and so holds locked): (key, amount,
/// budget, scope, window, limit). SQLite and MySQL.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) const BUDGET_RECORD: &str = "INSERT INTO toolgate_budget_reservations \
    (operation_key, budget, scope, window_start, amount, state) \
    SELECT ?, budget, scope, window_start, ?, 'reserved' FROM toolgate_budget_counters \
    WHERE budget = ? AND scope = ? AND window_start = ? AND used <= ?";
/// A counter's `used`: (budget, scope, window). The pooled dialects add a
/// locking clause.
macro_rules! budget_used {
    () => {
        "SELECT used FROM toolgate_budget_counters \
         WHERE budget = ? AND scope = ? AND window_start = ?"
    };
}
pub(crate) use budget_used;
pub(crate) const BUDGET_LEDGER_INSERT: &str = "INSERT INTO toolgate_budget_reservations \
    (operation_key, budget, scope, window_start, amount, state) \
    VALUES (?, ?, ?, ?, ?, ?)";
pub(crate) const BUDGET_HELD: &str = "SELECT budget, scope, window_start, amount \
    FROM toolgate_budget_reservations \
    WHERE operation_key = ? AND state IN ('reserved', 'over_limit') ORDER BY budget";
pub(crate) const BUDGET_RELEASE: &str = "UPDATE toolgate_budget_reservations \
    SET state = 'released' \
    WHERE operation_key = ? AND budget = ? AND state IN ('reserved', 'over_limit')";
pub(crate) const BUDGET_SUBTRACT: &str = "UPDATE toolgate_budget_counters SET used = used - ? \
    WHERE budget = ? AND scope = ? AND window_start = ?";
pub(crate) const BUDGET_FORGET_RELEASED: &str = "DELETE FROM toolgate_budget_reservations \
    WHERE operation_key = ? AND state = 'released'";

/// Held amounts per budget, with the dialect's expression for a sum that
/// reads as a 64-bit integer.
macro_rules! budget_reserved {
    ($sum:literal) => {
        concat!(
            "SELECT budget, ",
            $sum,
            " AS reserved FROM toolgate_budget_reservations \
             WHERE state IN ('reserved', 'over_limit') GROUP BY budget ORDER BY budget"
        )
    };
}
pub(crate) use budget_reserved;

// ---- Review ----

/// An item's columns, in the order `review::ItemRow` reads them.
macro_rules! item_columns {
    () => {
        "id, created_at, kind, reason, tool, proposer, proposer_via, \
         operation_key, fingerprint, version_seen, policy_digest, scope, decision, status, \
         approvals_needed, expires_at, consumed_at, closed_at, closed_by, note, consumed_by"
    };
}

/// The same columns as a listing reads them: the decision's summary (at
/// most `MAX_SUMMARY_BYTES`) in place of the decision, and the scope only
/// when it is at most `MAX_LISTED_SCOPE_BYTES` (4096): a page never
/// loads whole texts, whatever rows the table holds.
macro_rules! listed_columns {
    () => {
        "id, created_at, kind, reason, tool, proposer, proposer_via, \
         operation_key, fingerprint, version_seen, policy_digest, \
         CASE WHEN octet_length(scope) <= 4096 THEN scope END, \
         COALESCE(summary, '{\"truncated\":true}'), status, \
         approvals_needed, expires_at, consumed_at, closed_at, closed_by, note, consumed_by"
    };
}

/// A new item, up to the dialect's clause for a clash on `open_grant` or
/// `dedup` (the status is `open`).
macro_rules! review_insert {
    ($on_clash:literal) => {
        concat!(
            "INSERT INTO toolgate_review_items \
             (created_at, kind, reason, tool, proposer, proposer_via, operation_key, \
              fingerprint, version_seen, policy_digest, scope, decision, status, \
              approvals_needed, expires_at, open_grant, queue_principal, dedup, summary) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'open', ?, ?, ?, ?, ?, ?) ",
            $on_clash
        )
    };
}
pub(crate) use review_insert;

pub(crate) const SESSION_PURGE: &str = "DELETE FROM toolgate_review_sessions WHERE expires_at <= ?";
pub(crate) const SESSION_INSERT: &str = "INSERT INTO toolgate_review_sessions \
    (token_sha256, principal, csrf, expires_at) VALUES (?, ?, ?, ?)";
pub(crate) const SESSION_GET: &str = "SELECT principal, csrf, expires_at \
    FROM toolgate_review_sessions WHERE token_sha256 = ? AND expires_at > ?";
pub(crate) const SESSION_DELETE: &str =
    "DELETE FROM toolgate_review_sessions WHERE token_sha256 = ?";
pub(crate) const BY_GRANT: &str = concat!(
    "SELECT ",
    item_columns!(),
    " FROM toolgate_review_items WHERE open_grant = ?"
);
pub(crate) const BY_ID: &str = concat!(
    "SELECT ",
    item_columns!(),
    " FROM toolgate_review_items WHERE id = ?"
);
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) const BY_ID_LOCKED: &str = concat!(
    "SELECT ",
    item_columns!(),
    " FROM toolgate_review_items WHERE id = ? FOR UPDATE"
);
pub(crate) const LIST: &str = concat!(
    "SELECT ",
    listed_columns!(),
    " FROM toolgate_review_items WHERE (? IS NULL OR id < ?) \
    AND (? IS NULL OR status = ?) AND (? IS NULL OR kind = ?) \
    ORDER BY id DESC LIMIT ?"
);
pub(crate) const DENIED: &str = "SELECT id, closed_by FROM toolgate_review_items \
    WHERE operation_key = ? AND fingerprint = ? AND version_seen = ? AND policy_digest = ? \
    AND status = 'denied' ORDER BY id DESC LIMIT 1";
pub(crate) const BY_DEDUP: &str = "SELECT id FROM toolgate_review_items WHERE dedup = ?";
pub(crate) const EXPIRE_ONE: &str = "UPDATE toolgate_review_items \
    SET status = 'expired', open_grant = NULL \
    WHERE id = ? AND status IN ('open', 'approved') AND consumed_at IS NULL AND expires_at <= ?";
pub(crate) const EXPIRE_ALL: &str = "UPDATE toolgate_review_items \
    SET status = 'expired', open_grant = NULL \
    WHERE status IN ('open', 'approved') AND consumed_at IS NULL AND expires_at <= ?";
pub(crate) const OPEN_OF: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM toolgate_review_items \
    WHERE queue_principal = ? AND status = 'open' AND (expires_at IS NULL OR expires_at > ?) \
    LIMIT ?) t";
pub(crate) const OPEN_ALL: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM toolgate_review_items \
    WHERE status = 'open' AND (expires_at IS NULL OR expires_at > ?) LIMIT ?) t";
pub(crate) const VOTES: &str = "SELECT reviewer, verdict, at, note FROM toolgate_review_votes \
    WHERE item_id = ? ORDER BY at, reviewer";
pub(crate) const INSERT_VOTE: &str = "INSERT INTO toolgate_review_votes \
    (item_id, reviewer, verdict, at, note) VALUES (?, ?, ?, ?, ?)";
pub(crate) const COUNT_APPROVALS: &str = "SELECT COUNT(*) FROM toolgate_review_votes \
    WHERE item_id = ? AND verdict = 'approve'";
pub(crate) const CLOSE: &str = "UPDATE toolgate_review_items SET status = ?, closed_at = ?, \
    closed_by = ?, note = ?, open_grant = CASE WHEN ? = 'approved' THEN open_grant ELSE NULL END \
    WHERE id = ?";
pub(crate) const OPEN_COUNT: &str = "SELECT COUNT(*) FROM toolgate_review_items \
    WHERE status = 'open' AND (expires_at IS NULL OR expires_at > ?)";
pub(crate) const REVIEW_AUDIT: &str = "INSERT INTO toolgate_audit \
    (at, actor, tool, outcome, reason, operation_key, fingerprint, via) \
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)";

// ---- The Idempotency-Key memory ----

/// The pooled backends' insert: a duplicate is an error, which the begin
/// reads as a lost race (SQLite's writer inserts and reads in one unit).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) const IDEM_INSERT: &str = "INSERT INTO toolgate_idempotency \
    (principal, idem_key, payload, runner, state, lease_until) \
    VALUES (?, ?, ?, ?, 'running', ?)";
pub(crate) const IDEM_SELECT: &str = "SELECT payload, runner, state, lease_until, status, \
    content_type, outcome, body FROM toolgate_idempotency WHERE principal = ? AND idem_key = ?";
pub(crate) const IDEM_TAKE_OVER: &str = "UPDATE toolgate_idempotency \
    SET runner = ?, lease_until = ? WHERE principal = ? AND idem_key = ? \
    AND state = 'running' AND runner = ? AND lease_until <= ?";
pub(crate) const IDEM_FINISH: &str = "UPDATE toolgate_idempotency SET state = 'done', \
    finished_at = ?, status = ?, content_type = ?, outcome = ?, body = ?, bytes = ? \
    WHERE principal = ? AND idem_key = ? AND state = 'running' AND runner = ?";
pub(crate) const IDEM_FORGET: &str = "DELETE FROM toolgate_idempotency \
    WHERE principal = ? AND idem_key = ? AND state = 'running' AND runner = ?";
pub(crate) const IDEM_TOTALS_OF: &str =
    "SELECT answers, bytes FROM toolgate_idempotency_totals WHERE principal = ?";
/// PostgreSQL and MySQL; SQLite's two-argument `MAX` is its `GREATEST`.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) const IDEM_TOTALS_SUB: &str = "UPDATE toolgate_idempotency_totals \
    SET answers = GREATEST(answers - ?, 0), bytes = GREATEST(bytes - ?, 0) WHERE principal = ?";
pub(crate) const IDEM_OLDEST_OF: &str = "SELECT idem_key, bytes FROM toolgate_idempotency \
    WHERE principal = ? AND state = 'done' ORDER BY finished_at LIMIT ?";
pub(crate) const IDEM_EXPIRED: &str = "SELECT principal, idem_key FROM toolgate_idempotency \
    WHERE state = 'done' AND finished_at <= ? ORDER BY finished_at LIMIT ?";
pub(crate) const IDEM_LAPSED: &str = "SELECT principal, idem_key FROM toolgate_idempotency \
    WHERE state = 'running' AND lease_until <= ? LIMIT ?";
/// Without `RETURNING` (MySQL, which reads the bytes first).
#[cfg(feature = "mysql")]
pub(crate) const IDEM_DELETE_DONE: &str = "DELETE FROM toolgate_idempotency \
    WHERE principal = ? AND idem_key = ? AND state = 'done'";
/// With it (PostgreSQL, SQLite).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) const IDEM_DELETE_DONE_RETURNING: &str = "DELETE FROM toolgate_idempotency \
    WHERE principal = ? AND idem_key = ? AND state = 'done' RETURNING bytes";
pub(crate) const IDEM_DELETE_LAPSED: &str = "DELETE FROM toolgate_idempotency \
    WHERE principal = ? AND idem_key = ? AND state = 'running' AND lease_until <= ?";
