//! [`ReviewStore`] on the claim database (migrations 0003 and 0005): review
//! items, approvals and reviewer page logins are rows beside the claims, so every replica sees them, they
//! survive restarts, and a claim uses an approval in its own transaction.
//!
//! PostgreSQL and MySQL share one implementation, generic over the driver
//! (`PooledReview` over a `ReviewDialect`);
//! SQLite runs each write as one unit of the group-commit writer, whose
//! units run one at a time, and reads on the reader connections.
//!
//! A vote or a closing is one transaction with its audit entry, under a
//! lock on the item's row (`FOR UPDATE`; on SQLite the writer's own
//! serialisation). A request for approval needs no transaction: each of
//! its statements is atomic, and the unique `open_grant` column keeps one
//! live item per tuple however many retries race; the loop reads the
//! winner's row back.

#![cfg_attr(
    not(all(feature = "sqlite", feature = "postgres", feature = "mysql")),
    allow(dead_code, unused_imports)
)]

use toolgate::claim::{
    AuditEntry, CorruptRecord, Fingerprint, GrantUse, OperationKey, StoreError, StoreErrorKind,
    UnixMillis,
};
use toolgate::review::{
    Closed, Closing, ItemStatus, ListQuery, MAX_PAGE, NewItem, Opened, QueueLimits, Requested,
    ReviewItem, ReviewSession, ReviewStore, Verdict, Vote, Voted, check_reviewer, reviewer_audit,
};

#[cfg(any(feature = "postgres", feature = "mysql"))]
use std::future::Future;

#[cfg(any(feature = "postgres", feature = "mysql"))]
use crate::common::map_err;
#[cfg(feature = "mysql")]
use crate::mysql::MySqlClaimStore;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use crate::pooled::Dialect;
#[cfg(feature = "postgres")]
use crate::postgres::PgClaimStore;
#[cfg(feature = "sqlite")]
use crate::sqlite::{SqliteClaimStore, rusqlite};

/// How many times a request for approval re-reads after losing a race.
const REQUEST_ATTEMPTS: u32 = 8;

/// An item row's columns, in the order every `SELECT` here names them.
struct ItemRow {
    id: i64,
    created_at: i64,
    kind: String,
    reason: Option<String>,
    tool: Option<String>,
    proposer: String,
    proposer_via: Option<String>,
    key: Option<Vec<u8>>,
    fingerprint: Option<Vec<u8>>,
    version_seen: Option<String>,
    policy_digest: Option<String>,
    scope: Option<String>,
    decision: String,
    status: String,
    approvals_needed: i64,
    expires_at: Option<i64>,
    consumed_at: Option<i64>,
    closed_at: Option<i64>,
    closed_by: Option<String>,
    note: Option<String>,
    consumed_by: Option<String>,
}

/// An item row from an sqlx driver, in `SELECT` order: the one decoder
/// PostgreSQL and MySQL share.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn sqlx_item_row<R>(r: &R) -> Result<ItemRow, StoreError>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    i64: for<'d> sqlx::Decode<'d, R::Database> + sqlx::Type<R::Database>,
    i32: for<'d> sqlx::Decode<'d, R::Database> + sqlx::Type<R::Database>,
    String: for<'d> sqlx::Decode<'d, R::Database> + sqlx::Type<R::Database>,
    Vec<u8>: for<'d> sqlx::Decode<'d, R::Database> + sqlx::Type<R::Database>,
{
    (|| -> Result<ItemRow, sqlx::Error> {
        Ok(ItemRow {
            id: r.try_get(0)?,
            created_at: r.try_get(1)?,
            kind: r.try_get(2)?,
            reason: r.try_get(3)?,
            tool: r.try_get(4)?,
            proposer: r.try_get(5)?,
            proposer_via: r.try_get(6)?,
            key: r.try_get(7)?,
            fingerprint: r.try_get(8)?,
            version_seen: r.try_get(9)?,
            policy_digest: r.try_get(10)?,
            scope: r.try_get(11)?,
            decision: r.try_get(12)?,
            status: r.try_get(13)?,
            approvals_needed: i64::from(r.try_get::<i32, _>(14)?),
            expires_at: r.try_get(15)?,
            consumed_at: r.try_get(16)?,
            closed_at: r.try_get(17)?,
            closed_by: r.try_get(18)?,
            note: r.try_get(19)?,
            consumed_by: r.try_get(20)?,
        })
    })()
    .map_err(|e| map_err("reading a review item", e))
}

fn corrupt(e: CorruptRecord) -> StoreError {
    StoreError::new(StoreErrorKind::Corrupt, format!("review item: {e}"))
}

impl ItemRow {
    /// Validates a row: a status, key or fingerprint that does not read
    /// is a corrupt row, never shown.
    fn item(self, votes: Vec<Vote>) -> Result<ReviewItem, StoreError> {
        let bad = |field: &'static str, why: String| corrupt(CorruptRecord::new(field, why));
        let status = ItemStatus::parse(&self.status)
            .ok_or_else(|| bad("status", format!("unknown status {:?}", self.status)))?;
        let key = self
            .key
            .map(|k| OperationKey::from_slice(&k))
            .transpose()
            .map_err(|e| bad("operation_key", e.to_string()))?;
        let fingerprint = self
            .fingerprint
            .map(|f| Fingerprint::from_slice(&f))
            .transpose()
            .map_err(|e| bad("fingerprint", e.to_string()))?;
        Ok(ReviewItem {
            id: self.id,
            created_at: UnixMillis(self.created_at),
            kind: self.kind,
            reason: self.reason,
            tool: self.tool,
            proposer: self.proposer,
            proposer_via: self.proposer_via,
            key,
            fingerprint,
            version_seen: self.version_seen,
            policy_digest: self.policy_digest,
            scope: self.scope,
            decision: self.decision,
            status,
            approvals_needed: u32::try_from(self.approvals_needed)
                .map_err(|_| bad("approvals_needed", "out of range".into()))?,
            expires_at: self.expires_at.map(UnixMillis),
            consumed_at: self.consumed_at.map(UnixMillis),
            consumed_by: self.consumed_by,
            closed_at: self.closed_at.map(UnixMillis),
            closed_by: self.closed_by,
            note: self.note,
            votes,
        })
    }
}

fn vote_row(
    reviewer: String,
    verdict: &str,
    at: i64,
    note: Option<String>,
) -> Result<Vote, StoreError> {
    Ok(Vote {
        reviewer,
        verdict: Verdict::parse(verdict).ok_or_else(|| {
            corrupt(CorruptRecord::new(
                "verdict",
                format!("unknown verdict {verdict:?}"),
            ))
        })?,
        at: UnixMillis(at),
        note,
    })
}

/// What a vote does to its item, decided from the item read under lock.
enum VotePlan {
    Answer(Voted),
    /// Insert the vote; then close with this status if the count says so.
    Insert,
}

fn plan_vote(item: &ReviewItem, reviewer: &str, now: UnixMillis) -> VotePlan {
    if !item.is_approval() {
        return VotePlan::Answer(Voted::NotApproval);
    }
    let status = item.status_at(now);
    if status != ItemStatus::Open {
        return VotePlan::Answer(Voted::NotOpen(status));
    }
    if item.proposed_by(reviewer) {
        return VotePlan::Answer(Voted::SelfApproval);
    }
    if item.votes.iter().any(|v| v.reviewer == reviewer) {
        return VotePlan::Answer(Voted::AlreadyVoted);
    }
    VotePlan::Insert
}

/// The status a recorded vote leaves.
fn after_vote(verdict: Verdict, approvals: i64, needed: u32) -> ItemStatus {
    match verdict {
        Verdict::Deny => ItemStatus::Denied,
        Verdict::Approve if approvals >= i64::from(needed) => ItemStatus::Approved,
        Verdict::Approve => ItemStatus::Open,
    }
}

