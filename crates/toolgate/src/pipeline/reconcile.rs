//! Reconciling a stuck claim: asking the executor that owns its write, or
//! taking an explicit answer, and recording that with its audit entry.
//! Never executes (invariant 8).

use super::error::GateError;
use super::exec::{ExecError, ExecOutcome, ExecPermit, Executor};
use crate::claim::{
    AuditEntry, ClaimRecord, ClaimStore, ExecutorKind, OperationKey, ReconcileOutcome,
    ReconcileRequest, Reconciled, StoreError, StoreErrorKind, UnixMillis,
};

/// The audit outcomes [`reconcile`] and [`reconcile_answered`] append:
/// applied, not applied, not stuck, and a stuck claim whose owner was not
/// asked (an explicit answer is required).
pub const RECONCILE_AUDIT_OUTCOMES: [&str; 5] = [
    ReconcileAudit::Applied.as_str(),
    ReconcileAudit::NotApplied.as_str(),
    ReconcileAudit::NotStuck.as_str(),
    ReconcileAudit::ExplicitAnswerRequired.as_str(),
    ReconcileAudit::AnswerRefused.as_str(),
];

/// The audit outcome of one reconciliation, named by what happened rather
/// than by its place in [`RECONCILE_AUDIT_OUTCOMES`].
#[derive(Debug, Clone, Copy)]
enum ReconcileAudit {
    Applied,
    NotApplied,
    NotStuck,
    ExplicitAnswerRequired,
    AnswerRefused,
}

impl ReconcileAudit {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "reconciled_applied",
            Self::NotApplied => "reconciled_not_applied",
            Self::NotStuck => "not_stuck",
            Self::ExplicitAnswerRequired => "explicit_answer_required",
            Self::AnswerRefused => "answer_refused",
        }
    }
}

/// What [`reconcile`] did.
#[derive(Debug)]
pub enum ReconcileReport {
    /// The downstream answer was recorded as the claim's result.
    Recorded(ReconcileOutcome),
    /// The claim was not stuck (still leased, completed, or absent); nothing
    /// was asked or written.
    NotStuck(Option<Box<ClaimRecord>>),
    /// The claim is stuck, but its write is not the given executor's to
    /// answer for: it was recorded as `client` (the application performed
    /// it), or as another kind than the executor's. Nothing was asked or
    /// written; only an explicit answer ([`reconcile_answered`]) closes it
    /// (invariant 13).
    ExplicitAnswerRequired(Box<ClaimRecord>),
    /// The explicit answer is not a result the claim's own executor could
    /// have recorded ([`Executor::answered`]): nothing was written.
    AnswerRefused {
        /// The stuck claim.
        claim: Box<ClaimRecord>,
        /// Why, for the operator.
        message: String,
    },
}

/// Reconciles one stuck claim by asking the executor that owns its write
/// what happened downstream, and records that. Never executes (invariant
/// 8). The executor is asked only if the claim was recorded with its kind
/// for the claim's tool ([`Executor::kind`]) and that kind is not
/// [`ExecutorKind::Client`]; otherwise the report is
/// [`ReconcileReport::ExplicitAnswerRequired`] and nothing is asked. Appends
/// an audit entry (`actor` is the operator) either way.
pub async fn reconcile<C, E>(
    claims: &C,
    executor: &E,
    key: &OperationKey,
    actor: &str,
    now: UnixMillis,
) -> Result<ReconcileReport, GateError>
where
    C: ClaimStore,
    E: Executor,
{
    reconcile_routed(claims, Route::Ask(executor), key, actor, now).await
}

/// Reconciles one stuck claim with an explicit answer from the application
/// or an operator who checked the downstream system: `applied` with its
/// result, or `not_applied`. The only way to close a `client` claim, and
/// valid for every kind. Never executes; appends an audit entry.
pub async fn reconcile_answered<C>(
    claims: &C,
    answer: ReconcileOutcome,
    key: &OperationKey,
    actor: &str,
    now: UnixMillis,
) -> Result<ReconcileReport, GateError>
where
    C: ClaimStore,
{
    reconcile_routed::<C, Unasked>(claims, Route::Answer(answer), key, actor, now).await
}

/// [`reconcile_answered`], with `applied`'s result first shaped by the
/// claim's own executor when `executor` owns it ([`Executor::answered`]):
/// an answer it refuses is [`ReconcileReport::AnswerRefused`] and nothing
/// is recorded. What a door that knows its executor calls.
pub async fn reconcile_answered_for<C, E>(
    claims: &C,
    executor: &E,
    answer: ReconcileOutcome,
    key: &OperationKey,
    actor: &str,
    now: UnixMillis,
) -> Result<ReconcileReport, GateError>
where
    C: ClaimStore,
    E: Executor,
{
    reconcile_routed(claims, Route::Shaped(answer, executor), key, actor, now).await
}

