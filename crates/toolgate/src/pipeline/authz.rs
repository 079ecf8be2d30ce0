//! Capability and live authorisation (docs/design.md §7).
//!
//! Both take typed values. A capability is present or absent in a
//! [`Principal`] built by the server from the authenticated request; an
//! [`Authorizer`] answers with an [`AuthzDecision`], never a boolean that
//! could have been a truthy `1`.

use std::collections::BTreeSet;
use std::future::Future;

use serde_json::{Map, Value};

use crate::claim::{MAX_LABEL_BYTES, UnixMillis};

/// The authenticated actor: an id and the capabilities it holds. Built by
/// the server from its own authentication, never from the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    id: String,
    capabilities: BTreeSet<String>,
    via: Option<String>,
    attributes: Map<String, Value>,
    credential: Option<Credential>,
}

/// The credential a principal authenticated with, kept only for an
/// executor that acts as the person (exchanging it for an upstream's
/// token, RFC 8693): never printed, logged or stored, and never sent on as
/// it is.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential(std::sync::Arc<str>);

impl Credential {
    /// `secret` as a credential.
    pub fn new(secret: &str) -> Self {
        Self(secret.into())
    }

    /// The secret itself, for the one place that presents it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(<redacted>)")
    }
}

/// Why a principal could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("principal at '{pointer}': {message}")]
pub struct PrincipalError {
    pointer: String,
    message: String,
}

impl PrincipalError {
    fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            pointer: pointer.into(),
            message: message.into(),
        }
    }

    /// JSON pointer to the offending value (empty for the whole).
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// What was wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

fn label(pointer: &str, text: &str) -> Result<(), PrincipalError> {
    if text.is_empty() || text.len() > MAX_LABEL_BYTES || text.chars().any(char::is_control) {
        return Err(PrincipalError::new(
            pointer,
            format!("must be 1 to {MAX_LABEL_BYTES} bytes without control characters"),
        ));
    }
    Ok(())
}

/// Longest actor a key that acts for users may name, in bytes.
pub const MAX_ACTOR_BYTES: usize = 128;

fn actor_label(text: &str) -> Result<(), PrincipalError> {
    let printable = !text.is_empty()
        && text.len() <= MAX_ACTOR_BYTES
        && !text.starts_with(' ')
        && !text.ends_with(' ')
        && !text.chars().any(crate::claim::is_hidden);
    if printable {
        return Ok(());
    }
    Err(PrincipalError::new(
        "/actor",
        format!(
            "must be 1 to {MAX_ACTOR_BYTES} bytes of printable characters: no control, bidi, \
             zero-width or format characters, no line separators, and no space but U+0020 \
             (never first or last)"
        ),
    ))
}

impl Principal {
    /// A principal with `id` holding `capabilities`.
    pub fn new<I, C>(id: impl Into<String>, capabilities: I) -> Result<Self, PrincipalError>
    where
        I: IntoIterator<Item = C>,
        C: Into<String>,
    {
        let id = id.into();
        label("/id", &id)?;
        let mut set = BTreeSet::new();
        for c in capabilities {
            let c = c.into();
            label("/capabilities", &c)?;
            set.insert(c);
        }
        Ok(Self {
            id,
            capabilities: set,
            via: None,
            attributes: Map::new(),
            credential: None,
        })
    }

