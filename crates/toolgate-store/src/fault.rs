//! Fault injection for the fault tests (feature `fault-injection`, enabled
//! only by this crate's own dev-dependency on itself).
//!
//! A hook runs inside the claim transaction at a [`FaultPoint`] and is
//! given the backend's id for the connection (`pg_backend_pid()`,
//! `CONNECTION_ID()`), so a test can kill that connection from a second one
//! and watch what the store does. SQLite's claims run inside a group commit
//! (one shared writer connection, nothing to kill per claim), so there the
//! hook is asked only at [`FaultPoint::AfterCommit`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Where in the claim transaction the hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// After the conditional insert, before the read-back.
    AfterInsert,
    /// After the read-back found this attempt's token, before `COMMIT`.
    BeforeCommit,
    /// After `COMMIT` succeeded. A hook that answers `true` here makes the
    /// store treat the commit as failed with an unknown outcome (a lost
    /// acknowledgement, as on a Galera node losing quorum), so a test can
    /// check that the store reads the row back instead of guessing.
    AfterCommit,
}

/// The hook: called with the point and the server's connection id (-1 when
/// the backend has none, or after `COMMIT`). It answers whether to report
/// the commit as failed; only [`FaultPoint::AfterCommit`] reads the answer.
pub type FaultHook =
    Arc<dyn Fn(FaultPoint, i64) -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;
