//! Every statement a backend runs, by what it does ([`Sql`]), and the
//! statements whose text the dialects agree on ([`shared`]).
//!
//! Each backend's folder fills one [`Sql`] in its `sql.rs`, so the
//! compiler names any statement a new backend has not written. A statement
//! the dialects agree on is written once, in [`shared`], with `?`
//! placeholders (MySQL/MariaDB and SQLite take it as it is; PostgreSQL
//! takes it through [`numbered!`], which numbers the placeholders `$1`,
//! `$2`, … at compile time); a backend writes its own only where its
//! dialect differs (an upsert, a locking read, `RETURNING`). Every
//! statement binds in the same order on every backend.

#[cfg(feature = "postgres")]
mod placeholders;
pub(crate) mod shared;

#[cfg(feature = "postgres")]
pub(crate) use placeholders::{numbered, numbered_bytes, numbered_len};

/// One backend's statements.
pub(crate) struct Sql {
    /// The claim protocol's (`protocol.rs`).
    pub(crate) claims: ClaimSql,
    /// Budget counters and the reservations ledger.
    pub(crate) budget: BudgetSql,
    /// Review items, votes and reviewer sessions.
    pub(crate) review: ReviewSql,
    /// The `Idempotency-Key` memory.
    pub(crate) idempotency: IdemSql,
}

/// The claim protocol's statements.
pub(crate) struct ClaimSql {
    /// The conditional insert (a no-op on a duplicate key).
    pub(crate) insert: &'static str,
    /// One claim row by key.
    pub(crate) select: &'static str,
    /// The next attempt over a row reconciled as not applied.
    pub(crate) reopen: &'static str,
    /// The ownership- and lease-checked completion.
    pub(crate) complete: &'static str,
    /// Closing a stuck claim.
    pub(crate) reconcile: &'static str,
    /// Using an approval up.
    pub(crate) consume_grant: &'static str,
    /// Stuck claims, oldest lease first.
    pub(crate) list_stuck: &'static str,
    /// One audit entry.
    pub(crate) append_audit: &'static str,
    /// A key's audit entries, in order.
    pub(crate) audit_trail: &'static str,
    /// The server's id for the connection as column `id`, for the fault
    /// hooks.
    #[cfg_attr(
        not(feature = "fault-injection"),
        expect(dead_code, reason = "fault hooks only")
    )]
    pub(crate) connection_id: &'static str,
}

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

/// One dialect's budget statements (docs/design.md §15).
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

/// The review queue's statements. Item rows are read in the column order
/// of `review::ItemRow`.
pub(crate) struct ReviewSql {
    /// Drops expired reviewer sessions: (now).
    pub(crate) session_purge: &'static str,
    /// (token digest, principal, csrf, expires_at).
    pub(crate) session_insert: &'static str,
    /// A live session: (token digest, now).
    pub(crate) session_get: &'static str,
    /// (token digest).
    pub(crate) session_delete: &'static str,
    /// The live approval item of a grant digest: (digest).
    pub(crate) by_grant: &'static str,
    /// (id).
    pub(crate) by_id: &'static str,
    /// The same, locking the row for the caller's transaction: (id).
    pub(crate) by_id_locked: &'static str,
    /// One page: (before, before, status, status, kind, kind, limit).
    pub(crate) list: &'static str,
    /// The latest denial of a tuple: (key, fingerprint, version, policy
    /// digest).
    pub(crate) denied: &'static str,
    /// A rejection's item by its dedup digest: (digest).
    pub(crate) by_dedup: &'static str,
    /// Marks one lapsed item expired: (id, now).
    pub(crate) expire_one: &'static str,
    /// Marks every lapsed item expired: (now).
    pub(crate) expire_all: &'static str,
    /// A new item (every column of `review::Insert`, in order); a clash on
    /// `open_grant` or `dedup` inserts nothing.
    pub(crate) insert: &'static str,
    /// Open items of one queue principal, counted up to a cap: (principal,
    /// now, cap).
    pub(crate) open_of: &'static str,
    /// Open items, counted up to a cap: (now, cap).
    pub(crate) open_all: &'static str,
    /// An item's votes: (id).
    pub(crate) votes: &'static str,
    /// (id, reviewer, verdict, at, note).
    pub(crate) insert_vote: &'static str,
    /// (id).
    pub(crate) count_approvals: &'static str,
    /// (status, closed_at, closed_by, note, status, id).
    pub(crate) close: &'static str,
    /// Open items: (now).
    pub(crate) open_count: &'static str,
    /// A reviewer's audit entry: (at, actor, tool, outcome, reason, key,
    /// fingerprint, via).
    pub(crate) audit: &'static str,
}

/// The `Idempotency-Key` memory's statements.
pub(crate) struct IdemSql {
    /// A running row: (principal, key, payload, runner, lease_until).
    pub(crate) insert: &'static str,
    /// (principal, key).
    pub(crate) select: &'static str,
    /// (runner, lease_until, principal, key, old runner, now).
    pub(crate) take_over: &'static str,
    /// (finished_at, status, content_type, outcome, body, bytes,
    /// principal, key, runner).
    pub(crate) finish: &'static str,
    /// (principal, key, runner).
    pub(crate) forget: &'static str,
    /// Adds one answer of `bytes` to a principal's totals: (principal,
    /// bytes).
    pub(crate) totals_add: &'static str,
    /// A principal's totals: (principal).
    pub(crate) totals_of: &'static str,
    /// Takes `answers` and `bytes` off a principal's totals, never below
    /// zero: (answers, bytes, principal).
    pub(crate) totals_sub: &'static str,
    /// A principal's oldest finished answers: (principal, limit).
    pub(crate) oldest_of: &'static str,
    /// Finished answers past the retention, oldest first: (cutoff, limit).
    pub(crate) expired: &'static str,
    /// Running rows whose lease has passed: (now, limit).
    pub(crate) lapsed: &'static str,
    /// A finished answer's bytes, locked for its delete, where the
    /// dialect's `DELETE` cannot return them: (principal, key).
    pub(crate) lock_done: Option<&'static str>,
    /// One finished answer, returning its bytes unless `lock_done` read
    /// them: (principal, key).
    pub(crate) delete_done: &'static str,
    /// One running row whose lease has passed: (principal, key, now).
    pub(crate) delete_lapsed: &'static str,
}