fn invalid(e: CorruptRecord) -> StoreError {
    StoreError::new(StoreErrorKind::Invariant, e.to_string())
}

fn audit_entry(
    item: &ReviewItem,
    reviewer: &str,
    outcome: &str,
    now: UnixMillis,
) -> Result<AuditEntry, StoreError> {
    reviewer_audit(item, reviewer, outcome, now).map_err(invalid)
}

/// The terms of an approval request, checked.
struct Ask<'a> {
    digest: [u8; 32],
    key: &'a OperationKey,
    fingerprint: &'a Fingerprint,
    version: &'a str,
    policy_digest: &'a str,
}

fn ask(item: &NewItem) -> Result<Ask<'_>, StoreError> {
    let missing = || {
        StoreError::new(
            StoreErrorKind::Invariant,
            "a request for approval needs a key, fingerprint, version and terms",
        )
    };
    let (key, fingerprint, version, terms) = item.approval_tuple().ok_or_else(missing)?;
    Ok(Ask {
        digest: item.grant_digest().ok_or_else(missing)?,
        key,
        fingerprint,
        version,
        policy_digest: &terms.policy_digest,
    })
}

/// What the live item found for a tuple means.
enum Live {
    Answer(Requested),
    /// Lapsed: mark it expired, then look again.
    Expire(i64),
}

fn judge_live(item: &ReviewItem, policy_digest: &str, now: UnixMillis) -> Live {
    match item.status_at(now) {
        ItemStatus::Approved if item.consumed_at.is_none() => {
            Live::Answer(Requested::Granted(GrantUse {
                item: item.id,
                policy_digest: policy_digest.to_owned(),
            }))
        }
        ItemStatus::Expired => Live::Expire(item.id),
        // Open; or approved and used (its claim exists, so nothing asks
        // again in practice).
        _ => Live::Answer(Requested::Pending {
            item: item.id,
            created: false,
        }),
    }
}

fn limit_of(query: &ListQuery) -> i64 {
    i64::from(query.limit.clamp(1, MAX_PAGE))
}

/// An item's columns, in the order [`ItemRow`] reads them.
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

/// The columns a new item is inserted with (the status is `open`).
macro_rules! insert_columns {
    () => {
        "(created_at, kind, reason, tool, proposer, proposer_via, operation_key, fingerprint, \
          version_seen, policy_digest, scope, decision, status, approvals_needed, expires_at, \
          open_grant, queue_principal, dedup, summary)"
    };
}

#[cfg(feature = "postgres")]
mod pg {
    pub(super) const SESSION_PURGE: &str =
        "DELETE FROM toolgate_review_sessions WHERE expires_at <= $1";
    pub(super) const SESSION_INSERT: &str = "INSERT INTO toolgate_review_sessions \
        (token_sha256, principal, csrf, expires_at) VALUES ($1, $2, $3, $4)";
    pub(super) const SESSION_GET: &str = "SELECT principal, csrf, expires_at \
        FROM toolgate_review_sessions WHERE token_sha256 = $1 AND expires_at > $2";
    pub(super) const SESSION_DELETE: &str =
        "DELETE FROM toolgate_review_sessions WHERE token_sha256 = $1";
    pub(super) const BY_GRANT: &str = concat!(
        "SELECT ",
        item_columns!(),
        " FROM toolgate_review_items WHERE open_grant = $1"
    );
    pub(super) const BY_ID: &str = concat!(
        "SELECT ",
        item_columns!(),
        " FROM toolgate_review_items WHERE id = $1"
    );
    pub(super) const BY_ID_LOCKED: &str = concat!(
        "SELECT ",
        item_columns!(),
        " FROM toolgate_review_items WHERE id = $1 FOR UPDATE"
    );
    pub(super) const LIST: &str = concat!(
        "SELECT ",
        listed_columns!(),
        " FROM toolgate_review_items WHERE ($1::BIGINT IS NULL OR id < $1) \
        AND ($2::TEXT IS NULL OR status = $2) AND ($3::TEXT IS NULL OR kind = $3) \
        ORDER BY id DESC LIMIT $4"
    );
    pub(super) const DENIED: &str = "SELECT id, closed_by FROM toolgate_review_items \
        WHERE operation_key = $1 AND fingerprint = $2 AND version_seen = $3 AND policy_digest = $4 \
        AND status = 'denied' ORDER BY id DESC LIMIT 1";
    pub(super) const BY_DEDUP: &str = "SELECT id FROM toolgate_review_items WHERE dedup = $1";
    pub(super) const EXPIRE_ONE: &str = "UPDATE toolgate_review_items SET status = 'expired', open_grant = NULL \
        WHERE id = $1 AND status IN ('open', 'approved') AND consumed_at IS NULL AND expires_at <= $2";
    pub(super) const EXPIRE_ALL: &str = "UPDATE toolgate_review_items SET status = 'expired', open_grant = NULL \
        WHERE status IN ('open', 'approved') AND consumed_at IS NULL AND expires_at <= $1";
    /// A clash on `open_grant` or `dedup` inserts nothing and returns no row.
    pub(super) const INSERT: &str = concat!(
        "INSERT INTO toolgate_review_items ",
        insert_columns!(),
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'open', $13, $14, $15, \
        $16, $17, $18) ON CONFLICT DO NOTHING RETURNING id"
    );
    /// Open items of one queue principal, counted up to a cap: binds
    /// principal, now, cap.
    pub(super) const OPEN_OF: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM toolgate_review_items \
        WHERE queue_principal = $1 AND status = 'open' AND (expires_at IS NULL OR expires_at > $2) \
        LIMIT $3) t";
    /// Open items, counted up to a cap: binds now, cap.
    pub(super) const OPEN_ALL: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM toolgate_review_items \
        WHERE status = 'open' AND (expires_at IS NULL OR expires_at > $1) LIMIT $2) t";
    pub(super) const VOTES: &str = "SELECT reviewer, verdict, at, note FROM toolgate_review_votes \
        WHERE item_id = $1 ORDER BY at, reviewer";
    pub(super) const INSERT_VOTE: &str = "INSERT INTO toolgate_review_votes (item_id, reviewer, verdict, at, note) \
        VALUES ($1, $2, $3, $4, $5)";
    pub(super) const COUNT_APPROVALS: &str = "SELECT COUNT(*) FROM toolgate_review_votes \
        WHERE item_id = $1 AND verdict = 'approve'";
    pub(super) const CLOSE: &str = "UPDATE toolgate_review_items SET status = $1, closed_at = $2, \
        closed_by = $3, note = $4, open_grant = CASE WHEN $1 = 'approved' THEN open_grant ELSE NULL END \
        WHERE id = $5";
    pub(super) const OPEN_COUNT: &str = "SELECT COUNT(*) FROM toolgate_review_items \
        WHERE status = 'open' AND (expires_at IS NULL OR expires_at > $1)";
    pub(super) const AUDIT: &str = "INSERT INTO toolgate_audit \
        (at, actor, tool, outcome, reason, operation_key, fingerprint, via) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
}

