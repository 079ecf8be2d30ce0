//! The pipeline's decision: one outcome code (docs/design.md §2), a reason code
//! where one applies, and what the caller needs to act on it.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::codes::{Outcome, Reason};
use super::state::StateVersion;
use crate::claim::{Fingerprint, Lease, OperationKey, ProposalRecord};
use crate::contract;
use crate::provider::Stop;

/// What a decision about a bound proposal names: the tool, the operation
/// key, the fingerprint and the version the model read. Every outcome past
/// the operation key stage carries one.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    /// The proposed tool.
    pub tool: String,
    /// The operation key (docs/design.md §6).
    pub key: OperationKey,
    /// The canonical arguments' fingerprint.
    pub fingerprint: Fingerprint,
    /// The resource version the model was shown.
    pub version_seen: StateVersion,
}

/// A decision of the whole pipeline (docs/design.md §2). A value, never an
/// error: only infrastructure failures are [`super::GateError`]s. Each
/// variant carries exactly what its outcome has; the accessors
/// ([`Decision::outcome`], [`Decision::reason`], …) and
/// [`Decision::view`] give the flat view the front doors and the review
/// queue use.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// `answer`: the contract stage's decision, with the model's reply.
    Answer(contract::Checked),
    /// `abstain`: the contract stage's decision, with the policy's fixed
    /// message as the reply.
    Abstain(contract::Checked),
    /// `refused`: the provider reported a refusal.
    Refused(contract::Checked),
    /// `truncated`: output limit or cut stream; nothing was parsed.
    Truncated(contract::Checked),
    /// `content_filtered`: the provider's filter stopped the output.
    ContentFiltered(contract::Checked),
    /// `rejected`: the proposal broke a rule.
    Rejected(Rejection),
    /// `forbidden`: no capability, or not authorised for this resource
    /// now. INVARIANT: nothing read from the claim store or the state
    /// source is in it (invariant 3), so it names no operation key.
    Forbidden {
        /// The proposed tool.
        tool: String,
        /// The proposal's fingerprint.
        fingerprint: Fingerprint,
        /// `missing_capability`, `not_authorized` or `authorization_error`.
        reason: Reason,
        /// Why, for the operator's log (the HTTP layer conceals an
        /// authoriser's detail from the caller).
        message: String,
    },
    /// `executed`: the claim was won, the executor wrote, the result was
    /// recorded with the completion.
    Executed {
        /// The operation.
        operation: Operation,
        /// The recorded result.
        result: Value,
        /// The model's reply.
        reply: String,
        /// A person approved this proposal over a budget
        /// (`budget_exceeded_approved`).
        over_budget_approved: bool,
    },
    /// `replayed`: same operation and fingerprint, already completed.
    Replayed {
        /// The operation.
        operation: Operation,
        /// The result recorded the first time.
        result: Value,
        /// The model's reply.
        reply: String,
        /// The proposal that was recorded.
        prior: ProposalRecord,
    },
    /// `in_flight`: same operation and fingerprint, lease still live.
    InFlight {
        /// The operation.
        operation: Operation,
        /// The proposal holding the claim.
        prior: ProposalRecord,
    },
    /// `conflict`: same operation, different fingerprint; a person
    /// decides.
    Conflict {
        /// The operation.
        operation: Operation,
        /// What the caller is told.
        message: String,
        /// The prior proposal's result, if it completed.
        result: Option<Value>,
        /// The prior proposal.
        prior: ProposalRecord,
    },
    /// `state_changed`: the version the model read is not current
    /// (`version_mismatch`), or the executor's precondition failed
    /// (`precondition_failed`). Nothing was written.
    StateChanged {
        /// The operation.
        operation: Operation,
        /// Which of the two.
        reason: Reason,
        /// What the caller is told.
        message: String,
        /// The current version, where known.
        current_version: Option<StateVersion>,
        /// The claim's not-applied result, for a closed claim.
        result: Option<Value>,
        /// The recorded proposal, when an earlier attempt closed the claim.
        prior: Option<ProposalRecord>,
    },
    /// `needs_reconciliation`: the write's outcome is unknown; reconcile,
    /// never execute again (invariant 8).
    NeedsReconciliation {
        /// The operation.
        operation: Operation,
        /// `lease_expired`, `lease_lost` or `executor_failed`.
        reason: Reason,
        /// What the caller is told.
        message: String,
        /// The recorded proposal, when the stuck claim was found.
        prior: Option<ProposalRecord>,
    },
    /// `pending_approval`: a person must approve exactly this operation,
    /// fingerprint and version.
    PendingApproval {
        /// The operation.
        operation: Operation,
        /// `approval_required` or `budget_exceeded`.
        reason: Reason,
        /// What the caller is told.
        message: String,
        /// The budget that sent it to a person, for `budget_exceeded`.
        budget: Option<BudgetReport>,
    },
    /// `permitted`: claim won for a client-executed tool; the caller writes
    /// under the permit and completes the claim before the lease ends.
    Permitted {
        /// The operation.
        operation: Operation,
        /// The won claim: key, holder token, lease expiry.
        permit: Lease,
        /// The model's reply.
        reply: String,
    },
}

