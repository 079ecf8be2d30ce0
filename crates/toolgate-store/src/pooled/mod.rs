//! The store on an sqlx pool, generic over the driver: PostgreSQL and
//! MySQL/MariaDB are one implementation, [`PooledStore`], of the claim
//! protocol ([`ClaimStore`]), the review queue and the `Idempotency-Key`
//! memory, over a [`Pooled`] driver whose statements its folder writes.
//! Each unit of the protocol runs on a transaction of its own.
//!
//! A store keeps its server's pool as one node ([`nodes`]); a MySQL URL
//! listing several hosts (a Galera cluster) gives a node per host, one in
//! use at a time, with failover between them.

mod floor;
mod idempotency;
pub(crate) mod nodes;
mod review;
mod statements;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use toolgate::claim::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStore, CompleteRequest, Completion, JsonText,
    OperationKey, RawClaim, ReconcileRequest, Reconciled, StoreError, StuckEntry, UnixMillis,
};
use toolgate::pipeline::AppliedCompletion;

use crate::common::map_err;
use crate::dialect::{Dialect, Reads};
use crate::protocol::{self, Answer, ClaimBackend, Clock, End, TxFail, Unit, run_unit, unit_what};
use crate::write::{StoreWrite, WriteCompleted, WriteFuture};
use nodes::{FailoverCounts, Nodes, no_node, node_lost};
use statements::PooledTx;

/// A driver [`PooledStore`] runs on: PostgreSQL and MySQL/MariaDB.
pub(crate) trait Pooled: Dialect {
    /// Runs an application's `write` ([`StoreWrite`]'s method for this
    /// driver) on `conn`, inside the completion's transaction.
    fn app_write<'c>(write: &'c dyn StoreWrite, conn: &'c mut Self::Connection) -> WriteFuture<'c>;

    /// Runs a review item insert: the new id, or `None` when a clash
    /// inserted nothing (PostgreSQL reads it from `RETURNING`, MySQL from
    /// the insert's last id).
    fn insert_id(
        pool: &sqlx::Pool<Self>,
        q: sqlx::query::Query<'static, Self, Self::Arguments>,
    ) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;
}

/// `impl … where …` with the bounds every [`Pooled`] driver meets (the
/// types it binds, decodes and reads rows as), written once for the
/// impls of this module.
macro_rules! with_pooled_bounds {
    ([$($head:tt)*] { $($body:tt)* }) => {
        $($head)*
        where
            DB: $crate::pooled::Pooled,
            for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
            for<'a> &'a [u8]: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
            for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB> + sqlx::ColumnIndex<DB::Row>,
            for<'a> Option<&'a [u8]>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
            for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
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
            for<'r> crate::idempotency::SqlRow: sqlx::FromRow<'r, DB::Row>,
            for<'r> (i64, i64): sqlx::FromRow<'r, DB::Row>,
            for<'r> (String, i64): sqlx::FromRow<'r, DB::Row>,
            for<'r> (String, String): sqlx::FromRow<'r, DB::Row>,
            for<'r> (i64,): sqlx::FromRow<'r, DB::Row>,
            DB::Arguments: sqlx::IntoArguments<DB>,
        {
            $($body)*
        }
    };
}
pub(crate) use with_pooled_bounds;

/// The claims, review queue and `Idempotency-Key` memory on PostgreSQL
/// ([`crate::postgres::PgClaimStore`]) or MySQL/MariaDB
/// ([`crate::mysql::MySqlClaimStore`]): one server, or the nodes of a
/// Galera cluster with failover between them.
///
/// Cloning gives another handle to the same connections.
pub struct PooledStore<DB: sqlx::Database> {
    nodes: Arc<Nodes<DB>>,
    clock: Clock,
    #[cfg(feature = "fault-injection")]
    hook: Option<crate::fault::FaultHook>,
}

impl<DB: sqlx::Database> Clone for PooledStore<DB> {
    fn clone(&self) -> Self {
        Self {
            nodes: Arc::clone(&self.nodes),
            clock: self.clock,
            #[cfg(feature = "fault-injection")]
            hook: self.hook.clone(),
        }
    }
}

