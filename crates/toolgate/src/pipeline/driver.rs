//! The driver: one generic async function wiring the stages to the
//! pluggable authoriser, state source, claim store and executor, in
//! docs/design.md §1's order, one small function a stage. No runtime: the
//! caller's executor polls it.

use std::time::Duration;

use serde_json::{Map, Value};

use super::authz::{Authorizer, AuthorizerUnavailable, AuthzDecision, Principal};
use super::codes::Reason;
use super::decision::{Decision, Operation, Rejection};
use super::error::GateError;
use super::exec::{AppliedCompletion, Completed, ExecOutcome, Executor};
use super::existing::{existing_decided, json_value};
use super::not_applied::NotApplied;
use super::parts::DecisionParts;
use super::scope::{Scope, VERSION_MISSING};
use super::stage::{Authorized, Bound, Claimed, Validated};
use super::state::{StateError, StateSource, StateVersion};
use crate::claim::{
    AuditEntry, ClaimStore, CompleteRequest, Completion, CorruptRecord, Fingerprint, GrantUse,
    HolderToken, JsonText, OperationKey, RawClaim, StoreError, UnixMillis,
};
use crate::contract::{self, Policy, ToolContract};

/// The pluggable parts, borrowed for one decision.
pub struct Gate<'a, A, S, C, E> {
    /// The tool contracts.
    pub policy: &'a Policy,
    /// Live authorisation.
    pub authorizer: &'a A,
    /// Current resource versions.
    pub state: &'a S,
    /// Claims, results and the audit log.
    pub claims: &'a C,
    /// The side effect.
    pub executor: &'a E,
}

/// A person's approval, recorded by the server, bound to one operation key,
/// fingerprint and version: an approval for other arguments or another
/// version does not carry over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// The approved operation.
    pub key: OperationKey,
    /// The approved arguments' fingerprint.
    pub fingerprint: Fingerprint,
    /// The version the approved proposal was made against.
    pub version: StateVersion,
    /// The approved review item, used up by the claim in its own
    /// transaction (docs/design.md §14): if it no longer holds, nothing is
    /// claimed and the answer is `pending_approval` again.
    pub grant: GrantUse,
}

/// The server-fixed facts of one request. Nothing here comes from the model.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The authenticated actor.
    pub principal: &'a Principal,
    /// Server-fixed scope fields (`customer_id`, `order_id`, …) and the
    /// resource version the model was shown: canonical for the proposed
    /// tool once ([`Scope::canonical`]; the pipeline makes a scope that is
    /// not yet canonical so for the tool it decides).
    pub scope: &'a Scope,
    /// Entities the authenticated application sent (entity type →
    /// `{"id": …, <attr>: …}`), for the authoriser alone
    /// ([`super::AuthzRequest::attributes`]): never part of the operation
    /// key, the fingerprint, the claim or the permit. Empty for most
    /// callers.
    pub attributes: &'a Map<String, Value>,
    /// A reviewer's approval, for tools that need one.
    pub approval: Option<&'a Approval>,
    /// The time of the decision (the core reads no clock).
    pub now: UnixMillis,
    /// A fresh, unpredictable token for this attempt (the core has no RNG).
    pub holder: HolderToken,
    /// How long a won claim may run before it counts as stuck.
    pub lease: Duration,
}

impl<'a> Request<'a> {
    /// A request with no application attributes and no approval, as most
    /// callers decide.
    pub fn plain(
        principal: &'a Principal,
        scope: &'a Scope,
        now: UnixMillis,
        holder: HolderToken,
        lease: Duration,
    ) -> Self {
        static NONE: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        Self {
            principal,
            scope,
            attributes: NONE.get_or_init(Map::new),
            approval: None,
            now,
            holder,
            lease,
        }
    }
}