/// Why a proposal was `rejected`, by the stage that rejected it.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// A stateless stage (strict decoding, the envelope, the schema, the
    /// unknown-key rule, …): the contract stage's decision.
    Contract(contract::Checked),
    /// The tool passed the contract stage of another policy but is not in
    /// this gate's.
    UnknownTool {
        /// The tool named.
        tool: String,
        /// What the caller is told.
        message: String,
    },
    /// The server's scope could not make an operation key: a field is
    /// missing (`missing_scope`) or of the wrong type (`invalid_scope`).
    /// Nothing was authorised, read or claimed past this point.
    Scope {
        /// `missing_scope` or `invalid_scope`.
        reason: Reason,
        /// The proposed tool.
        tool: String,
        /// The proposal's fingerprint.
        fingerprint: Fingerprint,
        /// Which field, and why.
        message: String,
    },
    /// A proposal of a read tool (`read_tool`: a read is served, never
    /// decided as a write), or a read past its rate (`rate_limited`).
    /// Nothing was authorised, read or claimed.
    Read {
        /// `read_tool` or `rate_limited`.
        reason: Reason,
        /// The proposed tool.
        tool: String,
        /// The proposal's fingerprint.
        fingerprint: Fingerprint,
        /// What the caller is told.
        message: String,
    },
    /// A budget that rejects rather than asks a person
    /// (`budget_exceeded`); nothing was claimed or reserved.
    OverBudget {
        /// The operation.
        operation: Operation,
        /// What the caller is told.
        message: String,
        /// The budget.
        budget: BudgetReport,
    },
    /// A reviewer denied exactly this proposal (`approval_denied`); see
    /// [`Decision::denied`].
    ApprovalDenied {
        /// The operation.
        operation: Operation,
        /// What the caller is told.
        message: String,
        /// The budget that had sent it to a person, if one did.
        budget: Option<BudgetReport>,
    },
}

/// A budget as a decision reports it (docs/design.md §15), amounts in the
/// argument's own units; `remaining` is never below 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::ToSchema),
    schema(
        as = BudgetDto,
        description = "A budget as a `budget_exceeded` decision reports it (docs/policy.md,\n\
                       \"Budgets\"): amounts in the argument's own units."
    )
)]
pub struct BudgetReport {
    /// The budget's name.
    pub name: String,
    /// Its limit per scope and window.
    pub limit: i64,
    /// Already reserved in this window and scope, without this proposal.
    pub used: i64,
    /// `limit - used`.
    pub remaining: i64,
    /// This proposal's amount.
    pub amount: i64,
}

impl BudgetReport {
    /// The report as JSON: its serde form.
    pub fn to_json(&self) -> Value {
        json!(self)
    }
}

/// A proposal as recorded with its claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PriorProposal {
    /// The tool.
    pub tool: String,
    /// The validated arguments (null if the stored text no longer decodes).
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub arguments: Option<Value>,
    /// The version the proposing model read.
    pub version_seen: String,
    /// The principal that proposed it.
    pub proposer: String,
}