impl<DB: sqlx::Database> PooledStore<DB> {
    /// A store on `nodes`, with the wall clock.
    pub(crate) fn on(nodes: Nodes<DB>) -> Self {
        Self {
            nodes: Arc::new(nodes),
            clock: crate::now_millis,
            #[cfg(feature = "fault-injection")]
            hook: None,
        }
    }

    /// The pool of the node in use, for operations outside the claim
    /// protocol. With several nodes this follows the failover: ask again
    /// rather than keep it.
    pub fn pool(&self) -> &sqlx::Pool<DB> {
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

    fn hook(&self) -> Option<&crate::common::Hook> {
        #[cfg(feature = "fault-injection")]
        return self.hook.as_ref();
        #[cfg(not(feature = "fault-injection"))]
        None
    }
}

/// A connection of one node's transaction pool, kept by one decision
/// (`crate::held`): idle between its read and its claim, or in the
/// transaction its won claim chained for its write.
pub(crate) struct Kept<DB: sqlx::Database> {
    /// The node whose pool it came from: after a failover it serves no
    /// transaction and goes back.
    node: usize,
    conn: KeptConn<DB>,
}

/// What a kept connection is doing.
pub(crate) enum KeptConn<DB: sqlx::Database> {
    /// Outside any transaction: its read ran in autocommit.
    Idle(sqlx::pool::PoolConnection<DB>),
    /// In the empty transaction a won claim's `COMMIT AND CHAIN` began, so
    /// the write and completion that follow skip their `BEGIN` round trip.
    /// Dropped unused, sqlx queues its `ROLLBACK`, sent before the
    /// connection serves anyone else.
    Chained(sqlx::Transaction<'static, DB>),
}

impl<DB: sqlx::Database> Kept<DB> {
    /// The connection if it is idle: a read must not run inside a
    /// chained transaction, which then goes back to the pool.
    pub(crate) fn idle(self) -> Option<Self> {
        matches!(self.conn, KeptConn::Idle(_)).then_some(self)
    }
}

impl<DB: sqlx::Database> std::ops::Deref for Kept<DB> {
    type Target = DB::Connection;
    fn deref(&self) -> &DB::Connection {
        match &self.conn {
            KeptConn::Idle(c) => c,
            KeptConn::Chained(tx) => tx,
        }
    }
}

impl<DB: sqlx::Database> std::ops::DerefMut for Kept<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        match &mut self.conn {
            KeptConn::Idle(c) => c,
            KeptConn::Chained(tx) => tx,
        }
    }
}

impl<DB: sqlx::Database> PooledStore<DB> {
    /// A connection from the transaction pool of the node a claim would
    /// use now, for a decision to keep (`crate::held`).
    pub(crate) async fn acquire(&self) -> Result<Kept<DB>, StoreError> {
        let i = self.nodes.pick();
        let node = &self.nodes.list[i];
        let what = format!("connecting to {}", <DB as sqlx::Database>::NAME);
        match node.pool.acquire().await {
            Ok(conn) => Ok(Kept {
                node: i,
                conn: KeptConn::Idle(conn),
            }),
            Err(e) => Err(node.named(map_err(&what, e))),
        }
    }

    /// Whether `other` is a handle to this store's connections.
    pub(crate) fn same_as(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.nodes, &other.nodes)
    }
}

/// A store whose next transaction begins on a connection a decision kept
/// ([`claim_on`], [`write_and_complete_on`]); the rest is the store's.
struct FirstOn<'a, DB: sqlx::Database> {
    store: &'a PooledStore<DB>,
    conn: std::sync::Mutex<Option<Kept<DB>>>,
    /// Whether a transaction that commits leaves its connection in `conn`
    /// for the decision's next one, instead of giving it back to the pool.
    keep: bool,
}

impl<DB: sqlx::Database> FirstOn<'_, DB> {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Kept<DB>>> {
        // Taking and putting back cannot panic halfway: a poisoned slot is whole.
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

