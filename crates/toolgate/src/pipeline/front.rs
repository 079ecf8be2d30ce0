//! The whole decision, as every front door calls it.
//!
//! A front door (the HTTP sidecar, the MCP gateway, a CLI) decodes its
//! request into a [`Call`]: the authenticated principal, the contract
//! stage's verdict on the proposal, the raw scope fields and the version
//! the model read. [`decide_call`] does the rest, so no front door carries
//! pipeline logic of its own:
//!
//! - the scope in its canonical form by the proposed tool's types, and
//!   `version_seen` as a [`StateVersion`], each checked once (a malformed
//!   one is a request-level [`Refused`], audited);
//! - request entities only of types the tool's authoriser reads;
//! - the pipeline run ([`decide`](super::decide) through a [`Pipeline`]);
//! - the approval loop: a proposal that needs a person asks the review
//!   store, and a grant found for exactly this proposal is used by a second
//!   run, in the claim's own transaction (docs/design.md §14);
//! - review items for the other decisions a person acts on;
//! - the authoriser's own words concealed behind one `forbidden`.
//!
//! What stays with the front door is decoding, the status mapping, its
//! executor (behind the [`Pipeline`] it passes) and announcing a new
//! review item ([`Settled::new_item`]).

use std::future::Future;
use std::time::Duration;

use serde_json::{Map, Value};

use super::authz::{Authorizer, Principal};
use super::codes::{Outcome, Reason};
use super::decision::Decision;
use super::driver::{Approval, Gate, Request, decide};
use super::error::GateError;
use super::exec::Executor;
use super::refusal::{Refusal, Refused, audit_refusal};
use super::scope::{Scope, ScopeRefusal, VERSION_MISSING};
use super::state::{StateSource, StateVersion};
use crate::claim::{ClaimStore, HolderToken, StoreError, UnixMillis, audit_label};
use crate::contract::{Checked, Policy, ToolContract};
use crate::review::{
    ApprovalTerms, ItemDecision, NewItem, Opened, Opening, QueueLimits, Requested, ReviewStore,
    opening,
};

/// What a caller is told when the authoriser says no, whatever it said.
pub const FORBIDDEN_DETAIL: &str =
    "forbidden: the authoriser does not permit this principal this action on this resource";

/// The version the model read, as the front door found it.
#[derive(Debug, Clone, PartialEq)]
pub enum VersionSeen {
    /// A value from the request (a string or a number), not yet canonical:
    /// [`decide_call`] reads it by the tool's `version_seen` type.
    Given(Value),
    /// The request has none: an action is refused (`missing_scope`).
    Absent,
}

/// One proposal, decoded by a front door. Nothing here comes from the
/// model but the proposal itself and whatever the front door's own mapping
/// took from it.
#[derive(Debug)]
pub struct Call<'a> {
    /// The authenticated principal (a delegated actor already resolved).
    pub principal: &'a Principal,
    /// The contract stage's verdict.
    pub proposal: Checked,
    /// The operation-key fields, not yet canonical (`version_seen` apart).
    pub scope: &'a Map<String, Value>,
    /// The version the model read.
    pub version_seen: VersionSeen,
    /// Entities the application sent, for the authoriser alone.
    pub attributes: &'a Map<String, Value>,
    /// The decision's time (the core reads no clock).
    pub now: UnixMillis,
    /// Fresh tokens, one per pipeline run: the approval loop runs at most
    /// twice (the core has no RNG).
    pub holders: [HolderToken; 2],
    /// How long a won claim may run before it counts as stuck.
    pub lease: Duration,
}

/// One run of the pipeline with the front door's executor: the parts a
/// decision reads, and [`decide`] over them. A [`Gate`] is one; a front
/// door whose authoriser and state source share a read per decision may
/// bring its own.
pub trait Pipeline: Sync {
    /// The authoriser, asked which request entities a tool reads.
    type Authz: Authorizer;

    /// The authoriser.
    fn authorizer(&self) -> &Self::Authz;

    /// Decides one proposal ([`decide`]).
    fn decide(
        &self,
        proposal: Checked,
        request: &Request<'_>,
    ) -> impl Future<Output = Result<Decision, GateError>> + Send;
}