/// Where a reconciliation's answer comes from.
enum Route<'a, E> {
    /// The owning executor, if it is the given one.
    Ask(&'a E),
    /// An explicit answer.
    Answer(ReconcileOutcome),
    /// An explicit answer, shaped by the owning executor if it is this one.
    Shaped(ReconcileOutcome, &'a E),
}

/// The executor type of an explicit answer: there is none to ask.
enum Unasked {}

impl Executor for Unasked {
    async fn execute(&self, _permit: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        match *self {}
    }
    async fn reconcile(&self, _claim: &ClaimRecord) -> Result<ReconcileOutcome, ExecError> {
        match *self {}
    }
}

async fn reconcile_routed<C, E>(
    claims: &C,
    route: Route<'_, E>,
    key: &OperationKey,
    actor: &str,
    now: UnixMillis,
) -> Result<ReconcileReport, GateError>
where
    C: ClaimStore,
    E: Executor,
{
    let record = claims.fetch(key).await?;
    let asked_attempt = record.as_ref().map(|r| r.attempt);
    let report = match record {
        Some(r) if r.is_stuck(now) => {
            let outcome = match route {
                Route::Answer(answer) => Some(answer),
                Route::Shaped(ReconcileOutcome::Applied { receipt }, executor)
                    if r.executor != ExecutorKind::Client
                        && executor.kind(r.proposal.tool()) == r.executor =>
                {
                    match executor.answered(r.proposal.tool(), receipt) {
                        Ok(receipt) => Some(ReconcileOutcome::Applied { receipt }),
                        Err(e) => {
                            return refused_answer(claims, r, e.to_string(), key, actor, now).await;
                        }
                    }
                }
                Route::Shaped(answer, _) => Some(answer),
                Route::Ask(executor) => {
                    // INVARIANT (invariant 13): an executor answers only for
                    // writes it owns. A client's write is known only to the
                    // client; another executor's "not found" would be a
                    // guess that could lead to a second write by hand.
                    let owns = r.executor != ExecutorKind::Client
                        && executor.kind(r.proposal.tool()) == r.executor;
                    if owns {
                        Some(executor.reconcile(&r).await.map_err(|e| {
                            GateError::Store(StoreError::new(
                                StoreErrorKind::Unavailable,
                                e.to_string(),
                            ))
                        })?)
                    } else {
                        None
                    }
                }
            };
            match outcome {
                None => ReconcileReport::ExplicitAnswerRequired(Box::new(r)),
                Some(outcome) => match claims
                    .record_reconciliation(ReconcileRequest {
                        key,
                        outcome: &outcome,
                        now,
                    })
                    .await?
                {
                    Reconciled::Recorded => ReconcileReport::Recorded(outcome),
                    Reconciled::NotStuck(row) => ReconcileReport::NotStuck(row.map(Box::new)),
                },
            }
        }
        other => ReconcileReport::NotStuck(other.map(Box::new)),
    };
    audit(claims, &report, asked_attempt, key, actor, now).await?;
    Ok(report)
}

async fn refused_answer<C: ClaimStore>(
    claims: &C,
    claim: ClaimRecord,
    message: String,
    key: &OperationKey,
    actor: &str,
    now: UnixMillis,
) -> Result<ReconcileReport, GateError> {
    let report = ReconcileReport::AnswerRefused {
        claim: Box::new(claim),
        message,
    };
    audit(claims, &report, None, key, actor, now).await?;
    Ok(report)
}

/// The one audit entry of a reconciliation.
async fn audit<C: ClaimStore>(
    claims: &C,
    report: &ReconcileReport,
    asked_attempt: Option<u32>,
    key: &OperationKey,
    actor: &str,
    now: UnixMillis,
) -> Result<(), GateError> {
    let (tool, fingerprint, outcome) = match report {
        ReconcileReport::Recorded(o) => (
            None,
            None,
            match o {
                ReconcileOutcome::Applied { .. } => ReconcileAudit::Applied,
                ReconcileOutcome::NotApplied { .. } => ReconcileAudit::NotApplied,
            },
        ),
        ReconcileReport::NotStuck(r) => (
            r.as_ref().map(|r| r.proposal.tool().to_owned()),
            r.as_ref().map(|r| r.fingerprint),
            ReconcileAudit::NotStuck,
        ),
        ReconcileReport::ExplicitAnswerRequired(r) => (
            Some(r.proposal.tool().to_owned()),
            Some(r.fingerprint),
            ReconcileAudit::ExplicitAnswerRequired,
        ),
        ReconcileReport::AnswerRefused { claim, .. } => (
            Some(claim.proposal.tool().to_owned()),
            Some(claim.fingerprint),
            ReconcileAudit::AnswerRefused,
        ),
    };
    let attempt = match report {
        ReconcileReport::Recorded(_) => asked_attempt,
        ReconcileReport::NotStuck(r) => r.as_ref().map(|r| r.attempt),
        ReconcileReport::ExplicitAnswerRequired(r) => Some(r.attempt),
        ReconcileReport::AnswerRefused { claim, .. } => Some(claim.attempt),
    };
    let entry = AuditEntry::new(
        now,
        actor.to_owned(),
        tool,
        outcome.as_str().to_owned(),
        None,
        Some(*key),
        fingerprint,
    )?
    .with_attempt(attempt);
    claims.append_audit(&entry).await?;
    Ok(())
}
