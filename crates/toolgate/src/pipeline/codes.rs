//! The decision's codes: the outcome (docs/design.md §2) and the reason, each
//! with its stable snake_case code, and every (outcome, reason) pair a
//! decision can have. The codes are the wire form too: serde spells each
//! value as its `as_str()`.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::contract;

/// Every outcome a decision can have (docs/design.md §2). Deliberately exhaustive:
/// a new outcome breaks callers' matches, so they fail closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::ToSchema),
    schema(
        as = OutcomeCode,
        description = "The outcome of a decision (`docs/error-codes.md`, \"Pipeline decisions\")."
    )
)]
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

    /// Whether a decision with this outcome may come without a reason.
    /// Exhaustive, with [`Reason::outcomes`]: the two say every (outcome,
    /// reason) pair a decision can have ([`decision_pairs`]).
    pub const fn may_lack_reason(self) -> bool {
        match self {
            Self::Answer
            | Self::Abstain
            | Self::Executed
            | Self::Replayed
            | Self::InFlight
            | Self::Conflict
            | Self::Permitted
            | Self::Refused
            | Self::Truncated
            | Self::ContentFiltered => true,
            Self::StateChanged
            | Self::NeedsReconciliation
            | Self::PendingApproval
            | Self::Rejected
            | Self::Forbidden => false,
        }
    }

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

    /// The outcome whose code is `code`.
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == code)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why, where an outcome needs a reason. The stateless stages' reasons pass
/// through as [`Reason::Contract`]. One flat code space on the wire: serde
/// spells a contract reason as its own code, with no wrapper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A stateless-stage rejection (`duplicate_key`, `unknown_key`, …).
    Contract(contract::RejectReason),
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
    /// `rejected`: the tool only reads (`read = true`): it is served by
    /// the MCP gateway's read path, never claimed or executed as a write.
    ReadTool,
    /// `rejected`: the principal called this read tool more often than its
    /// rate allows; nothing was authorised or forwarded.
    RateLimited,
}

impl Reason {
    /// The outcomes a decision with this reason can have. Exhaustive (no
    /// wildcard): a new reason does not compile until it says where it
    /// appears, and [`decision_pairs`] then lists its pairs.
    pub const fn outcomes(self) -> &'static [Outcome] {
        match self {
            Self::Contract(_)
            | Self::MissingScope
            | Self::InvalidScope
            | Self::ApprovalDenied
            | Self::ReadTool
            | Self::RateLimited => &[Outcome::Rejected],
            Self::MissingCapability | Self::NotAuthorized | Self::AuthorizationError => {
                &[Outcome::Forbidden]
            }
            Self::VersionMismatch | Self::PreconditionFailed => &[Outcome::StateChanged],
            Self::LeaseExpired | Self::LeaseLost | Self::ExecutorFailed => {
                &[Outcome::NeedsReconciliation]
            }
            Self::ApprovalRequired => &[Outcome::PendingApproval],
            Self::BudgetExceeded => &[Outcome::PendingApproval, Outcome::Rejected],
            Self::BudgetExceededApproved => &[Outcome::Executed],
        }
    }

    /// Every reason: the contract's ([`contract::RejectReason::ALL`]) and
    /// the pipeline's own ([`Reason::OWN`]).
    pub fn all() -> impl Iterator<Item = Self> {
        contract::RejectReason::ALL
            .into_iter()
            .map(Self::Contract)
            .chain(Self::OWN)
    }

    /// The pipeline's own reasons (the contract's are listed with
    /// [`contract::RejectReason::ALL`]), for documentation checks. The
    /// match in `own_listed` names the same variants: a new reason does
    /// not compile until it is listed there, next to this list.
    pub const OWN: [Self; 16] = [
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
        Self::ReadTool,
        Self::RateLimited,
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
            Self::ReadTool => "read_tool",
            Self::RateLimited => "rate_limited",
        }
    }

    /// The reason whose code is `code`.
    pub fn parse(code: &str) -> Option<Self> {
        Self::all().find(|r| r.as_str() == code)
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = String::deserialize(deserializer)?;
        Self::parse(&code)
            .ok_or_else(|| serde::de::Error::custom(format_args!("unknown reason code `{code}`")))
    }
}

