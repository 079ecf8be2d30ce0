//! The claim protocol on an sqlx pool, generic over the driver: its
//! statements inside one pooled transaction ([`PooledTx`]), the
//! transaction each unit runs in, on the node in use or on a connection a
//! decision kept, and [`ClaimStore`] for [`PooledStore`].

use std::sync::Arc;
use std::sync::atomic::Ordering;

use toolgate::claim::{
    Attempt, AuditEntry, BudgetReservation, ClaimRecord, ClaimRequest, ClaimStore, CompleteRequest,
    Completion, CorruptRecord, GrantUse, HolderToken, JsonText, OperationKey, RawClaim,
    ReconcileRequest, Reconciled, Resolution, StoreError, StuckEntry, UnixMillis,
};
use toolgate::pipeline::AppliedCompletion;

use super::nodes::{no_node, node_lost};
use super::{Kept, KeptConn, PooledStore, with_pooled_bounds};
use crate::common::{ClaimTxPoint, map_err};
use crate::dialect::{Dialect, Reads};
use crate::protocol::{
    self, Answer, ClaimBackend, Clock, End, Held, Statements, TxFail, Unit, run_unit, unit_what,
};
use crate::rows::{self, SqlxRow};
use crate::write::{StoreWrite, WriteCompleted};

/// One unit's transaction on a pooled connection. Borrowed, not owned:
/// a claim's transaction may outlive its unit, chained into the decision's
/// write ([`transaction`]).
pub(super) struct PooledTx<'h, DB: sqlx::Database> {
    pub(super) tx: &'h mut sqlx::Transaction<'static, DB>,
    #[cfg_attr(
        not(feature = "fault-injection"),
        expect(dead_code, reason = "fault hooks only")
    )]
    pub(super) hook: Option<&'h crate::common::Hook>,
}

