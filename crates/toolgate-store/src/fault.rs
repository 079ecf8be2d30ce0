//! Fault injection for the fault tests (feature `fault-injection`, enabled
//! only by this crate's own dev-dependency on itself).
//!
//! A hook runs inside the claim transaction at a [`FaultPoint`] and is
//! given the backend's id for the connection (`pg_backend_pid()`,
//! `CONNECTION_ID()`), so a test can kill that connection from a second one
//! and watch what the store does.

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
}

/// The hook: called with the point and the server's connection id.
pub type FaultHook =
    Arc<dyn Fn(FaultPoint, i64) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;
