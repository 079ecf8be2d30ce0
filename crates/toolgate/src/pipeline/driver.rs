//! The driver: one generic async function wiring the stages to the
//! pluggable authoriser, state source, claim store and executor, in
//! docs/design.md §1's order. No runtime: the caller's executor polls it.

use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::authz::{Authorizer, AuthzDecision, Principal};
use super::codes::Reason;
use super::decision::{Decision, Operation, Rejection};
use super::exec::{AppliedCompletion, Completed, ExecOutcome, Executor};
use super::stage::{Authorized, Bound, Claimed, Validated};
use super::state::{StateError, StateSource, StateVersion};
use crate::claim::{
    AuditEntry, ClaimRecord, ClaimStatus, ClaimStore, Completion, Fingerprint, GrantUse,
    HolderToken, JsonText, OperationKey, RawClaim, StoreError, UnixMillis,
};
use crate::contract::{self, Policy};

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
    /// Server-fixed scope fields (`customer_id`, `order_id`, …). The
    /// pipeline adds `version_seen` from [`Request::version_seen`], which
    /// replaces any field of that name here.
    pub scope: &'a Map<String, Value>,
    /// The resource version the model was shown.
    pub version_seen: &'a StateVersion,
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

/// An infrastructure failure: a store, state source or audit log that could
/// not answer. Decisions are never errors.
#[derive(Debug)]
pub enum GateError {
    /// The claim store failed.
    Store(StoreError),
    /// The state source failed.
    State(StateError),
    /// The authoriser could not reach a source it needs
    /// ([`AuthzDecision::Unavailable`]); nothing was decided or claimed.
    Authorizer(String),
    /// A record read back from storage failed the tool's contract, or a
    /// proposal record could not be built; it is never shown.
    Corrupt(String),
    /// The decision was made but its audit entry could not be appended.
    Audit {
        /// The decision (an `executed` one did happen).
        decision: Box<Decision>,
        /// The store's failure.
        error: StoreError,
    },
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Store(e) => write!(f, "claim store: {e}"),
            Self::State(e) => write!(f, "{e}"),
            Self::Authorizer(m) => write!(f, "authoriser unavailable: {m}"),
            Self::Corrupt(m) => write!(f, "corrupt record: {m}"),
            Self::Audit { decision, error } => write!(
                f,
                "decision {} made but not audited: {error}",
                decision.outcome()
            ),
        }
    }
}

impl std::error::Error for GateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Store(e) | Self::Audit { error: e, .. } => Some(e),
            Self::State(e) => Some(e),
            Self::Authorizer(_) | Self::Corrupt(_) => None,
        }
    }
}

