//! Reads: a call of a tool the policy declares `read = true`, judged by the
//! first half of docs/design.md §1's order and no further.
//!
//! ```text
//! contract::check ─▶ capability ─▶ typed scope ─▶ authorisation ─▶ audit
//! ```
//!
//! Nothing is claimed, deduplicated or executed here: a read changes
//! nothing, so a repeat is simply another read. What a read shares with a
//! write is everything that keeps the model on resources its principal may
//! touch: the strict contract stage on its arguments, the capability, the
//! scope fields the deployment maps (from arguments or the identity, each
//! in its canonical form) and live authorisation over the entities they
//! name. The front door forwards the call only with an [`AllowedRead`],
//! which only [`decide_read`] makes. Every read, allowed or not, gets one
//! audit entry.

use serde_json::{Map, Value};

use super::authz::{Authorizer, AuthorizerUnavailable, AuthzDecision, Principal};
use super::codes::Reason;
use super::decision::{Decision, Rejection};
use super::driver::{audit_entry, forbidden, stateless};
use super::error::GateError;
use super::front::{CallError, Note, conceal, refused, with_identity};
use super::refusal::{Refusal, audit_refusal};
use super::scope::Scope;
use super::stage::Validated;
use crate::claim::{AuditEntry, ClaimStore, Fingerprint, StoreError, UnixMillis};
use crate::contract::{Checked, Policy};

/// The audit outcome of a read the gate allowed (a read is no decision:
/// its entries stand beside them, as refused requests do).
pub const READ_ALLOWED: &str = "read";

/// One call of a read tool, decoded by a front door.
#[derive(Debug)]
pub struct ReadCall<'a> {
    /// The authenticated principal.
    pub principal: &'a Principal,
    /// The contract stage's verdict on the tool and its arguments.
    pub proposal: Checked,
    /// The scope fields the deployment maps, not yet canonical.
    pub scope: &'a Map<String, Value>,
    /// The time of the read (the core reads no clock).
    pub now: UnixMillis,
    /// Set when the principal is past the tool's rate (the front door
    /// counts; the core has no clock to count with).
    pub over_rate: Option<OverRate>,
}

/// A read past its rate: `rejected` (`rate_limited`) once capability has
/// passed, before anything is authorised.
#[derive(Debug, Clone)]
pub struct OverRate {
    /// What the caller is told (the rate, when to retry).
    pub message: String,
    /// Whether this refusal gets an audit entry: the first in its window
    /// does, so that a flood costs the caller and not the audit log.
    pub audited: bool,
}

/// A read that passed capability and live authorisation: the only value a
/// front door forwards a read with.
#[derive(Debug, Clone)]
pub struct AllowedRead {
    tool: String,
    arguments: Value,
    fingerprint: Fingerprint,
}

impl AllowedRead {
    /// The tool.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The validated arguments, as the contract stage read them.
    pub fn arguments(&self) -> &Value {
        &self.arguments
    }

    /// The arguments' fingerprint (as audited).
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }
}

/// What [`decide_read`] says of a read.
#[derive(Debug)]
pub enum ReadVerdict {
    /// Forward it.
    Allowed(AllowedRead),
    /// Do not: `rejected` (its arguments, its scope) or `forbidden` (the
    /// capability, the authoriser), the authoriser's words concealed.
    Denied(Box<Decision>),
}

/// A read's verdict, with what did not reach a store and the concealed
/// authoriser detail (the operator's, never the caller's).
#[derive(Debug)]
pub struct ReadSettled {
    /// The verdict.
    pub verdict: ReadVerdict,
    /// For the operator's log.
    pub notes: Vec<Note>,
}

/// Judges one read: contract, capability, typed scope, authorisation, in
/// that order, and one audit entry under the principal. A scope the gate
/// cannot take is a refusal (audited), as for a write.
pub async fn decide_read<A, C>(
    policy: &Policy,
    authorizer: &A,
    store: &C,
    call: ReadCall<'_>,
) -> Result<ReadSettled, CallError>
where
    A: Authorizer,
    C: ClaimStore,
{
    let ReadCall {
        principal,
        proposal,
        scope,
        now,
        over_rate,
    } = call;
    let quiet = over_rate.as_ref().is_some_and(|o| !o.audited);
    let judged = judge(
        policy, authorizer, principal, proposal, scope, now, over_rate,
    )
    .await;
    let mut verdict = match judged {
        Ok(v) => v,
        Err(Judged::Refused((refused, tool))) => {
            let not_audited =
                audit_refusal(store, principal, refused.refusal, tool.as_deref(), now)
                    .await
                    .err();
            return Err(CallError::Refused {
                refused,
                tool,
                not_audited,
            });
        }
        Err(Judged::Unavailable(e)) => return Err(CallError::Gate(e.into())),
    };
    let entry = match &verdict {
        ReadVerdict::Allowed(read) => allowed_entry(read, principal, now),
        ReadVerdict::Denied(decision) => audit_entry(decision, principal, now),
    };
    let mut notes = Vec::new();
    let limited = matches!(
        &verdict,
        ReadVerdict::Denied(d) if d.reason() == Some(Reason::RateLimited)
    );
    if limited && quiet {
        return Ok(ReadSettled { verdict, notes });
    }
    let appended = match entry {
        Ok(entry) => store.append_audit(&entry).await,
        Err(e) => Err(StoreError::corrupt(&e)),
    };
    if let Err(e) = appended {
        // A denied read stays denied; an allowed one is not forwarded
        // unaudited: the audit is the read's only record.
        if matches!(verdict, ReadVerdict::Allowed(_)) {
            return Err(CallError::Gate(GateError::Store(e)));
        }
        notes.push(Note::NotAudited(e));
    }
    if let ReadVerdict::Denied(decision) = &mut verdict {
        notes.extend(conceal(decision));
    }
    Ok(ReadSettled { verdict, notes })
}

