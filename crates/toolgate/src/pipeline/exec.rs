//! Executors: the one place a side effect happens.

use std::fmt;
use std::future::Future;

use serde_json::{Map, Value};

use super::authz::Principal;
use super::stage::Claimed;
use super::state::StateVersion;
use crate::claim::{
    AuditEntry, ClaimRecord, CompleteRequest, ExecutorKind, HolderToken, JsonText, OperationKey,
    ReconcileOutcome, UnixMillis,
};

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

    /// Which attempt of the operation this is, from 1 (docs/design.md
    /// invariant 8): an attempt reconciled as not applied is followed by
    /// the next.
    pub fn attempt(&self) -> u32 {
        self.claimed.lease().attempt
    }

    /// The idempotency key to send downstream for this attempt
    /// ([`OperationKey::attempt_key`]): what the downstream system records
    /// the write under, and what reconciliation asks about and fences.
    pub fn idempotency_key(&self) -> String {
        self.claimed.lease().idempotency_key()
    }

    /// When the claim's lease ends: the last moment the write may be
    /// applied. An executor bounds its call by it; past it, the claim may
    /// be reconciled, and a write that lands later must be refused.
    pub fn lease_expires_at(&self) -> UnixMillis {
        self.claimed.lease().expires_at
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

/// The completion an applied write is recorded with, for an executor whose
/// writes live in the claim store's own database
/// ([`Executor::execute_and_complete`]). The pipeline builds it before the
/// write: the claim's key and holder, the decision's time, the `executed`
/// decision's audit entry (which does not depend on the receipt), and the
/// most receipt bytes the caller accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedCompletion {
    key: OperationKey,
    holder: HolderToken,
    now: UnixMillis,
    audit: AuditEntry,
    receipt_cap: Option<usize>,
}

impl AppliedCompletion {
    /// The completion of the claim on `key` won by `holder`, at `now`, with
    /// `audit` written beside it. The pipeline makes one per won claim; a
    /// store's own tests make them too.
    pub fn new(key: OperationKey, holder: HolderToken, now: UnixMillis, audit: AuditEntry) -> Self {
        Self {
            key,
            holder,
            now,
            audit,
            receipt_cap: None,
        }
    }

    /// The claim to complete.
    pub fn key(&self) -> &OperationKey {
        &self.key
    }

    /// The holder that won it.
    pub fn holder(&self) -> &HolderToken {
        &self.holder
    }

    /// The decision's time; the lease is checked at the store's clock, never
    /// earlier.
    pub fn now(&self) -> UnixMillis {
        self.now
    }

    /// The `executed` decision's audit entry, written with the completion.
    pub fn audit(&self) -> &AuditEntry {
        &self.audit
    }

    /// This completion recording `receipt`, for [`ClaimStore::complete`](crate::claim::ClaimStore::complete).
    pub fn request(&self, receipt: JsonText) -> CompleteRequest {
        CompleteRequest {
            key: self.key,
            holder: self.holder,
            result: receipt,
            now: self.now,
            audit: self.audit.clone(),
        }
    }

    /// The same completion, accepting receipts of at most `bytes` (the
    /// smaller cap wins when two are set).
    #[must_use]
    pub fn with_receipt_cap(mut self, bytes: usize) -> Self {
        self.receipt_cap = Some(self.receipt_cap.map_or(bytes, |c| c.min(bytes)));
        self
    }

    /// Whether `receipt` may be recorded. A store checks this before it
    /// writes: a receipt over the cap writes nothing, and the claim stays
    /// in flight until it is reconciled.
    pub fn accepts(&self, receipt: &JsonText) -> Result<(), ExecError> {
        match self.receipt_cap {
            Some(cap) if receipt.as_str().len() > cap => Err(ExecError::new(format!(
                "the executor's receipt is {} bytes, over the {cap}-byte cap; \
                 nothing was written",
                receipt.as_str().len()
            ))),
            _ => Ok(()),
        }
    }
}

/// What [`Executor::execute_and_complete`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Completed {
    /// The write's outcome; the pipeline records the completion itself (the
    /// default, and any outcome but an applied write in the store's own
    /// transaction).
    Outcome(ExecOutcome),
    /// The write applied and the [`AppliedCompletion`] committed with it,
    /// in one transaction: both or neither.
    Recorded {
        /// The downstream system's receipt, now the claim's result.
        receipt: JsonText,
    },
    /// The claim was no longer this holder's, or its lease had ended, when
    /// the completion ran: the write was rolled back with it, so nothing was
    /// written, and the claim is reconciled like any stuck one.
    LeaseLost,
}

/// Runs writes and answers for them afterwards.
pub trait Executor: Send + Sync {
    /// Performs the write, with [`ExecPermit::precondition`] as its
    /// precondition. `Err` means the outcome is unknown.
    fn execute(
        &self,
        permit: ExecPermit<'_>,
    ) -> impl Future<Output = Result<ExecOutcome, ExecError>> + Send;

    /// Performs the write and, where the executor's writes live in the claim
    /// store's own database, records `completion` in the same transaction
    /// (docs/design.md §8): one commit for both instead of two, and no
    /// window in which the write is committed and the claim still in
    /// flight. The pipeline calls this, never [`Executor::execute`]
    /// directly.
    ///
    /// The default runs [`Executor::execute`] and leaves the completion to
    /// the pipeline. An implementation that folds must keep the order of
    /// §1: the write with its precondition first, then the completion,
    /// whose lease and holder check decides whether both commit. A failed
    /// precondition rolls back whatever the write did and answers
    /// `Completed::Outcome(ExecOutcome::PreconditionFailed { .. })`; the
    /// pipeline then records the not-applied result. `Err` means the
    /// outcome is unknown, as for `execute`.
    fn execute_and_complete(
        &self,
        permit: ExecPermit<'_>,
        completion: &AppliedCompletion,
    ) -> impl Future<Output = Result<Completed, ExecError>> + Send {
        let _ = completion;
        async move { self.execute(permit).await.map(Completed::Outcome) }
    }

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

    /// An explicit "applied, with this result" for a stuck claim of `tool`
    /// this executor owns, in the form it records its own results, or why
    /// it cannot be one: what a replay answers must be what an execution
    /// would have recorded (an MCP upstream's: a `CallToolResult` its
    /// output schema accepts). Only asked for claims recorded with this
    /// executor's [`Executor::kind`]; by default the answer is recorded as
    /// given.
    fn answered(&self, tool: &str, receipt: JsonText) -> Result<JsonText, ExecError> {
        let _ = tool;
        Ok(receipt)
    }
}

/// The executor for client-mode principals: never writes; the decision is
/// `permitted` and the client completes the claim. Its claims are recorded
/// as `client`: the write is the application's, so no executor of the
/// server is ever asked about it (invariant 13); a stuck one is closed only
/// by an explicit answer.
pub struct ClientExecutor;

impl Executor for ClientExecutor {
    async fn execute(&self, _permit: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        Ok(ExecOutcome::Deferred)
    }

    fn kind(&self, _tool: &str) -> ExecutorKind {
        ExecutorKind::Client
    }

    async fn reconcile(&self, _claim: &ClaimRecord) -> Result<ReconcileOutcome, ExecError> {
        Err(ExecError::new(
            "a client-executed write is known only to the client; an explicit answer closes it",
        ))
    }
}