    /// This principal acting for the end user `actor` (actor delegation,
    /// docs/design.md §13): a principal whose id is `actor`, holding this
    /// one's capabilities, with this one's id as [`Principal::via`]. The
    /// capability check, the authoriser and the claim's proposer see the
    /// actor; the audit entry keeps `via`. The server decides whether the
    /// authenticated key may delegate; the model never names the actor.
    ///
    /// The actor is text a caller chose, shown to reviewers and kept in the
    /// audit log: it must be 1 to [`MAX_ACTOR_BYTES`] bytes of printable
    /// characters, with no control, bidi, zero-width or other format
    /// character, no line or paragraph separator, and no space but U+0020,
    /// never at either end ([`crate::claim::is_hidden`]). Look-alikes of
    /// other scripts (a Cyrillic `а` for a Latin `a`) are not folded: an
    /// actor is an identifier compared byte for byte, and the authoriser
    /// decides whether it exists (docs/http-api.md, "Actors").
    pub fn acting_for(&self, actor: impl Into<String>) -> Result<Self, PrincipalError> {
        let actor = actor.into();
        actor_label(&actor)?;
        // The attributes were the authenticated principal's; the actor a
        // key names has none until the authoriser's sources give it some.
        Ok(Self {
            id: actor,
            capabilities: self.capabilities.clone(),
            via: Some(self.id.clone()),
            attributes: Map::new(),
            credential: None,
        })
    }

    /// This principal with `attributes`, vouched for by whoever
    /// authenticated it (a signed token's claims, mapped by the
    /// deployment): the authoriser sees them as the principal's own
    /// (Cedar's `principal.team`). Never from a request body.
    #[must_use]
    pub fn with_attributes(mut self, attributes: Map<String, Value>) -> Self {
        self.attributes = attributes;
        self
    }

    /// This principal with the credential it authenticated with (a
    /// person's signed token), for an executor that acts as the person.
    #[must_use]
    pub fn with_credential(mut self, credential: Credential) -> Self {
        self.credential = Some(credential);
        self
    }

    /// The credential it authenticated with, if it is a person's token.
    pub fn credential(&self) -> Option<&Credential> {
        self.credential.as_ref()
    }

    /// The attributes its authentication vouched for
    /// ([`Principal::with_attributes`]); empty for a key.
    pub fn attributes(&self) -> &Map<String, Value> {
        &self.attributes
    }

    /// The authenticated principal that named this actor, when it was
    /// delegated with [`Principal::acting_for`].
    pub fn via(&self) -> Option<&str> {
        self.via.as_deref()
    }

    /// The principal the caller authenticated as: the key that named a
    /// delegated actor, or else this principal itself. Refusals are
    /// audited under it (a refused request may name no valid actor).
    pub fn authenticated_id(&self) -> &str {
        self.via.as_deref().unwrap_or(&self.id)
    }

    /// Reads a principal from configuration or an identity provider's
    /// claims: `{"id": "agent-7", "capabilities": {"refund:issue": true}}`.
    ///
    /// Each capability must be a JSON boolean. `1`, `"true"` or `"yes"` are
    /// a malformed principal, not a grant (docs/design.md §7: a truthy `1` is not
    /// `true`); `false` is an explicit absence.
    pub fn from_claims(value: &Value) -> Result<Self, PrincipalError> {
        let obj = value
            .as_object()
            .ok_or_else(|| PrincipalError::new("", "must be a JSON object"))?;
        if let Some(k) = obj.keys().find(|k| *k != "id" && *k != "capabilities") {
            return Err(PrincipalError::new(
                format!("/{k}"),
                "is not a principal field",
            ));
        }
        let id = obj
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| PrincipalError::new("/id", "must be a string"))?;
        let caps = match obj.get("capabilities") {
            None => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => {
                return Err(PrincipalError::new(
                    "/capabilities",
                    "must be an object of booleans",
                ));
            }
        };
        let mut granted = Vec::new();
        for (name, v) in &caps {
            match v {
                Value::Bool(true) => granted.push(name.clone()),
                Value::Bool(false) => {}
                other => {
                    return Err(PrincipalError::new(
                        format!("/capabilities/{name}"),
                        format!("must be true or false, not {other}"),
                    ));
                }
            }
        }
        Self::new(id, granted)
    }

    /// The authenticated actor's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether the principal holds `capability`.
    pub fn has_capability(&self, capability: &str) -> bool {
        self.capabilities.contains(capability)
    }
}