with_pooled_bounds! {
[impl<DB> Statements for PooledTx<'_, DB>]
{
    type Error = sqlx::Error;

    async fn insert_claim(
        &mut self,
        req: &ClaimRequest,
        attempt: &Attempt,
    ) -> Result<(), sqlx::Error> {
        let q = sqlx::query(DB::SQL.claims.insert).bind(req.key().as_bytes().as_slice());
        PooledTx::bind_attempt(q, req, attempt)
            .execute(&mut **self.tx)
            .await
            .map(drop)
    }

    async fn reopen_claim(
        &mut self,
        req: &ClaimRequest,
        attempt: &Attempt,
        closed: u32,
    ) -> Result<u64, sqlx::Error> {
        let q = sqlx::query(DB::SQL.claims.reopen);
        let done = PooledTx::bind_attempt(q, req, attempt)
            .bind(i64::from(closed) + 1)
            .bind(req.key().as_bytes().as_slice())
            .bind(i64::from(closed))
            .execute(&mut **self.tx)
            .await?;
        Ok(DB::rows_affected(&done))
    }

    async fn budget_forget_released(&mut self, key: &OperationKey) -> Result<(), sqlx::Error> {
        sqlx::query(DB::SQL.budget.forget_released)
            .bind(key.as_bytes().as_slice())
            .execute(&mut **self.tx)
            .await
            .map(drop)
    }

    async fn read_claim(
        &mut self,
        key: &OperationKey,
    ) -> Result<Option<Result<ClaimRecord, CorruptRecord>>, sqlx::Error> {
        let row = sqlx::query(DB::SQL.claims.select)
            .bind(key.as_bytes().as_slice())
            .fetch_optional(&mut **self.tx)
            .await?;
        Ok(row.map(|row| rows::claim(&SqlxRow(&row))))
    }

    async fn consume_grant(
        &mut self,
        req: &ClaimRequest,
        grant: &GrantUse,
        now: UnixMillis,
    ) -> Result<u64, sqlx::Error> {
        let proposer = req.proposal().proposer();
        let via = req.via().unwrap_or("");
        let done = sqlx::query(DB::SQL.claims.consume_grant)
            .bind(now.0)
            .bind(proposer)
            .bind(grant.item)
            .bind(now.0)
            .bind(req.key().as_bytes().as_slice())
            .bind(req.fingerprint().as_bytes().as_slice())
            .bind(req.proposal().version_seen())
            .bind(grant.policy_digest.as_str())
            .bind(proposer)
            .bind(via)
            .bind(grant.item)
            .bind(proposer)
            .bind(via)
            .execute(&mut **self.tx)
            .await?;
        Ok(DB::rows_affected(&done))
    }

    async fn budget_reserve(
        &mut self,
        key: &OperationKey,
        r: &BudgetReservation,
    ) -> Result<bool, sqlx::Error> {
        use crate::sql::Reserve;
        let recorded = match DB::SQL.budget.reserve {
            #[cfg(feature = "postgres")]
            Reserve::Once(sql) => {
                sqlx::query(sql)
                    .bind(key.as_bytes().as_slice())
                    .bind(r.budget.as_str())
                    .bind(r.scope.as_str())
                    .bind(r.window_start.0)
                    .bind(r.amount)
                    .bind(r.limit)
                    .execute(&mut **self.tx)
                    .await?
            }
            #[cfg(any(feature = "sqlite", feature = "mysql"))]
            Reserve::AddThenRecord { add, record } => {
                sqlx::query(add)
                    .bind(r.budget.as_str())
                    .bind(r.scope.as_str())
                    .bind(r.window_start.0)
                    .bind(r.amount)
                    .bind(r.amount)
                    .execute(&mut **self.tx)
                    .await?;
                sqlx::query(record)
                    .bind(key.as_bytes().as_slice())
                    .bind(r.amount)
                    .bind(r.budget.as_str())
                    .bind(r.scope.as_str())
                    .bind(r.window_start.0)
                    .bind(r.limit)
                    .execute(&mut **self.tx)
                    .await?
            }
        };
        Ok(DB::rows_affected(&recorded) == 1)
    }

    async fn budget_used(&mut self, r: &BudgetReservation) -> Result<i64, sqlx::Error> {
        use sqlx::Row as _;
        let row = sqlx::query(DB::SQL.budget.used)
            .bind(r.budget.as_str())
            .bind(r.scope.as_str())
            .bind(r.window_start.0)
            .fetch_one(&mut **self.tx)
            .await?;
        row.try_get::<i64, _>("used")
    }

    async fn budget_ledger_insert(
        &mut self,
        key: &OperationKey,
        r: &BudgetReservation,
        state: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(DB::SQL.budget.ledger_insert)
            .bind(key.as_bytes().as_slice())
            .bind(r.budget.as_str())
            .bind(r.scope.as_str())
            .bind(r.window_start.0)
            .bind(r.amount)
            .bind(state)
            .execute(&mut **self.tx)
            .await
            .map(drop)
    }

    async fn budget_held(&mut self, key: &OperationKey) -> Result<Vec<Held>, sqlx::Error> {
        use sqlx::Row as _;
        let rows = sqlx::query(DB::SQL.budget.held)
            .bind(key.as_bytes().as_slice())
            .fetch_all(&mut **self.tx)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(Held {
                    budget: row.try_get::<String, _>("budget")?,
                    scope: row.try_get::<String, _>("scope")?,
                    window_start: row.try_get::<i64, _>("window_start")?,
                    amount: row.try_get::<i64, _>("amount")?,
                })
            })
            .collect()
    }

    async fn budget_ledger_release(
        &mut self,
        key: &OperationKey,
        budget: &str,
    ) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(DB::SQL.budget.release)
            .bind(key.as_bytes().as_slice())
            .bind(budget)
            .execute(&mut **self.tx)
            .await?;
        Ok(DB::rows_affected(&done))
    }

    async fn budget_subtract(&mut self, held: &Held) -> Result<(), sqlx::Error> {
        sqlx::query(DB::SQL.budget.subtract)
            .bind(held.amount)
            .bind(held.budget.as_str())
            .bind(held.scope.as_str())
            .bind(held.window_start)
            .execute(&mut **self.tx)
            .await
            .map(drop)
    }

    async fn complete(
        &mut self,
        key: &OperationKey,
        holder: &HolderToken,
        result: &JsonText,
        now: UnixMillis,
    ) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(DB::SQL.claims.complete)
            .bind(now.0)
            .bind(result.as_str())
            .bind(key.as_bytes().as_slice())
            .bind(holder.as_bytes().as_slice())
            .bind(now.0)
            .execute(&mut **self.tx)
            .await?;
        Ok(DB::rows_affected(&done))
    }

    async fn reconcile(
        &mut self,
        key: &OperationKey,
        resolution: Resolution,
        result: &JsonText,
        now: UnixMillis,
    ) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(DB::SQL.claims.reconcile)
            .bind(now.0)
            .bind(resolution.as_str())
            .bind(result.as_str())
            .bind(key.as_bytes().as_slice())
            .bind(now.0)
            .execute(&mut **self.tx)
            .await?;
        Ok(DB::rows_affected(&done))
    }

    async fn append_audit(&mut self, entry: &AuditEntry) -> Result<(), sqlx::Error> {
        sqlx::query(DB::SQL.claims.append_audit)
            .bind(entry.at().0)
            .bind(entry.actor())
            .bind(entry.tool())
            .bind(entry.outcome())
            .bind(entry.reason())
            .bind(entry.key().map(|k| k.as_bytes().as_slice()))
            .bind(entry.fingerprint().map(|f| f.as_bytes().as_slice()))
            .bind(entry.via())
            .bind(entry.attempt().map(i64::from))
            .execute(&mut **self.tx)
            .await
            .map(drop)
    }

    async fn app_write(&mut self, write: &dyn StoreWrite) -> Result<bool, sqlx::Error> {
        DB::app_write(write, &mut **self.tx).await
    }

    async fn fault(&mut self, point: ClaimTxPoint) {
        #[cfg(feature = "fault-injection")]
        if let Some(hook) = self.hook {
            let row = sqlx::query(DB::SQL.claims.connection_id)
                .fetch_one(&mut **self.tx)
                .await;
            let id = row
                .ok()
                .and_then(|row| rows::Columns::int(&SqlxRow(&row), "id").ok())
                .unwrap_or(-1);
            hook(point.into(), id).await;
        }
        #[cfg(not(feature = "fault-injection"))]
        let _ = point;
    }
}
}