impl<A, S, C, E> Pipeline for Gate<'_, A, S, C, E>
where
    A: Authorizer,
    S: StateSource,
    C: ClaimStore,
    E: Executor,
{
    type Authz = A;

    fn authorizer(&self) -> &A {
        self.authorizer
    }

    fn decide(
        &self,
        proposal: Checked,
        request: &Request<'_>,
    ) -> impl Future<Output = Result<Decision, GateError>> + Send {
        decide(self, proposal, request)
    }
}

/// Everything a front door hands [`decide_call`] besides the call.
pub struct Front<'a, P, S> {
    /// The tool contracts.
    pub policy: &'a Policy,
    /// The pipeline, with the front door's executor.
    pub pipeline: &'a P,
    /// The store refusals are audited in and review items opened in (the
    /// claim database, so a claim can use a grant in its transaction).
    pub store: &'a S,
    /// The review queue's caps.
    pub queue: QueueLimits,
}

/// A decision, with what the front door needs beside it.
#[derive(Debug)]
pub struct Settled {
    /// The decision; a denial's authoriser detail already concealed.
    pub decision: Decision,
    /// The review item that stands for this decision, if any.
    pub review_item: Option<i64>,
    /// Whether this call opened that item (the front door announces it).
    pub new_item: bool,
    /// The version the model read, canonical, for an action.
    pub version_seen: Option<StateVersion>,
    /// The canonical scope the decision was made on.
    pub scope: Map<String, Value>,
    /// What did not reach a store, and the concealed authoriser detail:
    /// for the operator's log, never the caller's answer.
    pub notes: Vec<Note>,
}

/// Something the operator's log should say about a decision.
#[derive(Debug)]
pub enum Note {
    /// The decision stands, but its audit entry could not be written.
    NotAudited(StoreError),
    /// The review queue is at a cap: no item was opened.
    QueueFull,
    /// A review item could not be recorded.
    ItemNotRecorded(StoreError),
    /// What the authoriser said, kept from the caller.
    Concealed {
        /// The authoriser's reason (`not_authorized`,
        /// `authorization_error`).
        reason: Reason,
        /// Its words.
        detail: String,
    },
}

/// A request [`decide_call`] did not decide.
#[derive(Debug)]
pub enum CallError {
    /// Refused before a decision ran (already audited).
    Refused {
        /// Why, and what to tell the caller.
        refused: Refused,
        /// The tool the proposal named, if it got that far.
        tool: Option<String>,
        /// The refusal's audit entry could not be written.
        not_audited: Option<StoreError>,
    },
    /// An infrastructure failure; nothing was decided.
    Gate(GateError),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused { refused, .. } => {
                write!(f, "{}: {}", refused.refusal.as_str(), refused.message)
            }
            Self::Gate(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CallError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Refused { .. } => None,
            Self::Gate(e) => Some(e),
        }
    }
}

/// The reason a caller is sent: an authoriser's evaluation error is sent
/// as a denial ([`conceal`]); every other reason as it is.
pub fn sent_reason(reason: Reason) -> Reason {
    match reason {
        Reason::AuthorizationError => Reason::NotAuthorized,
        other => other,
    }
}

/// Replaces an authoriser's denial text (Cedar's policy ids, "entity
/// Order::\"4\" does not exist") with one message, and an evaluation error
/// with a denial: the caller learns neither which resources exist nor what
/// their attributes are. The audit entry, written before, keeps the truth;
/// the returned note carries it to the operator's log.
pub fn conceal(decision: &mut Decision) -> Option<Note> {
    let Decision::Forbidden {
        reason, message, ..
    } = decision
    else {
        return None;
    };
    if !matches!(reason, Reason::NotAuthorized | Reason::AuthorizationError) {
        return None;
    }
    let note = Note::Concealed {
        reason: *reason,
        detail: std::mem::replace(message, FORBIDDEN_DETAIL.to_owned()),
    };
    *reason = sent_reason(*reason);
    Some(note)
}

