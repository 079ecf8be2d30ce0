//! [`IdempotencyStore`] on a pooled driver: one implementation for
//! PostgreSQL and MySQL/MariaDB (see `crate::idempotency` for what the
//! backends share).

use toolgate::claim::{StoreError, UnixMillis};
use toolgate::idempotency::{Begun, Bounds, IdemBegin, IdemFinish, IdemRun, IdempotencyStore};

use super::{PooledStore, with_pooled_bounds};
use crate::common::map_err;
use crate::idempotency::{ATTEMPTS, Next, Row, SqlRow, batch, judge, lost_races, over_quota};

fn is_duplicate(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

with_pooled_bounds! {
[#[expect(private_bounds, reason = "private helpers over the crate's own drivers")]
impl<DB> PooledStore<DB>]
{
    /// Deletes one finished answer inside `tx`: its bytes if it was there.
    async fn delete_done(
        tx: &mut sqlx::Transaction<'_, DB>,
        principal: &str,
        key: &str,
    ) -> Result<Option<i64>, StoreError> {
        let what = "removing an Idempotency-Key answer";
        let sql = &DB::SQL.idempotency;
        // PostgreSQL returns the deleted row's bytes; MySQL reads them
        // first under a row lock.
        let bytes: Option<(i64,)> = if let Some(lock_done) = sql.lock_done {
            let found: Option<(i64,)> = sqlx::query_as(lock_done)
                .bind(principal)
                .bind(key)
                .fetch_optional(&mut **tx)
                .await
                .map_err(|e| map_err(what, e))?;
            if found.is_some() {
                sqlx::query(sql.delete_done)
                    .bind(principal)
                    .bind(key)
                    .execute(&mut **tx)
                    .await
                    .map_err(|e| map_err(what, e))?;
            }
            found
        } else {
            sqlx::query_as(sql.delete_done)
                .bind(principal)
                .bind(key)
                .fetch_optional(&mut **tx)
                .await
                .map_err(|e| map_err(what, e))?
        };
        Ok(bytes.map(|b| b.0))
    }
}
}

with_pooled_bounds! {
[impl<DB> IdempotencyStore for PooledStore<DB>]
{
    async fn idem_begin(&self, begin: IdemBegin<'_>) -> Result<Begun, StoreError> {
        let what = "beginning an Idempotency-Key";
        let IdemBegin {
            principal,
            key,
            payload,
            runner,
            now,
            lease_until,
        } = begin;
        for _ in 0..ATTEMPTS {
            let inserted = sqlx::query(DB::SQL.idempotency.insert)
                .bind(principal)
                .bind(key)
                .bind(payload.to_vec())
                .bind(runner)
                .bind(lease_until.0)
                .execute(self.pool())
                .await;
            match inserted {
                Ok(_) => return Ok(Begun::Fresh),
                Err(e) if is_duplicate(&e) => {}
                Err(e) => return Err(map_err(what, e)),
            }
            let row: Option<SqlRow> = sqlx::query_as(DB::SQL.idempotency.select)
                .bind(principal)
                .bind(key)
                .fetch_optional(self.pool())
                .await
                .map_err(|e| map_err(what, e))?;
            // Gone since the insert failed (finished and purged, or
            // forgotten): insert again.
            let Some(r) = row else { continue };
            let row = Row {
                payload: r.0,
                runner: r.1,
                state: r.2,
                lease_until: r.3,
                status: r.4.map(i64::from),
                content_type: r.5,
                outcome: r.6,
                body: r.7,
            };
            match judge(row, &payload, now)? {
                Next::Answer(a) => return Ok(a),
                Next::TakeOver(old) => {
                    let taken = sqlx::query(DB::SQL.idempotency.take_over)
                        .bind(runner)
                        .bind(lease_until.0)
                        .bind(principal)
                        .bind(key)
                        .bind(old)
                        .bind(now.0)
                        .execute(self.pool())
                        .await
                        .map_err(|e| map_err(what, e))?;
                    if DB::rows_affected(&taken) == 1 {
                        return Ok(Begun::Fresh);
                    }
                }
            }
        }
        Err(lost_races())
    }

    async fn idem_finish(&self, finish: IdemFinish<'_>) -> Result<(), StoreError> {
        let what = "remembering an Idempotency-Key answer";
        let bytes = finish.cost();
        let (principal, key, runner) = (finish.principal, finish.key, finish.runner);
        let (answer, now, bounds) = (finish.answer, finish.now, finish.bounds);
        let mut tx = self.pool().begin().await.map_err(|e| map_err(what, e))?;
        let done = sqlx::query(DB::SQL.idempotency.finish)
            .bind(now.0)
            .bind(i32::from(answer.status))
            .bind(answer.content_type)
            .bind(answer.outcome)
            .bind(answer.body)
            .bind(i64::try_from(bytes).unwrap_or(i64::MAX))
            .bind(principal)
            .bind(key)
            .bind(runner)
            .execute(&mut *tx)
            .await
            .map_err(|e| map_err(what, e))?;
        // The row was taken over (or forgotten): nothing of ours to count.
        if DB::rows_affected(&done) != 1 {
            return Ok(());
        }
        sqlx::query(DB::SQL.idempotency.totals_add)
            .bind(principal)
            .bind(i64::try_from(bytes).unwrap_or(i64::MAX))
            .execute(&mut *tx)
            .await
            .map_err(|e| map_err(what, e))?;
        let (count, total): (i64, i64) = sqlx::query_as(DB::SQL.idempotency.totals_of)
            .bind(principal)
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| map_err(what, e))?;
        let (count, total) = (
            u64::try_from(count).unwrap_or(0),
            u64::try_from(total).unwrap_or(0),
        );
        if count > bounds.capacity || total > bounds.max_bytes {
            let oldest: Vec<(String, i64)> = sqlx::query_as(DB::SQL.idempotency.oldest_of)
                .bind(principal)
                .bind(batch())
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| map_err(what, e))?;
            let (mut gone, mut freed) = (0i64, 0i64);
            for old in over_quota(oldest, count, total, bounds) {
                if let Some(b) = Self::delete_done(&mut tx, principal, &old).await? {
                    gone += 1;
                    freed += b;
                }
            }
            if gone > 0 {
                sqlx::query(DB::SQL.idempotency.totals_sub)
                    .bind(gone)
                    .bind(freed)
                    .bind(principal)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| map_err(what, e))?;
            }
        }
        tx.commit().await.map_err(|e| map_err(what, e))
    }

    async fn idem_forget(&self, run: IdemRun<'_>) -> Result<(), StoreError> {
        sqlx::query(DB::SQL.idempotency.forget)
            .bind(run.principal)
            .bind(run.key)
            .bind(run.runner)
            .execute(self.pool())
            .await
            .map_err(|e| map_err("forgetting an Idempotency-Key", e))?;
        Ok(())
    }

    async fn idem_purge(&self, now: UnixMillis, bounds: Bounds) -> Result<(), StoreError> {
        let what = "purging Idempotency-Key answers";
        let cutoff = now.0.saturating_sub(bounds.retention_ms);
        let expired: Vec<(String, String)> = sqlx::query_as(DB::SQL.idempotency.expired)
            .bind(cutoff)
            .bind(batch())
            .fetch_all(self.pool())
            .await
            .map_err(|e| map_err(what, e))?;
        // One transaction per row: a purge never holds two principals'
        // totals at once, so it cannot deadlock with their finishes.
        for (principal, key) in expired {
            let mut tx = self.pool().begin().await.map_err(|e| map_err(what, e))?;
            if let Some(b) = Self::delete_done(&mut tx, &principal, &key).await? {
                sqlx::query(DB::SQL.idempotency.totals_sub)
                    .bind(1i64)
                    .bind(b)
                    .bind(&principal)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| map_err(what, e))?;
            }
            tx.commit().await.map_err(|e| map_err(what, e))?;
        }
        let lapsed: Vec<(String, String)> = sqlx::query_as(DB::SQL.idempotency.lapsed)
            .bind(now.0)
            .bind(batch())
            .fetch_all(self.pool())
            .await
            .map_err(|e| map_err(what, e))?;
        for (principal, key) in lapsed {
            sqlx::query(DB::SQL.idempotency.delete_lapsed)
                .bind(principal)
                .bind(key)
                .bind(now.0)
                .execute(self.pool())
                .await
                .map_err(|e| map_err(what, e))?;
        }
        Ok(())
    }

}
}
