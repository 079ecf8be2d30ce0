//! The protocol's statements inside one pooled transaction, generic over
//! the driver.

use toolgate::claim::{
    Attempt, AuditEntry, BudgetReservation, ClaimRecord, ClaimRequest, CorruptRecord, GrantUse,
    HolderToken, JsonText, OperationKey, Resolution, UnixMillis,
};

use crate::common::ClaimTxPoint;
use crate::protocol::{Held, Statements};
use crate::rows::{self, SqlxRow};
use crate::write::StoreWrite;

/// One unit's transaction on a pooled connection. Borrowed, not owned:
/// a claim's transaction may outlive its unit, chained into the decision's
/// write (`super::transaction`).
pub(super) struct PooledTx<'h, DB: sqlx::Database> {
    pub(super) tx: &'h mut sqlx::Transaction<'static, DB>,
    #[cfg_attr(
        not(feature = "fault-injection"),
        expect(dead_code, reason = "fault hooks only")
    )]
    pub(super) hook: Option<&'h crate::common::Hook>,
}

super::with_pooled_bounds! {
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

super::with_pooled_bounds! {
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