/// Decides one call: docs/design.md §1's pipeline with its approvals,
/// review items and concealment. A refusal is audited here, under the
/// call's principal.
pub async fn decide_call<P, S>(
    front: &Front<'_, P, S>,
    call: Call<'_>,
) -> Result<Settled, CallError>
where
    P: Pipeline,
    S: ClaimStore + ReviewStore,
{
    let prepared = match prepare(front, &call) {
        Ok(p) => p,
        Err((refused, tool)) => {
            let not_audited = audit_refusal(
                front.store,
                call.principal,
                refused.refusal,
                tool.as_deref(),
                call.now,
            )
            .await
            .err();
            return Err(CallError::Refused {
                refused,
                tool,
                not_audited,
            });
        }
    };
    settle(front, call, prepared).await.map_err(CallError::Gate)
}

/// The call's typed parts: what the request-level checks leave.
struct Prepared<'p> {
    contract: Option<&'p ToolContract>,
    scope: Scope,
}

pub(super) type Refusing = (Refused, Option<String>);

pub(super) fn refused(
    refusal: Refusal,
    message: impl Into<String>,
    tool: Option<&str>,
) -> Refusing {
    (
        Refused {
            refusal,
            message: message.into(),
        },
        tool.map(str::to_owned),
    )
}

/// The scope canonical by the proposed tool's types, `version_seen` for an
/// action, and the request entities the tool reads: anything else is a
/// request the gate cannot take (a refusal, not a decision).
fn prepare<'p, P: Pipeline, S>(
    front: &Front<'p, P, S>,
    call: &Call<'_>,
) -> Result<Prepared<'p>, Refusing> {
    let action = call.proposal.action();
    let contract = action.and_then(|a| front.policy.tool(a.tool()));
    // The named tool, for the refusal's audit entry: the model's text only
    // when the policy has no such tool (then bounded as a label).
    let named = call.proposal.tool.as_deref();
    let version_seen = match &call.version_seen {
        VersionSeen::Given(v) => Some(v),
        VersionSeen::Absent => None,
    };
    let scope = match contract {
        Some(c) => {
            let scope = with_identity(c, call.principal, call.scope)?;
            Scope::canonical(c, &scope, version_seen).map_err(|e| match e {
                ScopeRefusal::Field(e) => {
                    refused(Refusal::InvalidScope, e.to_string(), Some(c.name()))
                }
                ScopeRefusal::Version => refused(Refusal::InvalidScope, e.to_string(), named),
            })?
        }
        // No tool of the policy: nothing reads the scope but the review
        // item, and no version is needed (the rejection says why).
        None => Scope::new(
            call.scope.clone(),
            version_seen.and_then(|v| match v {
                Value::String(s) => StateVersion::new(s.clone()),
                other => StateVersion::new(other.to_string()),
            }),
        ),
    };
    if action.is_some() && scope.version_seen().is_none() {
        return Err(refused(Refusal::MissingScope, VERSION_MISSING, named));
    }
    // A scope field the deployment takes from an argument names what the
    // model proposed: the resource authorised and claimed must be the one
    // the arguments send, whichever front door supplied the scope.
    if let (Some(c), Some(a)) = (contract, action) {
        c.check_argument_scopes(scope.fields(), a.arguments())
            .map_err(|m| refused(Refusal::InvalidScope, m, Some(c.name())))?;
    }
    if let Some(action) = action
        && let Some(ty) = call.attributes.keys().find(|ty| {
            !front
                .pipeline
                .authorizer()
                .accepts_request_entity(action.tool(), ty)
        })
    {
        return Err(refused(
            Refusal::UnexpectedEntities,
            format!(
                "entities.{ty}: the tool `{}` does not read a `{ty}` entity from the request \
                 (declare it in the deployment with source = \"request\", or do not send it)",
                action.tool()
            ),
            Some(action.tool()),
        ));
    }
    Ok(Prepared { contract, scope })
}

/// The call's scope with the fields the deployment takes from the caller's
/// identity filled in: its principal id. A caller that sent one is refused:
/// no door may set what another door derives.
pub(super) fn with_identity(
    c: &ToolContract,
    principal: &Principal,
    scope: &Map<String, Value>,
) -> Result<Map<String, Value>, Refusing> {
    let mut scope = scope.clone();
    for field in c.identity_scopes() {
        if scope.contains_key(field) {
            return Err(refused(
                Refusal::IdentityScopeField,
                format!(
                    "scope.{field}: the tool `{}` takes this field from the caller's identity; \
                     do not send it",
                    c.name()
                ),
                Some(c.name()),
            ));
        }
        let id = Value::String(principal.id().to_owned());
        scope.insert(field.to_owned(), id);
    }
    Ok(scope)
}

