//! Requests a front door refuses before a decision runs, and the audit row
//! each of them gets.
//!
//! A refusal is not a decision (the proposal never reached the pipeline),
//! but it is something a caller tried: the audit log keeps it under the
//! authenticated key's principal, with outcome [`REFUSED_REQUEST`] and the
//! refusal's code as the reason. The request-level checks every front door
//! shares live here too ([`check_request_scope`]), so a second front door
//! (an MCP gateway) refuses, and audits, the same requests in the same way.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::authz::Principal;
use crate::claim::{AuditEntry, ClaimStore, CorruptRecord, StoreError, UnixMillis, audit_label};
use crate::contract::Policy;
use crate::op::scope::bounded_scope_value;

/// The audit outcome of a refused request.
pub const REFUSED_REQUEST: &str = "refused_request";

/// Why a request was refused before a decision ran. Each code is the
/// front door's own (the HTTP sidecar's problem code of the same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The body is not strict JSON or not the request's shape (an actor
    /// that is not printable text included).
    InvalidBody,
    /// The provider is not one the gate reads.
    UnknownProvider,
    /// A scope field no tool's operation key names.
    UnknownScopeField,
    /// A scope value outside the bound every request keeps, or not of its
    /// field's type for the proposed tool.
    InvalidScope,
    /// An action without `version_seen`.
    MissingScope,
    /// A key that may not act for users named an actor.
    ActorNotAllowed,
    /// Request entities of a type the proposed tool does not read.
    UnexpectedEntities,
    /// A scope field the deployment takes from the caller's identity, sent
    /// by the caller.
    IdentityScopeField,
}

impl Refusal {
    /// Every refusal.
    pub const ALL: [Self; 8] = [
        Self::InvalidBody,
        Self::UnknownProvider,
        Self::UnknownScopeField,
        Self::InvalidScope,
        Self::MissingScope,
        Self::ActorNotAllowed,
        Self::UnexpectedEntities,
        Self::IdentityScopeField,
    ];

    /// The stable snake_case code (the audit entry's reason).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidBody => "invalid_body",
            Self::UnknownProvider => "unknown_provider",
            Self::UnknownScopeField => "unknown_scope_field",
            Self::InvalidScope => "invalid_scope",
            Self::MissingScope => "missing_scope",
            Self::ActorNotAllowed => "actor_not_allowed",
            Self::UnexpectedEntities => "unexpected_entities",
            Self::IdentityScopeField => "identity_scope_field",
        }
    }
}

/// A refused request: the refusal and what to tell the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Why.
    pub refusal: Refusal,
    /// What went wrong, for the caller.
    pub message: String,
}

impl Refused {
    /// A refusal with its message.
    pub fn new(refusal: Refusal, message: impl Into<String>) -> Self {
        Self {
            refusal,
            message: message.into(),
        }
    }
}

/// The scope fields a request may carry under `policy`: those some tool's
/// operation key names, and `version_seen`. Anything else (an `actor_id`,
/// say) is refused: identity never comes from a request body.
pub fn request_scope_fields(policy: &Policy) -> BTreeSet<String> {
    let mut fields: BTreeSet<String> = policy
        .tools()
        .iter()
        .flat_map(|t| t.operation_key().iter().cloned())
        .collect();
    fields.insert(crate::op::VERSION_SEEN.to_owned());
    fields
}

/// Checks a request's scope before anything else reads it, whatever tool
/// the proposal names (or if it names none): every field is one of
/// `fields` ([`request_scope_fields`]), and every value is bounded
/// ([`bounded_scope_value`]: a string of at most 256 bytes, or an
/// integer). So no request, not even one for an unknown tool, can carry a
/// 690 KB scope value into a review item or the audit log.
pub fn check_request_scope(
    fields: &BTreeSet<String>,
    scope: &Map<String, Value>,
) -> Result<(), Refused> {
    for (k, v) in scope {
        if !fields.contains(k) {
            return Err(Refused::new(
                Refusal::UnknownScopeField,
                format!(
                    "scope field {:?} is not named by any tool's operation key; identity comes \
                     from the API key, never the body",
                    audit_label(k)
                ),
            ));
        }
        if let Err(want) = bounded_scope_value(v) {
            return Err(Refused::new(
                Refusal::InvalidScope,
                format!("scope field {k:?} must be {want}"),
            ));
        }
    }
    Ok(())
}

/// The audit entry of a refused request: the authenticated key's
/// principal (never an actor it named: the request that named it was not
/// taken), outcome [`REFUSED_REQUEST`], the refusal's code as the reason,
/// and the tool the proposal named if it got that far (as an escaped,
/// bounded label: a model's tool name is never a reason to skip the row).
pub fn refusal_entry(
    caller: &Principal,
    refusal: Refusal,
    tool: Option<&str>,
    now: UnixMillis,
) -> Result<AuditEntry, CorruptRecord> {
    AuditEntry::new(
        now,
        caller.authenticated_id().to_owned(),
        tool.map(audit_label),
        REFUSED_REQUEST.to_owned(),
        Some(refusal.as_str().to_owned()),
        None,
        None,
    )
}

/// Appends [`refusal_entry`] to `claims`' audit log.
pub async fn audit_refusal<C: ClaimStore>(
    claims: &C,
    caller: &Principal,
    refusal: Refusal,
    tool: Option<&str>,
    now: UnixMillis,
) -> Result<(), StoreError> {
    let entry = refusal_entry(caller, refusal, tool, now).map_err(|e| StoreError::corrupt(&e))?;
    claims.append_audit(&entry).await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_refusal_is_an_audit_entry_even_with_a_hostile_tool_name() {
        let caller = Principal::new("php-app", ["refund:issue"]).unwrap();
        for r in Refusal::ALL {
            for tool in [None, Some("a\nb\0"), Some(&*"t".repeat(300_000))] {
                let e = refusal_entry(&caller, r, tool, UnixMillis(1)).unwrap();
                assert_eq!(
                    (e.actor(), e.outcome(), e.reason()),
                    ("php-app", REFUSED_REQUEST, Some(r.as_str()))
                );
            }
        }
    }

    #[test]
    fn the_request_scope_is_bounded_whatever_the_tool() {
        let fields: BTreeSet<String> = ["order_id", "version_seen"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        let ok = json!({"order_id": "O-1", "version_seen": 3});
        assert!(check_request_scope(&fields, ok.as_object().unwrap()).is_ok());
        let huge = json!({"order_id": "x".repeat(690_000)});
        assert_eq!(
            check_request_scope(&fields, huge.as_object().unwrap())
                .unwrap_err()
                .refusal,
            Refusal::InvalidScope
        );
        let unknown = json!({"actor_id": "ana"});
        assert_eq!(
            check_request_scope(&fields, unknown.as_object().unwrap())
                .unwrap_err()
                .refusal,
            Refusal::UnknownScopeField
        );
    }
}
