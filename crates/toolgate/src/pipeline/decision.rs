//! The pipeline's decision: one outcome code (docs/design.md §2), a reason code
//! where one applies, and what the caller needs to act on it.

use std::fmt;

use serde_json::{Value, json};

use super::state::StateVersion;
use crate::claim::{Fingerprint, Lease, OperationKey, ProposalRecord};
use crate::contract;

/// Every outcome a decision can have (docs/design.md §2). Deliberately exhaustive:
/// a new outcome breaks callers' matches, so they fail closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Reply text, no action.
    Answer,
    /// The model declined; the policy's fixed message is the reply.
    Abstain,
    /// Claim won, executor ran, result recorded.
    Executed,
    /// Same operation and fingerprint, already completed: the recorded result.
    Replayed,
    /// Same operation and fingerprint, lease still live.
    InFlight,
    /// Same operation, different fingerprint: the prior proposal (and its
    /// result if completed).
    Conflict,
    /// The version the model read is not current: both versions.
    StateChanged,
    /// A claim's outcome is unknown: reconcile, do not execute.
    NeedsReconciliation,
    /// The tool needs a person's approval bound to (key, fingerprint, version).
    PendingApproval,
    /// Claim won for a client-executed tool: the caller performs the write
    /// under the permit (key, holder token, lease expiry, canonical
    /// arguments, precondition version) and completes the claim.
    Permitted,
    /// The proposal broke a rule.
    Rejected,
    /// No capability, or not authorised for this resource now.
    Forbidden,
    /// The provider reported a refusal.
    Refused,
    /// Output limit or cut stream: nothing was parsed.
    Truncated,
    /// The provider's filter stopped the output.
    ContentFiltered,
}

impl Outcome {
    /// Every outcome, for documentation checks.
    pub const ALL: [Self; 15] = [
        Self::Answer,
        Self::Abstain,
        Self::Executed,
        Self::Replayed,
        Self::InFlight,
        Self::Conflict,
        Self::StateChanged,
        Self::NeedsReconciliation,
        Self::PendingApproval,
        Self::Permitted,
        Self::Rejected,
        Self::Forbidden,
        Self::Refused,
        Self::Truncated,
        Self::ContentFiltered,
    ];

    /// The stable snake_case code.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Answer => "answer",
            Self::Abstain => "abstain",
            Self::Executed => "executed",
            Self::Replayed => "replayed",
            Self::InFlight => "in_flight",
            Self::Conflict => "conflict",
            Self::StateChanged => "state_changed",
            Self::NeedsReconciliation => "needs_reconciliation",
            Self::PendingApproval => "pending_approval",
            Self::Permitted => "permitted",
            Self::Rejected => "rejected",
            Self::Forbidden => "forbidden",
            Self::Refused => "refused",
            Self::Truncated => "truncated",
            Self::ContentFiltered => "content_filtered",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why, where an outcome needs a reason. The stateless stages' reasons pass
/// through as [`Reason::Contract`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A stateless-stage rejection (`duplicate_key`, `unknown_key`, …).
    Contract(contract::Reason),
    /// `forbidden`: the principal lacks the tool's capability.
    MissingCapability,
    /// `forbidden`: the authoriser denied this actor this resource now.
    NotAuthorized,
    /// `forbidden`: the authoriser could not evaluate; an error denies.
    AuthorizationError,
    /// `rejected`: the tool's operation key names a scope field the request
    /// did not carry (a server configuration error; nothing was claimed).
    MissingScope,
    /// `rejected`: a scope value is not of its field's type (`scope_types`
    /// in the policy): `"042"` or `4.2` for an integer field, `42` for a
    /// string field. Nothing was authorised, read or claimed.
    InvalidScope,
    /// `state_changed`: the gate's state read found another version.
    VersionMismatch,
    /// `state_changed`: the executor's write precondition failed; nothing
    /// was written and the claim is closed as not applied.
    PreconditionFailed,
    /// `needs_reconciliation`: the claim is in flight past its lease.
    LeaseExpired,
    /// `needs_reconciliation`: completion matched no row (the lease was
    /// taken over or reconciled meanwhile); the write's outcome stands but
    /// this holder could not record it.
    LeaseLost,
    /// `needs_reconciliation`: the executor could not say what happened.
    ExecutorFailed,
    /// `pending_approval`: no approval bound to this key, fingerprint and
    /// version was presented.
    ApprovalRequired,
    /// `rejected`: a reviewer denied exactly this proposal (key,
    /// fingerprint, version, policy digest); nothing was claimed.
    ApprovalDenied,
    /// `pending_approval` or `rejected`, as the budget declares: reserving
    /// this proposal's amount would pass a budget's limit in its window
    /// (docs/design.md §15); nothing was claimed or reserved.
    BudgetExceeded,
    /// `executed`: a person approved this proposal over a budget, and its
    /// amount was reserved with the approval (beyond the limit if still
    /// over it); the audit entry says so.
    BudgetExceededApproved,
}