/// Decides one proposal: the stateless decision from [`contract::check`]
/// plus the server-fixed request, in docs/design.md §1's order:
///
/// capability → authorisation → operation key + fingerprint → state read:
/// version seen == current → approval → claim (which resolves an existing
/// operation) → execute(precondition) → complete.
///
/// Capability and authorisation run on every path before any state read or
/// claim-store call, so a principal who lost access gets `forbidden` and
/// never a recorded result or a prior proposal (invariant 3). No answer
/// rests on the state read or the approval before the operation is
/// resolved: a stale version or a missing approval looks the claim up
/// first, so a retry of a completed operation is `replayed` although the
/// version has moved on (invariant 4). Every decision gets one audit entry.
pub async fn decide<A, S, C, E>(
    gate: &Gate<'_, A, S, C, E>,
    proposal: contract::Checked,
    request: &Request<'_>,
) -> Result<Decision, GateError>
where
    A: Authorizer,
    S: StateSource,
    C: ClaimStore,
    E: Executor,
{
    decide_in(gate, &mut (), proposal, request).await
}

/// [`decide`] on components that share a session between the calls of one
/// decision ([`DecisionParts`]): `session` is this decision's alone, made
/// by the caller before and dropped after.
pub async fn decide_in<P: DecisionParts>(
    parts: &P,
    session: &mut P::Session,
    proposal: contract::Checked,
    request: &Request<'_>,
) -> Result<Decision, GateError> {
    let Decided {
        decision,
        audited,
        attempt,
    } = match stages(parts, session, proposal, request).await {
        Ok(decided) => decided,
        Err(Stop::Decided(decided)) => *decided,
        Err(Stop::Failed(e)) => return Err(e),
    };
    if audited {
        return Ok(decision);
    }
    let appended = match audit_entry(&decision, request.principal, request.now) {
        Ok(entry) => {
            parts
                .append_audit(session, &entry.with_attempt(attempt))
                .await
        }
        Err(e) => Err(StoreError::corrupt(&e)),
    };
    match appended {
        Ok(()) => Ok(decision),
        Err(error) => Err(GateError::Audit {
            decision: Box::new(decision),
            error,
        }),
    }
}

/// A decision, and whether its audit entry was already written with the
/// claim's completion (one commit for both; see
/// [`ClaimStore::complete`]).
pub(super) struct Decided {
    decision: Decision,
    audited: bool,
    /// The claim attempt the decision is about, if one: its audit entry
    /// names it.
    attempt: Option<u32>,
}

impl From<Decision> for Decided {
    fn from(decision: Decision) -> Self {
        Self {
            decision,
            audited: false,
            attempt: None,
        }
    }
}

impl Decided {
    /// A decision about attempt `attempt` of its operation.
    pub(super) fn about(decision: Decision, attempt: u32) -> Self {
        Self {
            attempt: Some(attempt),
            ..Self::from(decision)
        }
    }
}

/// The one audit entry of `decision`, made by `principal` at `now` (and,
/// for a delegated actor, the key that named it as `via`).
pub(super) fn audit_entry(
    decision: &Decision,
    principal: &Principal,
    now: UnixMillis,
) -> Result<AuditEntry, CorruptRecord> {
    // The tool may be the model's own text (an unknown tool's name, with
    // a newline or 300 KB of it): kept as an escaped, bounded label, so it
    // is never a reason to skip the entry.
    AuditEntry::new(
        now,
        principal.id().to_owned(),
        decision.tool().map(crate::claim::audit_label),
        decision.outcome().as_str().to_owned(),
        decision.reason().map(|r| r.as_str().to_owned()),
        decision.key(),
        decision.fingerprint(),
    )?
    .with_via(principal.via().map(str::to_owned))
}

/// A decision the contract stage ended, as the pipeline's.
pub(super) fn stateless(d: contract::Checked) -> Decision {
    match d.outcome() {
        contract::CheckOutcome::Answer => Decision::Answer(d),
        contract::CheckOutcome::Abstain => Decision::Abstain(d),
        contract::CheckOutcome::Refused => Decision::Refused(d),
        contract::CheckOutcome::Truncated => Decision::Truncated(d),
        contract::CheckOutcome::ContentFiltered => Decision::ContentFiltered(d),
        // `into_action` hands back only decisions without a proposal, and
        // only `check` can set the outcome: an `action` never gets here.
        // Were one to, it ends as the rejection it would be.
        contract::CheckOutcome::Rejected | contract::CheckOutcome::Action => {
            Decision::Rejected(Rejection::Contract(d))
        }
    }
}