impl PriorProposal {
    /// The recorded proposal `p`, as a decision about its claim reports it
    /// (`prior`).
    pub fn new(p: &ProposalRecord) -> Self {
        Self {
            tool: p.tool().to_owned(),
            arguments: p.arguments_value().ok(),
            version_seen: p.version_seen().to_owned(),
            proposer: p.proposer().to_owned(),
        }
    }
}

impl Decision {
    /// The outcome code.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Answer(_) => Outcome::Answer,
            Self::Abstain(_) => Outcome::Abstain,
            Self::Refused(_) => Outcome::Refused,
            Self::Truncated(_) => Outcome::Truncated,
            Self::ContentFiltered(_) => Outcome::ContentFiltered,
            Self::Rejected(_) => Outcome::Rejected,
            Self::Forbidden { .. } => Outcome::Forbidden,
            Self::Executed { .. } => Outcome::Executed,
            Self::Replayed { .. } => Outcome::Replayed,
            Self::InFlight { .. } => Outcome::InFlight,
            Self::Conflict { .. } => Outcome::Conflict,
            Self::StateChanged { .. } => Outcome::StateChanged,
            Self::NeedsReconciliation { .. } => Outcome::NeedsReconciliation,
            Self::PendingApproval { .. } => Outcome::PendingApproval,
            Self::Permitted { .. } => Outcome::Permitted,
        }
    }

    /// The reason code, where the outcome has one.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            Self::Answer(d)
            | Self::Abstain(d)
            | Self::Refused(d)
            | Self::Truncated(d)
            | Self::ContentFiltered(d)
            | Self::Rejected(Rejection::Contract(d)) => d.reason.map(Reason::Contract),
            Self::Rejected(Rejection::UnknownTool { .. }) => {
                Some(Reason::Contract(contract::RejectReason::UnknownTool))
            }
            Self::Rejected(Rejection::Scope { reason, .. } | Rejection::Read { reason, .. })
            | Self::Forbidden { reason, .. }
            | Self::StateChanged { reason, .. }
            | Self::NeedsReconciliation { reason, .. }
            | Self::PendingApproval { reason, .. } => Some(*reason),
            Self::Rejected(Rejection::OverBudget { .. }) => Some(Reason::BudgetExceeded),
            Self::Rejected(Rejection::ApprovalDenied { .. }) => Some(Reason::ApprovalDenied),
            Self::Executed {
                over_budget_approved,
                ..
            } => over_budget_approved.then_some(Reason::BudgetExceededApproved),
            Self::Replayed { .. }
            | Self::InFlight { .. }
            | Self::Conflict { .. }
            | Self::Permitted { .. } => None,
        }
    }

    /// Human-readable detail, where there is one.
    pub fn message(&self) -> Option<&str> {
        match self {
            Self::Answer(d)
            | Self::Abstain(d)
            | Self::Refused(d)
            | Self::Truncated(d)
            | Self::ContentFiltered(d)
            | Self::Rejected(Rejection::Contract(d)) => d.message.as_deref(),
            Self::Rejected(
                Rejection::UnknownTool { message, .. }
                | Rejection::Scope { message, .. }
                | Rejection::Read { message, .. }
                | Rejection::OverBudget { message, .. }
                | Rejection::ApprovalDenied { message, .. },
            )
            | Self::Forbidden { message, .. }
            | Self::Conflict { message, .. }
            | Self::StateChanged { message, .. }
            | Self::NeedsReconciliation { message, .. }
            | Self::PendingApproval { message, .. } => Some(message),
            Self::Executed { .. }
            | Self::Replayed { .. }
            | Self::InFlight { .. }
            | Self::Permitted { .. } => None,
        }
    }

    /// The operation, for every outcome past the operation key stage.
    pub fn operation(&self) -> Option<&Operation> {
        match self {
            Self::Rejected(
                Rejection::OverBudget { operation, .. }
                | Rejection::ApprovalDenied { operation, .. },
            )
            | Self::Executed { operation, .. }
            | Self::Replayed { operation, .. }
            | Self::InFlight { operation, .. }
            | Self::Conflict { operation, .. }
            | Self::StateChanged { operation, .. }
            | Self::NeedsReconciliation { operation, .. }
            | Self::PendingApproval { operation, .. }
            | Self::Permitted { operation, .. } => Some(operation),
            Self::Answer(_)
            | Self::Abstain(_)
            | Self::Refused(_)
            | Self::Truncated(_)
            | Self::ContentFiltered(_)
            | Self::Rejected(
                Rejection::Contract(_)
                | Rejection::UnknownTool { .. }
                | Rejection::Scope { .. }
                | Rejection::Read { .. },
            )
            | Self::Forbidden { .. } => None,
        }
    }

    /// The contract stage's decision, when it ended the pipeline (answer,
    /// abstain, a stateless rejection, refused, truncated,
    /// content_filtered).
    pub fn stateless(&self) -> Option<&contract::Checked> {
        match self {
            Self::Answer(d)
            | Self::Abstain(d)
            | Self::Refused(d)
            | Self::Truncated(d)
            | Self::ContentFiltered(d)
            | Self::Rejected(Rejection::Contract(d)) => Some(d),
            _ => None,
        }
    }

    /// The tool, when there was exactly one.
    pub fn tool(&self) -> Option<&str> {
        if let Some(d) = self.stateless() {
            return d.tool.as_deref();
        }
        match self {
            Self::Rejected(
                Rejection::UnknownTool { tool, .. }
                | Rejection::Scope { tool, .. }
                | Rejection::Read { tool, .. },
            )
            | Self::Forbidden { tool, .. } => Some(tool),
            other => other.operation().map(|o| o.tool.as_str()),
        }
    }

    /// The reply to deliver (`answer`, `abstain`, `executed`, `replayed`,
    /// `permitted`).
    pub fn reply(&self) -> Option<&str> {
        if let Some(d) = self.stateless() {
            return d.reply.as_deref();
        }
        match self {
            Self::Executed { reply, .. }
            | Self::Replayed { reply, .. }
            | Self::Permitted { reply, .. } => Some(reply),
            _ => None,
        }
    }

    /// The operation key, once derived (never for `forbidden`).
    pub fn key(&self) -> Option<OperationKey> {
        self.operation().map(|o| o.key)
    }

    /// The proposal's fingerprint, once validated.
    pub fn fingerprint(&self) -> Option<Fingerprint> {
        match self {
            Self::Rejected(
                Rejection::Scope { fingerprint, .. } | Rejection::Read { fingerprint, .. },
            )
            | Self::Forbidden { fingerprint, .. } => Some(*fingerprint),
            other => other.operation().map(|o| o.fingerprint),
        }
    }

    /// The version the model read, once the operation is bound.
    pub fn version_seen(&self) -> Option<&StateVersion> {
        self.operation().map(|o| &o.version_seen)
    }

    /// The current version, for `state_changed` where it is known.
    pub fn current_version(&self) -> Option<&StateVersion> {
        match self {
            Self::StateChanged {
                current_version, ..
            } => current_version.as_ref(),
            _ => None,
        }
    }

    /// The recorded result: the new one for `executed`, the stored one for
    /// `replayed`, a completed `conflict`'s and a closed claim's.
    pub fn result(&self) -> Option<&Value> {
        match self {
            Self::Executed { result, .. } | Self::Replayed { result, .. } => Some(result),
            Self::Conflict { result, .. } | Self::StateChanged { result, .. } => result.as_ref(),
            _ => None,
        }
    }

    /// The recorded proposal, for a decision about an existing claim.
    pub fn prior(&self) -> Option<&ProposalRecord> {
        match self {
            Self::Replayed { prior, .. }
            | Self::InFlight { prior, .. }
            | Self::Conflict { prior, .. } => Some(prior),
            Self::StateChanged { prior, .. } | Self::NeedsReconciliation { prior, .. } => {
                prior.as_ref()
            }
            _ => None,
        }
    }

    /// The won claim, for `permitted` only.
    pub fn permit(&self) -> Option<&Lease> {
        match self {
            Self::Permitted { permit, .. } => Some(permit),
            _ => None,
        }
    }

    /// The budget that refused the reservation, for `budget_exceeded` (and
    /// a denial of a proposal a budget sent to a person).
    pub fn budget(&self) -> Option<&BudgetReport> {
        match self {
            Self::Rejected(Rejection::OverBudget { budget, .. }) => Some(budget),
            Self::Rejected(Rejection::ApprovalDenied { budget, .. })
            | Self::PendingApproval { budget, .. } => budget.as_ref(),
            _ => None,
        }
    }

    /// A reviewer's denial of a `pending_approval` decision: `rejected`
    /// with `approval_denied` and `message`. Any other decision is
    /// returned unchanged, since only a proposal waiting for a person can
    /// be denied.
    #[must_use]
    pub fn denied(self, message: String) -> Self {
        match self {
            Self::PendingApproval {
                operation, budget, ..
            } => Self::Rejected(Rejection::ApprovalDenied {
                operation,
                message,
                budget,
            }),
            other => other,
        }
    }

    /// The decision's flat view ([`DecisionView::of`]).
    pub fn view(&self) -> DecisionView {
        DecisionView::of(self)
    }

    /// The flat view as JSON: its serde form.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.view()).unwrap_or(Value::Null)
    }
}