impl Reason {
    /// The pipeline's own reasons (the contract's are listed with
    /// [`contract::Reason::ALL`]), for documentation checks.
    pub const OWN: [Self; 14] = [
        Self::MissingCapability,
        Self::NotAuthorized,
        Self::AuthorizationError,
        Self::MissingScope,
        Self::InvalidScope,
        Self::VersionMismatch,
        Self::PreconditionFailed,
        Self::LeaseExpired,
        Self::LeaseLost,
        Self::ExecutorFailed,
        Self::ApprovalRequired,
        Self::ApprovalDenied,
        Self::BudgetExceeded,
        Self::BudgetExceededApproved,
    ];

    /// The stable snake_case code.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Contract(r) => r.as_str(),
            Self::MissingCapability => "missing_capability",
            Self::NotAuthorized => "not_authorized",
            Self::AuthorizationError => "authorization_error",
            Self::MissingScope => "missing_scope",
            Self::InvalidScope => "invalid_scope",
            Self::VersionMismatch => "version_mismatch",
            Self::PreconditionFailed => "precondition_failed",
            Self::LeaseExpired => "lease_expired",
            Self::LeaseLost => "lease_lost",
            Self::ExecutorFailed => "executor_failed",
            Self::ApprovalRequired => "approval_required",
            Self::ApprovalDenied => "approval_denied",
            Self::BudgetExceeded => "budget_exceeded",
            Self::BudgetExceededApproved => "budget_exceeded_approved",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A decision of the whole pipeline. A value, never an error: only
/// infrastructure failures are [`super::GateError`]s.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// What happened.
    pub outcome: Outcome,
    /// Why, where a reason applies.
    pub reason: Option<Reason>,
    /// Human-readable detail.
    pub message: Option<String>,
    /// The tool, when there was exactly one.
    pub tool: Option<String>,
    /// The reply to deliver (`answer`, `abstain`, `executed`, `replayed`).
    pub reply: Option<String>,
    /// The operation key, once derived (never for `forbidden`).
    pub key: Option<OperationKey>,
    /// The proposal's fingerprint, once validated.
    pub fingerprint: Option<Fingerprint>,
    /// The version the model read (`state_changed`, `pending_approval`).
    pub version_seen: Option<StateVersion>,
    /// The current version (`state_changed`).
    pub current_version: Option<StateVersion>,
    /// The recorded result: the new one for `executed`, the stored one for
    /// `replayed` and for a completed `conflict`.
    pub result: Option<Value>,
    /// The prior proposal, for `conflict` (and `in_flight`/
    /// `needs_reconciliation`, for the reviewer).
    pub prior: Option<ProposalRecord>,
    /// The won claim, for `permitted` only: the caller completes it with
    /// this holder token before the lease ends.
    pub permit: Option<Lease>,
    /// The stateless stages' decision when it ended the pipeline (answer,
    /// abstain, rejected, refused, truncated, content_filtered).
    pub stateless: Option<contract::Decision>,
    /// The budget that refused the reservation, for `budget_exceeded`.
    pub budget: Option<BudgetReport>,
}

/// A budget as a decision reports it (docs/design.md §15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetReport {
    /// The budget's name.
    pub name: String,
    /// Its limit.
    pub limit: i64,
    /// Reserved in this window and scope, without this proposal.
    pub used: i64,
    /// `limit - used` (never below 0).
    pub remaining: i64,
    /// This proposal's amount.
    pub amount: i64,
}

impl BudgetReport {
    /// The report as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "limit": self.limit,
            "used": self.used,
            "remaining": self.remaining,
            "amount": self.amount,
        })
    }
}

impl Decision {
    pub(crate) fn new(outcome: Outcome) -> Self {
        Self {
            outcome,
            reason: None,
            message: None,
            tool: None,
            reply: None,
            key: None,
            fingerprint: None,
            version_seen: None,
            current_version: None,
            result: None,
            prior: None,
            permit: None,
            stateless: None,
            budget: None,
        }
    }

    /// The decision as one JSON object with a fixed set of keys.
    pub fn to_json(&self) -> Value {
        let prior = self.prior.as_ref().map(|p| {
            json!({
                "tool": p.tool(),
                "arguments": p.arguments_value().ok(),
                "version_seen": p.version_seen(),
                "proposer": p.proposer(),
            })
        });
        json!({
            "outcome": self.outcome.as_str(),
            "reason": self.reason.map(Reason::as_str),
            "message": self.message,
            "tool": self.tool,
            "reply": self.reply,
            "operation_key": self.key.map(|k| k.to_hex()),
            "fingerprint": self.fingerprint.map(|f| f.to_hex()),
            "version_seen": self.version_seen.as_ref().map(StateVersion::as_str),
            "current_version": self.current_version.as_ref().map(StateVersion::as_str),
            "result": self.result,
            "prior": prior,
            "budget": self.budget.as_ref().map(BudgetReport::to_json),
        })
    }
}
