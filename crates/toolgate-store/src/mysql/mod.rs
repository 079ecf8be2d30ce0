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
//!
//! # Several nodes (MariaDB Galera)
//!
//! A URL may list several hosts, `mysql://user:pw@h1:4306,h2:4307,h3/db`
//! (sqlx reads one; [`split_hosts`] makes one URL per host). The store then
//! keeps a pool per node and uses one at a time. When a node fails (the
//! connection lost, 2013 or 2006; not in the primary component, 1047; an
//! error during COMMIT, 1180) it is left alone for a while
//! ([`NODE_RETRY_AFTER`]) and the store moves to the next node. A unit
//! whose statements failed wrote nothing and runs again there; a COMMIT
//! that failed leaves the outcome unknown, and the protocol reads the row
//! back, on another node, with the same holder token (docs/design.md §8).
//! Reads outside a transaction (claim lookups, stuck listings, the audit
//! trail, the read-back) use connections with `wsrep_sync_wait = 1` when
//! the node is a Galera node, so they see every write the cluster
//! committed before them.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

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
use crate::pooled::{self, Dialect, WriteDialect};
use crate::protocol::{self, Answer, ClaimBackend, Clock, TxFail, Unit};
use crate::write::{StoreWrite, WriteFuture};

mod failover;

use failover::*;
pub use failover::{FailoverCounts, NODE_RETRY_AFTER, split_hosts};

/// The claims and audit tables on MySQL or MariaDB: one server, or the
/// nodes of a Galera cluster with failover between them.
///
/// Cloning gives another handle to the same connections.
#[derive(Clone)]
pub struct MySqlClaimStore {
    nodes: Arc<Nodes>,
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
    const REOPEN_CLAIM: &str = qmark::REOPEN_CLAIM;
    const COMPLETE: &str = qmark::COMPLETE;
    const RECONCILE: &str = qmark::RECONCILE;
    const CONSUME_GRANT: &str = qmark::CONSUME_GRANT;
    const BUDGET: crate::budget::BudgetSql = crate::budget::MYSQL;
    const LIST_STUCK: &str = qmark::LIST_STUCK;
    const APPEND_AUDIT: &str = qmark::APPEND_AUDIT;
    const AUDIT_TRAIL: &str = qmark::AUDIT_TRAIL;
    const CONNECTION_ID: &str = "SELECT CAST(CONNECTION_ID() AS SIGNED) AS id";

    fn is_lost_race(e: &sqlx::Error) -> bool {
        is_lost_race(e)
    }

    const HAS_RETURNING: bool = false;

    fn rows_affected(done: &Self::QueryResult) -> u64 {
        done.rows_affected()
    }
}

