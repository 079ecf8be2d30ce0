//! One read for the entities and the ticket's version.
//!
//! Authorisation reads the acting agent and the ticket in one statement
//! ([`SupportDesk::directory`]); the ticket's version comes with it. The
//! pipeline then reads the version for its state check.
//! [`decide_reading_once`] gives that state read the version authorisation
//! read, so a decision sends one statement fewer.
//!
//! Why that is safe:
//!
//! - The version check is a filter, not a lock (docs/design.md invariant
//!   9): the credit applies `version_seen` again as its write precondition.
//!   A version read a little earlier can only let a proposal through that
//!   the precondition then stops (`state_changed` / `precondition_failed`,
//!   nothing written), as a read racing a write could already.
//! - Invariant 4 (a retry of a completed operation is `replayed`, never
//!   `state_changed`) holds: a credit's claim is committed before its
//!   write. If the read saw the original's write, the versions differ and
//!   the driver looks the claim up before answering, and finds the
//!   original's. If it did not, the versions agree and the retry's claim
//!   reads back the original's row.
//! - The version lives in a value built for one decision and dropped with
//!   it, taken by the first state read and only for the ticket it was read
//!   for: no version reaches another decision, and with none kept the
//!   state read queries as before.
//!
//! The read runs on the decision's own connection
//! ([`toolgate_store::Held`], made from the gate's claim store), which the
//! decision's claim then begins on: the read costs its statement, not also
//! a pool use. The decision claims through the `Held`, whose every call but
//! the claim gives the connection back first, and a state read of its own
//! gives it back before it uses the pool: a decision never waits on the
//! pool while it holds a connection.
//!
//! `toolgate serve` decides this way too: its support-desk components
//! override `toolgate_http::GateComponents::decide` with this function,
//! and `decide_in_process` with [`decide_reading_once_on`] on a `Held`
//! made by `hold_through_completion`, whose executor is the desk on that
//! connection ([`SupportDesk::on_held`](crate::SupportDesk::on_held)): the
//! credit and the completion run on it too.
//! toolgate-eval's `PipelineGate` has one state source for all decisions,
//! so it keeps [`SupportDesk`]'s own query for the version.

use std::sync::{Mutex, PoisonError};

use toolgate::claim::ClaimStore;
use toolgate::contract;
use toolgate::pipeline::{
    AuthzRequest, Decision, Executor, Gate, GateError, Request, StateError, StateScope,
    StateSource, StateVersion, decide,
};
use toolgate_cedar::{CedarAuthorizer, EntityError, EntityRecord, EntitySource};
use toolgate_store::{AnyClaimStore, Held};

use crate::cedar;
use crate::store::SupportDesk;

/// Decides one proposal as [`toolgate::pipeline::decide`] does on `gate`,
/// with the Cedar entities and the ticket's version read in one statement,
/// on a connection the decision holds and its claim then begins on. The
/// gate's authoriser lends its policies; its own entity source is not
/// asked.
pub async fn decide_reading_once<S, E>(
    gate: &Gate<'_, CedarAuthorizer<S>, SupportDesk, AnyClaimStore, E>,
    proposal: contract::Checked,
    request: &Request<'_>,
) -> Result<Decision, GateError>
where
    S: EntitySource,
    E: Executor,
{
    // Made here and dropped on return: one decision's connection only.
    let held = gate.claims.hold();
    let on_held = Gate {
        policy: gate.policy,
        authorizer: gate.authorizer,
        state: gate.state,
        claims: &held,
        executor: gate.executor,
    };
    decide_reading_once_on(&on_held, &held, proposal, request).await
}

/// [`decide_reading_once`] with the read on `held` and the claim through
/// `gate.claims`: `held` itself, or a wrapper that claims through it (a
/// test's hook between read and claim). Through any other store the claim
/// would acquire a connection of its own while the decision holds one,
/// which a pool that every decision waits on this way never hands out.
pub async fn decide_reading_once_on<S, C, E>(
    gate: &Gate<'_, CedarAuthorizer<S>, SupportDesk, C, E>,
    held: &Held<'_>,
    proposal: contract::Checked,
    request: &Request<'_>,
) -> Result<Decision, GateError>
where
    S: EntitySource,
    C: ClaimStore,
    E: Executor,
{
    // Built here and dropped on return: one decision's reads only.
    let reads = DecisionReads {
        desk: gate.state,
        held,
        version: Mutex::new(None),
    };
    let authorizer = gate.authorizer.with_entities(&reads);
    let once = Gate {
        policy: gate.policy,
        authorizer: &authorizer,
        state: &reads,
        claims: gate.claims,
        executor: gate.executor,
    };
    decide(&once, proposal, request).await
}

/// The entities and state source of one decision.
struct DecisionReads<'a> {
    desk: &'a SupportDesk,
    /// The connection the read runs on and the claim begins on.
    held: &'a Held<'a>,
    /// The ticket and the version authorisation read, until the state read
    /// takes it.
    version: Mutex<Option<(String, i64)>>,
}

impl DecisionReads<'_> {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<(String, i64)>> {
        // Nothing can panic while the slot is held; a poisoned one holds
        // a whole value.
        self.version.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl EntitySource for DecisionReads<'_> {
    async fn entities(&self, r: &AuthzRequest<'_>) -> Result<Vec<EntityRecord>, EntityError> {
        let (ticket, found) = cedar::read_directory(self.desk, Some(self.held), r).await?;
        *self.slot() = found.ticket.as_ref().map(|t| (ticket.clone(), t.version));
        Ok(cedar::entities(
            r.principal().id(),
            found.agent_active,
            &ticket,
            found.ticket.map(|t| (t.customer_id, t.assignee)),
        ))
    }
}

impl StateSource for DecisionReads<'_> {
    async fn current_version(&self, scope: StateScope<'_>) -> Result<StateVersion, StateError> {
        let read = self.slot().take();
        match (read, scope.field("ticket_id")) {
            (Some((read_for, version)), Some(ticket)) if read_for == ticket => {
                Ok(StateVersion::from(version))
            }
            _ => {
                // A read of its own from the pool: not while holding one.
                self.held.give_back();
                self.desk.current_version(scope).await
            }
        }
    }

    fn reads_state(&self, tool: &str) -> bool {
        self.desk.reads_state(tool)
    }
}
