//! [`IdempotencyStore`] on the claim database (migration 0006): the
//! `Idempotency-Key` memory as rows, so every replica sees a key's first
//! request and its answer survives restarts.
//!
//! Beginning needs no transaction: the primary key makes the insert of a
//! running row the race's only winner, a takeover is one conditional UPDATE
//! on the old runner and its lapsed lease, and forgetting names the runner.
//! Finishing is one transaction (migration 0008): the answer, the
//! principal's running totals (`toolgate_idempotency_totals`, one row per
//! principal, locked by the upsert, so a principal's finishes judge their
//! quota one at a time), and the removal of that principal's oldest
//! answers while it is over its quota. Nothing counts or sums the table:
//! a request's work is bounded by [`PURGE_BATCH`] whatever the table
//! holds. The purge removes a batch of rows past the retention, each with
//! its totals in a transaction of its own. PostgreSQL and MySQL share one
//! implementation, generic over the driver (`pooled/idempotency.rs`);
//! SQLite runs each call as one unit of its writer
//! (`sqlite/idempotency.rs`). This module holds what they share; the
//! statements are in each backend's `sql.rs`.

use toolgate::claim::{StoreError, StoreErrorKind, UnixMillis};
use toolgate::idempotency::{Begun, Bounds, PURGE_BATCH, Remembered};

/// How many times a begin re-reads after losing a race.
pub(crate) const ATTEMPTS: u32 = 8;

/// A row as `SELECT` names it.
pub(crate) struct Row {
    pub(crate) payload: Vec<u8>,
    pub(crate) runner: String,
    pub(crate) state: String,
    pub(crate) lease_until: i64,
    pub(crate) status: Option<i64>,
    pub(crate) content_type: Option<String>,
    pub(crate) outcome: Option<String>,
    pub(crate) body: Option<Vec<u8>>,
}

/// A row as sqlx reads it, in `SELECT` order.
pub(crate) type SqlRow = (
    Vec<u8>,
    String,
    String,
    i64,
    Option<i32>,
    Option<String>,
    Option<String>,
    Option<Vec<u8>>,
);

/// What a begin does after reading the row that stopped its insert.
pub(crate) enum Next {
    Answer(Begun),
    /// Take over from this runner.
    TakeOver(String),
}

pub(crate) fn judge(row: Row, payload: &[u8; 32], now: UnixMillis) -> Result<Next, StoreError> {
    if row.payload.as_slice() != payload {
        return Ok(Next::Answer(Begun::Mismatch));
    }
    match row.state.as_str() {
        "done" => {
            let bad = || StoreError::new(StoreErrorKind::Corrupt, "idempotency row: no answer");
            let status = row
                .status
                .and_then(|s| u16::try_from(s).ok())
                .ok_or_else(bad)?;
            Ok(Next::Answer(Begun::Replay(Remembered {
                status,
                content_type: row.content_type.ok_or_else(bad)?,
                outcome: row.outcome,
                body: row.body.ok_or_else(bad)?,
            })))
        }
        "running" if row.lease_until > now.0 => Ok(Next::Answer(Begun::InFlight)),
        "running" => Ok(Next::TakeOver(row.runner)),
        other => Err(StoreError::new(
            StoreErrorKind::Corrupt,
            format!("idempotency row: unknown state {other:?}"),
        )),
    }
}

pub(crate) fn lost_races() -> StoreError {
    StoreError::new(
        StoreErrorKind::Contention,
        "an Idempotency-Key begin kept losing races",
    )
}

/// Which of a principal's oldest answers must go for its totals to fit
/// `bounds`, and what they free.
pub(crate) fn over_quota(
    oldest: Vec<(String, i64)>,
    mut count: u64,
    mut bytes: u64,
    bounds: Bounds,
) -> Vec<String> {
    let mut out = Vec::new();
    for (key, b) in oldest {
        if count <= bounds.capacity && bytes <= bounds.max_bytes {
            break;
        }
        count = count.saturating_sub(1);
        bytes = bytes.saturating_sub(u64::try_from(b).unwrap_or(0));
        out.push(key);
    }
    out
}

pub(crate) fn batch() -> i64 {
    i64::from(PURGE_BATCH)
}
