//! The floor of a fresh decision on a database: the store's own claim and
//! completion statements, bare, for `toolgate bench serve --floor`.
//!
//! A fresh decision cannot commit fewer transactions than a claim (the
//! conditional insert and its read-back) and a completion (the conditional
//! update and its audit entry). [`floor`] runs exactly those statements,
//! with the SQL and binds the protocol uses (`pooled.rs`, `sqlite.rs`), on
//! `concurrency` workers against the store's own pool (PostgreSQL,
//! MySQL/MariaDB) or its group-commit writer (SQLite), with nothing else:
//! no pipeline, no HTTP, no row decoding, no retries. What a benchmark
//! reaches against this is the share of the database's own limit that the
//! rest of a decision leaves.
//!
//! The rows it writes stay: claims under the tool name `floor` with fresh
//! random keys, completed, and one audit entry each (the audit table
//! refuses DELETE). Run it on a benchmark database.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use toolgate::claim::{StoreError, StoreErrorKind};

use crate::AnyClaimStore;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use crate::common::map_err;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use crate::pooled::Dialect;

/// One floor run: how many claim + completion pairs, and how long they
/// took from the first worker's start to the last one's end.
#[derive(Debug, Clone, Copy)]
pub struct FloorRun {
    /// Pairs run (each one claim and one completion, both committed).
    pub pairs: u32,
    /// Wall time.
    pub elapsed: Duration,
}

impl FloorRun {
    /// Pairs per second.
    pub fn per_second(&self) -> f64 {
        f64::from(self.pairs) / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// The tool name the floor's rows carry.
const TOOL: &str = "floor";

/// One pair's values, bound exactly as the protocol binds a claim's.
struct Pair {
    key: [u8; 32],
    fingerprint: [u8; 32],
    holder: [u8; 16],
    now: i64,
}

impl Pair {
    fn fresh() -> Result<Self, StoreError> {
        let mut bytes = [0u8; 80];
        getrandom::fill(&mut bytes).map_err(|e| {
            StoreError::new(StoreErrorKind::Unavailable, format!("random numbers: {e}"))
        })?;
        let mut pair = Self {
            key: [0; 32],
            fingerprint: [0; 32],
            holder: [0; 16],
            now: crate::now_millis().0,
        };
        pair.key.copy_from_slice(&bytes[..32]);
        pair.fingerprint.copy_from_slice(&bytes[32..64]);
        pair.holder.copy_from_slice(&bytes[64..]);
        Ok(pair)
    }

    fn lease_end(&self) -> i64 {
        self.now + 30_000
    }
}

/// Runs `pairs` claim + completion pairs on `concurrency` workers (each a
/// task of its own on the caller's runtime, as a server's decisions are)
/// against `store`'s database and times them.
pub async fn floor(
    store: Arc<AnyClaimStore>,
    concurrency: u32,
    pairs: u32,
) -> Result<FloorRun, StoreError> {
    let next = Arc::new(AtomicU32::new(0));
    let begin = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let next = Arc::clone(&next);
        let store = Arc::clone(&store);
        workers.push(tokio::spawn(async move {
            worker(&store, || next.fetch_add(1, Ordering::Relaxed) < pairs).await
        }));
    }
    for w in workers {
        w.await.map_err(|e| {
            StoreError::new(StoreErrorKind::Invariant, format!("floor worker: {e}"))
        })??;
    }
    Ok(FloorRun {
        pairs,
        elapsed: begin.elapsed(),
    })
}

async fn worker(store: &AnyClaimStore, take: impl Fn() -> bool) -> Result<(), StoreError> {
    while take() {
        let pair = Pair::fresh()?;
        match store {
            #[cfg(feature = "postgres")]
            AnyClaimStore::Postgres(s) => pooled_pair(s.pool(), &pair).await?,
            #[cfg(feature = "mysql")]
            AnyClaimStore::MySql(s) => pooled_pair(s.pool(), &pair).await?,
            #[cfg(feature = "sqlite")]
            AnyClaimStore::Sqlite(s) => sqlite_pair(s.writer(), pair).await?,
        }
    }
    Ok(())
}

/// A claim and a completion, two transactions on the pool, with the
/// protocol's SQL.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn pooled_pair<DB>(pool: &sqlx::Pool<DB>, p: &Pair) -> Result<(), StoreError>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'a> &'a [u8]: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<&'a [u8]>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    let e = |what: &'static str| move |e: sqlx::Error| map_err(what, e);
    let mut tx = pool.begin().await.map_err(e("floor: BEGIN"))?;
    sqlx::query(DB::INSERT_CLAIM)
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
    let row = sqlx::query(DB::SELECT_CLAIM)
        .bind(p.key.as_slice())
        .fetch_optional(&mut *tx)
        .await
        .map_err(e("floor: read-back"))?;
    if row.is_none() {
        return Err(lost_row());
    }
    tx.commit().await.map_err(e("floor: COMMIT"))?;
    let mut tx = pool.begin().await.map_err(e("floor: BEGIN"))?;
    let done = sqlx::query(DB::COMPLETE)
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
    sqlx::query(DB::APPEND_AUDIT)
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

/// A claim and a completion, two units of the group commit, with the
/// protocol's SQL.
#[cfg(feature = "sqlite")]
async fn sqlite_pair(writer: &crate::sqlite::Writer, p: Pair) -> Result<(), StoreError> {
    use crate::group_commit::rusqlite::{OptionalExtension, params};
    let sql = |what: &str, e: crate::group_commit::WriteError| {
        StoreError::new(StoreErrorKind::Database, format!("floor: {what}: {e:?}"))
    };
    let p = Arc::new(p);
    let claim = Arc::clone(&p);
    let found = writer
        .write(move |conn| {
            let p = &claim;
            conn.prepare_cached(<sqlx::Sqlite as crate::pooled::Dialect>::INSERT_CLAIM)?
                .execute(params![
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
            conn.prepare_cached(<sqlx::Sqlite as crate::pooled::Dialect>::SELECT_CLAIM)?
                .query_row(params![p.key.as_slice()], |_| Ok(()))
                .optional()
        })
        .await
        .map_err(|e| sql("claim", e))?;
    if found.is_none() {
        return Err(lost_row());
    }
    let changed = writer
        .write(move |conn| {
            let changed = conn
                .prepare_cached(<sqlx::Sqlite as crate::pooled::Dialect>::COMPLETE)?
                .execute(params![
                    p.now,
                    "{}",
                    p.key.as_slice(),
                    p.holder.as_slice(),
                    p.now
                ])?;
            conn.prepare_cached(<sqlx::Sqlite as crate::pooled::Dialect>::APPEND_AUDIT)?
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

/// A floor pair found no row of its own: the database is not behaving as
/// the protocol assumes, so the figure would mean nothing.
fn lost_row() -> StoreError {
    StoreError::new(
        StoreErrorKind::Invariant,
        "floor: a fresh key's claim or completion found no row",
    )
}