/// The stateless stages' detail, when they ended the decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Stateless {
    /// JSON pointer to the offending value, where known.
    pub pointer: Option<String>,
    /// The provider's stop, where the body was read that far.
    pub stop: Option<Stop>,
    /// Whether the one bounded re-ask is still allowed.
    pub repairable: bool,
    /// Which model attempt this was.
    pub attempt: u32,
}

impl Stateless {
    /// The contract stage's decision `d`, as a decision it ended reports it.
    pub fn new(d: &contract::Checked) -> Self {
        Self {
            pointer: d.pointer.clone(),
            stop: d.stop.clone(),
            repairable: d.repairable,
            attempt: d.attempt,
        }
    }
}

/// A decision as one flat object with a fixed set of keys: the one view
/// every front door starts from (HTTP adds the permit and the review item,
/// MCP keeps what a host may see) and the one a review item keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DecisionView {
    /// The outcome code (`docs/design.md` §2).
    pub outcome: Outcome,
    /// The reason code, where one applies.
    pub reason: Option<Reason>,
    /// Human-readable detail.
    pub message: Option<String>,
    /// The tool.
    pub tool: Option<String>,
    /// The reply to deliver.
    pub reply: Option<String>,
    /// The operation key (hex).
    pub operation_key: Option<String>,
    /// The proposal's fingerprint (hex).
    pub fingerprint: Option<String>,
    /// The version the model read.
    pub version_seen: Option<String>,
    /// The current version (`state_changed`).
    pub current_version: Option<String>,
    /// The recorded result (`executed`, `replayed`, a completed `conflict`).
    pub result: Option<Value>,
    /// The prior proposal (`conflict`, `in_flight`, `needs_reconciliation`).
    pub prior: Option<PriorProposal>,
    /// The stateless stages' detail (pointer, stop class, repairable) when
    /// they ended the decision.
    pub stateless: Option<Stateless>,
    /// The budget that refused the reservation (`budget_exceeded`).
    pub budget: Option<BudgetReport>,
}

impl DecisionView {
    /// The flat view of `d`.
    pub fn of(d: &Decision) -> Self {
        Self {
            outcome: d.outcome(),
            reason: d.reason(),
            message: d.message().map(str::to_owned),
            tool: d.tool().map(str::to_owned),
            reply: d.reply().map(str::to_owned),
            operation_key: d.key().map(|k| k.to_hex()),
            fingerprint: d.fingerprint().map(|f| f.to_hex()),
            version_seen: d.version_seen().map(|v| v.as_str().to_owned()),
            current_version: d.current_version().map(|v| v.as_str().to_owned()),
            result: d.result().cloned(),
            prior: d.prior().map(PriorProposal::new),
            stateless: d.stateless().map(Stateless::new),
            budget: d.budget().cloned(),
        }
    }
}
