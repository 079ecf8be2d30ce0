//! # toolgate-store
//!
//! [`ClaimStore`] backends on sqlx: SQLite (the embedded default: one file
//! in WAL mode, no set-up), PostgreSQL and MySQL/MariaDB. Pick one at run
//! time from a URL with [`AnyClaimStore::connect`]:
//!
//! | URL | backend |
//! |---|---|
//! | `sqlite://PATH` | SQLite file, created if missing |
//! | `postgres://…`, `postgresql://…` | PostgreSQL |
//! | `mysql://…`, `mariadb://…` | MySQL or MariaDB |
//!
//! Migrations are embedded and run on connect. They are tracked in their own
//! table, `toolgate_migrations`, so an application's own sqlx migrations in
//! the same database are not mistaken for ours (or ours for theirs).
//!
//! ## The claim protocol (docs/design.md §8), identical on every backend
//!
//! The protocol is written once, as generic code (`protocol.rs`) over two
//! traits of primitive steps: the statements inside one transaction (the
//! conditional insert and read-back, the conditional writes, the grant, the
//! audit insert; implemented on sqlx for PostgreSQL and MySQL/MariaDB in
//! `pooled/claims.rs`, and on the SQLite writer's connection in
//! `sqlite/claims.rs`), and
//! a backend that runs a unit of work as one transaction and classifies its
//! failures (a lost race, nothing written, or an unknown outcome). Rows are
//! decoded by one decoder (`rows.rs`) whichever driver read them.
//!
//! 1. `BEGIN`; with each attempt's own time and a lease counted from it, a
//!    conditional insert that changes nothing on a duplicate
//!    (`INSERT … ON CONFLICT DO NOTHING` on SQLite and PostgreSQL,
//!    `INSERT … ON DUPLICATE KEY UPDATE operation_key = operation_key` on
//!    MySQL). **No read comes before it**: under REPEATABLE READ (MySQL's
//!    default) a read would fix the snapshot before the winner commits, and
//!    the read-back would then find no row.
//! 2. Read the row back in the same transaction. No row means retry, never
//!    a win; our own row whose lease has already ended by the read-back
//!    (the store's clock read again) is rolled back and retried too. If the
//!    row is ours and the request carries an approval, the approval is used
//!    up in the same transaction, or both roll back
//!    ([`RawClaim::GrantUnusable`](toolgate::claim::RawClaim::GrantUnusable)).
//! 3. The attempt wins only if the row carries its own holder token *and*
//!    `COMMIT` succeeds. **The affected-row count is never used**: sqlx's
//!    MySQL driver always sets `CLIENT_FOUND_ROWS`, so the count is 1 for a
//!    new row and for a duplicate alike (the MariaDB trap; `tests/mysql.rs`
//!    shows it). The other backends follow the same rule so that there is
//!    one protocol to reason about.
//! 4. A deadlock, serialisation failure or lock timeout (MySQL 1213, 1205,
//!    1020; PostgreSQL 40001, 40P01; SQLite `BUSY`/`LOCKED`) is a lost race:
//!    roll back and retry the whole claim, which then reads the winner.
//! 5. Any other `COMMIT` failure leaves the outcome unknown: read the row
//!    back on a fresh connection, with the same holder token, before
//!    deciding.
//!
//! Completion is `UPDATE … WHERE operation_key = ? AND status = 'in_flight'
//! AND holder = ? AND lease_expires_at > ?` with the decision's audit entry
//! in the same transaction, and must match exactly one row. Zero is
//! [`Completion::Reconcile`](toolgate::claim::Completion::Reconcile), unless
//! the row, read in the same transaction, was completed by the same holder
//! with the same result bytes: a retry after a lost answer, which is
//! `Recorded` and writes nothing. That makes the completion safe to run
//! again after an unknown outcome.
//!
//! On SQLite, every unit (steps 1–3, a completion, an audit entry) runs as
//! one unit of a group commit (`sqlite/group_commit.rs`), inside a savepoint of its
//! own:
//! one writer connection runs the waiting units in one transaction and
//! answers only after the `COMMIT`; a unit that fails rolls the batch back,
//! and the others, having written nothing, run again. The single
//! writer makes step 4 moot within a process (a second claim on the same
//! key in the same batch reads the first one's row); another process
//! holding the lock past the busy timeout is a lost race as before, and a
//! failed `COMMIT` is step 5.
//!
//! The PostgreSQL and MySQL/MariaDB pools do not ping a connection as they
//! hand it out (`test_before_acquire(false)`): sqlx's pool already pings
//! each connection as it takes it back, so an idle connection was tested
//! when it went idle, and a second ping on the way out costs every pool use
//! a round trip. A connection the server dropped while it was idle fails its
//! next statement as `Unavailable`, which the claim protocol treats as any
//! other failure before `COMMIT` (nothing written).
//!
//! A decision that reads from the claim store's database before it claims
//! can hold one connection for both ([`AnyClaimStore::session`],
//! `session.rs`): the read keeps it in the decision's [`Session`], passed
//! by `&mut`, and the claim made through the session receives it by value
//! for its first transaction. One pool use (and one ping) fewer per
//! decision.
//!
//! ## Where a backend does what
//!
//! The backend folders (`postgres/`, `mysql/`, `sqlite/`) name their files
//! alike: `mod.rs` connects and names the store type, `sql.rs` holds the
//! statements, `migrate.rs` applies the migrations, `error.rs` reads the
//! driver's error codes (which are lost races). The claim protocol, the
//! review queue, the `Idempotency-Key` memory and the floor's pair are in
//! `claims.rs`, `review.rs`, `idempotency.rs` and `floor.rs`: in `sqlite/`
//! for SQLite, and in `pooled/` for PostgreSQL and MySQL, which share them.
//! A file only one backend needs keeps its own name:
//! `sqlite/group_commit.rs`, `pooled/nodes.rs` (the Galera node list).
//!
//! A [`StoreError`] made from a driver's, a migration's or the SQLite
//! writer's error keeps it as its
//! [`source`](std::error::Error::source), down to the database's code.
//!
//! Rows read back are validated by the core
//! ([`ClaimRecord::from_stored`](toolgate::claim::ClaimRecord::from_stored),
//! which uses the strict JSON decoder): a corrupt row is an error value and
//! is never shown.