impl From<StoreError> for GateError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl From<StateError> for GateError {
    fn from(e: StateError) -> Self {
        Self::State(e)
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
    let Decided {
        decision,
        audited,
        attempt,
    } = run(gate, proposal, request).await?;
    if audited {
        return Ok(decision);
    }
    let appended = match audit_entry(&decision, request.principal, request.now) {
        Ok(entry) => gate.claims.append_audit(&entry.with_attempt(attempt)).await,
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
struct Decided {
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
    fn about(decision: Decision, attempt: u32) -> Self {
        Self {
            attempt: Some(attempt),
            ..Self::from(decision)
        }
    }
}

/// A decision on an operation someone already holds ([`existing`]), about
/// the attempt on its row.
fn existing_decided(
    policy: &Policy,
    bound: &Bound,
    record: ClaimRecord,
    now: UnixMillis,
) -> Result<Decided, GateError> {
    let attempt = record.attempt;
    existing(policy, bound, record, now).map(|d| Decided::about(d, attempt))
}

/// The one audit entry of `decision`, made by `principal` at `now` (and,
/// for a delegated actor, the key that named it as `via`).
fn audit_entry(
    decision: &Decision,
    principal: &Principal,
    now: UnixMillis,
) -> Result<AuditEntry, crate::claim::CorruptRecord> {
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
fn stateless(d: contract::Checked) -> Decision {
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

fn forbidden(v: &Validated, reason: Reason, message: String) -> Decision {
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
fn operation(b: &Bound) -> Operation {
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

async fn run<A, S, C, E>(
    gate: &Gate<'_, A, S, C, E>,
    proposal: contract::Checked,
    request: &Request<'_>,
) -> Result<Decided, GateError>
where
    A: Authorizer,
    S: StateSource,
    C: ClaimStore,
    E: Executor,
{
    // Stateless stages: anything but an action ends here.
    let reply = proposal.reply.clone().unwrap_or_default();
    let action = match proposal.into_action() {
        Ok(action) => action,
        Err(proposal) => return Ok(stateless(*proposal).into()),
    };
    let Some(contract) = gate.policy.tool(action.tool()) else {
        let d = Decision::Rejected(Rejection::UnknownTool {
            tool: action.tool().to_owned(),
            message: format!("tool {:?} is not in this gate's policy", action.tool()),
        });
        return Ok(d.into());
    };
    let validated = Validated::new(action, reply, contract);

    // Capability: coarse, from the authenticated principal.
    if !request.principal.has_capability(validated.capability()) {
        let message = format!(
            "{} lacks the capability {}",
            request.principal.id(),
            validated.capability()
        );
        return Ok(forbidden(&validated, Reason::MissingCapability, message).into());
    }

    // Typed scope (docs/design.md §13): every value in its canonical form
    // before anything reads it, so `42` and `"42"` are one resource to the
    // authoriser, the key, the state source and the executor alike.
    let mut scope = request.scope.clone();
    scope.insert(
        "version_seen".to_owned(),
        Value::String(request.version_seen.as_str().to_owned()),
    );
    let scope = match contract.canonical_scope(&scope) {
        Ok(s) => s,
        Err(e) => {
            let d = Decision::Rejected(Rejection::Scope {
                reason: Reason::InvalidScope,
                tool: validated.tool().to_owned(),
                fingerprint: *validated.fingerprint(),
                message: e.to_string(),
            });
            return Ok(d.into());
        }
    };

    // Live authorisation, on every path (before the lookup that would tell
    // fresh from replay from conflict).
    let verdict = gate
        .authorizer
        .authorize(&validated.authz_request(
            request.principal,
            &scope,
            request.attributes,
            request.now,
        ))
        .await;
    match verdict {
        AuthzDecision::Allow => {}
        AuthzDecision::Deny { message } => {
            return Ok(forbidden(&validated, Reason::NotAuthorized, message).into());
        }
        AuthzDecision::Error { message } => {
            return Ok(forbidden(&validated, Reason::AuthorizationError, message).into());
        }
        AuthzDecision::Unavailable { message } => return Err(GateError::Authorizer(message)),
    }
    let authorized = Authorized::new(
        validated,
        request.principal.clone(),
        scope,
        request.version_seen.clone(),
    );

    // Operation key (the fingerprint came from the contract stage).
    let bound = match Bound::new(authorized) {
        Ok(b) => b,
        Err((auth, e)) => {
            let d = Decision::Rejected(Rejection::Scope {
                reason: Reason::MissingScope,
                tool: auth.validated().tool().to_owned(),
                fingerprint: *auth.validated().fingerprint(),
                message: e.to_string(),
            });
            return Ok(d.into());
        }
    };

    // No separate claim lookup on the way to a write: the claim reads its
    // row back and resolves an existing operation to it (replay, in
    // flight, conflict), so a fresh decision saves a round trip. Every
    // answer that would end the decision before the claim (a stale
    // version, a missing approval) resolves the operation first instead
    // (invariant 4).
    //
    // Is the version the model read still current? A filter, not a lock:
    // the executor applies it again as a precondition. A tool whose state
    // source reads nothing leaves it to that precondition.
    let current = if gate
        .state
        .reads_state(bound.authorized().validated().tool())
    {
        Some(
            gate.state
                .current_version(bound.authorized().state_scope())
                .await?,
        )
    } else {
        None
    };
    if let Some(current) = current.filter(|c| c != bound.authorized().version_seen()) {
        // A retry of a completed operation: the write moved the version.
        // Its claim was committed before its write, so it is there now
        // (also when the original is racing this retry); the retry is a
        // replay (or in flight), never `state_changed` (invariant 4). An
        // attempt reconciled as not applied wrote nothing: the version
        // moved for another reason, and the model must read again.
        if let Some(record) = gate.claims.fetch(bound.key()).await?
            && !record.reopenable()
        {
            return existing_decided(gate.policy, &bound, record, request.now);
        }
        let d = Decision::StateChanged {
            operation: operation(&bound),
            reason: Reason::VersionMismatch,
            message: format!(
                "the model read version {} but the current version is {current}",
                bound.authorized().version_seen()
            ),
            current_version: Some(current),
            result: None,
            prior: None,
        };
        return Ok(d.into());
    }

    // Approval, bound to (key, fingerprint, version), and consumed by the
    // claim below. An approval for other arguments or another version is
    // not this proposal's.
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
        if let Some(record) = gate.claims.fetch(bound.key()).await?
            && !record.reopenable()
        {
            return existing_decided(gate.policy, &bound, record, request.now);
        }
        let d = pending_approval(
            &bound,
            "this tool needs a person's approval for this operation key, fingerprint and version",
        );
        return Ok(d.into());
    }
    // A tool without needs_approval takes an approval only for a proposal a
    // budget sent to a person: it lets that claim reserve beyond the limit.
    let grant = approval.filter(|_| needs_approval || !contract.budgets().is_empty());

    // Claim.
    // The claim records who owns the write, so reconciliation can ask that
    // executor and no other (invariant 13).
    let executor_kind = gate.executor.kind(bound.authorized().validated().tool());
    let claim_request = bound
        .claim_request(request.holder, request.now, request.lease)
        .map_err(|e| GateError::Corrupt(e.to_string()))?
        .with_executor(executor_kind);
    let budgets =
        super::budget::reservations(contract, &bound, request.now).map_err(GateError::Corrupt)?;
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
    let lease = match gate.claims.claim(claim_request).await? {
        RawClaim::Acquired(lease) => lease,
        RawClaim::InFlight(r)
        | RawClaim::Completed(r)
        | RawClaim::Mismatch(r)
        | RawClaim::Expired(r) => {
            return existing_decided(gate.policy, &bound, r, request.now);
        }
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
            return Ok(d.into());
        }
        RawClaim::GrantUnusable => {
            // The approval was used, expired, denied or given under another
            // policy since the request found it: nothing was written,
            // and the proposal needs a person again (docs/design.md §14).
            let d = pending_approval(
                &bound,
                "the approval for this proposal can no longer be used; it needs a person's approval again",
            );
            return Ok(d.into());
        }
    };
    let claimed = Claimed::new(bound, lease);
    execute(gate, &claimed, request, budget_approved).await
}

async fn execute<A, S, C, E>(
    gate: &Gate<'_, A, S, C, E>,
    claimed: &Claimed,
    request: &Request<'_>,
    budget_approved: bool,
) -> Result<Decided, GateError>
where
    C: ClaimStore,
    E: Executor,
{
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
        audit_entry(&placeholder, request.principal, now)
            .map_err(|e| GateError::Corrupt(e.to_string()))?
            .with_attempt(Some(attempt))
    };
    let completion =
        AppliedCompletion::new(*bound.key(), claimed.lease().holder, now, executed_entry);
    let outcome = match gate
        .executor
        .execute_and_complete(claimed.permit(), &completion)
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
            let detail = json!({
                "applied": false,
                "reason": Reason::PreconditionFailed.as_str(),
                "version_seen": bound.authorized().version_seen().as_str(),
                "current_version": current.as_ref().map(StateVersion::as_str),
            });
            let result = JsonText::result(detail.to_string())
                .map_err(|e| GateError::Corrupt(e.to_string()))?;
            let d = Decision::StateChanged {
                operation: operation(bound),
                reason: Reason::PreconditionFailed,
                message: "the executor's version precondition failed; nothing was written".into(),
                current_version: current,
                result: Some(detail),
                prior: None,
            };
            // The entry this decision gets if the completion is recorded:
            // written with it, in one transaction.
            let entry = audit_entry(&d, request.principal, now)
                .map_err(|e| GateError::Corrupt(e.to_string()))?
                .with_attempt(Some(attempt));
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
    let recorded = gate
        .claims
        .complete(bound.key(), &claimed.lease().holder, &result, now, &entry)
        .await?;
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

/// A recorded result as JSON.
fn json_value(text: &JsonText) -> Result<Value, GateError> {
    text.value().map_err(|e| GateError::Corrupt(e.to_string()))
}

/// Someone already holds the operation: replay, conflict, in flight or
/// needs reconciliation. The record passes the tool's contract again before
/// any of it is shown.
fn existing(
    policy: &Policy,
    bound: &Bound,
    record: ClaimRecord,
    now: UnixMillis,
) -> Result<Decision, GateError> {
    if record.reopenable() {
        // A store answers a claim on such a row with the next attempt
        // (the conformance suite's `not_applied_runs_again_as_the_next_attempt`),
        // and the driver's lookups skip it: one here is a store breaking
        // its contract, never an answer to give.
        return Err(GateError::Store(StoreError::new(
            crate::claim::StoreErrorKind::Invariant,
            "the claim store answered with an attempt reconciled as not applied \
             instead of starting the next attempt",
        )));
    }
    check_record(policy, &record)?;
    let result = record.result().map(json_value).transpose()?;
    let operation = operation(bound);
    let prior = record.proposal.clone();
    let d = if record.fingerprint != *bound.fingerprint() {
        Decision::Conflict {
            operation,
            message:
                "this operation was already proposed with different arguments; a person decides"
                    .to_owned(),
            result,
            prior,
        }
    } else if let Some(not_applied) = closed_not_applied(&record, result.as_ref()) {
        // A closure that wrote nothing replays as what it was, never as
        // `replayed` (which says the write happened).
        let message = "the executor's version precondition failed; nothing was written".to_owned();
        let current_version = result
            .as_ref()
            .and_then(|r| r.get("current_version"))
            .and_then(Value::as_str)
            .and_then(StateVersion::new);
        Decision::StateChanged {
            operation,
            reason: not_applied,
            message,
            current_version,
            result,
            prior: Some(prior),
        }
    } else if record.status == ClaimStatus::Completed {
        let result = result.ok_or_else(|| {
            GateError::Corrupt("a completed claim has no recorded result".to_owned())
        })?;
        Decision::Replayed {
            operation,
            result,
            reply: bound.authorized().validated().reply().to_owned(),
            prior,
        }
    } else if record.is_stuck(now) {
        Decision::NeedsReconciliation {
            operation,
            reason: Reason::LeaseExpired,
            message: format!(
                "the claim's lease ended at {} with the outcome unknown",
                record.lease_expires_at
            ),
            prior: Some(prior),
        }
    } else {
        Decision::InFlight { operation, prior }
    };
    Ok(d)
}

/// Why a completed claim wrote nothing, if it did not: closed by its own
/// execution with a not-applied result (the executor's precondition
/// failed; see `execute`), whose first answer was `state_changed`. An
/// attempt reconciled as not applied is not answered from at all: the next
/// claim runs the operation again (see `existing`).
fn closed_not_applied(record: &ClaimRecord, result: Option<&Value>) -> Option<Reason> {
    let completion = record.completion.as_ref()?;
    match completion.resolution {
        crate::claim::Resolution::ReconciledNotApplied
        | crate::claim::Resolution::ReconciledApplied => None,
        crate::claim::Resolution::Executed => {
            let r = result?;
            (r.get("applied") == Some(&Value::Bool(false))
                && r.get("reason").and_then(Value::as_str)
                    == Some(Reason::PreconditionFailed.as_str()))
            .then_some(Reason::PreconditionFailed)
        }
    }
}

/// docs/design.md §8: records read back pass the same contract as fresh proposals.
fn check_record(policy: &Policy, record: &ClaimRecord) -> Result<(), GateError> {
    let tool = record.proposal.tool();
    let contract = policy.tool(tool).ok_or_else(|| {
        GateError::Corrupt(format!(
            "stored proposal names tool {tool:?}, not in the policy"
        ))
    })?;
    let args = record
        .proposal
        .arguments_value()
        .map_err(|e| GateError::Corrupt(format!("stored arguments: {e}")))?;
    let Some(map) = args.as_object() else {
        return Err(GateError::Corrupt(
            "stored arguments are not an object".into(),
        ));
    };
    if let Some(k) = map.keys().find(|k| !contract.properties().contains(*k)) {
        return Err(GateError::Corrupt(format!(
            "stored arguments carry the undeclared key {k:?}"
        )));
    }
    contract
        .schema()
        .validate(&args)
        .map_err(|v| GateError::Corrupt(format!("stored arguments: {}", v.message)))
}