impl WriteDialect for sqlx::MySql {
    fn app_write<'c>(
        write: &'c dyn StoreWrite,
        conn: &'c mut sqlx::MySqlConnection,
    ) -> WriteFuture<'c> {
        write.mysql(conn)
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
        let nodes = &self.nodes;
        let mut last = None;
        for _ in 0..nodes.list.len() {
            let i = nodes.pick();
            let node = &nodes.list[i];
            match pooled::transaction(&node.pool, hook, &unit).await {
                // The statements failed because the node did: nothing was
                // written, so the unit runs again on the next node.
                Err(TxFail::Failed(e)) if node_lost(&e) => {
                    nodes.node_failed(i, &e);
                    last = Some(node.named(e));
                }
                Err(TxFail::Unknown(e)) => {
                    // A COMMIT that failed other than by a lost race: the
                    // node is suspect, and the protocol reads back on
                    // another one.
                    nodes.counts.unknown_commits.fetch_add(1, Ordering::Relaxed);
                    nodes.node_failed(i, &e);
                    return Err(TxFail::Unknown(node.named(e)));
                }
                Err(TxFail::Failed(e)) => return Err(TxFail::Failed(node.named(e))),
                other => return other,
            }
        }
        Err(TxFail::Failed(last.unwrap_or_else(no_node)))
    }

    async fn read_claim(&self, key: &OperationKey) -> Result<Option<ClaimRecord>, StoreError> {
        self.nodes
            .read(|pool| async move { pooled::read_claim(&pool, key).await })
            .await
    }

    fn clock(&self) -> Clock {
        self.clock
    }

    fn read_back_settled(&self, settled: bool) {
        let counts = &self.nodes.counts;
        if settled {
            counts.settled.fetch_add(1, Ordering::Relaxed);
        } else {
            counts.unsettled.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[cfg(feature = "fault-injection")]
    async fn fault_after_commit(&self) -> bool {
        match &self.hook {
            Some(hook) => hook(crate::common::ClaimTxPoint::AfterCommit.into(), -1).await,
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
        ClaimBackend::read_claim(self, key).await
    }

    async fn list_stuck(&self, now: UnixMillis, limit: u32) -> Result<Vec<StuckEntry>, StoreError> {
        self.nodes
            .read(|pool| async move { pooled::list_stuck(&pool, now, limit).await })
            .await
    }

    async fn budget_reserved(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.nodes
            .read(|pool| async move { pooled::budget_reserved(&pool).await })
            .await
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

    /// The claim lookup's connections, and a connection for the claim's
    /// transactions: a store whose reads work but whose transactions
    /// cannot start is not ready.
    async fn ready(&self) -> Result<(), StoreError> {
        let probe = OperationKey::from_bytes([0; OperationKey::LEN]);
        self.fetch(&probe).await?;
        self.nodes
            .on(true, |pool| async move {
                pool.acquire()
                    .await
                    .map(drop)
                    .map_err(|e| map_err("connecting to MySQL", e))
            })
            .await
    }

    async fn audit_trail(
        &self,
        key: &OperationKey,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.nodes
            .read(|pool| async move { pooled::audit_trail(&pool, key, limit).await })
            .await
    }
}

impl MySqlClaimStore {
    /// The pool of the node in use, for operations outside the claim
    /// protocol. With several nodes this follows the failover: ask again
    /// rather than keep it.
    pub fn pool(&self) -> &MySqlPool {
        &self.nodes.list[self.nodes.current.load(Ordering::Relaxed)].pool
    }

    /// Which of the URL's hosts (from 0) the store uses now.
    pub fn node_in_use(&self) -> usize {
        self.nodes.current.load(Ordering::Relaxed)
    }

    /// How many nodes the store knows.
    pub fn node_count(&self) -> usize {
        self.nodes.list.len()
    }

    /// The failover counters since the store connected.
    pub fn failover_counts(&self) -> FailoverCounts {
        let c = &self.nodes.counts;
        FailoverCounts {
            failovers: c.failovers.load(Ordering::Relaxed),
            unknown_commits: c.unknown_commits.load(Ordering::Relaxed),
            settled_by_read_back: c.settled.load(Ordering::Relaxed),
            unsettled: c.unsettled.load(Ordering::Relaxed),
        }
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
            include_str!("../../migrations/mysql/0001_claims.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            2,
            "executor kind on claims, via on audit entries".into(),
            MigrationType::Simple,
            include_str!("../../migrations/mysql/0002_executor_and_via.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            3,
            "review items and approvals".into(),
            MigrationType::Simple,
            include_str!("../../migrations/mysql/0003_review.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            4,
            "budget counters and reservations".into(),
            MigrationType::Simple,
            include_str!("../../migrations/mysql/0004_budgets.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            5,
            "reviewer page sessions".into(),
            MigrationType::Simple,
            include_str!("../../migrations/mysql/0005_review_sessions.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            6,
            "idempotency key memory".into(),
            MigrationType::Simple,
            include_str!("../../migrations/mysql/0006_idempotency.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            8,
            "bounded review queue, grants bound to their proposer, idempotency quotas".into(),
            MigrationType::Simple,
            include_str!("../../migrations/mysql/0008_hostile_callers.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            9,
            "attempts of one operation".into(),
            MigrationType::Simple,
            include_str!("../../migrations/mysql/0009_attempts.sql").into_sql_str(),
            false,
        ),
    ]);
    m.dangerous_set_table_name("toolgate_migrations");
    m
}

impl MySqlClaimStore {
    /// Connects to `url` (`mysql://…`; `mariadb://` is accepted by
    /// [`crate::AnyClaimStore`]) and runs the migrations. The URL may list
    /// several hosts, comma-separated (the nodes of a Galera cluster): the
    /// store then starts on one of them, a different one for each store a
    /// process opens, and fails over to the others (see the module's
    /// documentation).
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        let urls = split_hosts(url)?;
        let many = urls.len() > 1;
        let mut list = Vec::with_capacity(urls.len());
        for url in &urls {
            let connect = MySqlConnectOptions::from_str(url).map_err(|e| {
                // The URL may hold a password: never repeat it.
                StoreError::new(
                    StoreErrorKind::Config,
                    format!("{}: {e}", crate::redact_url(url)),
                )
            })?;
            let max = options.max_connections.max(1);
            // Tested as they came back to the pool (the crate's docs).
            let mut pool = MySqlPoolOptions::new()
                .max_connections(max)
                .test_before_acquire(false);
            let mut reads = MySqlPoolOptions::new()
                .max_connections(max)
                .test_before_acquire(false)
                .after_connect(|conn, _| Box::pin(async move { causal_reads(conn).await }));
            if many {
                // A node frozen mid-handshake must not hold a caller for
                // sqlx's default 30 s when another node could answer.
                pool = pool.acquire_timeout(NODE_ACQUIRE_TIMEOUT);
                reads = reads.acquire_timeout(NODE_ACQUIRE_TIMEOUT);
            }
            list.push(Node {
                // One server: its errors read as before, unnamed.
                name: if many {
                    crate::redact_url(url)
                } else {
                    String::new()
                },
                pool: pool.connect_lazy_with(connect.clone()),
                reads: reads.connect_lazy_with(connect),
                down_until: AtomicI64::new(0),
            });
        }
        let start = if many {
            NEXT_START.fetch_add(1, Ordering::Relaxed) % list.len()
        } else {
            0
        };
        let nodes = Arc::new(Nodes {
            list,
            current: AtomicUsize::new(start),
            counts: Counters::default(),
        });
        // Migrate through the first node that answers, on a connection
        // that reads causally: a node that has not yet applied another
        // process's migrations would otherwise run them again.
        let mut last = None;
        for _ in 0..nodes.list.len() {
            let i = nodes.pick();
            let node = &nodes.list[i];
            let reached = node
                .reads
                .acquire()
                .await
                .map(drop)
                .map_err(|e| map_err("connecting to MySQL", e))
                .map_err(|e| node.named(e));
            match reached {
                Ok(()) => {
                    run_migrations(&node.reads, &migrator(), "MySQL migrations").await?;
                    return Ok(Self {
                        nodes,
                        clock: crate::now_millis,
                        #[cfg(feature = "fault-injection")]
                        hook: None,
                    });
                }
                Err(e) => {
                    nodes.node_failed(i, &e);
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(no_node))
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

#[cfg(test)]
mod tests {
    use super::split_hosts;

    #[test]
    fn a_host_list_gives_one_url_per_host() {
        assert_eq!(
            split_hosts("mysql://root:pw@h1:4306,h2:4307, h3/test?ssl-mode=REQUIRED").unwrap(),
            [
                "mysql://root:pw@h1:4306/test?ssl-mode=REQUIRED",
                "mysql://root:pw@h2:4307/test?ssl-mode=REQUIRED",
                "mysql://root:pw@h3/test?ssl-mode=REQUIRED",
            ]
        );
        assert_eq!(
            split_hosts("mysql://h1,h2").unwrap(),
            ["mysql://h1", "mysql://h2"]
        );
    }

    #[test]
    fn one_host_comes_back_as_it_is() {
        for url in ["mysql://root@127.0.0.1:3306/test", "mysql://u:p,w@h/db"] {
            assert_eq!(split_hosts(url).unwrap(), [url]);
        }
    }

    #[test]
    fn config_check_reads_a_host_list() {
        let url = "mysql://root:s3cret@h1:4306,h2:4307,h3:4308/test";
        assert_eq!(
            crate::AnyClaimStore::check_url(url).unwrap(),
            crate::Backend::MySql
        );
        let e = crate::AnyClaimStore::check_url("mysql://root:s3cret@h1:4306,/test").unwrap_err();
        assert!(!e.message().contains("s3cret"), "{e}");
    }

    /// Every node refusing: the error names the last one tried, with its
    /// password hidden, and says the store is unavailable.
    #[tokio::test]
    async fn no_node_answering_is_unavailable_and_the_password_stays_hidden() {
        // Ports nothing listens on: bound and dropped at once.
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .unwrap()
        };
        let url = format!(
            "mysql://root:s3cret@127.0.0.1:{},127.0.0.1:{}/test",
            free(),
            free()
        );
        let e = match super::MySqlClaimStore::connect(&url, crate::StoreOptions::default()).await {
            Ok(_) => panic!("nothing listens there"),
            Err(e) => e,
        };
        assert_eq!(
            e.kind(),
            toolgate::claim::StoreErrorKind::Unavailable,
            "{e}"
        );
        assert!(!e.message().contains("s3cret"), "{e}");
        assert!(e.message().contains("root:***@127.0.0.1:"), "{e}");
    }

    #[test]
    fn an_empty_host_is_refused_without_the_password() {
        let e = split_hosts("mysql://root:s3cret@h1,,h3/test").unwrap_err();
        assert!(e.message().contains("empty host"), "{e}");
        assert!(!e.message().contains("s3cret"), "{e}");
    }
}