/// The same statements with `?` placeholders (MySQL, SQLite): each `$n`
/// becomes `?`, and a repeated `$n` is bound again.
mod qmark {
    pub(super) const SESSION_PURGE: &str =
        "DELETE FROM toolgate_review_sessions WHERE expires_at <= ?";
    pub(super) const SESSION_INSERT: &str = "INSERT INTO toolgate_review_sessions \
        (token_sha256, principal, csrf, expires_at) VALUES (?, ?, ?, ?)";
    pub(super) const SESSION_GET: &str = "SELECT principal, csrf, expires_at \
        FROM toolgate_review_sessions WHERE token_sha256 = ? AND expires_at > ?";
    pub(super) const SESSION_DELETE: &str =
        "DELETE FROM toolgate_review_sessions WHERE token_sha256 = ?";
    pub(super) const BY_GRANT: &str = concat!(
        "SELECT ",
        item_columns!(),
        " FROM toolgate_review_items WHERE open_grant = ?"
    );
    pub(super) const BY_ID: &str = concat!(
        "SELECT ",
        item_columns!(),
        " FROM toolgate_review_items WHERE id = ?"
    );
    pub(super) const BY_ID_LOCKED: &str = concat!(
        "SELECT ",
        item_columns!(),
        " FROM toolgate_review_items WHERE id = ? FOR UPDATE"
    );
    /// Binds: before, before, status, status, kind, kind, limit.
    pub(super) const LIST: &str = concat!(
        "SELECT ",
        listed_columns!(),
        " FROM toolgate_review_items WHERE (? IS NULL OR id < ?) \
        AND (? IS NULL OR status = ?) AND (? IS NULL OR kind = ?) \
        ORDER BY id DESC LIMIT ?"
    );
    pub(super) const DENIED: &str = "SELECT id, closed_by FROM toolgate_review_items \
        WHERE operation_key = ? AND fingerprint = ? AND version_seen = ? AND policy_digest = ? \
        AND status = 'denied' ORDER BY id DESC LIMIT 1";
    pub(super) const BY_DEDUP: &str = "SELECT id FROM toolgate_review_items WHERE dedup = ?";
    pub(super) const EXPIRE_ONE: &str = "UPDATE toolgate_review_items SET status = 'expired', open_grant = NULL \
        WHERE id = ? AND status IN ('open', 'approved') AND consumed_at IS NULL AND expires_at <= ?";
    pub(super) const EXPIRE_ALL: &str = "UPDATE toolgate_review_items SET status = 'expired', open_grant = NULL \
        WHERE status IN ('open', 'approved') AND consumed_at IS NULL AND expires_at <= ?";
    /// MySQL: a clash on `open_grant` or `dedup` changes nothing (`id = id`).
    pub(super) const INSERT_MYSQL: &str = concat!(
        "INSERT INTO toolgate_review_items ",
        insert_columns!(),
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'open', ?, ?, ?, ?, ?, ?) \
        ON DUPLICATE KEY UPDATE id = id"
    );
    /// SQLite: a clash on `open_grant` or `dedup` inserts nothing.
    pub(super) const INSERT_SQLITE: &str = concat!(
        "INSERT INTO toolgate_review_items ",
        insert_columns!(),
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'open', ?, ?, ?, ?, ?, ?) \
        ON CONFLICT DO NOTHING"
    );
    /// Binds: principal, now, cap.
    pub(super) const OPEN_OF: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM toolgate_review_items \
        WHERE queue_principal = ? AND status = 'open' AND (expires_at IS NULL OR expires_at > ?) \
        LIMIT ?) t";
    /// Binds: now, cap.
    pub(super) const OPEN_ALL: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM toolgate_review_items \
        WHERE status = 'open' AND (expires_at IS NULL OR expires_at > ?) LIMIT ?) t";
    pub(super) const VOTES: &str = "SELECT reviewer, verdict, at, note FROM toolgate_review_votes \
        WHERE item_id = ? ORDER BY at, reviewer";
    pub(super) const INSERT_VOTE: &str = "INSERT INTO toolgate_review_votes (item_id, reviewer, verdict, at, note) \
        VALUES (?, ?, ?, ?, ?)";
    pub(super) const COUNT_APPROVALS: &str = "SELECT COUNT(*) FROM toolgate_review_votes \
        WHERE item_id = ? AND verdict = 'approve'";
    /// Binds: status, closed_at, closed_by, note, status, id.
    pub(super) const CLOSE: &str = "UPDATE toolgate_review_items SET status = ?, closed_at = ?, \
        closed_by = ?, note = ?, open_grant = CASE WHEN ? = 'approved' THEN open_grant ELSE NULL END \
        WHERE id = ?";
    pub(super) const OPEN_COUNT: &str = "SELECT COUNT(*) FROM toolgate_review_items \
        WHERE status = 'open' AND (expires_at IS NULL OR expires_at > ?)";
    pub(super) const AUDIT: &str = "INSERT INTO toolgate_audit \
        (at, actor, tool, outcome, reason, operation_key, fingerprint, via) \
        VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
}

/// The new item's columns, bound in INSERT order (all but the status).
#[derive(Clone)]
struct Insert {
    created_at: i64,
    kind: String,
    reason: Option<String>,
    tool: Option<String>,
    proposer: String,
    proposer_via: Option<String>,
    key: Option<Vec<u8>>,
    fingerprint: Option<Vec<u8>>,
    version_seen: Option<String>,
    policy_digest: Option<String>,
    scope: Option<String>,
    decision: String,
    approvals_needed: i32,
    expires_at: Option<i64>,
    open_grant: Option<Vec<u8>>,
    queue_principal: String,
    dedup: Option<Vec<u8>>,
    summary: String,
}

/// The row for `item`: an approval item with its `grant` digest, or
/// another item with its rejection `dedup` digest.
fn insert_of(item: NewItem, grant: Option<[u8; 32]>, dedup: Option<[u8; 32]>) -> Insert {
    let (policy_digest, approvals_needed, expires_at) = match &item.approval {
        Some(t) if grant.is_some() => (
            Some(t.policy_digest.clone()),
            i32::try_from(t.approvers.max(1)).unwrap_or(i32::MAX),
            Some(t.expires_at.0),
        ),
        _ => (None, 0, None),
    };
    let queue_principal = item.queue_principal().to_owned();
    let summary = item.summary();
    Insert {
        created_at: item.at.0,
        kind: item.kind,
        reason: item.reason,
        tool: item.tool,
        proposer: item.proposer,
        proposer_via: item.proposer_via,
        key: item.key.map(|k| k.as_bytes().to_vec()),
        fingerprint: item.fingerprint.map(|f| f.as_bytes().to_vec()),
        version_seen: item.version_seen,
        policy_digest,
        scope: item.scope,
        decision: item.decision,
        approvals_needed,
        expires_at,
        open_grant: grant.map(|g| g.to_vec()),
        queue_principal,
        dedup: dedup.map(|d| d.to_vec()),
        summary,
    }
}

/// The statements of [`ReviewStore`] on a pooled driver, and the three
/// steps whose form differs between PostgreSQL and MySQL.
#[cfg(any(feature = "postgres", feature = "mysql"))]
trait ReviewDialect: Dialect {
    const SESSION_PURGE: &'static str;
    const SESSION_INSERT: &'static str;
    const SESSION_GET: &'static str;
    const SESSION_DELETE: &'static str;
    const BY_GRANT: &'static str;
    const BY_ID: &'static str;
    const BY_ID_LOCKED: &'static str;
    const DENIED: &'static str;
    const BY_DEDUP: &'static str;
    const OPEN_OF: &'static str;
    const OPEN_ALL: &'static str;
    const EXPIRE_ONE: &'static str;
    const EXPIRE_ALL: &'static str;
    const VOTES: &'static str;
    const INSERT_VOTE: &'static str;
    const COUNT_APPROVALS: &'static str;
    const OPEN_COUNT: &'static str;
    const AUDIT: &'static str;
    /// An item: a clash on `open_grant` or `dedup` inserts nothing.
    const INSERT: &'static str;

    /// One page of items.
    fn list(
        pool: &sqlx::Pool<Self>,
        query: &ListQuery,
    ) -> impl Future<Output = Result<Vec<ItemRow>, StoreError>> + Send;