pub(super) fn forbidden(v: &Validated, reason: Reason, message: String) -> Decision {
    // INVARIANT: nothing read from the claim store or the state source is
    // put in a `forbidden` decision; none has been read at this point.
    Decision::Forbidden {
        tool: v.tool().to_owned(),
        fingerprint: *v.fingerprint(),
        reason,
        message,
    }
}

/// The operation a bound proposal names.
pub(super) fn operation(b: &Bound) -> Operation {
    Operation {
        tool: b.authorized().validated().tool().to_owned(),
        key: *b.key(),
        fingerprint: *b.fingerprint(),
        version_seen: b.authorized().version_seen().clone(),
    }
}

fn pending_approval(b: &Bound, message: &str) -> Decision {
    Decision::PendingApproval {
        operation: operation(b),
        reason: Reason::ApprovalRequired,
        message: message.to_owned(),
        budget: None,
    }
}

/// Why the stages stop before a won claim reaches the executor: with a
/// decision (most of them do), or with a failure.
enum Stop {
    Decided(Box<Decided>),
    Failed(GateError),
}

/// What one stage hands the next, or why the decision ends there.
type Step<T> = Result<T, Stop>;

impl From<Decided> for Stop {
    fn from(d: Decided) -> Self {
        Self::Decided(Box::new(d))
    }
}

impl From<Decision> for Stop {
    fn from(d: Decision) -> Self {
        Decided::from(d).into()
    }
}

impl From<GateError> for Stop {
    fn from(e: GateError) -> Self {
        Self::Failed(e)
    }
}

/// The failures a stage meets, each its [`GateError`].
macro_rules! stop_on {
    ($($cause:ty),*) => {$(
        impl From<$cause> for Stop {
            fn from(e: $cause) -> Self {
                Self::Failed(e.into())
            }
        }
    )*};
}
stop_on!(StoreError, StateError, CorruptRecord, AuthorizerUnavailable);

/// The stages in docs/design.md §1's order, one call each.
async fn stages<P: DecisionParts>(
    parts: &P,
    session: &mut P::Session,
    proposal: contract::Checked,
    request: &Request<'_>,
) -> Step<Decided> {
    let (validated, contract) = validate(parts.policy(), proposal)?;
    capability(&validated, request.principal)?;
    let (scope, version) = canonical_scope(contract, &validated, request)?;
    let authorized = authorize(parts, session, validated, scope, version, request).await?;
    let bound = bind(authorized)?;
    // No separate claim lookup on the way to a write: the claim reads its
    // row back and resolves an existing operation to it (replay, in
    // flight, conflict), so a fresh decision saves a round trip. Every
    // answer that would end the decision before the claim (a stale
    // version, a missing approval) resolves the operation first instead
    // (invariant 4).
    current_version(parts, session, &bound, request).await?;
    let grant = approval(parts, session, contract, &bound, request).await?;
    let (claimed, budget_approved) = claim(parts, session, contract, bound, grant, request).await?;
    Ok(execute(parts, session, &claimed, request, budget_approved).await?)
}

/// The stateless stages' verdict: anything but an action of a policy tool
/// ends here.
fn validate(policy: &Policy, proposal: contract::Checked) -> Step<(Validated, &ToolContract)> {
    let reply = proposal.reply.clone().unwrap_or_default();
    let action = proposal.into_action().map_err(|p| stateless(*p))?;
    let Some(contract) = policy.tool(action.tool()) else {
        return Err(Decision::Rejected(Rejection::UnknownTool {
            tool: action.tool().to_owned(),
            message: format!("tool {:?} is not in this gate's policy", action.tool()),
        })
        .into());
    };
    if contract.is_read() {
        return Err(Decision::Rejected(Rejection::Read {
            reason: Reason::ReadTool,
            tool: action.tool().to_owned(),
            fingerprint: *action.fingerprint(),
            message: format!(
                "tool {:?} only reads: the MCP gateway serves it without a claim; \
                 there is no write to decide",
                action.tool()
            ),
        })
        .into());
    }
    Ok((Validated::new(action, reply, contract), contract))
}

/// Capability: coarse, from the authenticated principal.
fn capability(validated: &Validated, principal: &Principal) -> Step<()> {
    if principal.has_capability(validated.capability()) {
        return Ok(());
    }
    let message = format!(
        "{} lacks the capability {}",
        principal.id(),
        validated.capability()
    );
    Err(forbidden(validated, Reason::MissingCapability, message).into())
}

