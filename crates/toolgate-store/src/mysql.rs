//! MySQL and MariaDB.
//!
//! # The MariaDB trap
//!
//! sqlx's MySQL driver always sets `CLIENT_FOUND_ROWS`. With it, the
//! affected-row count of `INSERT … ON DUPLICATE KEY UPDATE operation_key =
//! operation_key` is 1 for a new row *and* for a duplicate (the duplicate's
//! row was "found"), so the count cannot tell a won claim from a lost one.
//! The claim is decided only by reading the holder token back and
//! committing; `tests/mysql.rs` pins the driver's behaviour.
//!
//! # The migration lock
//!
//! sqlx serialises migrations with `GET_LOCK(name, -1)` and ignores the
//! result. MySQL reads `-1` as "wait forever"; MariaDB does not accept a
//! negative timeout and returns NULL at once. On MariaDB two processes
//! starting together on a fresh database (two `toolgate serve` replicas)
//! both apply the migrations, and one fails with `Duplicate entry '1'` in
//! the migrations table. `run_migrations` takes a lock of its own, with a
//! positive timeout, and checks that it was granted.

use std::str::FromStr;

use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::mysql::{MySqlConnectOptions, MySqlDatabaseError, MySqlPool, MySqlPoolOptions};
use toolgate::claim::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStore, Completion, HolderToken, JsonText,
    OperationKey, RawClaim, ReconcileOutcome, Reconciled, StoreError, StoreErrorKind, StuckEntry,
    UnixMillis,
};

use crate::StoreOptions;
use crate::common::{map_err, qmark};
use crate::pooled::{self, Dialect};
use crate::protocol::{self, Answer, ClaimBackend, Clock, TxFail, Unit};

/// The claims and audit tables on MySQL or MariaDB.
pub struct MySqlClaimStore {
    pool: MySqlPool,
    clock: Clock,
    #[cfg(feature = "fault-injection")]
    hook: Option<crate::fault::FaultHook>,
}

/// The dialect's own statement (the others are shared with SQLite), public
/// for the tests that pin the driver's behaviour.
pub mod sql {
    /// The conditional insert. `UPDATE operation_key = operation_key`
    /// changes nothing on a duplicate; unlike `INSERT IGNORE` it does not
    /// also swallow other errors (truncation, bad values) as warnings.
    pub const INSERT_CLAIM: &str = "INSERT INTO toolgate_claims \
        (operation_key, fingerprint, tool, arguments, scope, version_seen, proposer, \
         status, holder, lease_expires_at, claimed_at, executor) \
        VALUES (?, ?, ?, ?, ?, ?, ?, 'in_flight', ?, ?, ?, ?) \
        ON DUPLICATE KEY UPDATE operation_key = operation_key";
}

impl Dialect for sqlx::MySql {
    const INSERT_CLAIM: &str = sql::INSERT_CLAIM;
    const SELECT_CLAIM: &str = qmark::SELECT_CLAIM;
    const COMPLETE: &str = qmark::COMPLETE;
    const RECONCILE: &str = qmark::RECONCILE;
    const CONSUME_GRANT: &str = qmark::CONSUME_GRANT;
    const LIST_STUCK: &str = qmark::LIST_STUCK;
    const APPEND_AUDIT: &str = qmark::APPEND_AUDIT;
    const AUDIT_TRAIL: &str = qmark::AUDIT_TRAIL;
    const CONNECTION_ID: &str = "SELECT CAST(CONNECTION_ID() AS SIGNED) AS id";

    fn is_lost_race(e: &sqlx::Error) -> bool {
        is_lost_race(e)
    }

    fn rows_affected(done: &Self::QueryResult) -> u64 {
        done.rows_affected()
    }
}

/// MySQL's lost-race errors: 1213 deadlock (also Galera's certification
/// failure), 1205 lock wait timeout, 1020 record changed since last read.
/// The claim rolls back and runs again on these; public so that the tests
/// can pin the codes against a real server.
pub fn is_lost_race(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|db| db.try_downcast_ref::<MySqlDatabaseError>())
        .is_some_and(|db| matches!(db.number(), 1213 | 1205 | 1020))
}

impl ClaimBackend for MySqlClaimStore {
    async fn transaction(&self, unit: Unit) -> Result<Answer, TxFail> {
        #[cfg(feature = "fault-injection")]
        let hook = self.hook.as_ref();
        #[cfg(not(feature = "fault-injection"))]
        let hook = None;
        pooled::transaction(&self.pool, hook, &unit).await
    }

    async fn read_claim(&self, key: &OperationKey) -> Result<Option<ClaimRecord>, StoreError> {
        pooled::read_claim(&self.pool, key).await
    }

    fn clock(&self) -> Clock {
        self.clock
    }

    #[cfg(feature = "fault-injection")]
    async fn fault_after_commit(&self) -> bool {
        match &self.hook {
            Some(hook) => hook(crate::common::Point::AfterCommit.into(), -1).await,
            None => false,
        }
    }
}

impl ClaimStore for MySqlClaimStore {
    async fn claim(&self, request: ClaimRequest) -> Result<RawClaim, StoreError> {
        protocol::claim(self, request).await
    }