async fn settle<P, S>(
    front: &Front<'_, P, S>,
    call: Call<'_>,
    prepared: Prepared<'_>,
) -> Result<Settled, GateError>
where
    P: Pipeline,
    S: ClaimStore + ReviewStore,
{
    let Prepared {
        contract,
        scope: typed,
    } = prepared;
    let version = typed.version_seen().cloned();
    let scope = typed.to_map();
    let mut notes = Vec::new();
    let arguments = call.proposal.action().map(|a| a.arguments().clone());
    // A second run needs the proposal again only when a person may have
    // approved it.
    let asks_person = contract.is_some_and(|c| c.needs_approval() || !c.budgets().is_empty());
    let mut again = asks_person.then(|| call.proposal.clone());
    let mut next = Some((call.proposal, call.holders[0]));
    let second_holder = call.holders[1];
    let mut approval: Option<Approval> = None;
    let mut review_item: Option<i64> = None;
    let mut new_item = false;
    let mut queue_full = false;
    // A tool that needs approval runs twice at most: the first run ends at
    // `pending_approval` before anything is claimed; if the review store
    // holds an approved, unused grant for exactly this proposal (key,
    // fingerprint, version, policy digest, proposer), the second run
    // claims with it, and the claim uses it up in its own transaction.
    let mut decision = loop {
        let Some((this, holder)) = next.take() else {
            unreachable!("each turn of the loop sets the next run or breaks")
        };
        let request = Request {
            principal: call.principal,
            scope: &typed,
            attributes: call.attributes,
            approval: approval.as_ref(),
            now: call.now,
            holder,
            lease: call.lease,
        };
        let decision = match front.pipeline.decide(this, &request).await {
            Ok(d) => d,
            // The decision stands (an `executed` one did happen); hiding it
            // would make the client retry into a replay it cannot explain.
            Err(GateError::Audit { decision, error }) => {
                notes.push(Note::NotAudited(error));
                *decision
            }
            Err(e) => return Err(e),
        };
        let asks = asks_a_person(&decision);
        let (Some(key), Some(fingerprint), Some(contract), Some(version), true) = (
            decision.key(),
            decision.fingerprint(),
            contract,
            version.as_ref(),
            asks,
        ) else {
            break decision;
        };
        let shown_with = Shown {
            scope: &scope,
            version: Some(version),
            arguments: arguments.as_ref(),
        };
        let item = approval_item(call.principal, call.now, &decision, contract, &shown_with);
        match front
            .store
            .request_approval(item, call.now, &front.queue)
            .await?
        {
            // The first run found the grant: claim with it. A second
            // `pending_approval` (the grant was used or expired meanwhile)
            // is answered as it is.
            Requested::Granted(grant) if approval.is_none() && again.is_some() => {
                review_item = Some(grant.item);
                approval = Some(Approval {
                    key,
                    fingerprint,
                    version: version.clone(),
                    grant,
                });
                next = again.take().map(|p| (p, second_holder));
            }
            Requested::Granted(grant) => {
                review_item = Some(grant.item);
                break decision;
            }
            Requested::Pending { item, created } => {
                review_item = Some(item);
                new_item = created;
                break decision;
            }
            Requested::Denied { item, by } => {
                review_item = Some(item);
                break decision.denied(denied_message(item, by.as_deref()));
            }
            Requested::QueueFull => {
                notes.push(Note::QueueFull);
                queue_full = true;
                break with_queue_full(decision);
            }
        }
    };
    notes.extend(conceal(&mut decision));
    // Other decisions a person acts on open an item (as `opening` says); a
    // failure to record one is the operator's, not the caller's (the claim
    // store keeps the facts of a conflict or a stuck claim anyway).
    let opened = match (review_item, queue_full) {
        (None, false) => {
            let shown = Shown {
                scope: &scope,
                version: version.as_ref(),
                arguments: arguments.as_ref(),
            };
            open_other(front, call.principal, call.now, &decision, &shown).await
        }
        _ => None,
    };
    match opened {
        None => {}
        Some(Ok(Opened::Created(id))) => {
            review_item = Some(id);
            new_item = true;
        }
        // The same rejection by the same principal in this window: its
        // item stands for this one too.
        Some(Ok(Opened::Existing(id))) => review_item = Some(id),
        Some(Ok(Opened::Full)) => notes.push(Note::QueueFull),
        Some(Err(e)) => notes.push(Note::ItemNotRecorded(e)),
    }
    Ok(Settled {
        decision,
        review_item,
        new_item,
        version_seen: version,
        scope,
        notes,
    })
}