with_pooled_bounds! {
[impl<DB> PooledTx<'_, DB>]
{
    /// An attempt's columns, bound in the order the claim's insert and
    /// its reopening both name them: fingerprint, tool, arguments, scope,
    /// version_seen, proposer, holder, lease end, claim time, executor.
    fn bind_attempt<'q>(
        q: sqlx::query::Query<'q, DB, DB::Arguments>,
        req: &'q ClaimRequest,
        attempt: &Attempt,
    ) -> sqlx::query::Query<'q, DB, DB::Arguments> {
        let p = req.proposal();
        q.bind(req.fingerprint().as_bytes().as_slice())
            .bind(p.tool())
            .bind(p.arguments())
            .bind(p.scope())
            .bind(p.version_seen())
            .bind(p.proposer())
            .bind(req.holder().as_bytes().as_slice())
            .bind(attempt.lease_expires_at.0)
            .bind(attempt.now.0)
            .bind(req.executor().as_str())
    }
}
}

/// A store whose next transaction begins on a connection a decision kept
/// ([`claim_on`], [`write_and_complete_on`]); the rest is the store's.
struct FirstOn<'a, DB: sqlx::Database> {
    store: &'a PooledStore<DB>,
    conn: Option<Kept<DB>>,
    /// Whether a transaction that commits leaves its connection in `conn`
    /// for the decision's next one, instead of giving it back to the pool.
    keep: bool,
}

with_pooled_bounds! {
[impl<DB> ClaimBackend for FirstOn<'_, DB>]
{
    async fn transaction(&mut self, unit: Unit) -> Result<Answer, TxFail> {
        let first = self.conn.take();
        let (answer, kept) = transaction_on(self.store, first, self.keep, &unit).await?;
        self.conn = kept;
        Ok(answer)
    }

    // Not an `async fn`: its future would hold `&self`, and a kept
    // connection is not `Sync`.
    fn read_claim(
        &self,
        key: &OperationKey,
    ) -> impl Future<Output = Result<Option<ClaimRecord>, StoreError>> + Send {
        let store = self.store;
        async move { ClaimBackend::read_claim(&store, key).await }
    }

    fn clock(&self) -> Clock {
        self.store.clock
    }

    fn read_back_settled(&self, settled: bool) {
        ClaimBackend::read_back_settled(&self.store, settled);
    }

    fn fault_after_commit(&self) -> impl Future<Output = bool> + Send {
        let store = self.store;
        async move { ClaimBackend::fault_after_commit(&store).await }
    }
}
}

with_pooled_bounds! {
[
/// Claims `request` as [`ClaimStore::claim`] does, its first transaction
/// on `conn` when given: a connection of `store`'s that a decision kept
/// since its read (`crate::session`). With `keep`, the connection whose
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
    let mut first = FirstOn { store, conn, keep };
    let claimed = protocol::claim(&mut first, request).await;
    // A transaction that rolled back left nothing; one that committed left
    // its connection only with `keep`.
    let kept = first.conn.take();
    (claimed, kept)
}
}

with_pooled_bounds! {
[
/// Runs `write` and the completion as [`crate::AnyClaimStore::write_and_complete`]
/// does, its first transaction on `conn`: the connection the decision's
/// claim committed on, in the transaction the claim chained
/// (`crate::session`). It goes back to the pool when that transaction ends.
pub(crate) async fn write_and_complete_on<DB>(
    store: &PooledStore<DB>,
    conn: Kept<DB>,
    write: Arc<dyn StoreWrite>,
    receipt: &JsonText,
    completion: &AppliedCompletion,
) -> Result<WriteCompleted, StoreError>
]
{
    let mut first = FirstOn {
        store,
        conn: Some(conn),
        keep: false,
    };
    protocol::write_and_complete(&mut first, write, receipt, completion).await
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
[impl<DB> ClaimBackend for &PooledStore<DB>]
{
    async fn transaction(&mut self, unit: Unit) -> Result<Answer, TxFail> {
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
        protocol::claim(&mut { self }, request).await
    }

    async fn complete(&self, request: CompleteRequest) -> Result<Completion, StoreError> {
        protocol::complete(&mut { self }, request).await
    }

    async fn fetch(&self, key: &OperationKey) -> Result<Option<ClaimRecord>, StoreError> {
        ClaimBackend::read_claim(&self, key).await
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
        protocol::reconcile(&mut { self }, request.key, request.outcome, request.now).await
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        protocol::append_audit(&mut { self }, entry).await
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
