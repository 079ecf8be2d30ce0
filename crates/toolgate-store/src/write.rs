//! An application's write in the completion's transaction: for an
//! executor whose writes live in the claim store's own database,
//! the write and the claim's completion commit together, in one
//! transaction instead of two.
//!
//! The order inside the transaction is docs/design.md §1's: the write with
//! its version precondition, then the ownership- and lease-checked
//! completion and its audit entry. Either check failing rolls back both:
//!
//! - the precondition failed: nothing is written, and the pipeline closes
//!   the claim with its not-applied result as for any executor;
//! - the completion matched no row (the lease ended, the claim was
//!   reconciled): the write is undone with it, so a claim reconciled as
//!   not applied never has a write behind it.
//!
//! A `COMMIT` whose outcome is unknown is never run again: the claim is
//! read back, and unless it shows this holder's completion the answer is
//! an `OutcomeUnknown` error. The claim then stays in flight and is
//! reconciled against the application's own rows (invariant 8).

use std::fmt;
use std::future::Future;
use std::pin::Pin;

/// A future a [`StoreWrite`] returns on a pooled connection.
pub type WriteFuture<'c> = Pin<Box<dyn Future<Output = Result<bool, sqlx::Error>> + Send + 'c>>;

/// An application's write that the claim store runs inside the claim's
/// completion transaction
/// ([`crate::AnyClaimStore::write_and_complete`]). One method per
/// backend, each given the transaction's connection; each answers whether
/// the write applied (`false`: its precondition failed, and whatever it
/// did is rolled back).
///
/// A method must only write the application's own tables, never commit or
/// roll back, and treat the connection as inside a transaction it does not
/// own.
pub trait StoreWrite: fmt::Debug + Send + Sync + 'static {
    /// The write on PostgreSQL.
    #[cfg(feature = "postgres")]
    fn postgres<'c>(&'c self, conn: &'c mut sqlx::PgConnection) -> WriteFuture<'c>;

    /// The write on MySQL or MariaDB.
    #[cfg(feature = "mysql")]
    fn mysql<'c>(&'c self, conn: &'c mut sqlx::MySqlConnection) -> WriteFuture<'c>;

    /// The write on SQLite, on the group-commit writer's connection (a unit
    /// of its batch, inside the unit's savepoint).
    #[cfg(feature = "sqlite")]
    fn sqlite(&self, conn: &rusqlite::Connection) -> Result<bool, rusqlite::Error>;
}

/// What [`crate::AnyClaimStore::write_and_complete`] committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum WriteCompleted {
    /// The write and the completion with its audit entry: committed.
    Recorded,
    /// The write's precondition failed: rolled back, nothing written, the
    /// claim still in flight for the pipeline's not-applied completion.
    PreconditionFailed,
    /// The completion matched no row: rolled back with the write, nothing
    /// written.
    LeaseLost,
}
