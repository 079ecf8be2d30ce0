//! The decision pipeline (docs/design.md §1): what happens to a proposal that
//! passed the stateless stages.
//!
//! ```text
//! contract::check ─▶ capability ─▶ authorisation ─▶ operation key + fingerprint
//!   ─▶ state read: version seen == current? ─▶ approval
//!   ─▶ claim (resolves an existing operation) ─▶ execute(precondition) ─▶ complete ─▶ audit
//! ```
//!
//! The order is in the types ([`stage`]): only [`Authorized`] can name a
//! resource to a [`StateSource`], only [`Bound`] can build a claim request,
//! only [`Claimed`] (a won claim) can reach an [`Executor`]. [`decide`] is
//! the one function that wires them. It is generic over the four pluggable
//! parts, links no runtime and reads no clock: time and holder tokens come in
//! with the [`Request`].
//!
//! A front door calls [`decide_call`] rather than [`decide`]: it adds the
//! request-level checks (typed scope and version, request entities), the
//! approval loop and review items, and the concealment of the authoriser's
//! words, so that no front door carries pipeline logic of its own.

mod authz;
mod budget;
mod codes;
mod decision;
mod driver;
mod error;
mod exec;
mod existing;
mod front;
mod not_applied;
mod parts;
mod read;
mod reconcile;
mod refusal;
mod scope;
pub mod stage;
mod state;

pub use crate::claim::ExecutorKind;
pub use authz::{
    Authorizer, AuthorizerUnavailable, AuthzDecision, AuthzRequest, Credential, MAX_ACTOR_BYTES,
    Principal, PrincipalError,
};
pub use codes::{Outcome, Reason, decision_pairs};
pub use decision::{
    BudgetReport, Decision, DecisionView, Operation, PriorProposal, Rejection, Stateless,
};
pub use driver::{Approval, Gate, Request, decide, decide_in};
pub use error::GateError;
pub use exec::{
    AppliedCompletion, ClientExecutor, Completed, ExecError, ExecOutcome, ExecPermit, Executor,
};
pub use front::{
    Call, CallError, FORBIDDEN_DETAIL, Front, Note, Pipeline, Settled, VersionSeen, conceal,
    decide_call, sent_reason,
};
pub use parts::DecisionParts;
pub use read::{
    AllowedRead, OverRate, READ_ALLOWED, ReadCall, ReadSettled, ReadVerdict, decide_read,
};
pub use reconcile::{
    RECONCILE_AUDIT_OUTCOMES, ReconcileReport, reconcile, reconcile_answered,
    reconcile_answered_for,
};
pub use refusal::{
    REFUSED_REQUEST, Refusal, Refused, audit_refusal, check_request_scope, refusal_entry,
    request_scope_fields,
};
pub use scope::{Scope, ScopeRefusal, VERSION_SEEN};
pub use stage::{Authorized, Bound, Claimed, Validated};
pub use state::{StateError, StateScope, StateSource, StateVersion};
