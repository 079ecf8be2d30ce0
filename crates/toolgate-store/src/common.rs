//! What the three SQL backends share besides the protocol itself
//! (`protocol.rs`) and their statements (`sql/`): the retry budget, the
//! pause between retries, error mapping and the fault points.

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

/// A database URL the driver refused, named with its password hidden.
pub(crate) fn bad_url(url: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::new(
        StoreErrorKind::Config,
        format!("{}: {e}", crate::redact_url(url)),
    )
}
