//! Claims: one operation key admits one write (docs/design.md §8).
//!
//! This module holds the plain data every backend shares, the
//! [`ClaimStore`] trait, a reference in-memory implementation
//! ([`MemoryClaimStore`]) and, behind the `testkit` feature, the
//! conformance suite every backend must pass (`conformance`).
//!
//! The protocol, whatever the backend:
//!
//! - **claim** = a conditional insert that changes nothing on a duplicate,
//!   then a read-back of the row in the same transaction. The attempt wins
//!   only if the row carries its own [`HolderToken`] *and* the transaction
//!   commits ([`ClaimRequest::judge`], docs/design.md invariant 6). Affected-row
//!   counts are never consulted: MySQL drivers that set `CLIENT_FOUND_ROWS`
//!   report 1 for a duplicate too.
//! - an in-flight claim whose lease has ended is reported as
//!   [`RawClaim::Expired`], never re-acquired (invariant 8);
//! - **complete** changes the row only where key, `in_flight`, holder and a
//!   live lease all match, with its audit entry in the same transaction,
//!   and exactly one row must change; otherwise the answer is
//!   [`Completion::Reconcile`] and nothing is written (invariant 7), except
//!   that a retry of the same holder's completion with the same result is
//!   [`Completion::Recorded`] again;
//! - **reconcile** closes a stuck claim with what the downstream system
//!   reported; it never executes anything;
//! - the **audit log** is append-only.
//!
//! Time is always passed in ([`UnixMillis`]); nothing here reads a clock.

mod audit;
mod error;
mod ids;
mod memory;
mod record;
mod request;
mod text;

#[cfg(any(test, feature = "testkit"))]
pub mod conformance;

use std::future::Future;

pub use audit::AuditEntry;
pub use error::{StoreError, StoreErrorKind};
pub use ids::{Fingerprint, HolderToken, IdError, OperationKey};
pub use memory::MemoryClaimStore;
pub use record::{
    ClaimRecord, ClaimStatus, CompletionRecord, CorruptRecord, ExecutorKind, JsonText,
    MAX_LABEL_BYTES, ProposalRecord, RECORD_JSON_LIMITS, RESULT_JSON_LIMITS, Resolution,
    StoredClaim, UnixMillis,
};
pub use request::{
    Attempt, BudgetReservation, ClaimRequest, CompleteRequest, Completion, GrantUse, Lease,
    RawClaim, ReadBack, ReconcileOutcome, ReconcileRequest, Reconciled,
};
pub use text::{audit_label, is_hidden};

/// A stuck-claim listing entry: a valid record, or a row that failed
/// validation (reported with its raw key so an operator can find it, and
/// never shown as a record).
pub type StuckEntry = Result<ClaimRecord, CorruptRow>;

/// A stored row that failed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptRow {
    /// The raw `operation_key` column, whatever its length.
    pub raw_key: Vec<u8>,
    /// What was wrong.
    pub problem: CorruptRecord,
}

/// Where claims, results and the audit log live.
///
/// Methods return `impl Future + Send` rather than using `async-trait`, so
/// the trait is not dyn-compatible; pick a backend at run time with an enum
/// (`toolgate_store::AnyClaimStore`).
///
/// Every implementation must pass the `conformance` suite (`testkit` feature).
pub trait ClaimStore: Send + Sync {
    /// Tries to claim `request.key()` for `request.holder()`. See the
    /// module docs for the protocol. Contention is retried inside the store;
    /// the answer is the winner's row or this attempt's lease.
    fn claim(
        &self,
        request: ClaimRequest,
    ) -> impl Future<Output = Result<RawClaim, StoreError>> + Send;

    /// Records `request.result` for the claim on `request.key`, only if it
    /// is in flight, held by `request.holder` and its lease has not ended at
    /// `request.now` (all checked in the write itself), and appends
    /// `request.audit` in the same transaction: the
    /// entry is there exactly when the completion is. Exactly one row
    /// changes, or none and the answer is [`Completion::Reconcile`].
    ///
    /// Idempotent for the same holder and result: a completion retried
    /// after a lost answer finds the claim completed by this holder with
    /// these result bytes, answers [`Completion::Recorded`] and writes
    /// nothing (no second audit entry).
    fn complete(
        &self,
        request: CompleteRequest,
    ) -> impl Future<Output = Result<Completion, StoreError>> + Send;

    /// Reads one claim (operations and reconciliation; the pipeline only
    /// ever uses [`ClaimStore::claim`]). A corrupt row is an error.
    fn fetch(
        &self,
        key: &OperationKey,
    ) -> impl Future<Output = Result<Option<ClaimRecord>, StoreError>> + Send;

    /// In-flight claims whose lease ended at or before `now`, oldest lease
    /// first, at most `limit`.
    fn list_stuck(
        &self,
        now: UnixMillis,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<StuckEntry>, StoreError>> + Send;

    /// Closes a stuck claim with what the downstream system reported. Only
    /// an in-flight claim whose lease ended at or before `now` changes;
    /// anything else is [`Reconciled::NotStuck`]. Never executes.
    fn record_reconciliation(
        &self,
        request: ReconcileRequest<'_>,
    ) -> impl Future<Output = Result<Reconciled, StoreError>> + Send;

    /// Appends one entry to the audit log.
    fn append_audit(
        &self,
        entry: &AuditEntry,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The audit entries for `key`, in the order they were appended, at most
    /// `limit`.
    fn audit_trail(
        &self,
        key: &OperationKey,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<AuditEntry>, StoreError>> + Send;

    /// The amounts budget reservations hold now, summed per budget name,
    /// in name order (`GET /metrics`, docs/policy.md "Budgets"). The
    /// default is none: a store that keeps no budgets holds nothing.
    fn budget_reserved(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, i64)>, StoreError>> + Send {
        std::future::ready(Ok(Vec::new()))
    }

    /// Whether the store answers now: a readiness probe (`GET /readyz`).
    /// Cheap and side-effect free. The default reads a claim that cannot
    /// exist (the all-zero key), which goes through the same connections a
    /// decision's claim lookups do; a backend with more moving parts (a
    /// writer thread, say) checks those too.
    fn ready(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        let probe = OperationKey::from_bytes([0; OperationKey::LEN]);
        async move { self.fetch(&probe).await.map(drop) }
    }
}
