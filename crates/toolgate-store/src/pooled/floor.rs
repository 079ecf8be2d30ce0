//! The floor's pair on a pooled driver (`crate::floor`).

use toolgate::claim::StoreError;

use super::{PooledStore, with_pooled_bounds};
use crate::common::map_err;
use crate::floor::{Pair, TOOL, lost_row};

with_pooled_bounds! {
[#[expect(private_bounds, reason = "private helpers over the crate's own drivers")]
impl<DB> PooledStore<DB>]
{
    /// A claim and a completion, two transactions on the pool, with the
    /// protocol's SQL.
    pub(crate) async fn floor_pair(&self, p: &Pair) -> Result<(), StoreError> {
        let e = |what: &'static str| move |e: sqlx::Error| map_err(what, e);
        let mut tx = self.pool().begin().await.map_err(e("floor: BEGIN"))?;
        sqlx::query(DB::SQL.claims.insert)
            .bind(p.key.as_slice())
            .bind(p.fingerprint.as_slice())
            .bind(TOOL)
            .bind("{}")
            .bind("{}")
            .bind("1")
            .bind("floor")
            .bind(p.holder.as_slice())
            .bind(p.lease_end())
            .bind(p.now)
            .bind("in_process")
            .execute(&mut *tx)
            .await
            .map_err(e("floor: claim"))?;
        let row = sqlx::query(DB::SQL.claims.select)
            .bind(p.key.as_slice())
            .fetch_optional(&mut *tx)
            .await
            .map_err(e("floor: read-back"))?;
        if row.is_none() {
            return Err(lost_row());
        }
        tx.commit().await.map_err(e("floor: COMMIT"))?;
        let mut tx = self.pool().begin().await.map_err(e("floor: BEGIN"))?;
        let done = sqlx::query(DB::SQL.claims.complete)
            .bind(p.now)
            .bind("{}")
            .bind(p.key.as_slice())
            .bind(p.holder.as_slice())
            .bind(p.now)
            .execute(&mut *tx)
            .await
            .map_err(e("floor: completion"))?;
        if DB::rows_affected(&done) != 1 {
            return Err(lost_row());
        }
        sqlx::query(DB::SQL.claims.append_audit)
            .bind(p.now)
            .bind("floor")
            .bind(Some(TOOL))
            .bind("executed")
            .bind(None::<&str>)
            .bind(Some(p.key.as_slice()))
            .bind(Some(p.fingerprint.as_slice()))
            .bind(None::<&str>)
            .bind(1_i64)
            .execute(&mut *tx)
            .await
            .map_err(e("floor: audit"))?;
        tx.commit().await.map_err(e("floor: COMMIT"))?;
        Ok(())
    }
}
}