    /// Closes an item inside the caller's transaction.
    fn close(
        tx: &mut Self::Connection,
        status: &str,
        at: i64,
        by: &str,
        note: Option<&str>,
        id: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Runs an item insert: the new id, or `None` when a clash inserted
    /// nothing.
    fn insert_id(
        pool: &sqlx::Pool<Self>,
        q: sqlx::query::Query<'static, Self, Self::Arguments>,
    ) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;
}

/// [`ReviewStore`] on a pooled driver: one implementation for PostgreSQL
/// and MySQL, which their stores delegate to.
#[cfg(any(feature = "postgres", feature = "mysql"))]
struct PooledReview<'p, DB: sqlx::Database> {
    pool: &'p sqlx::Pool<DB>,
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl<DB> PooledReview<'_, DB>
where
    DB: ReviewDialect,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> &'a [u8]: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<&'a [u8]>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    String: for<'a> sqlx::Encode<'a, DB> + for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    Option<String>: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Vec<u8>: for<'a> sqlx::Encode<'a, DB> + for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    Option<Vec<u8>>: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: for<'a> sqlx::Encode<'a, DB> + for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    Option<i64>: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i32: for<'a> sqlx::Encode<'a, DB> + for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    for<'r> (String, String, i64, Option<String>): sqlx::FromRow<'r, DB::Row>,
    for<'r> (String, String, i64): sqlx::FromRow<'r, DB::Row>,
    for<'r> (i64, Option<String>): sqlx::FromRow<'r, DB::Row>,
    for<'r> (i64,): sqlx::FromRow<'r, DB::Row>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    async fn review_row<'e, E>(
        exec: E,
        sql: &'static str,
        bind: impl FnOnce(
            sqlx::query::Query<'static, DB, <DB as sqlx::Database>::Arguments>,
        ) -> sqlx::query::Query<'static, DB, <DB as sqlx::Database>::Arguments>,
    ) -> Result<Option<ItemRow>, StoreError>
    where
        E: sqlx::Executor<'e, Database = DB>,
    {
        let row = bind(sqlx::query(sql))
            .fetch_optional(exec)
            .await
            .map_err(|e| map_err("reading a review item", e))?;
        row.as_ref().map(sqlx_item_row).transpose()
    }

    async fn review_votes<'e, E>(exec: E, id: i64) -> Result<Vec<Vote>, StoreError>
    where
        E: sqlx::Executor<'e, Database = DB>,
    {
        let rows: Vec<(String, String, i64, Option<String>)> = sqlx::query_as(DB::VOTES)
            .bind(id)
            .fetch_all(exec)
            .await
            .map_err(|e| map_err("reading review votes", e))?;
        rows.into_iter()
            .map(|(r, v, at, note)| vote_row(r, &v, at, note))
            .collect()
    }

    async fn review_full(&self, row: ItemRow) -> Result<ReviewItem, StoreError> {
        let votes = if row.approvals_needed > 0 {
            Self::review_votes(self.pool, row.id).await?
        } else {
            Vec::new()
        };
        row.item(votes)
    }

    async fn review_insert(&self, v: Insert) -> Result<Option<i64>, StoreError> {
        let q = sqlx::query(DB::INSERT)
            .bind(v.created_at)
            .bind(v.kind)
            .bind(v.reason)
            .bind(v.tool)
            .bind(v.proposer)
            .bind(v.proposer_via)
            .bind(v.key)
            .bind(v.fingerprint)
            .bind(v.version_seen)
            .bind(v.policy_digest)
            .bind(v.scope)
            .bind(v.decision)
            .bind(v.approvals_needed)
            .bind(v.expires_at)
            .bind(v.open_grant)
            .bind(v.queue_principal)
            .bind(v.dedup)
            .bind(v.summary);
        DB::insert_id(self.pool, q).await
    }

    /// Whether one more open item for `principal` stays within `limits`:
    /// each count stops at its cap, so the work is bounded by the caps
    /// whatever the table holds. Not atomic with the insert that follows:
    /// concurrent openings on several connections may pass a cap by at most
    /// their number (docs/http-api.md).
    async fn room(
        &self,
        principal: &str,
        limits: &QueueLimits,
        now: UnixMillis,
    ) -> Result<bool, StoreError> {
        let what = "counting open review items";
        let cap = |c: u64| i64::try_from(c).unwrap_or(i64::MAX);
        let theirs: i64 = sqlx::query_scalar(DB::OPEN_OF)
            .bind(principal)
            .bind(now.0)
            .bind(cap(limits.per_principal))
            .fetch_one(self.pool)
            .await
            .map_err(|e| map_err(what, e))?;
        if theirs >= cap(limits.per_principal) {
            return Ok(false);
        }
        let all: i64 = sqlx::query_scalar(DB::OPEN_ALL)
            .bind(now.0)
            .bind(cap(limits.total))
            .fetch_one(self.pool)
            .await
            .map_err(|e| map_err(what, e))?;
        Ok(all < cap(limits.total))
    }

    async fn by_dedup(&self, dedup: &[u8; 32]) -> Result<Option<i64>, StoreError> {
        sqlx::query_scalar(DB::BY_DEDUP)
            .bind(dedup.to_vec())
            .fetch_optional(self.pool)
            .await
            .map_err(|e| map_err("reading a rejection's review item", e))
    }

    async fn open_session(
        &self,
        digest: [u8; 32],
        session: ReviewSession,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        sqlx::query(DB::SESSION_PURGE)
            .bind(now.0)
            .execute(self.pool)
            .await
            .map_err(|e| map_err("purging reviewer sessions", e))?;
        sqlx::query(DB::SESSION_INSERT)
            .bind(digest.to_vec())
            .bind(session.principal)
            .bind(session.csrf)
            .bind(session.expires_at.0)
            .execute(self.pool)
            .await
            .map_err(|e| map_err("opening a reviewer session", e))?;
        Ok(())
    }

    async fn session(
        &self,
        digest: [u8; 32],
        now: UnixMillis,
    ) -> Result<Option<ReviewSession>, StoreError> {
        let row: Option<(String, String, i64)> = sqlx::query_as(DB::SESSION_GET)
            .bind(digest.to_vec())
            .bind(now.0)
            .fetch_optional(self.pool)
            .await
            .map_err(|e| map_err("reading a reviewer session", e))?;
        Ok(row.map(|(principal, csrf, expires_at)| ReviewSession {
            principal,
            csrf,
            expires_at: UnixMillis(expires_at),
        }))
    }

    async fn close_session(&self, digest: [u8; 32]) -> Result<(), StoreError> {
        sqlx::query(DB::SESSION_DELETE)
            .bind(digest.to_vec())
            .execute(self.pool)
            .await
            .map_err(|e| map_err("closing a reviewer session", e))?;
        Ok(())
    }

    async fn open_item(&self, item: NewItem, limits: &QueueLimits) -> Result<Opened, StoreError> {
        let dedup = item.dedup(limits.rejection_window_ms);
        if let Some(d) = &dedup
            && let Some(id) = self.by_dedup(d).await?
        {
            return Ok(Opened::Existing(id));
        }
        if !self.room(item.queue_principal(), limits, item.at).await? {
            return Ok(Opened::Full);
        }
        let inserted = self.review_insert(insert_of(item, None, dedup)).await?;
        let Some(d) = dedup else {
            return inserted.map(Opened::Created).ok_or_else(|| {
                StoreError::new(StoreErrorKind::Database, "no id for a new review item")
            });
        };
        // A clash on `dedup` inserted nothing: the racing request's item
        // is this rejection's.
        match self.by_dedup(&d).await? {
            Some(id) if inserted == Some(id) => Ok(Opened::Created(id)),
            Some(id) => Ok(Opened::Existing(id)),
            None => Err(StoreError::new(
                StoreErrorKind::Database,
                "a rejection's review item is neither new nor found",
            )),
        }
    }

    async fn request_approval(
        &self,
        item: NewItem,
        now: UnixMillis,
        limits: &QueueLimits,
    ) -> Result<Requested, StoreError> {
        let a = ask(&item)?;
        let (digest, key, fingerprint) = (a.digest, *a.key, *a.fingerprint);
        let (version, policy_digest) = (a.version.to_owned(), a.policy_digest.to_owned());
        let row = insert_of(item.clone(), Some(digest), None);
        // The id this call inserted, if it did: the row read back by
        // its grant is then this call's.
        let mut inserted = None;
        for _ in 0..REQUEST_ATTEMPTS {
            let live =
                Self::review_row(self.pool, DB::BY_GRANT, |q| q.bind(digest.to_vec())).await?;
            if let Some(row) = live {
                let live = self.review_full(row).await?;
                match judge_live(&live, &policy_digest, now) {
                    Live::Answer(Requested::Pending { item, .. }) => {
                        return Ok(Requested::Pending {
                            item,
                            created: inserted == Some(item),
                        });
                    }
                    Live::Answer(r) => return Ok(r),
                    Live::Expire(id) => {
                        sqlx::query(DB::EXPIRE_ONE)
                            .bind(id)
                            .bind(now.0)
                            .execute(self.pool)
                            .await
                            .map_err(|e| map_err("expiring a review item", e))?;
                        continue;
                    }
                }
            }
            let denied: Option<(i64, Option<String>)> = sqlx::query_as(DB::DENIED)
                .bind(key.as_bytes().as_slice())
                .bind(fingerprint.as_bytes().as_slice())
                .bind(version.as_str())
                .bind(policy_digest.as_str())
                .fetch_optional(self.pool)
                .await
                .map_err(|e| map_err("reading a denial", e))?;
            if let Some((item, by)) = denied {
                return Ok(Requested::Denied { item, by });
            }
            if inserted.is_none() && !self.room(item.queue_principal(), limits, now).await? {
                return Ok(Requested::QueueFull);
            }
            // A clash on `open_grant` inserts nothing; either way the
            // live row is read back by its grant.
            inserted = self.review_insert(row.clone()).await?;
        }
        Err(StoreError::new(
            StoreErrorKind::Contention,
            "a request for approval kept losing races",
        ))
    }

    async fn item(&self, id: i64, now: UnixMillis) -> Result<Option<ReviewItem>, StoreError> {
        sqlx::query(DB::EXPIRE_ONE)
            .bind(id)
            .bind(now.0)
            .execute(self.pool)
            .await
            .map_err(|e| map_err("expiring a review item", e))?;
        match Self::review_row(self.pool, DB::BY_ID, |q| q.bind(id)).await? {
            Some(row) => self.review_full(row).await.map(Some),
            None => Ok(None),
        }
    }

    async fn list_items(
        &self,
        query: &ListQuery,
        now: UnixMillis,
    ) -> Result<Vec<ReviewItem>, StoreError> {
        sqlx::query(DB::EXPIRE_ALL)
            .bind(now.0)
            .execute(self.pool)
            .await
            .map_err(|e| map_err("expiring review items", e))?;
        let rows = DB::list(self.pool, query).await?;
        let mut items = Vec::with_capacity(rows.len());
        for row in rows {
            items.push(self.review_full(row).await?);
        }
        Ok(items)
    }

    async fn open_items(&self, now: UnixMillis) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar(DB::OPEN_COUNT)
            .bind(now.0)
            .fetch_one(self.pool)
            .await
            .map_err(|e| map_err("counting open review items", e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn vote(
        &self,
        id: i64,
        reviewer: &str,
        verdict: Verdict,
        note: Option<&str>,
        now: UnixMillis,
    ) -> Result<Voted, StoreError> {
        check_reviewer(reviewer, note).map_err(invalid)?;
        let what = "recording a review vote";
        let mut tx = self.pool.begin().await.map_err(|e| map_err(what, e))?;
        let Some(row) = Self::review_row(&mut *tx, DB::BY_ID_LOCKED, |q| q.bind(id)).await? else {
            return Ok(Voted::NotFound);
        };
        let votes = Self::review_votes(&mut *tx, id).await?;
        let item = row.item(votes)?;
        if let VotePlan::Answer(a) = plan_vote(&item, reviewer, now) {
            if a == Voted::NotOpen(ItemStatus::Expired) {
                sqlx::query(DB::EXPIRE_ONE)
                    .bind(id)
                    .bind(now.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| map_err(what, e))?;
                tx.commit().await.map_err(|e| map_err(what, e))?;
            }
            return Ok(a);
        }
        sqlx::query(DB::INSERT_VOTE)
            .bind(id)
            .bind(reviewer)
            .bind(verdict.as_str())
            .bind(now.0)
            .bind(note)
            .execute(&mut *tx)
            .await
            .map_err(|e| map_err(what, e))?;
        let approvals: i64 = sqlx::query_scalar(DB::COUNT_APPROVALS)
            .bind(id)
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| map_err(what, e))?;
        let status = after_vote(verdict, approvals, item.approvals_needed);
        if status != ItemStatus::Open {
            DB::close(&mut *tx, status.as_str(), now.0, reviewer, note, id).await?;
        }
        let entry = audit_entry(&item, reviewer, verdict.audit_outcome(), now)?;
        Self::review_audit(&mut *tx, &entry).await?;
        tx.commit().await.map_err(|e| map_err(what, e))?;
        Ok(Voted::Recorded(status))
    }

    async fn close(
        &self,
        id: i64,
        reviewer: &str,
        closing: Closing,
        note: Option<&str>,
        now: UnixMillis,
    ) -> Result<Closed, StoreError> {
        check_reviewer(reviewer, note).map_err(invalid)?;
        let what = "closing a review item";
        let mut tx = self.pool.begin().await.map_err(|e| map_err(what, e))?;
        let Some(row) = Self::review_row(&mut *tx, DB::BY_ID_LOCKED, |q| q.bind(id)).await? else {
            return Ok(Closed::NotFound);
        };
        let item = row.item(Vec::new())?;
        if item.is_approval() {
            return Ok(Closed::IsApproval);
        }
        if item.status != ItemStatus::Open {
            return Ok(Closed::NotOpen(item.status));
        }
        let status = closing.status();
        DB::close(&mut *tx, status.as_str(), now.0, reviewer, note, id).await?;
        let entry = audit_entry(&item, reviewer, status.as_str(), now)?;
        Self::review_audit(&mut *tx, &entry).await?;
        tx.commit().await.map_err(|e| map_err(what, e))?;
        Ok(Closed::Done)
    }

    async fn review_audit<'e, E>(exec: E, e: &AuditEntry) -> Result<(), StoreError>
    where
        E: sqlx::Executor<'e, Database = DB>,
    {
        sqlx::query(DB::AUDIT)
            .bind(e.at().0)
            .bind(e.actor())
            .bind(e.tool())
            .bind(e.outcome())
            .bind(e.reason())
            .bind(e.key().map(|k| k.as_bytes().as_slice()))
            .bind(e.fingerprint().map(|f| f.as_bytes().as_slice()))
            .bind(e.via())
            .execute(exec)
            .await
            .map(drop)
            .map_err(|e| map_err("appending a reviewer's audit entry", e))
    }
}