enum Judged {
    Refused(super::front::Refusing),
    Unavailable(AuthorizerUnavailable),
}

async fn judge<A: Authorizer>(
    policy: &Policy,
    authorizer: &A,
    principal: &Principal,
    proposal: Checked,
    scope: &Map<String, Value>,
    now: UnixMillis,
    over_rate: Option<OverRate>,
) -> Result<ReadVerdict, Judged> {
    let denied = |d: Decision| Ok(ReadVerdict::Denied(Box::new(d)));
    let reply = proposal.reply.clone().unwrap_or_default();
    let action = match proposal.into_action() {
        Ok(a) => a,
        Err(stopped) => return denied(stateless(*stopped)),
    };
    let contract = match policy.tool(action.tool()) {
        Some(c) if c.is_read() => c,
        // The front door routes only read tools here: any other is not one
        // it may forward unclaimed.
        _ => {
            return denied(Decision::Rejected(Rejection::UnknownTool {
                tool: action.tool().to_owned(),
                message: format!("tool {:?} is not a read tool of this policy", action.tool()),
            }));
        }
    };
    let validated = Validated::new(action, reply, contract);
    if !principal.has_capability(validated.capability()) {
        let message = format!(
            "{} lacks the capability {}",
            principal.id(),
            validated.capability()
        );
        return denied(forbidden(&validated, Reason::MissingCapability, message));
    }
    if let Some(over) = over_rate {
        return denied(Decision::Rejected(Rejection::Read {
            reason: Reason::RateLimited,
            tool: validated.tool().to_owned(),
            fingerprint: *validated.fingerprint(),
            message: over.message,
        }));
    }
    let with_id = with_identity(contract, principal, scope).map_err(Judged::Refused)?;
    let scope = Scope::canonical(contract, &with_id, None).map_err(|e| {
        Judged::Refused(refused(
            Refusal::InvalidScope,
            e.to_string(),
            Some(contract.name()),
        ))
    })?;
    contract
        .check_argument_scopes(scope.fields(), validated.arguments())
        .map_err(|m| Judged::Refused(refused(Refusal::InvalidScope, m, Some(contract.name()))))?;
    if let Some(field) = contract
        .operation_key()
        .iter()
        .find(|f| !scope.fields().contains_key(*f))
    {
        return denied(Decision::Rejected(Rejection::Scope {
            reason: Reason::MissingScope,
            tool: validated.tool().to_owned(),
            fingerprint: *validated.fingerprint(),
            message: format!("the call names no `{field}`"),
        }));
    }
    let fields = scope.to_map();
    let no_entities = Map::new();
    let request = validated.authz_request(principal, &fields, &no_entities, now);
    match authorizer.authorize(&request).await {
        AuthzDecision::Allow => Ok(ReadVerdict::Allowed(AllowedRead {
            tool: validated.tool().to_owned(),
            arguments: validated.arguments().clone(),
            fingerprint: *validated.fingerprint(),
        })),
        AuthzDecision::Deny { message } => {
            denied(forbidden(&validated, Reason::NotAuthorized, message))
        }
        AuthzDecision::Error { message } => {
            denied(forbidden(&validated, Reason::AuthorizationError, message))
        }
        AuthzDecision::Unavailable { message } => {
            Err(Judged::Unavailable(AuthorizerUnavailable::new(message)))
        }
    }
}

fn allowed_entry(
    read: &AllowedRead,
    principal: &Principal,
    now: UnixMillis,
) -> Result<AuditEntry, crate::claim::CorruptRecord> {
    AuditEntry::new(
        now,
        principal.id().to_owned(),
        Some(read.tool.clone()),
        READ_ALLOWED.to_owned(),
        None,
        None,
        Some(read.fingerprint),
    )?
    .with_via(principal.via().map(str::to_owned))
}
