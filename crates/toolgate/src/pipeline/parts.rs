//! The calls one decision makes on its components, with the session it
//! threads through them.
//!
//! A [`Gate`] shares nothing between the calls of one decision, and its
//! session is `()`. Components that do share something (a database
//! connection the decision's read, claim and write run on, so that they
//! cost their statements and not also a pool use each) implement
//! [`DecisionParts`] with a session of their own. The decision owns that
//! value, makes it before its first call and drops it on return, and hands
//! it to each call by `&mut`, as sqlx hands a `&mut PgConnection`: what one
//! call leaves in it the next one sees, and no other decision can.

use super::authz::{Authorizer, AuthzDecision, AuthzRequest};
use super::driver::Gate;
use super::exec::{AppliedCompletion, Completed, ExecError, ExecPermit, Executor};
use super::state::{StateError, StateScope, StateSource, StateVersion};
use crate::claim::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStore, CompleteRequest, Completion, ExecutorKind,
    OperationKey, RawClaim, StoreError,
};
use crate::contract::Policy;

/// Every call [`decide_in`](super::decide_in) makes on the components of
/// one decision, in its order, each with the decision's session.
pub trait DecisionParts: Sync {
    /// What the calls of one decision share; `()` when nothing is.
    type Session: Send;

    /// The tool contracts.
    fn policy(&self) -> &Policy;

    /// Live authorisation ([`Authorizer::authorize`]).
    fn authorize(
        &self,
        session: &mut Self::Session,
        request: &AuthzRequest<'_>,
    ) -> impl Future<Output = AuthzDecision> + Send;

    /// Whether `tool`'s state check reads anything
    /// ([`StateSource::reads_state`]).
    fn reads_state(&self, tool: &str) -> bool;

    /// The current version ([`StateSource::current_version`]).
    fn current_version(
        &self,
        session: &mut Self::Session,
        scope: StateScope<'_>,
    ) -> impl Future<Output = Result<StateVersion, StateError>> + Send;

    /// Who owns `tool`'s write ([`Executor::kind`]).
    fn executor_kind(&self, tool: &str) -> ExecutorKind;

    /// One claim ([`ClaimStore::claim`]).
    fn claim(
        &self,
        session: &mut Self::Session,
        request: ClaimRequest,
    ) -> impl Future<Output = Result<RawClaim, StoreError>> + Send;

    /// One claim's record ([`ClaimStore::fetch`]).
    fn fetch(
        &self,
        session: &mut Self::Session,
        key: &OperationKey,
    ) -> impl Future<Output = Result<Option<ClaimRecord>, StoreError>> + Send;

    /// The write ([`Executor::execute_and_complete`]).
    fn execute_and_complete(
        &self,
        session: &mut Self::Session,
        permit: ExecPermit<'_>,
        completion: &AppliedCompletion,
    ) -> impl Future<Output = Result<Completed, ExecError>> + Send;

    /// The completion of a write that did not complete itself
    /// ([`ClaimStore::complete`]).
    fn complete(
        &self,
        session: &mut Self::Session,
        request: CompleteRequest,
    ) -> impl Future<Output = Result<Completion, StoreError>> + Send;

    /// An audit entry not written with a completion
    /// ([`ClaimStore::append_audit`]).
    fn append_audit(
        &self,
        session: &mut Self::Session,
        entry: &AuditEntry,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

impl<A, S, C, E> DecisionParts for Gate<'_, A, S, C, E>
where
    A: Authorizer,
    S: StateSource,
    C: ClaimStore,
    E: Executor,
{
    type Session = ();

    fn policy(&self) -> &Policy {
        self.policy
    }

    fn authorize(
        &self,
        _: &mut (),
        request: &AuthzRequest<'_>,
    ) -> impl Future<Output = AuthzDecision> + Send {
        self.authorizer.authorize(request)
    }

    fn reads_state(&self, tool: &str) -> bool {
        self.state.reads_state(tool)
    }

    fn current_version(
        &self,
        _: &mut (),
        scope: StateScope<'_>,
    ) -> impl Future<Output = Result<StateVersion, StateError>> + Send {
        self.state.current_version(scope)
    }

    fn executor_kind(&self, tool: &str) -> ExecutorKind {
        self.executor.kind(tool)
    }

    fn claim(
        &self,
        _: &mut (),
        request: ClaimRequest,
    ) -> impl Future<Output = Result<RawClaim, StoreError>> + Send {
        self.claims.claim(request)
    }

    fn fetch(
        &self,
        _: &mut (),
        key: &OperationKey,
    ) -> impl Future<Output = Result<Option<ClaimRecord>, StoreError>> + Send {
        self.claims.fetch(key)
    }

    fn execute_and_complete(
        &self,
        _: &mut (),
        permit: ExecPermit<'_>,
        completion: &AppliedCompletion,
    ) -> impl Future<Output = Result<Completed, ExecError>> + Send {
        self.executor.execute_and_complete(permit, completion)
    }

    fn complete(
        &self,
        _: &mut (),
        request: CompleteRequest,
    ) -> impl Future<Output = Result<Completion, StoreError>> + Send {
        self.claims.complete(request)
    }

    fn append_audit(
        &self,
        _: &mut (),
        entry: &AuditEntry,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.claims.append_audit(entry)
    }
}