/// Typed scope (docs/design.md §13): every value in its canonical form
/// before anything reads it, so `42` and `"42"` are one resource to the
/// authoriser, the key, the state source and the executor alike; and the
/// version the model read, which an action needs.
fn canonical_scope(
    contract: &ToolContract,
    validated: &Validated,
    request: &Request<'_>,
) -> Step<(Map<String, Value>, StateVersion)> {
    let reject = |reason, message: String| -> Stop {
        Decision::Rejected(Rejection::Scope {
            reason,
            tool: validated.tool().to_owned(),
            fingerprint: *validated.fingerprint(),
            message,
        })
        .into()
    };
    let scope = request
        .scope
        .canonical_for(contract)
        .map_err(|e| reject(Reason::InvalidScope, e.to_string()))?;
    let Some(version) = scope.version_seen().cloned() else {
        return Err(reject(Reason::MissingScope, VERSION_MISSING.to_owned()));
    };
    Ok((scope.to_map(), version))
}

/// Live authorisation, on every path (before the lookup that would tell
/// fresh from replay from conflict).
async fn authorize<P: DecisionParts>(
    parts: &P,
    session: &mut P::Session,
    validated: Validated,
    scope: Map<String, Value>,
    version_seen: StateVersion,
    request: &Request<'_>,
) -> Step<Authorized> {
    let verdict = parts
        .authorize(
            session,
            &validated.authz_request(request.principal, &scope, request.attributes, request.now),
        )
        .await;
    match verdict {
        AuthzDecision::Allow => Ok(Authorized::new(
            validated,
            request.principal.clone(),
            scope,
            version_seen,
        )),
        AuthzDecision::Deny { message } => {
            Err(forbidden(&validated, Reason::NotAuthorized, message).into())
        }
        AuthzDecision::Error { message } => {
            Err(forbidden(&validated, Reason::AuthorizationError, message).into())
        }
        AuthzDecision::Unavailable { message } => Err(AuthorizerUnavailable::new(message).into()),
    }
}

/// Operation key (the fingerprint came from the contract stage).
fn bind(authorized: Authorized) -> Step<Bound> {
    Bound::new(authorized).map_err(|(auth, e)| {
        Decision::Rejected(Rejection::Scope {
            reason: Reason::MissingScope,
            tool: auth.validated().tool().to_owned(),
            fingerprint: *auth.validated().fingerprint(),
            message: e.to_string(),
        })
        .into()
    })
}

/// Is the version the model read still current? A filter, not a lock: the
/// executor applies it again as a precondition. A tool whose state source
/// reads nothing leaves it to that precondition.
async fn current_version<P: DecisionParts>(
    parts: &P,
    session: &mut P::Session,
    bound: &Bound,
    request: &Request<'_>,
) -> Step<()> {
    let authorized = bound.authorized();
    if !parts.reads_state(authorized.validated().tool()) {
        return Ok(());
    }
    let current = parts
        .current_version(session, authorized.state_scope())
        .await?;
    if current == *authorized.version_seen() {
        return Ok(());
    }
    // A retry of a completed operation: the write moved the version. Its
    // claim was committed before its write, so it is there now (also when
    // the original is racing this retry); the retry is a replay (or in
    // flight), never `state_changed` (invariant 4). An attempt reconciled
    // as not applied wrote nothing: the version moved for another reason,
    // and the model must read again.
    held_operation(parts, session, bound, request.now).await?;
    Err(Decision::StateChanged {
        operation: operation(bound),
        reason: Reason::VersionMismatch,
        message: format!(
            "the model read version {} but the current version is {current}",
            authorized.version_seen()
        ),
        current_version: Some(current),
        result: None,
        prior: None,
    }
    .into())
}

