//! The claim protocol on SQLite: its statements on the writer's
//! connection, inside the group commit's transaction ([`WriterTx`]), and
//! [`ClaimStore`] for [`SqliteClaimStore`], whose units run on the writer
//! and whose lookups on the store's own reader connections.

use std::future::Future;

use rusqlite::types::ToSqlOutput;
use toolgate::claim::{
    Attempt, AuditEntry, BudgetReservation, ClaimRecord, ClaimRequest, ClaimStore, CompleteRequest,
    Completion, CorruptRecord, GrantUse, HolderToken, JsonText, OperationKey, RawClaim,
    ReconcileRequest, Reconciled, Resolution, StoreError, StoreErrorKind, StuckEntry, UnixMillis,
};

use super::error::{is_busy, rusqlite_error};
use super::sql::{self, SQL};
use super::{SqliteClaimStore, WriteError, rusqlite};
use crate::common::{ClaimTxPoint, map_err};
use crate::dialect::Reads;
use crate::protocol::{
    self, Answer, ClaimBackend, Clock, End, Held, Statements, TxFail, Unit, unit_what,
};
use crate::rows::{self, RusqliteRow};
use crate::write::StoreWrite;

/// An attempt's columns, in the order the claim's insert and its
/// reopening both name them: fingerprint, tool, arguments, scope,
/// version_seen, proposer, holder, lease end, claim time, executor.
fn attempt_params<'a>(req: &'a ClaimRequest, attempt: &Attempt) -> [ToSqlOutput<'a>; 10] {
    let p = req.proposal();
    [
        req.fingerprint().as_bytes().as_slice().into(),
        p.tool().into(),
        p.arguments().into(),
        p.scope().into(),
        p.version_seen().into(),
        p.proposer().into(),
        req.holder().as_bytes().as_slice().into(),
        attempt.lease_expires_at.0.into(),
        attempt.now.0.into(),
        req.executor().as_str().into(),
    ]
}

/// The protocol's statements on the writer's connection, inside the
/// batch's transaction. rusqlite is synchronous: every future here is
/// ready at its first poll (see [`run_now`]).
struct WriterTx<'c>(&'c rusqlite::Connection);

