//! SQLite: the embedded default. One file in WAL mode, created on first
//! use; nothing to install or run.

use std::str::FromStr;
use std::time::Duration;

use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use toolgate::claim::{StoreError, StoreErrorKind};

use crate::StoreOptions;
use crate::common::{map_err, sql_claim_store};

/// The claims and audit tables on SQLite.
pub struct SqliteClaimStore {
    pool: SqlitePool,
    #[cfg(feature = "fault-injection")]
    hook: Option<crate::fault::FaultHook>,
}

/// The SQL, with the bind order the shared implementation uses.
mod sql {
    pub(super) use crate::common::qmark::{
        APPEND_AUDIT, AUDIT_TRAIL, COMPLETE, LIST_STUCK, RECONCILE, SELECT_CLAIM,
    };
    pub(super) const INSERT_CLAIM: &str = "INSERT INTO toolgate_claims \
        (operation_key, fingerprint, tool, arguments, scope, version_seen, proposer, \
         status, holder, lease_expires_at, claimed_at) \
        VALUES (?, ?, ?, ?, ?, ?, ?, 'in_flight', ?, ?, ?) \
        ON CONFLICT (operation_key) DO NOTHING";
    #[cfg(feature = "fault-injection")]
    pub(super) const CONNECTION_ID: &str = "SELECT -1";
}

/// SQLite's lost-race errors: `SQLITE_BUSY` and `SQLITE_LOCKED`, with any
/// extended code (the primary code is the low byte). The claim rolls back
/// and runs again on these.
pub fn is_lost_race(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|db| db.code())
        .and_then(|code| code.parse::<i64>().ok())
        .is_some_and(|code| matches!(code & 0xff, 5 | 6))
}

sql_claim_store!(SqliteClaimStore, sqlx::Sqlite, sql, is_lost_race);

fn migrator() -> Migrator {
    let mut m = Migrator::with_migrations(vec![Migration::new(
        1,
        "claims and audit log".into(),
        MigrationType::Simple,
        include_str!("../migrations/sqlite/0001_claims.sql").into_sql_str(),
        false,
    )]);
    m.dangerous_set_table_name("toolgate_migrations");
    m
}

impl SqliteClaimStore {
    /// Opens the database at `url` (`sqlite://PATH`), creating the file if
    /// [`StoreOptions::create_if_missing`] says so, and runs the migrations.
    ///
    /// WAL mode lets readers proceed while one writer commits; claims
    /// serialise on the write lock and wait up to the busy timeout for it.
    /// `synchronous = FULL`: a claim acknowledged and then lost to a power
    /// cut would let the operation execute twice.
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        let connect = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::new(StoreErrorKind::Config, format!("{url}: {e}")))?
            .create_if_missing(options.create_if_missing)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .connect_with(connect)
            .await
            .map_err(|e| map_err("opening the SQLite database", e))?;
        migrator().run(&pool).await.map_err(|e| {
            StoreError::new(StoreErrorKind::Migration, format!("SQLite migrations: {e}"))
        })?;
        Ok(Self {
            pool,
            #[cfg(feature = "fault-injection")]
            hook: None,
        })
    }
}