#![warn(missing_docs)]

#[cfg(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")))]
compile_error!("toolgate-store needs at least one of the features sqlite, postgres, mysql");

mod any;
mod common;
mod dialect;
pub mod floor;
mod idempotency;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod pooled;
#[cfg(feature = "postgres")]
pub mod postgres;
mod protocol;
mod redact;
mod review;
mod rows;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod session;
mod sql;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod write;

#[cfg(feature = "fault-injection")]
pub mod fault;

use std::time::SystemTime;

pub use any::{AnyClaimStore, Backend};
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub use pooled::PooledStore;
pub use redact::{REDACTED, redact_url};
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub use session::{Borrowed, Session, SessionConnection};
pub use toolgate::claim::ClaimStore;
use toolgate::claim::{HolderToken, StoreError, StoreErrorKind, UnixMillis};
pub use write::{StoreWrite, WriteCompleted, WriteFuture};

/// Options for connecting a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// Most connections the pool opens. Each claim in flight holds one for
    /// the length of its transaction.
    pub max_connections: u32,
    /// SQLite only: create the database file if it does not exist. Off for
    /// operator commands, where a mistyped path must be an error rather
    /// than a new, empty store that reports nothing stuck.
    pub create_if_missing: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_connections: 16,
            create_if_missing: true,
        }
    }
}

/// A fresh, unpredictable holder token: 128 bits from the operating
/// system's random number generator (the core has none; see
/// [`HolderToken`]).
pub fn fresh_holder() -> Result<HolderToken, StoreError> {
    let mut bytes = [0u8; HolderToken::LEN];
    getrandom::fill(&mut bytes).map_err(|e| {
        StoreError::new(
            StoreErrorKind::Unavailable,
            format!("random number generator: {e}"),
        )
    })?;
    Ok(HolderToken::from_bytes(bytes))
}

/// Maps an error from an application's own sqlx statements on the store's
/// database (its tables beside the claims) to a [`StoreError`], classified
/// as the store's own are: connection-level failures are `Unavailable`,
/// anything the server refused is `Database`.
pub fn sqlx_error(what: &str, e: sqlx::Error) -> StoreError {
    common::map_err(what, e)
}

/// The wall clock as [`UnixMillis`], for callers at the edge (the core
/// reads no clock). A clock before 1970 reads as 0.
pub fn now_millis() -> UnixMillis {
    UnixMillis::from(SystemTime::now())
}
