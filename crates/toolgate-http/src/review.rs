//! Which decisions go to a person, and how long a reviewer page login lasts.
//!
//! Review items, approvals and the page's logins are durable rows in the
//! claim database ([`toolgate::review::ReviewStore`], docs/design.md §14):
//! every replica lists and acts on the same items, a reviewer signed in on
//! one replica is signed in on all of them, and both survive restarts.

use toolgate::pipeline::{Outcome, Reason};

/// Whether a person can act on decisions with this outcome. A denial's
/// own rejection is not: a person already decided it.
pub fn reviewable(outcome: Outcome, reason: Option<Reason>) -> bool {
    matches!(
        outcome,
        Outcome::Conflict
            | Outcome::StateChanged
            | Outcome::Rejected
            | Outcome::PendingApproval
            | Outcome::NeedsReconciliation
    ) && reason != Some(Reason::ApprovalDenied)
}

/// How long a reviewer login lasts.
pub const SESSION_MS: i64 = 8 * 60 * 60 * 1000;
