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
    StoreError::with_source(kind, format!("{what}: {e}"), e)
}

/// A database URL the driver refused, named with its password hidden.
pub(crate) fn bad_url(url: &str, e: sqlx::Error) -> StoreError {
    StoreError::with_source(
        StoreErrorKind::Config,
        format!("{}: {e}", crate::redact_url(url)),
        e,
    )
}

/// The migrations, by version, with what each does: the same on every
/// backend, whose folder under `migrations/` holds its own SQL for each.
const MIGRATIONS: [(i64, &str); 8] = [
    (1, "claims and audit log"),
    (2, "executor kind on claims, via on audit entries"),
    (3, "review items and approvals"),
    (4, "budget counters and reservations"),
    (5, "reviewer page sessions"),
    (6, "idempotency key memory"),
    (
        8,
        "bounded review queue, grants bound to their proposer, idempotency quotas",
    ),
    (9, "attempts of one operation"),
];

/// A backend's migration files, embedded, in [`MIGRATIONS`] order.
macro_rules! migrations {
    ($backend:literal) => {
        [
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/migrations/",
                $backend,
                "/0001_claims.sql"
            )),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/migrations/",
                $backend,
                "/0002_executor_and_via.sql"
            )),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/migrations/",
                $backend,
                "/0003_review.sql"
            )),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/migrations/",
                $backend,
                "/0004_budgets.sql"
            )),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/migrations/",
                $backend,
                "/0005_review_sessions.sql"
            )),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/migrations/",
                $backend,
                "/0006_idempotency.sql"
            )),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/migrations/",
                $backend,
                "/0008_hostile_callers.sql"
            )),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/migrations/",
                $backend,
                "/0009_attempts.sql"
            )),
        ]
    };
}
pub(crate) use migrations;

/// A backend's migrator over its files ([`migrations!`]), tracked in its own
/// table, `toolgate_migrations`, so an application's own sqlx migrations in
/// the same database are not mistaken for ours.
pub(crate) fn migrator(files: [&'static str; 8]) -> sqlx::migrate::Migrator {
    use sqlx::SqlSafeStr;
    use sqlx::migrate::{Migration, MigrationType, Migrator};
    let mut m = Migrator::with_migrations(
        MIGRATIONS
            .iter()
            .zip(files)
            .map(|(&(version, what), sql)| {
                Migration::new(
                    version,
                    what.into(),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect(),
    );
    m.dangerous_set_table_name("toolgate_migrations");
    m
}