#[cfg(feature = "postgres")]
async fn pg_insert_id(
    pool: &sqlx::PgPool,
    q: sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> Result<Option<i64>, StoreError> {
    use sqlx::Row;
    // The statement has RETURNING only when it cannot clash (open_item);
    // the ON CONFLICT form answers no row on a clash.
    let row = q
        .fetch_optional(pool)
        .await
        .map_err(|e| map_err("opening a review item", e))?;
    row.map(|r| r.try_get::<i64, _>(0))
        .transpose()
        .map_err(|e| map_err("opening a review item", e))
}

#[cfg(feature = "mysql")]
async fn mysql_insert_id(
    pool: &sqlx::MySqlPool,
    q: sqlx::query::Query<'static, sqlx::MySql, sqlx::mysql::MySqlArguments>,
) -> Result<Option<i64>, StoreError> {
    let done = q
        .execute(pool)
        .await
        .map_err(|e| map_err("opening a review item", e))?;
    // Never the affected-row count (sqlx sets CLIENT_FOUND_ROWS): the
    // caller reads the live row back by its grant, and this id only says
    // whether that row is the one inserted here (a clash inserts none).
    Ok(i64::try_from(done.last_insert_id())
        .ok()
        .filter(|id| *id > 0))
}

#[cfg(feature = "postgres")]
async fn pg_list(pool: &sqlx::PgPool, query: &ListQuery) -> Result<Vec<ItemRow>, StoreError> {
    let rows = sqlx::query(pg::LIST)
        .bind(query.before)
        .bind(query.status.map(ItemStatus::as_str))
        .bind(query.kind.as_deref())
        .bind(limit_of(query))
        .fetch_all(pool)
        .await
        .map_err(|e| map_err("listing review items", e))?;
    rows.iter().map(sqlx_item_row).collect()
}

#[cfg(feature = "mysql")]
async fn mysql_list(pool: &sqlx::MySqlPool, query: &ListQuery) -> Result<Vec<ItemRow>, StoreError> {
    let status = query.status.map(ItemStatus::as_str);
    let rows = sqlx::query(qmark::LIST)
        .bind(query.before)
        .bind(query.before)
        .bind(status)
        .bind(status)
        .bind(query.kind.as_deref())
        .bind(query.kind.as_deref())
        .bind(limit_of(query))
        .fetch_all(pool)
        .await
        .map_err(|e| map_err("listing review items", e))?;
    rows.iter().map(sqlx_item_row).collect()
}

#[cfg(feature = "postgres")]
async fn pg_close(
    tx: &mut sqlx::PgConnection,
    status: &str,
    at: i64,
    by: &str,
    note: Option<&str>,
    id: i64,
) -> Result<(), StoreError> {
    sqlx::query(pg::CLOSE)
        .bind(status)
        .bind(at)
        .bind(by)
        .bind(note)
        .bind(id)
        .execute(tx)
        .await
        .map(drop)
        .map_err(|e| map_err("closing a review item", e))
}

#[cfg(feature = "mysql")]
async fn mysql_close(
    tx: &mut sqlx::MySqlConnection,
    status: &str,
    at: i64,
    by: &str,
    note: Option<&str>,
    id: i64,
) -> Result<(), StoreError> {
    sqlx::query(qmark::CLOSE)
        .bind(status)
        .bind(at)
        .bind(by)
        .bind(note)
        .bind(status)
        .bind(id)
        .execute(tx)
        .await
        .map(drop)
        .map_err(|e| map_err("closing a review item", e))
}

#[cfg(feature = "postgres")]
impl ReviewDialect for sqlx::Postgres {
    const SESSION_PURGE: &'static str = pg::SESSION_PURGE;
    const SESSION_INSERT: &'static str = pg::SESSION_INSERT;
    const SESSION_GET: &'static str = pg::SESSION_GET;
    const SESSION_DELETE: &'static str = pg::SESSION_DELETE;
    const BY_GRANT: &'static str = pg::BY_GRANT;
    const BY_ID: &'static str = pg::BY_ID;
    const BY_ID_LOCKED: &'static str = pg::BY_ID_LOCKED;
    const DENIED: &'static str = pg::DENIED;
    const BY_DEDUP: &'static str = pg::BY_DEDUP;
    const OPEN_OF: &'static str = pg::OPEN_OF;
    const OPEN_ALL: &'static str = pg::OPEN_ALL;
    const EXPIRE_ONE: &'static str = pg::EXPIRE_ONE;
    const EXPIRE_ALL: &'static str = pg::EXPIRE_ALL;
    const VOTES: &'static str = pg::VOTES;
    const INSERT_VOTE: &'static str = pg::INSERT_VOTE;
    const COUNT_APPROVALS: &'static str = pg::COUNT_APPROVALS;
    const OPEN_COUNT: &'static str = pg::OPEN_COUNT;
    const AUDIT: &'static str = pg::AUDIT;
    const INSERT: &'static str = pg::INSERT;

    async fn list(pool: &sqlx::PgPool, query: &ListQuery) -> Result<Vec<ItemRow>, StoreError> {
        pg_list(pool, query).await
    }

    async fn close(
        tx: &mut sqlx::PgConnection,
        status: &str,
        at: i64,
        by: &str,
        note: Option<&str>,
        id: i64,
    ) -> Result<(), StoreError> {
        pg_close(tx, status, at, by, note, id).await
    }

    async fn insert_id(
        pool: &sqlx::PgPool,
        q: sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Option<i64>, StoreError> {
        pg_insert_id(pool, q).await
    }
}

#[cfg(feature = "postgres")]
impl PgClaimStore {
    fn review(&self) -> PooledReview<'_, sqlx::Postgres> {
        PooledReview { pool: self.pool() }
    }
}

/// The review queue of a pooled backend: every method is its
/// [`PooledReview`]'s, so PostgreSQL and MySQL share one body.
#[cfg(any(feature = "postgres", feature = "mysql"))]
macro_rules! pooled_review_store {
    ($store:ty) => {
        impl ReviewStore for $store {
            async fn open_session(
                &self,
                digest: [u8; 32],
                session: ReviewSession,
                now: UnixMillis,
            ) -> Result<(), StoreError> {
                self.review().open_session(digest, session, now).await
            }

            async fn session(
                &self,
                digest: [u8; 32],
                now: UnixMillis,
            ) -> Result<Option<ReviewSession>, StoreError> {
                self.review().session(digest, now).await
            }

            async fn close_session(&self, digest: [u8; 32]) -> Result<(), StoreError> {
                self.review().close_session(digest).await
            }

            async fn open_item(
                &self,
                item: NewItem,
                limits: &QueueLimits,
            ) -> Result<Opened, StoreError> {
                self.review().open_item(item, limits).await
            }

            async fn request_approval(
                &self,
                item: NewItem,
                now: UnixMillis,
                limits: &QueueLimits,
            ) -> Result<Requested, StoreError> {
                self.review().request_approval(item, now, limits).await
            }

            async fn item(
                &self,
                id: i64,
                now: UnixMillis,
            ) -> Result<Option<ReviewItem>, StoreError> {
                self.review().item(id, now).await
            }

            async fn list_items(
                &self,
                query: &ListQuery,
                now: UnixMillis,
            ) -> Result<Vec<ReviewItem>, StoreError> {
                self.review().list_items(query, now).await
            }

            async fn open_items(&self, now: UnixMillis) -> Result<u64, StoreError> {
                self.review().open_items(now).await
            }

            async fn vote(
                &self,
                id: i64,
                reviewer: &str,
                verdict: Verdict,
                note: Option<&str>,
                now: UnixMillis,
            ) -> Result<Voted, StoreError> {
                self.review().vote(id, reviewer, verdict, note, now).await
            }

            async fn close(
                &self,
                id: i64,
                reviewer: &str,
                closing: Closing,
                note: Option<&str>,
                now: UnixMillis,
            ) -> Result<Closed, StoreError> {
                self.review().close(id, reviewer, closing, note, now).await
            }
        }
    };
}

#[cfg(feature = "postgres")]
pooled_review_store!(PgClaimStore);

#[cfg(feature = "mysql")]
impl ReviewDialect for sqlx::MySql {
    const SESSION_PURGE: &'static str = qmark::SESSION_PURGE;
    const SESSION_INSERT: &'static str = qmark::SESSION_INSERT;
    const SESSION_GET: &'static str = qmark::SESSION_GET;
    const SESSION_DELETE: &'static str = qmark::SESSION_DELETE;
    const BY_GRANT: &'static str = qmark::BY_GRANT;
    const BY_ID: &'static str = qmark::BY_ID;
    const BY_ID_LOCKED: &'static str = qmark::BY_ID_LOCKED;
    const DENIED: &'static str = qmark::DENIED;
    const BY_DEDUP: &'static str = qmark::BY_DEDUP;
    const OPEN_OF: &'static str = qmark::OPEN_OF;
    const OPEN_ALL: &'static str = qmark::OPEN_ALL;
    const EXPIRE_ONE: &'static str = qmark::EXPIRE_ONE;
    const EXPIRE_ALL: &'static str = qmark::EXPIRE_ALL;
    const VOTES: &'static str = qmark::VOTES;
    const INSERT_VOTE: &'static str = qmark::INSERT_VOTE;
    const COUNT_APPROVALS: &'static str = qmark::COUNT_APPROVALS;
    const OPEN_COUNT: &'static str = qmark::OPEN_COUNT;
    const AUDIT: &'static str = qmark::AUDIT;
    const INSERT: &'static str = qmark::INSERT_MYSQL;

    async fn list(pool: &sqlx::MySqlPool, query: &ListQuery) -> Result<Vec<ItemRow>, StoreError> {
        mysql_list(pool, query).await
    }

    async fn close(
        tx: &mut sqlx::MySqlConnection,
        status: &str,
        at: i64,
        by: &str,
        note: Option<&str>,
        id: i64,
    ) -> Result<(), StoreError> {
        mysql_close(tx, status, at, by, note, id).await
    }

    async fn insert_id(
        pool: &sqlx::MySqlPool,
        q: sqlx::query::Query<'static, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    ) -> Result<Option<i64>, StoreError> {
        mysql_insert_id(pool, q).await
    }
}

#[cfg(feature = "mysql")]
impl MySqlClaimStore {
    fn review(&self) -> PooledReview<'_, sqlx::MySql> {
        PooledReview { pool: self.pool() }
    }
}

