//! PostgreSQL.

use std::str::FromStr;

use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use toolgate::claim::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStore, Completion, HolderToken, JsonText,
    OperationKey, RawClaim, ReconcileOutcome, Reconciled, StoreError, StoreErrorKind, StuckEntry,
    UnixMillis,
};

use crate::StoreOptions;
use crate::common::map_err;
use crate::pooled::{self, Dialect, WriteDialect};
use crate::protocol::{self, Answer, ClaimBackend, Clock, TxFail, Unit};
use crate::write::{StoreWrite, WriteFuture};

/// The claims and audit tables on PostgreSQL.
///
/// Cloning gives another handle to the same connections.
#[derive(Clone)]
pub struct PgClaimStore {
    pool: PgPool,
    clock: Clock,
    #[cfg(feature = "fault-injection")]
    hook: Option<crate::fault::FaultHook>,
}

impl Dialect for sqlx::Postgres {
    const INSERT_CLAIM: &str = "INSERT INTO toolgate_claims \
        (operation_key, fingerprint, tool, arguments, scope, version_seen, proposer, \
         status, holder, lease_expires_at, claimed_at, executor) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, 'in_flight', $8, $9, $10, $11) \
        ON CONFLICT (operation_key) DO NOTHING";
    const SELECT_CLAIM: &str = "SELECT operation_key, fingerprint, tool, arguments, \
        scope, version_seen, proposer, status, holder, lease_expires_at, claimed_at, \
        completed_at, resolution, result, executor, attempt FROM toolgate_claims \
        WHERE operation_key = $1";
    const REOPEN_CLAIM: &str = "UPDATE toolgate_claims \
        SET fingerprint = $1, tool = $2, arguments = $3, scope = $4, version_seen = $5, \
        proposer = $6, status = 'in_flight', holder = $7, lease_expires_at = $8, \
        claimed_at = $9, executor = $10, attempt = $11, completed_at = NULL, \
        resolution = NULL, result = NULL \
        WHERE operation_key = $12 AND status = 'completed' \
        AND resolution = 'reconciled_not_applied' AND attempt = $13";
    const COMPLETE: &str = "UPDATE toolgate_claims \
        SET status = 'completed', completed_at = $1, resolution = 'executed', result = $2 \
        WHERE operation_key = $3 AND status = 'in_flight' AND holder = $4 \
        AND lease_expires_at > $5";
    const RECONCILE: &str = "UPDATE toolgate_claims \
        SET status = 'completed', completed_at = $1, resolution = $2, result = $3 \
        WHERE operation_key = $4 AND status = 'in_flight' AND lease_expires_at <= $5";
    const BUDGET: crate::budget::BudgetSql = crate::budget::POSTGRES;
    const CONSUME_GRANT: &str = "UPDATE toolgate_review_items \
        SET consumed_at = $1, consumed_by = $2 \
        WHERE id = $3 AND status = 'approved' AND consumed_at IS NULL AND expires_at > $4 \
        AND operation_key = $5 AND fingerprint = $6 AND version_seen = $7 AND policy_digest = $8 \
        AND proposer = $9 AND COALESCE(proposer_via, '') = $10 \
        AND NOT EXISTS (SELECT 1 FROM toolgate_review_votes v \
            WHERE v.item_id = $11 AND v.reviewer IN ($12, $13))";
    const LIST_STUCK: &str = "SELECT operation_key, fingerprint, tool, arguments, \
        scope, version_seen, proposer, status, holder, lease_expires_at, claimed_at, \
        completed_at, resolution, result, executor, attempt FROM toolgate_claims \
        WHERE status = 'in_flight' AND lease_expires_at <= $1 \
        ORDER BY lease_expires_at, operation_key LIMIT $2";
    const APPEND_AUDIT: &str = "INSERT INTO toolgate_audit \
        (at, actor, tool, outcome, reason, operation_key, fingerprint, via, attempt) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";
    const AUDIT_TRAIL: &str = "SELECT at, actor, tool, outcome, reason, \
        operation_key, fingerprint, via, attempt FROM toolgate_audit WHERE operation_key = $1 \
        ORDER BY id LIMIT $2";
    const CONNECTION_ID: &str = "SELECT CAST(pg_backend_pid() AS BIGINT) AS id";

    fn is_lost_race(e: &sqlx::Error) -> bool {
        is_lost_race(e)
    }

    const HAS_RETURNING: bool = true;

    fn rows_affected(done: &Self::QueryResult) -> u64 {
        done.rows_affected()
    }
}

impl WriteDialect for sqlx::Postgres {
    fn app_write<'c>(
        write: &'c dyn StoreWrite,
        conn: &'c mut sqlx::PgConnection,
    ) -> WriteFuture<'c> {
        write.postgres(conn)
    }
}

/// PostgreSQL's lost-race errors: serialization_failure (40001) and
/// deadlock_detected (40P01). The claim rolls back and runs again on these;
/// public so that the tests can pin the codes against a real server.
pub fn is_lost_race(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|code| code == "40001" || code == "40P01")
}

impl ClaimBackend for PgClaimStore {
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
            Some(hook) => hook(crate::common::ClaimTxPoint::AfterCommit.into(), -1).await,
            None => false,
        }
    }
}

impl ClaimStore for PgClaimStore {
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

    async fn budget_reserved(&self) -> Result<Vec<(String, i64)>, StoreError> {
        pooled::budget_reserved(&self.pool).await
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

impl PgClaimStore {
    /// The pool, for operations outside the claim protocol.
    pub fn pool(&self) -> &PgPool {
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
            include_str!("../migrations/postgres/0001_claims.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            2,
            "executor kind on claims, via on audit entries".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0002_executor_and_via.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            3,
            "review items and approvals".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0003_review.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            4,
            "budget counters and reservations".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0004_budgets.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            5,
            "reviewer page sessions".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0005_review_sessions.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            6,
            "idempotency key memory".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0006_idempotency.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            8,
            "bounded review queue, grants bound to their proposer, idempotency quotas".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0008_hostile_callers.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            9,
            "attempts of one operation".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0009_attempts.sql").into_sql_str(),
            false,
        ),
    ]);
    m.dangerous_set_table_name("toolgate_migrations");
    m
}

impl PgClaimStore {
    /// Connects to `url` (`postgres://…`) and runs the migrations. The
    /// tables go in the connection's current schema (`search_path`).
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        let connect = PgConnectOptions::from_str(url).map_err(|e| {
            // The URL may hold a password: never repeat it.
            StoreError::new(
                StoreErrorKind::Config,
                format!("{}: {e}", crate::redact_url(url)),
            )
        })?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            // Tested as it came back to the pool (the crate's docs).
            .test_before_acquire(false)
            .connect_with(connect)
            .await
            .map_err(|e| map_err("connecting to PostgreSQL", e))?;
        migrator().run(&pool).await.map_err(|e| {
            StoreError::new(
                StoreErrorKind::Migration,
                format!("PostgreSQL migrations: {e}"),
            )
        })?;
        Ok(Self {
            pool,
            clock: crate::now_millis,
            #[cfg(feature = "fault-injection")]
            hook: None,
        })
    }
}
