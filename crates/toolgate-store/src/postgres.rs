//! PostgreSQL.

use std::str::FromStr;

use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use toolgate::claim::{StoreError, StoreErrorKind};

use crate::StoreOptions;
use crate::common::{map_err, sql_claim_store};

/// The claims and audit tables on PostgreSQL.
pub struct PgClaimStore {
    pool: PgPool,
    #[cfg(feature = "fault-injection")]
    hook: Option<crate::fault::FaultHook>,
}

/// The SQL, with the bind order the shared implementation uses.
mod sql {
    pub(super) const INSERT_CLAIM: &str = "INSERT INTO toolgate_claims \
        (operation_key, fingerprint, tool, arguments, scope, version_seen, proposer, \
         status, holder, lease_expires_at, claimed_at, executor) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, 'in_flight', $8, $9, $10, $11) \
        ON CONFLICT (operation_key) DO NOTHING";
    pub(super) const SELECT_CLAIM: &str = "SELECT operation_key, fingerprint, tool, arguments, \
        scope, version_seen, proposer, status, holder, lease_expires_at, claimed_at, \
        completed_at, resolution, result, executor FROM toolgate_claims WHERE operation_key = $1";
    pub(super) const COMPLETE: &str = "UPDATE toolgate_claims \
        SET status = 'completed', completed_at = $1, resolution = 'executed', result = $2 \
        WHERE operation_key = $3 AND status = 'in_flight' AND holder = $4";
    pub(super) const RECONCILE: &str = "UPDATE toolgate_claims \
        SET status = 'completed', completed_at = $1, resolution = $2, result = $3 \
        WHERE operation_key = $4 AND status = 'in_flight' AND lease_expires_at <= $5";
    pub(super) const LIST_STUCK: &str = "SELECT operation_key, fingerprint, tool, arguments, \
        scope, version_seen, proposer, status, holder, lease_expires_at, claimed_at, \
        completed_at, resolution, result, executor FROM toolgate_claims \
        WHERE status = 'in_flight' AND lease_expires_at <= $1 \
        ORDER BY lease_expires_at, operation_key LIMIT $2";
    pub(super) const APPEND_AUDIT: &str = "INSERT INTO toolgate_audit \
        (at, actor, tool, outcome, reason, operation_key, fingerprint, via) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
    pub(super) const AUDIT_TRAIL: &str = "SELECT at, actor, tool, outcome, reason, \
        operation_key, fingerprint, via FROM toolgate_audit WHERE operation_key = $1 \
        ORDER BY id LIMIT $2";
    #[cfg(feature = "fault-injection")]
    pub(super) const CONNECTION_ID: &str = "SELECT CAST(pg_backend_pid() AS BIGINT)";
}

/// PostgreSQL's lost-race errors: serialization_failure (40001) and
/// deadlock_detected (40P01). The claim rolls back and runs again on these;
/// public so that the tests can pin the codes against a real server.
pub fn is_lost_race(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|code| code == "40001" || code == "40P01")
}

sql_claim_store!(PgClaimStore, sqlx::Postgres, sql, is_lost_race, pooled);

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
            #[cfg(feature = "fault-injection")]
            hook: None,
        })
    }
}
