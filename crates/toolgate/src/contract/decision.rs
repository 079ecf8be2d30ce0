//! What [`check`](super::check) returns: a [`Checked`], and for an `action`
//! the [`ProposedAction`] inside it.
//!
//! Both are closed: their fields are private to the contract module, so the
//! only way to hold a `ProposedAction` is to have it from `check`, which made
//! it after schema validation, the unknown-key rule and the fingerprint.
//! `pipeline::decide` trusts an action for exactly that reason.

use std::sync::Arc;

use serde_json::Value;

use super::vocab::{CheckOutcome, RejectReason};
use crate::claim::Fingerprint;
use crate::provider::Stop;

/// A proposal that passed every stateless stage. Only [`check`](super::check)
/// makes one; its fields are read through the accessors.
#[derive(Debug, Clone, PartialEq)]
pub struct ProposedAction {
    /// The tool's name (a tool of the policy; shared with it).
    pub(super) tool: Arc<str>,
    /// The provider's call id, for native tool calls that have one.
    pub(super) call_id: Option<String>,
    /// The strictly decoded, schema-valid arguments.
    pub(super) arguments: Value,
    /// Their RFC 8785 canonical JSON text.
    pub(super) canonical_arguments: String,
    /// SHA-256 of the canonical text.
    pub(super) fingerprint: Fingerprint,
    /// The capability the tool needs (from the policy; shared with it).
    pub(super) capability: Arc<str>,
    /// Whether each operation needs a person's approval (from the policy).
    pub(super) needs_approval: bool,
}

impl ProposedAction {
    /// The tool's name, a tool of the policy `check` ran under.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The provider's call id, for native tool calls that have one.
    pub fn call_id(&self) -> Option<&str> {
        self.call_id.as_deref()
    }

    /// The strictly decoded, schema-valid arguments.
    pub fn arguments(&self) -> &Value {
        &self.arguments
    }

    /// The arguments' RFC 8785 canonical JSON text.
    pub fn canonical_arguments(&self) -> &str {
        &self.canonical_arguments
    }

    /// SHA-256 of the canonical arguments.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// The capability the tool needs (from the policy).
    pub fn capability(&self) -> &str {
        &self.capability
    }

    /// Whether each operation needs a person's approval (from the policy).
    pub fn needs_approval(&self) -> bool {
        self.needs_approval
    }
}

/// The result of [`check`]: a value, never an error.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// What happened: private, so that only `check` makes an `action`
    /// (and always with its proposal); [`Checked::outcome`] reads it.
    pub(super) outcome: CheckOutcome,
    /// Why, for `rejected`.
    pub reason: Option<RejectReason>,
    /// JSON pointer to the offending value, where known. Pointers into a
    /// tool's arguments are relative to the arguments object.
    pub pointer: Option<String>,
    /// Human-readable detail.
    pub message: Option<String>,
    /// The tool named by the model, when there was exactly one (shared with
    /// the policy when it is one of its tools).
    pub tool: Option<Arc<str>>,
    /// The validated proposal, for `action`: private, so that only `check`
    /// puts one here ([`Checked::action`] reads it).
    pub(super) action: Option<ProposedAction>,
    /// The reply to deliver: the model's for `answer`/`action`, the policy's
    /// fixed message for `abstain`.
    pub reply: Option<String>,
    /// The provider's stop, where the body was read that far.
    pub stop: Option<Stop>,
    /// Which attempt this was.
    pub attempt: u32,
    /// Whether the one bounded repair (a re-ask) is still allowed: only for
    /// `invalid_json` in model-authored JSON on the first attempt. A
    /// refusal or a truncation is never repairable.
    pub repairable: bool,
}

impl Checked {
    pub(super) fn new(outcome: CheckOutcome, stop: Option<Stop>, attempt: u32) -> Self {
        Self {
            outcome,
            reason: None,
            pointer: None,
            message: None,
            tool: None,
            action: None,
            reply: None,
            stop,
            attempt,
            repairable: false,
        }
    }

    pub(super) fn rejected(
        reason: RejectReason,
        pointer: impl Into<String>,
        message: impl Into<String>,
        stop: Option<Stop>,
        attempt: u32,
    ) -> Self {
        Self {
            reason: Some(reason),
            pointer: Some(pointer.into()),
            message: Some(message.into()),
            ..Self::new(CheckOutcome::Rejected, stop, attempt)
        }
    }

    /// What happened.
    pub fn outcome(&self) -> CheckOutcome {
        self.outcome
    }

    /// The validated proposal: `Some` exactly for an `action` decision
    /// made by `check`.
    pub fn action(&self) -> Option<&ProposedAction> {
        self.action.as_ref()
    }

    /// Takes the proposal out of an `action` decision; any other decision
    /// (or one whose outcome was changed after `check`) comes back
    /// unchanged as the error (boxed: a decision is large, and only the
    /// action path is hot).
    pub fn into_action(self) -> Result<ProposedAction, Box<Self>> {
        match self {
            Self {
                outcome: CheckOutcome::Action,
                action: Some(action),
                ..
            } => Ok(action),
            other => Err(Box::new(other)),
        }
    }
}