impl Statements for WriterTx<'_> {
    type Error = rusqlite::Error;

    async fn insert_claim(
        &mut self,
        req: &ClaimRequest,
        attempt: &Attempt,
    ) -> Result<(), rusqlite::Error> {
        let key = ToSqlOutput::from(req.key().as_bytes().as_slice());
        self.0
            .prepare_cached(SQL.claims.insert)?
            .execute(rusqlite::params_from_iter(
                std::iter::once(key).chain(attempt_params(req, attempt)),
            ))
            .map(drop)
    }

    async fn reopen_claim(
        &mut self,
        req: &ClaimRequest,
        attempt: &Attempt,
        closed: u32,
    ) -> Result<u64, rusqlite::Error> {
        let tail: [ToSqlOutput<'_>; 3] = [
            (i64::from(closed) + 1).into(),
            req.key().as_bytes().as_slice().into(),
            i64::from(closed).into(),
        ];
        let n = self
            .0
            .prepare_cached(SQL.claims.reopen)?
            .execute(rusqlite::params_from_iter(
                attempt_params(req, attempt).into_iter().chain(tail),
            ))?;
        Ok(n as u64)
    }

    async fn budget_forget_released(&mut self, key: &OperationKey) -> Result<(), rusqlite::Error> {
        self.0
            .prepare_cached(SQL.budget.forget_released)?
            .execute([key.as_bytes().as_slice()])
            .map(drop)
    }

    async fn read_claim(
        &mut self,
        key: &OperationKey,
    ) -> Result<Option<Result<ClaimRecord, CorruptRecord>>, rusqlite::Error> {
        select_claim(self.0, key)
    }

    async fn consume_grant(
        &mut self,
        req: &ClaimRequest,
        grant: &GrantUse,
        now: UnixMillis,
    ) -> Result<u64, rusqlite::Error> {
        let n = self
            .0
            .prepare_cached(SQL.claims.consume_grant)?
            .execute(rusqlite::params![
                now.0,
                req.proposal().proposer(),
                grant.item,
                now.0,
                req.key().as_bytes().as_slice(),
                req.fingerprint().as_bytes().as_slice(),
                req.proposal().version_seen(),
                grant.policy_digest.as_str(),
                req.proposal().proposer(),
                req.via().unwrap_or(""),
                grant.item,
                req.proposal().proposer(),
                req.via().unwrap_or(""),
            ])?;
        Ok(n as u64)
    }

    async fn complete(
        &mut self,
        key: &OperationKey,
        holder: &HolderToken,
        result: &JsonText,
        now: UnixMillis,
    ) -> Result<u64, rusqlite::Error> {
        let n = self
            .0
            .prepare_cached(SQL.claims.complete)?
            .execute(rusqlite::params![
                now.0,
                result.as_str(),
                key.as_bytes().as_slice(),
                holder.as_bytes().as_slice(),
                now.0,
            ])?;
        Ok(n as u64)
    }

    async fn reconcile(
        &mut self,
        key: &OperationKey,
        resolution: Resolution,
        result: &JsonText,
        now: UnixMillis,
    ) -> Result<u64, rusqlite::Error> {
        let n = self
            .0
            .prepare_cached(SQL.claims.reconcile)?
            .execute(rusqlite::params![
                now.0,
                resolution.as_str(),
                result.as_str(),
                key.as_bytes().as_slice(),
                now.0,
            ])?;
        Ok(n as u64)
    }

    async fn budget_reserve(
        &mut self,
        key: &OperationKey,
        r: &BudgetReservation,
    ) -> Result<bool, rusqlite::Error> {
        self.0
            .prepare_cached(sql::BUDGET_ADD)?
            .execute(rusqlite::params![
                r.budget,
                r.scope,
                r.window_start.0,
                r.amount,
                r.amount
            ])?;
        let n = self
            .0
            .prepare_cached(crate::sql::shared::BUDGET_RECORD)?
            .execute(rusqlite::params![
                key.as_bytes().as_slice(),
                r.amount,
                r.budget,
                r.scope,
                r.window_start.0,
                r.limit
            ])?;
        Ok(n == 1)
    }

    async fn budget_used(&mut self, r: &BudgetReservation) -> Result<i64, rusqlite::Error> {
        self.0.prepare_cached(SQL.budget.used)?.query_row(
            rusqlite::params![r.budget, r.scope, r.window_start.0],
            |row| row.get(0),
        )
    }

    async fn budget_ledger_insert(
        &mut self,
        key: &OperationKey,
        r: &BudgetReservation,
        state: &str,
    ) -> Result<(), rusqlite::Error> {
        self.0
            .prepare_cached(SQL.budget.ledger_insert)?
            .execute(rusqlite::params![
                key.as_bytes().as_slice(),
                r.budget,
                r.scope,
                r.window_start.0,
                r.amount,
                state
            ])
            .map(drop)
    }

    async fn budget_held(&mut self, key: &OperationKey) -> Result<Vec<Held>, rusqlite::Error> {
        let mut stmt = self.0.prepare_cached(SQL.budget.held)?;
        let rows = stmt.query_map(rusqlite::params![key.as_bytes().as_slice()], |row| {
            Ok(Held {
                budget: row.get(0)?,
                scope: row.get(1)?,
                window_start: row.get(2)?,
                amount: row.get(3)?,
            })
        })?;
        rows.collect()
    }

    async fn budget_ledger_release(
        &mut self,
        key: &OperationKey,
        budget: &str,
    ) -> Result<u64, rusqlite::Error> {
        let n = self
            .0
            .prepare_cached(SQL.budget.release)?
            .execute(rusqlite::params![key.as_bytes().as_slice(), budget])?;
        Ok(n as u64)
    }

    async fn budget_subtract(&mut self, held: &Held) -> Result<(), rusqlite::Error> {
        self.0
            .prepare_cached(SQL.budget.subtract)?
            .execute(rusqlite::params![
                held.amount,
                held.budget,
                held.scope,
                held.window_start
            ])
            .map(drop)
    }

    async fn append_audit(&mut self, entry: &AuditEntry) -> Result<(), rusqlite::Error> {
        self.0
            .prepare_cached(SQL.claims.append_audit)?
            .execute(rusqlite::params![
                entry.at().0,
                entry.actor(),
                entry.tool(),
                entry.outcome(),
                entry.reason(),
                entry.key().map(|k| k.as_bytes().as_slice()),
                entry.fingerprint().map(|f| f.as_bytes().as_slice()),
                entry.via(),
                entry.attempt(),
            ])
            .map(drop)
    }

    async fn app_write(&mut self, write: &dyn StoreWrite) -> Result<bool, rusqlite::Error> {
        write.sqlite(self.0)
    }

    // SQLite's claims share one writer connection: nothing to kill per
    // claim, so only `AfterCommit` is offered (`fault_after_commit`).
    async fn fault(&mut self, _point: ClaimTxPoint) {}
}

