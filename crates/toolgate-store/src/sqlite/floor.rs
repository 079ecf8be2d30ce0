//! The floor's pair on SQLite (`crate::floor`).

use std::sync::Arc;

use toolgate::claim::{StoreError, StoreErrorKind};

use super::SqliteClaimStore;
use super::sql::SQL;
use crate::floor::{Pair, TOOL, lost_row};

impl SqliteClaimStore {
    /// A claim and a completion, two units of the group commit, with the
    /// protocol's SQL.
    pub(crate) async fn floor_pair(&self, p: &Pair) -> Result<(), StoreError> {
        use super::rusqlite::{OptionalExtension, params};
        let sql = |what: &str, e: super::WriteError| {
            StoreError::with_source(StoreErrorKind::Database, format!("floor: {what}: {e:?}"), e)
        };
        let p = Arc::new(p.clone());
        let claim = Arc::clone(&p);
        let found = self
            .writer()
            .write(move |conn| {
                let p = &claim;
                conn.prepare_cached(SQL.claims.insert)?.execute(params![
                    p.key.as_slice(),
                    p.fingerprint.as_slice(),
                    TOOL,
                    "{}",
                    "{}",
                    "1",
                    "floor",
                    p.holder.as_slice(),
                    p.lease_end(),
                    p.now,
                    "in_process",
                ])?;
                conn.prepare_cached(SQL.claims.select)?
                    .query_row(params![p.key.as_slice()], |_| Ok(()))
                    .optional()
            })
            .await
            .map_err(|e| sql("claim", e))?;
        if found.is_none() {
            return Err(lost_row());
        }
        let changed = self
            .writer()
            .write(move |conn| {
                let changed = conn.prepare_cached(SQL.claims.complete)?.execute(params![
                    p.now,
                    "{}",
                    p.key.as_slice(),
                    p.holder.as_slice(),
                    p.now
                ])?;
                conn.prepare_cached(SQL.claims.append_audit)?
                    .execute(params![
                        p.now,
                        "floor",
                        TOOL,
                        "executed",
                        None::<&str>,
                        p.key.as_slice(),
                        p.fingerprint.as_slice(),
                        None::<&str>,
                        1_i64,
                    ])?;
                Ok(changed)
            })
            .await
            .map_err(|e| sql("completion", e))?;
        if changed != 1 {
            return Err(lost_row());
        }
        Ok(())
    }
}
