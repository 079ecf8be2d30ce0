//! SQLite's result codes that the store reads, from either driver: which
//! are a lost race (`SQLITE_BUSY`, `SQLITE_LOCKED`), and a `rusqlite`
//! error as a store error. sqlx's errors map as on the other backends
//! (`crate::common::map_err`).

use rusqlite::ErrorCode;
use toolgate::claim::{StoreError, StoreErrorKind};

/// SQLite's lost-race errors, `SQLITE_BUSY` and `SQLITE_LOCKED` (any
/// extended code): another connection held the lock past the timeout.
pub fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// `SQLITE_BUSY` or `SQLITE_LOCKED`, with any extended code, as sqlx
/// reports them.
pub(super) fn is_sqlx_busy(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|db| db.code())
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| matches!(code & 0xff, 5 | 6))
}

/// A failed statement on a `rusqlite` connection: busy is contention,
/// anything else the database's. Public for an application whose own
/// statements run on
/// [`SqliteClaimStore::writer`](super::SqliteClaimStore::writer), so its errors read like
/// the store's.
pub fn rusqlite_error(what: &str, e: rusqlite::Error) -> StoreError {
    let kind = if is_busy(&e) {
        StoreErrorKind::Contention
    } else {
        StoreErrorKind::Database
    };
    StoreError::with_source(kind, format!("{what}: {e}"), e)
}
