//! The stateless stages (docs/design.md §5–§6): provider body → stop class → strict
//! decode → envelope → tool contract → canonical arguments and fingerprint.
//!
//! [`check`] cannot fail: every input gives a [`Checked`] (cedar's
//! `is_authorized` style). An `action` decision means the proposal passed
//! every stateless stage; it is **not** permission to act: capability,
//! authorisation, state and the claim are the pipeline's job.

pub mod budget;
mod check;
mod decision;
mod envelope;
pub mod explain;
pub mod export;
mod policy;
mod render;
pub mod schema;
mod vocab;

pub use check::{CheckOptions, check, check_call};
pub use decision::{Checked, ProposedAction};
pub use envelope::{Envelope, EnvelopeError};
pub use policy::{
    ArgumentScopes, DEFAULT_ARGUMENT_MAX_BYTES, DEFAULT_REPLY_MAX_BYTES, Policy, PolicyError,
    ToolContract, is_identifier,
};
pub use schema::{AuditError, Schema, Violation};
pub use vocab::{CheckOutcome, EnvelopeMode, MAX_ATTEMPTS, RejectReason};
