//! The floor of a fresh decision on a database: the store's own claim and
//! completion statements, bare, for `toolgate bench serve --floor`.
//!
//! A fresh decision cannot commit fewer transactions than a claim (the
//! conditional insert and its read-back) and a completion (the conditional
//! update and its audit entry). [`floor`] runs exactly those statements,
//! with the SQL and binds the protocol uses (`pooled/floor.rs`,
//! `sqlite/floor.rs`), on
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
pub(crate) const TOOL: &str = "floor";

/// One pair's values, bound exactly as the protocol binds a claim's.
#[derive(Clone)]
pub(crate) struct Pair {
    pub(crate) key: [u8; 32],
    pub(crate) fingerprint: [u8; 32],
    pub(crate) holder: [u8; 16],
    pub(crate) now: i64,
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

    pub(crate) fn lease_end(&self) -> i64 {
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
            StoreError::with_source(StoreErrorKind::Invariant, format!("floor worker: {e}"), e)
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
        store.floor_pair(&pair).await?;
    }
    Ok(())
}

/// A floor pair found no row of its own: the database is not behaving as
/// the protocol assumes, so the figure would mean nothing.
pub(crate) fn lost_row() -> StoreError {
    StoreError::new(
        StoreErrorKind::Invariant,
        "floor: a fresh key's claim or completion found no row",
    )
}