#[cfg(feature = "mysql")]
pooled_review_store!(MySqlClaimStore);

// ---- SQLite: rusqlite on the writer (writes) and the readers (reads) ----

#[cfg(feature = "sqlite")]
fn sqlite_item_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ItemRow> {
    Ok(ItemRow {
        id: r.get(0)?,
        created_at: r.get(1)?,
        kind: r.get(2)?,
        reason: r.get(3)?,
        tool: r.get(4)?,
        proposer: r.get(5)?,
        proposer_via: r.get(6)?,
        key: r.get(7)?,
        fingerprint: r.get(8)?,
        version_seen: r.get(9)?,
        policy_digest: r.get(10)?,
        scope: r.get(11)?,
        decision: r.get(12)?,
        status: r.get(13)?,
        approvals_needed: r.get(14)?,
        expires_at: r.get(15)?,
        consumed_at: r.get(16)?,
        closed_at: r.get(17)?,
        closed_by: r.get(18)?,
        note: r.get(19)?,
        consumed_by: r.get(20)?,
    })
}

/// A row and its votes, read on `conn`; a corrupt row is `Err(StoreError)`
/// inside `Ok`, so that the writer's batch is not rolled back for it.
#[cfg(feature = "sqlite")]
fn sqlite_item(
    conn: &rusqlite::Connection,
    sql: &str,
    bind: impl rusqlite::Params,
) -> rusqlite::Result<Option<Result<ReviewItem, StoreError>>> {
    use rusqlite::OptionalExtension;
    let Some(row) = conn.query_row(sql, bind, sqlite_item_row).optional()? else {
        return Ok(None);
    };
    let votes = sqlite_votes(conn, row.id)?;
    Ok(Some(votes.and_then(|v| row.item(v))))
}