    async fn complete(
        &self,
        key: &OperationKey,
        holder: &HolderToken,
        result: &JsonText,
        now: UnixMillis,
        audit: &AuditEntry,
    ) -> Result<Completion, StoreError> {
        protocol::complete(self, key, holder, result, now, audit).await
    }

    async fn fetch(&self, key: &OperationKey) -> Result<Option<ClaimRecord>, StoreError> {
        pooled::read_claim(&self.pool, key).await
    }

    async fn list_stuck(&self, now: UnixMillis, limit: u32) -> Result<Vec<StuckEntry>, StoreError> {
        pooled::list_stuck(&self.pool, now, limit).await
    }

    async fn record_reconciliation(
        &self,
        key: &OperationKey,
        outcome: &ReconcileOutcome,
        now: UnixMillis,
    ) -> Result<Reconciled, StoreError> {
        protocol::reconcile(self, key, outcome, now).await
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        protocol::append_audit(self, entry).await
    }

    async fn audit_trail(
        &self,
        key: &OperationKey,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        pooled::audit_trail(&self.pool, key, limit).await
    }
}

impl MySqlClaimStore {
    /// The pool, for operations outside the claim protocol.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// The store with `clock` as its time source for claim attempts (the
    /// default is the wall clock, [`crate::now_millis`]). An attempt's time
    /// is the clock's reading, never earlier than the request's own time.
    #[must_use]
    pub fn with_clock(mut self, clock: fn() -> UnixMillis) -> Self {
        self.clock = clock;
        self
    }

    /// Installs a fault hook (tests only).
    #[cfg(feature = "fault-injection")]
    #[must_use]
    pub fn with_fault_hook(mut self, hook: crate::fault::FaultHook) -> Self {
        self.hook = Some(hook);
        self
    }
}

fn migrator() -> Migrator {
    let mut m = Migrator::with_migrations(vec![
        Migration::new(
            1,
            "claims and audit log".into(),
            MigrationType::Simple,
            include_str!("../migrations/mysql/0001_claims.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            2,
            "executor kind on claims, via on audit entries".into(),
            MigrationType::Simple,
            include_str!("../migrations/mysql/0002_executor_and_via.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            3,
            "review items and approvals".into(),
            MigrationType::Simple,
            include_str!("../migrations/mysql/0003_review.sql").into_sql_str(),
            false,
        ),
    ]);
    m.dangerous_set_table_name("toolgate_migrations");
    m
}

impl MySqlClaimStore {
    /// Connects to `url` (`mysql://…`; `mariadb://` is accepted by
    /// [`crate::AnyClaimStore`]) and runs the migrations.
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        let connect = MySqlConnectOptions::from_str(url).map_err(|e| {
            // The URL may hold a password: never repeat it.
            StoreError::new(
                StoreErrorKind::Config,
                format!("{}: {e}", crate::redact_url(url)),
            )
        })?;
        let pool = MySqlPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .connect_with(connect)
            .await
            .map_err(|e| map_err("connecting to MySQL", e))?;
        run_migrations(&pool, &migrator(), "MySQL migrations").await?;
        Ok(Self {
            pool,
            clock: crate::now_millis,
            #[cfg(feature = "fault-injection")]
            hook: None,
        })
    }
}

/// How long a process waits for another one's migrations.
const MIGRATION_LOCK_WAIT_SECS: i64 = 120;

/// The lock's name: per database (lock names are server-wide), at most
/// the 64 characters MySQL accepts.
macro_rules! migration_lock {
    () => {
        "LEFT(CONCAT('toolgate_migrate_', COALESCE(DATABASE(), '')), 64)"
    };
}

/// Runs `migrator` on one connection that holds a named lock for the whole
/// run, so that processes sharing the database migrate one at a time (see
/// "The migration lock" above). The connection runs the migrations itself:
/// a pool of one connection must not wait for a second. Public for an
/// application migrating its own tables in the store's database with its
/// own [`Migrator`] (and its own migrations table).
pub async fn run_migrations(
    pool: &MySqlPool,
    migrator: &Migrator,
    what: &str,
) -> Result<(), StoreError> {
    let failed = |e: &dyn std::fmt::Display| {
        StoreError::new(StoreErrorKind::Migration, format!("{what}: {e}"))
    };
    let mut conn = pool.acquire().await.map_err(|e| failed(&e))?;
    let granted: Option<i64> = sqlx::query_scalar(concat!(
        "SELECT CAST(GET_LOCK(",
        migration_lock!(),
        ", ?) AS SIGNED)"
    ))
    .bind(MIGRATION_LOCK_WAIT_SECS)
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| failed(&e))?;
    if granted != Some(1) {
        return Err(failed(&format!(
            "the migration lock was not granted within {MIGRATION_LOCK_WAIT_SECS} s \
             (GET_LOCK returned {granted:?}): another process may be migrating"
        )));
    }
    let run = migrator.run(&mut *conn).await;
    // Released at once rather than when the pooled connection closes.
    let released = sqlx::query(concat!("SELECT RELEASE_LOCK(", migration_lock!(), ")"))
        .execute(&mut *conn)
        .await;
    run.map_err(|e| failed(&e))?;
    released.map(drop).map_err(|e| failed(&e))
}