with_pooled_bounds! {
[impl<DB> ClaimBackend for FirstOn<'_, DB>]
{
    async fn transaction(&self, unit: Unit) -> Result<Answer, TxFail> {
        let first = self.slot().take();
        let (answer, kept) = transaction_on(self.store, first, self.keep, &unit).await?;
        *self.slot() = kept;
        Ok(answer)
    }

    async fn read_claim(&self, key: &OperationKey) -> Result<Option<ClaimRecord>, StoreError> {
        ClaimBackend::read_claim(self.store, key).await
    }

    fn clock(&self) -> Clock {
        self.store.clock
    }

    fn read_back_settled(&self, settled: bool) {
        ClaimBackend::read_back_settled(self.store, settled);
    }

    async fn fault_after_commit(&self) -> bool {
        ClaimBackend::fault_after_commit(self.store).await
    }
}
}

with_pooled_bounds! {
[
/// Claims `request` as [`ClaimStore::claim`] does, its first transaction
/// on `conn` when given: a connection of `store`'s that a decision kept
/// since its read (`crate::held`). With `keep`, the connection whose
/// transaction committed (the claim was won) is answered with the claim,
/// in the transaction its `COMMIT AND CHAIN` began, for the decision's
/// write and completion; any other goes back to the pool when its
/// transaction ends, and a retry acquires as usual.
pub(crate) async fn claim_on<DB>(
    store: &PooledStore<DB>,
    conn: Option<Kept<DB>>,
    keep: bool,
    request: ClaimRequest,
) -> (Result<RawClaim, StoreError>, Option<Kept<DB>>)
]
{
    let first = FirstOn {
        store,
        conn: std::sync::Mutex::new(conn),
        keep,
    };
    let claimed = protocol::claim(&first, request).await;
    // A transaction that rolled back left nothing; one that committed left
    // its connection only with `keep`.
    let kept = first.slot().take();
    (claimed, kept)
}
}

with_pooled_bounds! {
[
/// Runs `write` and the completion as [`crate::AnyClaimStore::write_and_complete`]
/// does, its first transaction on `conn`: the connection the decision's
/// claim committed on, in the transaction the claim chained
/// (`crate::held`). It goes back to the pool when that transaction ends.
pub(crate) async fn write_and_complete_on<DB>(
    store: &PooledStore<DB>,
    conn: Kept<DB>,
    write: Arc<dyn StoreWrite>,
    receipt: &JsonText,
    completion: &AppliedCompletion,
) -> Result<WriteCompleted, StoreError>
]
{
    let first = FirstOn {
        store,
        conn: std::sync::Mutex::new(Some(conn)),
        keep: false,
    };
    protocol::write_and_complete(&first, write, receipt, completion).await
}
}

with_pooled_bounds! {
[
/// Runs `unit` on the node in use: on `first` when it is that node's,
/// else on a connection from the node's pool. A kept connection of a node
/// the store left goes back to its pool. With `keep`, a transaction that
/// committed answers its connection too.
async fn transaction_on<DB>(
    store: &PooledStore<DB>,
    mut first: Option<Kept<DB>>,
    keep: bool,
    unit: &Unit,
) -> Result<(Answer, Option<Kept<DB>>), TxFail>
]
{
    let nodes = &store.nodes;
    let mut last = None;
    for _ in 0..nodes.list.len() {
        let i = nodes.pick();
        let node = &nodes.list[i];
        let kept = first.take().filter(|k| k.node == i).map(|k| k.conn);
        match transaction(&node.pool, kept, keep, store.hook(), unit).await {
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
            Err(other) => return Err(other),
            Ok((answer, conn)) => {
                return Ok((answer, conn.map(|tx| Kept { node: i, conn: KeptConn::Chained(tx) })));
            }
        }
    }
    Err(TxFail::Failed(last.unwrap_or_else(no_node::<DB>)))
}
}

with_pooled_bounds! {
[impl<DB> ClaimBackend for PooledStore<DB>]
{
    async fn transaction(&self, unit: Unit) -> Result<Answer, TxFail> {
        Ok(transaction_on(self, None, false, &unit).await?.0)
    }

    async fn read_claim(&self, key: &OperationKey) -> Result<Option<ClaimRecord>, StoreError> {
        self.nodes
            .read(|pool| async move { Reads(&pool).claim(key).await })
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
}

with_pooled_bounds! {
[impl<DB> ClaimStore for PooledStore<DB>]
{
    async fn claim(&self, request: ClaimRequest) -> Result<RawClaim, StoreError> {
        protocol::claim(self, request).await
    }

    async fn complete(&self, request: CompleteRequest) -> Result<Completion, StoreError> {
        protocol::complete(self, request).await
    }

    async fn fetch(&self, key: &OperationKey) -> Result<Option<ClaimRecord>, StoreError> {
        ClaimBackend::read_claim(self, key).await
    }

    async fn list_stuck(&self, now: UnixMillis, limit: u32) -> Result<Vec<StuckEntry>, StoreError> {
        self.nodes
            .read(|pool| async move { Reads(&pool).list_stuck(now, limit).await })
            .await
    }

    async fn budget_reserved(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.nodes
            .read(|pool| async move { Reads(&pool).budget_reserved().await })
            .await
    }

    async fn record_reconciliation(
        &self,
        request: ReconcileRequest<'_>,
    ) -> Result<Reconciled, StoreError> {
        protocol::reconcile(self, request.key, request.outcome, request.now).await
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
                    .map_err(|e| map_err(&format!("connecting to {}", DB::NAME), e))
            })
            .await
    }

    async fn audit_trail(
        &self,
        key: &OperationKey,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.nodes
            .read(|pool| async move { Reads(&pool).audit_trail(key, limit).await })
            .await
    }
}
}

/// Runs `unit` in a transaction of its own on `conn` (a connection of
/// `pool` a decision kept, idle or in the transaction its claim chained)
/// or else on one from `pool`. The connection goes back to the pool when
/// the transaction has ended, unless `keep` asks for it back from a
/// transaction that committed: that one ends with `COMMIT AND CHAIN`, and
/// the decision's next unit runs in the transaction it began.
async fn transaction<DB>(
    pool: &sqlx::Pool<DB>,
    conn: Option<KeptConn<DB>>,
    keep: bool,
    hook: Option<&crate::common::Hook>,
    unit: &Unit,
) -> Result<(Answer, Option<sqlx::Transaction<'static, DB>>), TxFail>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'t> PooledTx<'t, DB>: crate::protocol::Statements<Error = sqlx::Error>,
{
    let failed = |what: &str, e: sqlx::Error| {
        if DB::is_lost_race(&e) {
            TxFail::LostRace
        } else {
            TxFail::Failed(map_err(what, e))
        }
    };
    let begun = match conn {
        Some(KeptConn::Chained(tx)) => Ok(tx),
        // An owned transaction, as `Pool::begin` makes one from the
        // connection it acquired (sqlx hides this constructor from its
        // docs; its public `begin` on a `&mut` connection would borrow,
        // and a chained transaction must outlive this call).
        Some(KeptConn::Idle(conn)) => sqlx::Transaction::begin(conn, None).await,
        None => pool.begin().await,
    };
    let mut tx = begun.map_err(|e| failed("beginning a transaction", e))?;
    let (answer, end) = run_unit(&mut PooledTx { tx: &mut tx, hook }, unit)
        .await
        .map_err(|e| failed(unit_what(unit), e))?;
    let committed = match end {
        End::Rollback => {
            // Nothing worth keeping; a failed rollback closes the
            // connection, which rolls back too.
            let _ = tx.rollback().await;
            return Ok((answer, None));
        }
        // The chained transaction is sqlx's still-open one: if it is
        // dropped unused, sqlx rolls it back as it would this one.
        End::Commit if keep => match sqlx::raw_sql("COMMIT AND CHAIN").execute(&mut *tx).await {
            Ok(_) => return Ok((answer, Some(tx))),
            Err(e) => Err(e),
        },
        End::Commit => tx.commit().await,
    };
    match committed {
        Ok(()) => Ok((answer, None)),
        Err(e) if DB::is_lost_race(&e) => Err(TxFail::LostRace),
        Err(e) => Err(TxFail::Unknown(map_err("COMMIT", e))),
    }
}