/// Whether a decision waits for a person: a tool that needs approval, or
/// a budget over its limit (docs/policy.md, "Budgets": the approval lets
/// the retry reserve beyond it).
fn asks_a_person(decision: &Decision) -> bool {
    decision.outcome() == Outcome::PendingApproval
        && matches!(
            decision.reason(),
            Some(Reason::ApprovalRequired | Reason::BudgetExceeded)
        )
}

/// What a proposal a reviewer denied is told.
fn denied_message(item: i64, by: Option<&str>) -> String {
    format!(
        "review item {item}: a reviewer{} denied this proposal; it will not run \
         (other arguments or a new version ask again)",
        by.map(|b| format!(" ({b})")).unwrap_or_default()
    )
}

/// The item a proposal that needs a person asks for: its terms are the
/// tool's (the policy digest, how many reviewers, how long it lasts).
fn approval_item(
    principal: &Principal,
    now: UnixMillis,
    decision: &Decision,
    contract: &ToolContract,
    shown_with: &Shown<'_>,
) -> NewItem {
    NewItem {
        at: now,
        kind: Outcome::PendingApproval,
        reason: decision.reason(),
        tool: decision.tool().map(str::to_owned),
        proposer: principal.id().to_owned(),
        proposer_via: principal.via().map(str::to_owned),
        key: decision.key(),
        fingerprint: decision.fingerprint(),
        version_seen: shown_with.version.map(|v| v.as_str().to_owned()),
        scope: Some(Value::Object(shown_with.scope.clone()).to_string()),
        decision: shown(decision, shown_with.arguments),
        approval: Some(ApprovalTerms {
            policy_digest: contract.digest().to_owned(),
            approvers: contract.approvers(),
            expires_at: now.plus_millis(contract.approval_ttl_ms()),
        }),
        once_per_window: false,
    }
}

/// What a review item shows of a proposal beside its decision.
struct Shown<'a> {
    scope: &'a Map<String, Value>,
    version: Option<&'a StateVersion>,
    arguments: Option<&'a Value>,
}

/// The item a decision other than a request for approval opens, if
/// [`opening`] says it opens one.
async fn open_other<P, S: ReviewStore>(
    front: &Front<'_, P, S>,
    principal: &Principal,
    now: UnixMillis,
    decision: &Decision,
    shown_with: &Shown<'_>,
) -> Option<Result<Opened, StoreError>> {
    let opens = opening(decision, principal, front.policy)?;
    let item = NewItem {
        at: now,
        kind: decision.outcome(),
        reason: decision.reason(),
        // A rejection's tool is the model's own text: a bounded label.
        tool: decision.tool().map(audit_label),
        proposer: principal.id().to_owned(),
        proposer_via: principal.via().map(str::to_owned),
        key: decision.key(),
        fingerprint: decision.fingerprint(),
        version_seen: shown_with.version.map(|v| v.as_str().to_owned()),
        scope: Some(Value::Object(shown_with.scope.clone()).to_string()),
        decision: shown(decision, shown_with.arguments),
        approval: None,
        once_per_window: opens == Opening::OncePerWindow,
    };
    Some(front.store.open_item(item, &front.queue).await)
}

/// A `pending_approval` whose item the full queue could not take: the
/// decision stands (nothing was claimed), and its message says that no
/// item was opened, so the caller retries later instead of waiting for a
/// reviewer who cannot see it.
fn with_queue_full(mut decision: Decision) -> Decision {
    if let Decision::PendingApproval { message, .. } = &mut decision {
        message.push_str(
            "; the review queue is full, so no item was opened: nobody can approve this yet; \
             retry later",
        );
    }
    decision
}

/// The decision as a reviewer sees it: its flat view with the proposal's
/// arguments beside it (the decision carries only their fingerprint).
fn shown(decision: &Decision, arguments: Option<&Value>) -> ItemDecision {
    ItemDecision::of(decision, arguments)
}