#[cfg(feature = "sqlite")]
fn sqlite_votes(
    conn: &rusqlite::Connection,
    id: i64,
) -> rusqlite::Result<Result<Vec<Vote>, StoreError>> {
    let mut stmt = conn.prepare_cached(qmark::VOTES)?;
    let rows = stmt
        .query_map([id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows
        .into_iter()
        .map(|(r, v, at, note)| vote_row(r, &v, at, note))
        .collect())
}

#[cfg(feature = "sqlite")]
fn sqlite_insert(
    conn: &rusqlite::Connection,
    sql: &str,
    v: &Insert,
) -> rusqlite::Result<Option<i64>> {
    let changed = conn.execute(
        sql,
        rusqlite::params![
            v.created_at,
            v.kind,
            v.reason,
            v.tool,
            v.proposer,
            v.proposer_via,
            v.key,
            v.fingerprint,
            v.version_seen,
            v.policy_digest,
            v.scope,
            v.decision,
            v.approvals_needed,
            v.expires_at,
            v.open_grant,
            v.queue_principal,
            v.dedup,
            v.summary,
        ],
    )?;
    // The writer runs one unit at a time: the row count and the last id
    // are this statement's.
    Ok((changed == 1).then(|| conn.last_insert_rowid()))
}

/// Whether one more open item for `principal` stays within `limits`, on
/// the writer's connection (each count stops at its cap).
#[cfg(feature = "sqlite")]
fn sqlite_room(
    conn: &rusqlite::Connection,
    principal: &str,
    limits: &QueueLimits,
    now: UnixMillis,
) -> rusqlite::Result<bool> {
    let cap = |c: u64| i64::try_from(c).unwrap_or(i64::MAX);
    let theirs: i64 = conn.query_row(
        qmark::OPEN_OF,
        rusqlite::params![principal, now.0, cap(limits.per_principal)],
        |r| r.get(0),
    )?;
    if theirs >= cap(limits.per_principal) {
        return Ok(false);
    }
    let all: i64 = conn.query_row(
        qmark::OPEN_ALL,
        rusqlite::params![now.0, cap(limits.total)],
        |r| r.get(0),
    )?;
    Ok(all < cap(limits.total))
}

#[cfg(feature = "sqlite")]
fn sqlite_audit(conn: &rusqlite::Connection, e: &AuditEntry) -> rusqlite::Result<()> {
    conn.execute(
        qmark::AUDIT,
        rusqlite::params![
            e.at().0,
            e.actor(),
            e.tool(),
            e.outcome(),
            e.reason(),
            e.key().map(|k| k.as_bytes().to_vec()),
            e.fingerprint().map(|f| f.as_bytes().to_vec()),
            e.via(),
        ],
    )
    .map(drop)
}

#[cfg(feature = "sqlite")]
impl ReviewStore for SqliteClaimStore {
    async fn open_session(
        &self,
        digest: [u8; 32],
        session: ReviewSession,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        self.write_unit("opening a reviewer session", move |conn| {
            conn.execute(qmark::SESSION_PURGE, [now.0])?;
            conn.execute(
                qmark::SESSION_INSERT,
                rusqlite::params![
                    digest.as_slice(),
                    session.principal,
                    session.csrf,
                    session.expires_at.0
                ],
            )?;
            Ok(Ok(()))
        })
        .await
    }

    async fn session(
        &self,
        digest: [u8; 32],
        now: UnixMillis,
    ) -> Result<Option<ReviewSession>, StoreError> {
        use rusqlite::OptionalExtension as _;
        self.write_unit("reading a reviewer session", move |conn| {
            let row = conn
                .query_row(
                    qmark::SESSION_GET,
                    rusqlite::params![digest.as_slice(), now.0],
                    |r| {
                        Ok(ReviewSession {
                            principal: r.get(0)?,
                            csrf: r.get(1)?,
                            expires_at: UnixMillis(r.get(2)?),
                        })
                    },
                )
                .optional()?;
            Ok(Ok(row))
        })
        .await
    }

    async fn close_session(&self, digest: [u8; 32]) -> Result<(), StoreError> {
        self.write_unit("closing a reviewer session", move |conn| {
            conn.execute(qmark::SESSION_DELETE, [digest.as_slice()])?;
            Ok(Ok(()))
        })
        .await
    }

    async fn open_item(&self, item: NewItem, limits: &QueueLimits) -> Result<Opened, StoreError> {
        let dedup = item.dedup(limits.rejection_window_ms);
        let now = item.at;
        let limits = *limits;
        let v = insert_of(item, None, dedup);
        // One unit of the writer: the dedup read, the caps and the insert
        // see no other write in between.
        self.write_unit("opening a review item", move |conn| {
            use rusqlite::OptionalExtension;
            if let Some(d) = dedup {
                let found: Option<i64> = conn
                    .query_row(qmark::BY_DEDUP, [d.as_slice()], |r| r.get(0))
                    .optional()?;
                if let Some(id) = found {
                    return Ok(Ok(Opened::Existing(id)));
                }
            }
            if !sqlite_room(conn, &v.queue_principal, &limits, now)? {
                return Ok(Ok(Opened::Full));
            }
            Ok(match sqlite_insert(conn, qmark::INSERT_SQLITE, &v)? {
                Some(id) => Ok(Opened::Created(id)),
                None => Err(StoreError::new(
                    StoreErrorKind::Database,
                    "no id for a new review item",
                )),
            })
        })
        .await
    }

    async fn request_approval(
        &self,
        item: NewItem,
        now: UnixMillis,
        limits: &QueueLimits,
    ) -> Result<Requested, StoreError> {
        let a = ask(&item)?;
        let (digest, key, fingerprint) = (a.digest, *a.key, *a.fingerprint);
        let (version, policy_digest) = (a.version.to_owned(), a.policy_digest.to_owned());
        let limits = *limits;
        let v = insert_of(item, Some(digest), None);
        // One unit of the writer: nothing else writes meanwhile.
        self.write_unit("requesting approval", move |conn| {
            if let Some(live) = sqlite_item(conn, qmark::BY_GRANT, [digest.to_vec()])? {
                let live = match live {
                    Ok(i) => i,
                    Err(e) => return Ok(Err(e)),
                };
                match judge_live(&live, &policy_digest, now) {
                    Live::Answer(r) => return Ok(Ok(r)),
                    Live::Expire(id) => {
                        conn.execute(qmark::EXPIRE_ONE, rusqlite::params![id, now.0])?;
                    }
                }
            }
            use rusqlite::OptionalExtension;
            let denied: Option<(i64, Option<String>)> = conn
                .query_row(
                    qmark::DENIED,
                    rusqlite::params![
                        key.as_bytes().to_vec(),
                        fingerprint.as_bytes().to_vec(),
                        version,
                        policy_digest
                    ],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            if let Some((item, by)) = denied {
                return Ok(Ok(Requested::Denied { item, by }));
            }
            if !sqlite_room(conn, &v.queue_principal, &limits, now)? {
                return Ok(Ok(Requested::QueueFull));
            }
            Ok(match sqlite_insert(conn, qmark::INSERT_SQLITE, &v)? {
                Some(id) => Ok(Requested::Pending {
                    item: id,
                    created: true,
                }),
                None => Err(StoreError::new(
                    StoreErrorKind::Invariant,
                    "a live approval item appeared inside the writer's unit",
                )),
            })
        })
        .await
    }

    async fn item(&self, id: i64, now: UnixMillis) -> Result<Option<ReviewItem>, StoreError> {
        self.write_unit("expiring a review item", move |conn| {
            conn.execute(qmark::EXPIRE_ONE, rusqlite::params![id, now.0])
                .map(|_| Ok(()))
        })
        .await?;
        self.write_unit("reading a review item", move |conn| {
            Ok(sqlite_item(conn, qmark::BY_ID, [id])?.transpose())
        })
        .await
    }

    async fn list_items(
        &self,
        query: &ListQuery,
        now: UnixMillis,
    ) -> Result<Vec<ReviewItem>, StoreError> {
        self.write_unit("expiring review items", move |conn| {
            conn.execute(qmark::EXPIRE_ALL, [now.0]).map(|_| Ok(()))
        })
        .await?;
        let status = query.status.map(ItemStatus::as_str);
        let kind = query.kind.clone();
        let limit = limit_of(query);
        let before = query.before;
        self.write_unit("listing review items", move |conn| {
            let mut stmt = conn.prepare_cached(qmark::LIST)?;
            let rows = stmt
                .query_map(
                    rusqlite::params![before, before, status, status, kind, kind, limit],
                    sqlite_item_row,
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut items = Vec::with_capacity(rows.len());
            for row in rows {
                let votes = if row.approvals_needed > 0 {
                    match sqlite_votes(conn, row.id)? {
                        Ok(v) => v,
                        Err(e) => return Ok(Err(e)),
                    }
                } else {
                    Vec::new()
                };
                match row.item(votes) {
                    Ok(i) => items.push(i),
                    Err(e) => return Ok(Err(e)),
                }
            }
            Ok(Ok(items))
        })
        .await
    }

    async fn open_items(&self, now: UnixMillis) -> Result<u64, StoreError> {
        self.write_unit("counting open review items", move |conn| {
            let n: i64 = conn.query_row(qmark::OPEN_COUNT, [now.0], |r| r.get(0))?;
            Ok(Ok(u64::try_from(n).unwrap_or(0)))
        })
        .await
    }

    async fn vote(
        &self,
        id: i64,
        reviewer: &str,
        verdict: Verdict,
        note: Option<&str>,
        now: UnixMillis,
    ) -> Result<Voted, StoreError> {
        check_reviewer(reviewer, note).map_err(invalid)?;
        let reviewer = reviewer.to_owned();
        let note = note.map(str::to_owned);
        self.write_unit("recording a review vote", move |conn| {
            let item = match sqlite_item(conn, qmark::BY_ID, [id])? {
                None => return Ok(Ok(Voted::NotFound)),
                Some(Err(e)) => return Ok(Err(e)),
                Some(Ok(i)) => i,
            };
            if let VotePlan::Answer(a) = plan_vote(&item, &reviewer, now) {
                if a == Voted::NotOpen(ItemStatus::Expired) {
                    conn.execute(qmark::EXPIRE_ONE, rusqlite::params![id, now.0])?;
                }
                return Ok(Ok(a));
            }
            let entry = match audit_entry(&item, &reviewer, verdict.audit_outcome(), now) {
                Ok(e) => e,
                Err(e) => return Ok(Err(e)),
            };
            conn.execute(
                qmark::INSERT_VOTE,
                rusqlite::params![id, reviewer, verdict.as_str(), now.0, note],
            )?;
            let approvals: i64 = conn.query_row(qmark::COUNT_APPROVALS, [id], |r| r.get(0))?;
            let status = after_vote(verdict, approvals, item.approvals_needed);
            if status != ItemStatus::Open {
                conn.execute(
                    qmark::CLOSE,
                    rusqlite::params![status.as_str(), now.0, reviewer, note, status.as_str(), id],
                )?;
            }
            sqlite_audit(conn, &entry)?;
            Ok(Ok(Voted::Recorded(status)))
        })
        .await
    }

    async fn close(
        &self,
        id: i64,
        reviewer: &str,
        closing: Closing,
        note: Option<&str>,
        now: UnixMillis,
    ) -> Result<Closed, StoreError> {
        check_reviewer(reviewer, note).map_err(invalid)?;
        let reviewer = reviewer.to_owned();
        let note = note.map(str::to_owned);
        self.write_unit("closing a review item", move |conn| {
            let item = match sqlite_item(conn, qmark::BY_ID, [id])? {
                None => return Ok(Ok(Closed::NotFound)),
                Some(Err(e)) => return Ok(Err(e)),
                Some(Ok(i)) => i,
            };
            if item.is_approval() {
                return Ok(Ok(Closed::IsApproval));
            }
            if item.status != ItemStatus::Open {
                return Ok(Ok(Closed::NotOpen(item.status)));
            }
            let status = closing.status();
            let entry = match audit_entry(&item, &reviewer, status.as_str(), now) {
                Ok(e) => e,
                Err(e) => return Ok(Err(e)),
            };
            conn.execute(
                qmark::CLOSE,
                rusqlite::params![status.as_str(), now.0, reviewer, note, status.as_str(), id],
            )?;
            sqlite_audit(conn, &entry)?;
            Ok(Ok(Closed::Done))
        })
        .await
    }
}