/// Approval, bound to (key, fingerprint, version), and consumed by the
/// claim. An approval for other arguments or another version is not this
/// proposal's. The grant the claim uses, if any.
async fn approval<P: DecisionParts>(
    parts: &P,
    session: &mut P::Session,
    contract: &ToolContract,
    bound: &Bound,
    request: &Request<'_>,
) -> Step<Option<GrantUse>> {
    let approval = request
        .approval
        .filter(|a| {
            a.key == *bound.key()
                && a.fingerprint == *bound.fingerprint()
                && a.version == *bound.authorized().version_seen()
        })
        .map(|a| a.grant.clone());
    let needs_approval = bound.authorized().validated().needs_approval();
    if needs_approval && approval.is_none() {
        // A retry of an approved operation that was written replays it
        // without asking a person again (invariant 4). A new attempt after
        // one reconciled as not applied needs its own approval.
        held_operation(parts, session, bound, request.now).await?;
        return Err(pending_approval(
            bound,
            "this tool needs a person's approval for this operation key, fingerprint and version",
        )
        .into());
    }
    // A tool without needs_approval takes an approval only for a proposal a
    // budget sent to a person: it lets that claim reserve beyond the limit.
    Ok(approval.filter(|_| needs_approval || !contract.budgets().is_empty()))
}

/// Before an answer that does not rest on the claim (a stale version, a
/// missing approval): the operation's own answer if someone holds it. A
/// claim reconciled as not applied holds nothing; the next attempt takes
/// it over.
async fn held_operation<P: DecisionParts>(
    parts: &P,
    session: &mut P::Session,
    bound: &Bound,
    now: UnixMillis,
) -> Step<()> {
    match parts.fetch(session, bound.key()).await? {
        Some(record) if !record.reopenable() => {
            Err(existing_decided(parts.policy(), bound, record, now)?.into())
        }
        _ => Ok(()),
    }
}

/// The claim: wins the operation (with its budgets and the approval's
/// grant, in one transaction), or answers from whoever holds it. Also
/// whether the write is one a person approved over a budget.
async fn claim<P: DecisionParts>(
    parts: &P,
    session: &mut P::Session,
    contract: &ToolContract,
    bound: Bound,
    grant: Option<GrantUse>,
    request: &Request<'_>,
) -> Step<(Claimed, bool)> {
    // The claim records who owns the write, so reconciliation can ask that
    // executor and no other (invariant 13).
    let executor_kind = parts.executor_kind(bound.authorized().validated().tool());
    let claim_request = bound
        .claim_request(request.holder, request.now, request.lease)?
        .with_executor(executor_kind);
    let budgets = super::budget::reservations(contract, &bound, request.now)?;
    // An approval on a tool that needs none was given over a budget: the
    // write it lets through is audited as such.
    let budget_approved = grant.is_some() && !contract.needs_approval();
    let claim_request = match grant {
        Some(g) => claim_request.with_grant(g),
        None => claim_request,
    }
    .with_budgets(budgets.clone());
    // A claim reconciled as not applied (fenced downstream) is taken over
    // by this claim as the operation's next attempt: authorised, read and
    // budgeted again above, on the same operation key, with a new holder
    // token (docs/design.md invariant 8).
    match parts.claim(session, claim_request).await? {
        RawClaim::Acquired(lease) => Ok((Claimed::new(bound, lease), budget_approved)),
        RawClaim::InFlight(r)
        | RawClaim::Completed(r)
        | RawClaim::Mismatch(r)
        | RawClaim::Expired(r) => Err(existing_decided(parts.policy(), &bound, r, request.now)?.into()),
        RawClaim::OverBudget {
            budget,
            limit,
            used,
        } => {
            // Nothing was claimed or reserved (the claim rolled back).
            let amount = budgets
                .iter()
                .find(|r| r.budget == budget)
                .map_or(0, |r| r.amount);
            let message = format!(
                "budget {budget}: {used} of {limit} already reserved in this window; {amount} more would pass the limit"
            );
            let d = super::budget::over(
                contract,
                operation(&bound),
                message,
                &budget,
                limit,
                used,
                amount,
            );
            Err(d.into())
        }
        // The approval was used, expired, denied or given under another
        // policy since the request found it: nothing was written, and the
        // proposal needs a person again (docs/design.md §14).
        RawClaim::GrantUnusable => Err(pending_approval(
            &bound,
            "the approval for this proposal can no longer be used; it needs a person's approval again",
        )
        .into()),
    }
}

