//! What the three SQL backends share besides the protocol itself
//! (`protocol.rs`): the retry budget, the pause between retries, error
//! mapping, the fault points and the SQL of the backends that bind with `?`.

use std::time::Duration;

use toolgate::claim::{StoreError, StoreErrorKind};

/// How many times one claim is retried after lost races or read-backs that
/// found no row, before giving up with [`StoreErrorKind::Contention`].
pub(crate) const MAX_CLAIM_ATTEMPTS: u32 = 32;

/// A point in the claim transaction where a fault hook may run (see
/// `fault`, whose public `FaultPoint` mirrors it); a no-op without the
/// feature.
#[derive(Clone, Copy)]
pub(crate) enum ClaimTxPoint {
    AfterInsert,
    BeforeCommit,
    #[cfg_attr(
        not(feature = "fault-injection"),
        expect(dead_code, reason = "only a fault hook asks for this point")
    )]
    AfterCommit,
}

/// A store's fault hook (tests only); uninhabited without the feature.
#[cfg(feature = "fault-injection")]
pub(crate) type Hook = crate::fault::FaultHook;
/// A store's fault hook (tests only); uninhabited without the feature.
#[cfg(not(feature = "fault-injection"))]
pub(crate) enum Hook {}

#[cfg(feature = "fault-injection")]
impl From<ClaimTxPoint> for crate::fault::FaultPoint {
    fn from(p: ClaimTxPoint) -> Self {
        match p {
            ClaimTxPoint::AfterInsert => Self::AfterInsert,
            ClaimTxPoint::BeforeCommit => Self::BeforeCommit,
            ClaimTxPoint::AfterCommit => Self::AfterCommit,
        }
    }
}

/// A short pause before retrying a lost race, growing with the attempt
/// number and capped, so that a crowd of losers does not retry in lockstep.
pub(crate) async fn backoff(attempt: u32) {
    let ms = (1u64 << attempt.min(6)).min(50);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Maps a driver error to a store error. Connection-level failures are
/// `Unavailable`; anything the server refused is `Database`.
pub(crate) fn map_err(what: &str, e: sqlx::Error) -> StoreError {
    let kind = match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreErrorKind::Unavailable,
        sqlx::Error::Configuration(_) => StoreErrorKind::Config,
        // The server reporting that it dropped the session: SQLSTATE class
        // 08 (connection exception), 57P (PostgreSQL operator intervention,
        // e.g. pg_terminate_backend) and 70100 (MySQL/MariaDB: connection
        // or query killed).
        sqlx::Error::Database(db)
            if db
                .code()
                .is_some_and(|c| c.starts_with("08") || c.starts_with("57P") || c == "70100") =>
        {
            StoreErrorKind::Unavailable
        }
        _ => StoreErrorKind::Database,
    };
    StoreError::new(kind, format!("{what}: {e}"))
}

/// Statements whose text is identical on the backends that bind with `?`
/// (SQLite and MySQL/MariaDB); each backend's `sql` module re-exports them
/// beside its own insert, which is where the dialects differ.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) mod qmark {
    pub(crate) const SELECT_CLAIM: &str = "SELECT operation_key, fingerprint, tool, arguments, \
        scope, version_seen, proposer, status, holder, lease_expires_at, claimed_at, \
        completed_at, resolution, result, executor, attempt FROM toolgate_claims \
        WHERE operation_key = ?";
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
    pub(crate) const LIST_STUCK: &str = "SELECT operation_key, fingerprint, tool, arguments, \
        scope, version_seen, proposer, status, holder, lease_expires_at, claimed_at, \
        completed_at, resolution, result, executor, attempt FROM toolgate_claims \
        WHERE status = 'in_flight' AND lease_expires_at <= ? \
        ORDER BY lease_expires_at, operation_key LIMIT ?";
    pub(crate) const APPEND_AUDIT: &str = "INSERT INTO toolgate_audit \
        (at, actor, tool, outcome, reason, operation_key, fingerprint, via, attempt) \
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)";
    pub(crate) const AUDIT_TRAIL: &str = "SELECT at, actor, tool, outcome, reason, \
        operation_key, fingerprint, via, attempt FROM toolgate_audit WHERE operation_key = ? \
        ORDER BY id LIMIT ?";
}