/// The claim row on `key`, on any `rusqlite` connection.
fn select_claim(
    conn: &rusqlite::Connection,
    key: &OperationKey,
) -> Result<Option<Result<ClaimRecord, CorruptRecord>>, rusqlite::Error> {
    let mut select = conn.prepare_cached(SQL.claims.select)?;
    let mut found = select.query([key.as_bytes().as_slice()])?;
    Ok(found.next()?.map(|row| rows::claim(&RusqliteRow(row))))
}

/// Runs a future that never waits: the protocol's body over [`WriterTx`],
/// whose statements are synchronous. A unit that did wait would be a bug;
/// it panics, and the writer fails that unit as it does any panicking one.
fn run_now<F: Future>(work: F) -> F::Output {
    let mut work = std::pin::pin!(work);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match work.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("a SQLite unit waited for something"),
    }
}

// For a shared reference: the protocol takes its backend by `&mut`, which
// only a decision's own connection (`pooled::claim_on`) makes use of.
impl ClaimBackend for &SqliteClaimStore {
    /// The unit runs on the writer's thread as one unit of a group commit,
    /// inside a savepoint of its own, so that a unit ending in a rollback
    /// (a grant no longer usable) undoes only itself. Its answer comes
    /// after the batch's `COMMIT`.
    async fn transaction(&mut self, unit: Unit) -> Result<Answer, TxFail> {
        let what = unit_what(&unit);
        let written = self
            .writer
            .write(move |conn| {
                conn.execute_batch("SAVEPOINT toolgate_unit")?;
                let (answer, end) = run_now(protocol::run_unit(&mut WriterTx(conn), &unit))?;
                match end {
                    End::Commit => conn.execute_batch("RELEASE toolgate_unit")?,
                    End::Rollback => {
                        conn.execute_batch("ROLLBACK TO toolgate_unit; RELEASE toolgate_unit")?
                    }
                }
                Ok(answer)
            })
            .await;
        written.map_err(|e| match e {
            WriteError::Unit(e) if is_busy(&e) => TxFail::LostRace,
            WriteError::Unit(e) => TxFail::Failed(rusqlite_error(what, e)),
            // The batch rolled back (another process held the lock, or
            // another unit broke it): nothing was written, so run it
            // again; a lasting cause ends as a contention error.
            WriteError::NotApplied { .. } => TxFail::LostRace,
            e @ WriteError::Unknown(_) => TxFail::Unknown(StoreError::with_source(
                StoreErrorKind::Unavailable,
                format!("{what}: {e}"),
                e,
            )),
            e @ WriteError::Stopped => TxFail::Failed(StoreError::with_source(
                StoreErrorKind::Unavailable,
                format!("{what}: {e}"),
                e,
            )),
        })
    }

    async fn read_claim(&self, key: &OperationKey) -> Result<Option<ClaimRecord>, StoreError> {
        let row = self
            .readers
            .read(|conn| select_claim(conn, key))
            .map_err(|e| rusqlite_error("reading a claim", e))?;
        row.transpose().map_err(|p| StoreError::corrupt(&p))
    }

    fn clock(&self) -> Clock {
        self.clock
    }

    #[cfg(feature = "fault-injection")]
    async fn fault_after_commit(&self) -> bool {
        match &self.hook {
            Some(hook) => hook(ClaimTxPoint::AfterCommit.into(), -1).await,
            None => false,
        }
    }
}

impl ClaimStore for SqliteClaimStore {
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
        Reads(&self.pool).list_stuck(now, limit).await
    }

    async fn budget_reserved(&self) -> Result<Vec<(String, i64)>, StoreError> {
        Reads(&self.pool).budget_reserved().await
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

    async fn audit_trail(
        &self,
        key: &OperationKey,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        Reads(&self.pool).audit_trail(key, limit).await
    }

    /// The claim lookup a stale version or a missing approval makes (a key that cannot
    /// exist), the writer thread every write goes through, and the pool
    /// the listings and the audit trail use.
    async fn ready(&self) -> Result<(), StoreError> {
        ClaimBackend::read_claim(&self, &OperationKey::from_bytes([0; OperationKey::LEN])).await?;
        if !self.writer.is_running() {
            return Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "the SQLite writer thread has stopped",
            ));
        }
        sqlx::query("SELECT 1 FROM toolgate_claims WHERE 1 = 0")
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map_err("checking the SQLite pool", e))?;
        Ok(())
    }
}