async fn execute<P: DecisionParts>(
    parts: &P,
    session: &mut P::Session,
    claimed: &Claimed,
    request: &Request<'_>,
    budget_approved: bool,
) -> Result<Decided, GateError> {
    let bound = claimed.bound();
    let now = request.now;
    let attempt = claimed.lease().attempt;
    let reply = || bound.authorized().validated().reply().to_owned();
    let executed = |result: Value| Decision::Executed {
        operation: operation(bound),
        result,
        reply: reply(),
        over_budget_approved: budget_approved,
    };
    let lease_lost = |message: &str| {
        // Invariant 7: zero rows means this holder no longer owns the
        // claim. Whatever the executor did stands (nothing, when the
        // completion ran in its write's transaction); reconcile.
        Decided::about(
            Decision::NeedsReconciliation {
                operation: operation(bound),
                reason: Reason::LeaseLost,
                message: message.to_owned(),
                prior: None,
            },
            attempt,
        )
    };
    // The `executed` entry does not depend on the receipt: built before the
    // write, so an executor on the claim store's database can commit it
    // with the write and the completion.
    let executed_entry = {
        let placeholder = executed(Value::Null);
        audit_entry(&placeholder, request.principal, now)?.with_attempt(Some(attempt))
    };
    let completion =
        AppliedCompletion::new(*bound.key(), claimed.lease().holder, now, executed_entry);
    let outcome = match parts
        .execute_and_complete(session, claimed.permit(), &completion)
        .await
    {
        Ok(Completed::Recorded { receipt }) => {
            return Ok(Decided {
                decision: executed(json_value(&receipt)?),
                audited: true,
                attempt: Some(attempt),
            });
        }
        Ok(Completed::LeaseLost) => {
            return Ok(lease_lost(
                "completion matched no row: the claim was taken over or reconciled; \
                 the write was rolled back with it",
            ));
        }
        Ok(Completed::Outcome(outcome)) => outcome,
        Err(e) => {
            // The outcome is unknown: leave the claim in flight. After its
            // lease it is reconciled against the downstream system, never
            // executed again (invariant 8).
            let d = Decision::NeedsReconciliation {
                operation: operation(bound),
                reason: Reason::ExecutorFailed,
                message: e.to_string(),
                prior: None,
            };
            return Ok(Decided::about(d, attempt));
        }
    };
    let (result, decision, entry) = match outcome {
        ExecOutcome::Applied { receipt } => {
            let d = executed(json_value(&receipt)?);
            (receipt, d, completion.audit().clone())
        }
        ExecOutcome::PreconditionFailed { current } => {
            // Nothing was written. The claim is closed with a not-applied
            // result, so a retry replays this answer instead of writing.
            let not_applied = NotApplied::precondition_failed(
                bound.authorized().version_seen(),
                current.as_ref(),
            );
            let detail = not_applied
                .to_value()
                .map_err(|e| CorruptRecord::new("result", e.to_string()))?;
            let result = JsonText::result(detail.to_string())?;
            let d = Decision::StateChanged {
                operation: operation(bound),
                reason: not_applied.reason(),
                message: "the executor's version precondition failed; nothing was written".into(),
                current_version: current,
                result: Some(detail),
                prior: None,
            };
            // The entry this decision gets if the completion is recorded:
            // written with it, in one transaction.
            let entry = audit_entry(&d, request.principal, now)?.with_attempt(Some(attempt));
            (result, d, entry)
        }
        ExecOutcome::Deferred => {
            // Client-executed: nothing was written here and the claim stays
            // in flight; the caller holds the lease and completes it (or,
            // past the lease, it is reconciled, never re-executed).
            let d = Decision::Permitted {
                operation: operation(bound),
                permit: claimed.lease().clone(),
                reply: reply(),
            };
            return Ok(Decided::about(d, attempt));
        }
    };
    let done = CompleteRequest {
        key: *bound.key(),
        holder: claimed.lease().holder,
        result,
        now,
        audit: entry,
    };
    let recorded = parts.complete(session, done).await?;
    match recorded {
        Completion::Recorded => Ok(Decided {
            decision,
            audited: true,
            attempt: Some(attempt),
        }),
        Completion::Reconcile => Ok(lease_lost(
            "completion matched no row: the claim was taken over or reconciled",
        )),
    }
}