/// The reason's schema, listing every code of [`Reason::all`] (the derive
/// cannot flatten [`Reason::Contract`] into the one code space).
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Reason {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some(
                "Why, where an outcome has a reason: the stateless stages' rejection\n\
                 reasons and the pipeline's own (`docs/error-codes.md`).",
            ))
            .enum_values(Some(Self::all().map(Self::as_str)))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Reason {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("ReasonCode")
    }
}

/// Whether `r` is one of [`Reason::OWN`]'s variants, by a match that names
/// every variant: adding one to [`Reason`] breaks the build here until it is
/// sorted in or out, which is where [`Reason::OWN`] is kept up to date.
#[cfg_attr(
    not(test),
    expect(dead_code, reason = "the exhaustiveness guard of Reason::OWN")
)]
const fn own_listed(r: Reason) -> bool {
    match r {
        Reason::Contract(_) => false,
        Reason::MissingCapability
        | Reason::NotAuthorized
        | Reason::AuthorizationError
        | Reason::MissingScope
        | Reason::InvalidScope
        | Reason::VersionMismatch
        | Reason::PreconditionFailed
        | Reason::LeaseExpired
        | Reason::LeaseLost
        | Reason::ExecutorFailed
        | Reason::ApprovalRequired
        | Reason::ApprovalDenied
        | Reason::BudgetExceeded
        | Reason::BudgetExceededApproved
        | Reason::ReadTool
        | Reason::RateLimited => true,
    }
}

/// Every (outcome, reason) pair a pipeline decision can have, `None` for a
/// decision without a reason: built from [`Outcome::ALL`],
/// [`Outcome::may_lack_reason`], [`Reason::all`] and [`Reason::outcomes`],
/// never kept by hand. docs/error-codes.md has a row for each
/// (`tests/docs.rs`).
pub fn decision_pairs() -> Vec<(Outcome, Option<Reason>)> {
    let mut pairs: Vec<(Outcome, Option<Reason>)> = Outcome::ALL
        .into_iter()
        .filter(|o| o.may_lack_reason())
        .map(|o| (o, None))
        .collect();
    for reason in Reason::all() {
        for outcome in reason.outcomes() {
            pairs.push((*outcome, Some(reason)));
        }
    }
    pairs
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_lists_exactly_the_own_reasons() {
        for r in Reason::OWN {
            assert!(own_listed(r), "{r}");
        }
        for r in contract::RejectReason::ALL {
            assert!(!own_listed(Reason::Contract(r)), "{}", r.as_str());
        }
        let distinct: std::collections::HashSet<_> = Reason::OWN.into_iter().collect();
        assert_eq!(distinct.len(), Reason::OWN.len());
    }

    #[test]
    fn serde_spells_every_outcome_as_its_code_and_reads_it_back() {
        crate::assert_serde_spells_codes(Outcome::ALL, Outcome::as_str);
        let parsed = Outcome::ALL.map(|o| Outcome::parse(o.as_str()));
        assert_eq!(parsed, Outcome::ALL.map(Some));
        assert!(serde_json::from_value::<Outcome>("Answer".into()).is_err());
    }

    #[test]
    fn serde_spells_every_reason_as_its_flat_code_and_reads_it_back() {
        crate::assert_serde_spells_codes(Reason::all(), Reason::as_str);
        assert!(Reason::all().all(|r| Reason::parse(r.as_str()) == Some(r)));
        assert!(serde_json::from_value::<Reason>("contract".into()).is_err());
        assert!(serde_json::from_value::<Reason>(serde_json::json!(3)).is_err());
    }

    #[test]
    fn every_reason_has_an_outcome_that_needs_or_allows_it() {
        for r in Reason::all() {
            assert!(!r.outcomes().is_empty(), "{r}");
        }
        // An outcome that always carries a reason has at least one.
        for o in Outcome::ALL.into_iter().filter(|o| !o.may_lack_reason()) {
            assert!(
                decision_pairs()
                    .iter()
                    .any(|(po, r)| *po == o && r.is_some()),
                "{o}"
            );
        }
    }
}
