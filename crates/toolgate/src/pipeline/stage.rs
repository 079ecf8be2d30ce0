//! The stage values: proofs that a proposal passed the earlier stages.
//!
//! Every field is private and every constructor is `pub(crate)`, called only
//! by the driver. Each later capability is borrowed from a value of the
//! earlier stage (rustls-style typestate), so skipping a step does not
//! compile (`tests/ui/*.rs` pin this):
//!
//! - only [`Authorized`] makes a [`StateScope`] (the state source's input)
//!   and only [`Authorized`] becomes a [`Bound`];
//! - only [`Bound`] makes a [`ClaimRequest`] (the claim store's input);
//! - only [`Claimed`], made from a won claim, makes an [`ExecPermit`] (the
//!   executor's input).

use std::time::Duration;

use serde_json::{Map, Value};

use super::authz::{AuthzRequest, Principal};
use super::exec::ExecPermit;
use super::state::{StateScope, StateVersion};
use crate::claim::{
    ClaimRequest, CorruptRecord, Fingerprint, HolderToken, Lease, OperationKey, ProposalRecord,
    UnixMillis,
};
use crate::contract::{ProposedAction, ToolContract};
use crate::op::{KeyError, operation_key};

/// A proposal that passed every stateless stage, with its tool's contract
/// facts. Made from a `contract::check` action decision.
#[derive(Debug, Clone)]
pub struct Validated {
    action: ProposedAction,
    reply: String,
    key_fields: Vec<String>,
}

impl Validated {
    pub(crate) fn new(action: ProposedAction, reply: String, contract: &ToolContract) -> Self {
        Self {
            action,
            reply,
            key_fields: contract.operation_key().to_vec(),
        }
    }

    /// The tool.
    pub fn tool(&self) -> &str {
        self.action.tool()
    }

    /// The validated arguments.
    pub fn arguments(&self) -> &Value {
        self.action.arguments()
    }

    /// The canonical arguments.
    pub fn canonical_arguments(&self) -> &str {
        self.action.canonical_arguments()
    }

    /// The fingerprint of the canonical arguments.
    pub fn fingerprint(&self) -> &Fingerprint {
        self.action.fingerprint()
    }

    /// The capability the tool needs.
    pub fn capability(&self) -> &str {
        self.action.capability()
    }

    /// Whether each operation needs a person's approval.
    pub fn needs_approval(&self) -> bool {
        self.action.needs_approval()
    }

    /// The model's reply.
    pub fn reply(&self) -> &str {
        &self.reply
    }

    pub(crate) fn authz_request<'a>(
        &'a self,
        principal: &'a Principal,
        scope: &'a Map<String, Value>,
        attributes: &'a Map<String, Value>,
        now: UnixMillis,
    ) -> AuthzRequest<'a> {
        AuthzRequest {
            principal,
            tool: self.tool(),
            capability: self.capability(),
            scope,
            arguments: self.arguments(),
            attributes,
            now,
        }
    }
}

/// A validated proposal whose principal holds the capability and which the
/// authoriser allowed, with its server-fixed scope and the version the model
/// read.
#[derive(Debug, Clone)]
pub struct Authorized {
    validated: Validated,
    principal: Principal,
    scope: Map<String, Value>,
    version_seen: StateVersion,
}

impl Authorized {
    pub(crate) fn new(
        validated: Validated,
        principal: Principal,
        scope: Map<String, Value>,
        version_seen: StateVersion,
    ) -> Self {
        Self {
            validated,
            principal,
            scope,
            version_seen,
        }
    }

    /// The proposal.
    pub fn validated(&self) -> &Validated {
        &self.validated
    }

    /// The authorised actor.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// The server-fixed scope, `version_seen` included.
    pub fn scope(&self) -> &Map<String, Value> {
        &self.scope
    }

    /// The version the model read.
    pub fn version_seen(&self) -> &StateVersion {
        &self.version_seen
    }

    /// The only way to name a resource to a [`super::StateSource`].
    pub fn state_scope(&self) -> StateScope<'_> {
        StateScope {
            tool: self.validated.tool(),
            scope: &self.scope,
            principal: &self.principal,
        }
    }
}

/// An authorised proposal with its operation key.
#[derive(Debug, Clone)]
pub struct Bound {
    authorized: Authorized,
    key: OperationKey,
}

impl Bound {
    /// Derives the key (see [`crate::op::key`]); on failure the authorised
    /// value comes back with the error.
    pub(crate) fn new(authorized: Authorized) -> Result<Self, (Box<Authorized>, KeyError)> {
        match operation_key(
            authorized.validated.tool(),
            &authorized.validated.key_fields,
            &authorized.scope,
        ) {
            Ok(key) => Ok(Self { authorized, key }),
            Err(e) => Err((Box::new(authorized), e)),
        }
    }

    /// The authorised proposal.
    pub fn authorized(&self) -> &Authorized {
        &self.authorized
    }

    /// The operation key.
    pub fn key(&self) -> &OperationKey {
        &self.key
    }

    /// The proposal's fingerprint.
    pub fn fingerprint(&self) -> &Fingerprint {
        self.authorized.validated.fingerprint()
    }

    /// The proposal record written once at claim time.
    pub fn proposal_record(&self) -> Result<ProposalRecord, CorruptRecord> {
        let a = &self.authorized;
        ProposalRecord::new(
            a.validated.tool().to_owned(),
            a.validated.canonical_arguments().to_owned(),
            Value::Object(a.scope.clone()).to_string(),
            a.version_seen.as_str().to_owned(),
            a.principal.id().to_owned(),
        )
    }

    /// The only way to build a [`ClaimRequest`].
    pub fn claim_request(
        &self,
        holder: HolderToken,
        now: UnixMillis,
        lease: Duration,
    ) -> Result<ClaimRequest, CorruptRecord> {
        Ok(ClaimRequest::new(
            self.key,
            *self.fingerprint(),
            self.proposal_record()?,
            holder,
            now,
            lease,
        )
        .with_via(self.authorized.principal.via().map(str::to_owned)))
    }
}

/// A bound proposal whose claim this attempt won (its holder token was read
/// back and the claim committed).
#[derive(Debug, Clone)]
pub struct Claimed {
    bound: Bound,
    lease: Lease,
}

impl Claimed {
    pub(crate) fn new(bound: Bound, lease: Lease) -> Self {
        Self { bound, lease }
    }

    /// The bound proposal.
    pub fn bound(&self) -> &Bound {
        &self.bound
    }

    /// The won lease.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The only way to reach an [`super::Executor`].
    pub fn permit(&self) -> ExecPermit<'_> {
        ExecPermit { claimed: self }
    }
}
