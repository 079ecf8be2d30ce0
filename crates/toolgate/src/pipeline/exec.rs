//! Executors: the one place a side effect happens.

use std::fmt;
use std::future::Future;

use serde_json::{Map, Value};

use super::authz::Principal;
use super::stage::Claimed;
use super::state::StateVersion;
use crate::claim::{ClaimRecord, ExecutorKind, JsonText, OperationKey, ReconcileOutcome};

/// Permission to run one write: borrowed from a won claim
/// ([`Claimed::permit`]), so nothing else can reach an executor.
#[derive(Debug, Clone, Copy)]
pub struct ExecPermit<'a> {
    pub(crate) claimed: &'a Claimed,
}

impl ExecPermit<'_> {
    /// The tool.
    pub fn tool(&self) -> &str {
        self.claimed.bound().authorized().validated().tool()
    }

    /// The validated arguments.
    pub fn arguments(&self) -> &Value {
        self.claimed.bound().authorized().validated().arguments()
    }

    /// Their RFC 8785 canonical text (what was fingerprinted and recorded).
    pub fn canonical_arguments(&self) -> &str {
        self.claimed
            .bound()
            .authorized()
            .validated()
            .canonical_arguments()
    }

    /// The server-fixed scope.
    pub fn scope(&self) -> &Map<String, Value> {
        self.claimed.bound().authorized().scope()
    }

    /// One scope field as text.
    pub fn field(&self, name: &str) -> Option<String> {
        self.claimed.bound().authorized().state_scope().field(name)
    }

    /// The version the gate validated. The executor must apply it as a
    /// write precondition in the system that owns the state (docs/design.md
    /// invariant 9): `… WHERE id = ? AND version = ?`.
    pub fn precondition(&self) -> &StateVersion {
        self.claimed.bound().authorized().version_seen()
    }

    /// The operation key (for the downstream record, so reconciliation can
    /// find it).
    pub fn key(&self) -> &OperationKey {
        self.claimed.bound().key()
    }

    /// The authorised actor.
    pub fn principal(&self) -> &Principal {
        self.claimed.bound().authorized().principal()
    }
}

/// What an execution did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum ExecOutcome {
    /// The write happened; the receipt is recorded as the claim's result.
    Applied {
        /// The downstream system's receipt.
        receipt: JsonText,
    },
    /// The precondition version no longer matched: nothing was written.
    PreconditionFailed {
        /// The version the downstream system holds now, if it said.
        current: Option<StateVersion>,
    },
    /// The write is the caller's to perform (a client-executed tool, as in
    /// the HTTP sidecar's client mode): nothing was written here. The claim
    /// stays in flight, and the decision is `permitted` and carries the won
    /// [`crate::claim::Lease`], so the caller can complete it with the same
    /// holder token once its own write is done.
    Deferred,
}

/// An executor could not say what happened (a lost connection, a timeout).
/// The claim stays in flight; after its lease it needs reconciliation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecError {
    message: String,
}

impl ExecError {
    /// An error with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// What failed.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "executor: {}", self.message)
    }
}

impl std::error::Error for ExecError {}

/// Runs writes and answers for them afterwards.
pub trait Executor: Send + Sync {
    /// Performs the write, with [`ExecPermit::precondition`] as its
    /// precondition. `Err` means the outcome is unknown.
    fn execute(
        &self,
        permit: ExecPermit<'_>,
    ) -> impl Future<Output = Result<ExecOutcome, ExecError>> + Send;

    /// Which kind of executor performs `tool`'s writes; recorded with every
    /// claim it wins, so reconciliation asks only the owner of a write
    /// (invariant 13). A Rust executor in the gate's process is
    /// [`ExecutorKind::InProcess`], the default.
    fn kind(&self, tool: &str) -> ExecutorKind {
        let _ = tool;
        ExecutorKind::InProcess
    }

    /// Asks the downstream system whether the write for a stuck claim
    /// happened. Never performs it. Only called for claims recorded with
    /// this executor's [`Executor::kind`] for their tool.
    fn reconcile(
        &self,
        claim: &ClaimRecord,
    ) -> impl Future<Output = Result<ReconcileOutcome, ExecError>> + Send;
}