/// What an [`Authorizer`] decided. There is no "maybe": an engine that
/// could not evaluate answers [`AuthzDecision::Error`], which denies.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum AuthzDecision {
    /// This actor may do this to this resource, now.
    Allow,
    /// A policy denied it (or none permitted it).
    Deny {
        /// Why, for the audit and the caller.
        message: String,
    },
    /// Evaluation failed (a policy error, a missing attribute, an attribute
    /// of the wrong type such as `1` for `true`).
    /// The pipeline denies: `forbidden` with reason `authorization_error`.
    Error {
        /// What failed.
        message: String,
    },
    /// Nothing was decided: a source the authoriser needs (the directory
    /// or database its entities live in) did not answer. Not a denial, which
    /// would tell the caller "no" for good and be remembered as such: the
    /// pipeline stops with [`GateError::Authorizer`](super::GateError),
    /// before any claim, and the caller may retry.
    Unavailable {
        /// What did not answer (for the operator's log).
        message: String,
    },
}

/// An authoriser that could not decide because a source it needs did not
/// answer ([`AuthzDecision::Unavailable`]): the cause of
/// [`GateError::Authorizer`](super::GateError). Its message names the
/// application's tables and hosts, so it is for the operator's log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AuthorizerUnavailable {
    message: String,
}

impl AuthorizerUnavailable {
    /// What did not answer.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// What did not answer.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// What an [`Authorizer`] is asked. Built only by the pipeline, after the
/// proposal passed its contract and the principal holds the capability.
#[derive(Debug)]
pub struct AuthzRequest<'a> {
    pub(crate) principal: &'a Principal,
    pub(crate) tool: &'a str,
    pub(crate) capability: &'a str,
    pub(crate) scope: &'a Map<String, Value>,
    pub(crate) arguments: &'a Value,
    pub(crate) attributes: &'a Map<String, Value>,
    pub(crate) now: UnixMillis,
}

impl AuthzRequest<'_> {
    /// The authenticated actor.
    pub fn principal(&self) -> &Principal {
        self.principal
    }

    /// The tool (the action).
    pub fn tool(&self) -> &str {
        self.tool
    }

    /// The capability the tool needs (already checked).
    pub fn capability(&self) -> &str {
        self.capability
    }

    /// The server-fixed scope (customer, resource, version seen).
    pub fn scope(&self) -> &Map<String, Value> {
        self.scope
    }

    /// The validated arguments, for policies that bound amounts.
    pub fn arguments(&self) -> &Value {
        self.arguments
    }

    /// Entities the authenticated application sent with the request
    /// ([`super::Request::attributes`]): entity type → `{"id": …, <attr>: …}`.
    /// Trusted as the application's word, never the model's; an authoriser
    /// that does not declare a type must not read it.
    pub fn attributes(&self) -> &Map<String, Value> {
        self.attributes
    }

    /// The time of the decision.
    pub fn now(&self) -> UnixMillis {
        self.now
    }
}

/// Live authorisation: this actor, this resource, this customer, now.
///
/// Runs on every path that gets past the contract — fresh, replay,
/// conflict, in flight — before any state is read or the claim store is
/// touched (docs/design.md invariant 3). An application plugs in its own engine by
/// implementing this; `toolgate-cedar` provides Cedar.
pub trait Authorizer: Send + Sync {
    /// Decides one request. Cannot fail: an engine error is
    /// [`AuthzDecision::Error`].
    fn authorize(&self, request: &AuthzRequest<'_>) -> impl Future<Output = AuthzDecision> + Send;

    /// Whether this authoriser reads entities of `entity_type` sent by the
    /// application ([`AuthzRequest::attributes`]) for `tool`. A server
    /// refuses a request carrying a type for which this is `false`, so an
    /// attribute the application believes is checked is never silently
    /// ignored. The default reads none.
    fn accepts_request_entity(&self, tool: &str, entity_type: &str) -> bool {
        let _ = (tool, entity_type);
        false
    }
}
