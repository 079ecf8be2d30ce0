//! Which decisions a person is asked about: the rule that opens a review
//! item, or none, for a decision.

/// How a decision opens a review item ([`opening`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// An item of its own.
    Each,
    /// A rejection of a proposal that names no tool of the policy: at most
    /// one item per principal, reason and window ([`NewItem::dedup`](super::NewItem::dedup)).
    OncePerWindow,
}

/// Whether, and how, `decision`, proposed by `principal` under `policy`,
/// opens a review item: a decision a person can act on (`conflict`,
/// `state_changed`, `rejected`, `pending_approval`,
/// `needs_reconciliation`; not the rejection a denial itself gave). A
/// `rejected` one opens an item only when the principal holds the proposed
/// tool's capability (each rejection its own item), or when the proposal
/// names no tool the policy has (an unknown tool, or none): then at most
/// one per principal, reason and window. A key without the capability fills
/// no one's queue with proposals it may not make, and any key's stream of
/// unknown tools is one item an hour; the queue's caps bound the rest.
pub fn opening(
    decision: &crate::pipeline::Decision,
    principal: &crate::pipeline::Principal,
    policy: &crate::contract::Policy,
) -> Option<Opening> {
    use crate::pipeline::{Outcome, Reason};
    let kind = matches!(
        decision.outcome(),
        Outcome::Conflict
            | Outcome::StateChanged
            | Outcome::Rejected
            | Outcome::PendingApproval
            | Outcome::NeedsReconciliation
    ) && decision.reason() != Some(Reason::ApprovalDenied);
    if !kind {
        return None;
    }
    if decision.outcome() != Outcome::Rejected {
        return Some(Opening::Each);
    }
    match decision.tool().and_then(|t| policy.tool(t)) {
        Some(contract) => principal
            .has_capability(contract.capability())
            .then_some(Opening::Each),
        None => Some(Opening::OncePerWindow),
    }
}
