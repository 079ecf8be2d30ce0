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
//! The read runs on the decision's own connection (its
//! [`toolgate_store::Session`], made from the gate's claim store and passed
//! by `&mut` to each of the decision's calls: [`ReadingOnce`] is the
//! desk's [`DecisionParts`]), which the decision's claim then begins on:
//! the read costs its statement, not also a pool use. Every call but the
//! claim and the credit gives the connection back first, and a state read
//! of its own gives it back before it uses the pool: a decision never waits
//! on the pool while it holds a connection.
//!
//! `toolgate serve` decides this way too: its support-desk components
//! override `toolgate_service::Components::decide` with
//! [`ReadingOnce::new`], and `decide_in_process` with
//! [`ReadingOnce::crediting`], whose credit and completion run on that
//! connection too. `toolgate eval`'s service has one state source for all
//! decisions, so it keeps [`SupportDesk`]'s own query for the version.

use toolgate::claim::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStore, CompleteRequest, Completion, ExecutorKind,
    OperationKey, RawClaim, StoreError,
};
use toolgate::contract::{self, Policy};
use toolgate::pipeline::{
    AppliedCompletion, Authorizer, AuthzDecision, AuthzRequest, Completed, Decision, DecisionParts,
    ExecError, ExecPermit, Executor, Gate, GateError, Request, StateError, StateScope, StateSource,
    StateVersion, decide_in,
};
use toolgate_cedar::{CedarAuthorizer, EntityError, EntityRecord, EntitySource};
use toolgate_service::ResultCap;
use toolgate_store::{AnyClaimStore, Session};

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
    ReadingOnce::new(gate).decide(proposal, request).await
}

/// The desk's parts for one decision that reads once
/// ([`DecisionParts`], with a [`DeskSession`]).
pub struct ReadingOnce<'g, S, E> {
    policy: &'g Policy,
    authorizer: &'g CedarAuthorizer<S>,
    desk: &'g SupportDesk,
    claims: &'g AnyClaimStore,
    write: Write<'g, E>,
}

/// Who writes a won claim.
enum Write<'g, E> {
    /// The gate's executor, with no connection held.
    Executor(&'g E),
    /// The desk's credit and the claim's completion in one transaction, on
    /// the connection the claim committed on, its receipt under `cap`.
    Credit(ResultCap),
}

/// What one decision's calls share: the connection
/// ([`toolgate_store::Session`]), and the ticket and the version
/// authorisation read, until the state read takes them.
pub struct DeskSession<'g> {
    db: Session<'g>,
    version: Option<(String, i64)>,
}

impl<'g, S, E> ReadingOnce<'g, S, E> {
    /// The parts of `gate`, its executor writing after the claim.
    pub fn new(gate: &Gate<'g, CedarAuthorizer<S>, SupportDesk, AnyClaimStore, E>) -> Self {
        Self {
            policy: gate.policy,
            authorizer: gate.authorizer,
            desk: gate.state,
            claims: gate.claims,
            write: Write::Executor(gate.executor),
        }
    }

    /// A new session for one decision.
    pub fn session(&self) -> DeskSession<'g> {
        let db = match self.write {
            Write::Executor(_) => self.claims.session(),
            Write::Credit(_) => self.claims.session_through_completion(),
        };
        DeskSession { db, version: None }
    }
}

impl<'g, S> ReadingOnce<'g, S, SupportDesk> {
    /// The parts of a decision whose executor is `desk` on `claims`'s
    /// database: its credit and completion run in one transaction, on the
    /// connection its read kept and its claim committed on, so a fresh
    /// credit uses the pool once. Receipts are held to `cap`.
    pub fn crediting(
        policy: &'g Policy,
        authorizer: &'g CedarAuthorizer<S>,
        desk: &'g SupportDesk,
        claims: &'g AnyClaimStore,
        cap: ResultCap,
    ) -> Self {
        Self {
            policy,
            authorizer,
            desk,
            claims,
            write: Write::Credit(cap),
        }
    }
}

impl<S: EntitySource, E: Executor> ReadingOnce<'_, S, E> {
    /// Decides one proposal on a session of its own.
    pub async fn decide(
        &self,
        proposal: contract::Checked,
        request: &Request<'_>,
    ) -> Result<Decision, GateError> {
        let mut session = self.session();
        decide_in(self, &mut session, proposal, request).await
    }
}

/// Entities read already, for the authoriser's one ask.
struct Read(Result<Vec<EntityRecord>, EntityError>);

impl EntitySource for Read {
    async fn entities(&self, _: &AuthzRequest<'_>) -> Result<Vec<EntityRecord>, EntityError> {
        self.0.clone()
    }
}

impl<'g, S: EntitySource, E: Executor> DecisionParts for ReadingOnce<'g, S, E> {
    type Session = DeskSession<'g>;

    fn policy(&self) -> &Policy {
        self.policy
    }

    async fn authorize(&self, s: &mut DeskSession<'g>, r: &AuthzRequest<'_>) -> AuthzDecision {
        let read = cedar::read_directory(self.desk, Some(&mut s.db), r).await;
        let entities = read.map(|(ticket, found)| {
            s.version = found.ticket.as_ref().map(|t| (ticket.clone(), t.version));
            cedar::entities(
                r.principal().id(),
                found.agent_active,
                &ticket,
                found.ticket.map(|t| (t.customer_id, t.assignee)),
            )
        });
        let read = Read(entities);
        self.authorizer.with_entities(&read).authorize(r).await
    }

    fn reads_state(&self, tool: &str) -> bool {
        self.desk.reads_state(tool)
    }

    async fn current_version(
        &self,
        s: &mut DeskSession<'g>,
        scope: StateScope<'_>,
    ) -> Result<StateVersion, StateError> {
        match (s.version.take(), scope.field("ticket_id")) {
            (Some((read_for, version)), Some(ticket)) if read_for == ticket => {
                Ok(StateVersion::from(version))
            }
            _ => {
                // A read of its own from the pool: not while holding one.
                s.db.give_back();
                self.desk.current_version(scope).await
            }
        }
    }

    fn executor_kind(&self, tool: &str) -> ExecutorKind {
        match self.write {
            Write::Executor(e) => e.kind(tool),
            Write::Credit(_) => self.desk.kind(tool),
        }
    }

    async fn claim(
        &self,
        s: &mut DeskSession<'g>,
        request: ClaimRequest,
    ) -> Result<RawClaim, StoreError> {
        s.db.claim(request).await
    }

    async fn fetch(
        &self,
        s: &mut DeskSession<'g>,
        key: &OperationKey,
    ) -> Result<Option<ClaimRecord>, StoreError> {
        s.db.store().fetch(key).await
    }

    async fn execute_and_complete(
        &self,
        s: &mut DeskSession<'g>,
        permit: ExecPermit<'_>,
        completion: &AppliedCompletion,
    ) -> Result<Completed, ExecError> {
        match self.write {
            Write::Executor(e) => {
                s.db.give_back();
                e.execute_and_complete(permit, completion).await
            }
            Write::Credit(cap) => {
                let completion = cap.completion(completion);
                self.desk.credit_on(&mut s.db, permit, &completion).await
            }
        }
    }

    async fn complete(
        &self,
        s: &mut DeskSession<'g>,
        request: CompleteRequest,
    ) -> Result<Completion, StoreError> {
        s.db.store().complete(request).await
    }

    async fn append_audit(
        &self,
        s: &mut DeskSession<'g>,
        entry: &AuditEntry,
    ) -> Result<(), StoreError> {
        s.db.store().append_audit(entry).await
    }
}
