//! # toolgate-cedar
//!
//! [Cedar](https://www.cedarpolicy.com) policies as toolgate's default
//! [`Authorizer`]: live authorisation of *this actor, this resource, this
//! customer, now*.
//!
//! Each decision becomes one Cedar request:
//!
//! | Cedar | from |
//! |---|---|
//! | principal | `<principal_type>::"<authenticated principal id>"` |
//! | action | `Action::"<tool name>"` |
//! | resource | `<resource_type>::"<scope[resource_field]>"` |
//! | context | `{"scope": {…server-fixed scope…}, "arguments": {…validated arguments…}}` |
//!
//! The entities (the principal's and the resource's attributes, such as an
//! order's owner and the team it belongs to) come from an [`EntitySource`] the
//! application implements, read live for each decision, as
//! [`EntityRecord`]s: values built directly, not Cedar's JSON entity format,
//! whose parser cost more than the evaluation.
//!
//! Cedar's `is_authorized` cannot fail: it returns a decision and
//! diagnostics. This crate is stricter than Cedar's default: **any**
//! evaluation error in the diagnostics denies, even if another policy
//! permitted, and is reported as [`AuthzDecision::Error`] (the pipeline's
//! `forbidden` / `authorization_error`). Cedar is strictly typed, so an
//! attribute that holds `1` where a policy uses it as a boolean is an
//! evaluation error, not a truthy value.
//!
//! The messages of a denial or an error (policy ids, Cedar's evaluation
//! errors, `entity Order::"4" does not exist`) are for the operator: they
//! tell which entities exist and what they hold. The HTTP sidecar logs them
//! and answers every caller with one generic `forbidden`; an application
//! showing decisions to its users should do the same.

#![warn(missing_docs)]

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::str::FromStr;

use cedar_policy::{
    Authorizer as Engine, Context, Decision, Entities, Entity, EntityId, EntityTypeName, EntityUid,
    PolicySet, Request, RestrictedExpression,
};
use serde_json::{Map, Value};
use toolgate::pipeline::{Authorizer, AuthzDecision, AuthzRequest};

/// Loads the Cedar entities one decision needs.
pub trait EntitySource: Send + Sync {
    /// The entities for `request`. [`EntityError::Invalid`] denies;
    /// [`EntityError::Unavailable`] decides nothing.
    fn entities(
        &self,
        request: &AuthzRequest<'_>,
    ) -> impl Future<Output = Result<Vec<EntityRecord>, EntityError>> + Send;
}

/// Why an [`EntitySource`] has no entities for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntityError {
    /// The request or the data cannot give entities (a scope without the
    /// resource's id, a row of the wrong shape): [`AuthzDecision::Error`], which
    /// denies.
    Invalid(String),
    /// The source did not answer (its database is down or restarting):
    /// [`AuthzDecision::Unavailable`]. Denying here would tell a caller "no"
    /// for a question nobody could ask; the sidecar answers 503 instead,
    /// and nothing is claimed either way.
    Unavailable(String),
}

impl From<String> for EntityError {
    fn from(message: String) -> Self {
        Self::Invalid(message)
    }
}

impl std::fmt::Display for EntityError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid(m) => f.write_str(m),
            Self::Unavailable(m) => write!(f, "unavailable: {m}"),
        }
    }
}

/// One entity: its type and id, attributes and parents.
#[derive(Debug, Clone, PartialEq)]
pub struct EntityRecord {
    /// The entity type, e.g. `Agent`.
    pub type_name: String,
    /// The entity id, e.g. `agent-ana`.
    pub id: String,
    /// Attributes, by name.
    pub attrs: Vec<(String, Attr)>,
    /// Parent entities, as (type, id).
    pub parents: Vec<(String, String)>,
}

impl EntityRecord {
    /// An entity with no attributes and no parents yet.
    pub fn new(type_name: impl Into<String>, id: impl Into<String>) -> Self {
        Self {
            type_name: type_name.into(),
            id: id.into(),
            attrs: Vec::new(),
            parents: Vec::new(),
        }
    }

    /// Adds an attribute.
    #[must_use]
    pub fn attr(mut self, name: impl Into<String>, value: Attr) -> Self {
        self.attrs.push((name.into(), value));
        self
    }
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    /// A JSON value, read as in the request context: strings, booleans,
    /// 64-bit integers, arrays as sets, objects as records (never as
    /// entity references or extension values); anything else denies.
    Value(Value),
    /// A reference to another entity, as (type, id).
    Entity(String, String),
}

/// Which Cedar types and scope field name the principal and the resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Entity type of principals, e.g. `Agent`.
    pub principal_type: String,
    /// Entity type of the resource, e.g. `Order`.
    pub resource_type: String,
    /// The scope field holding the resource id, e.g. `order_id`.
    pub resource_field: String,
}

/// Why a policy set or mapping could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError(String);

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cedar: {}", self.0)
    }
}

impl std::error::Error for LoadError {}

/// The Cedar engine with its policies, a mapping and an entity source.
pub struct CedarAuthorizer<S> {
    policies: PolicySet,
    action_type: EntityTypeName,
    principal_type: EntityTypeName,
    resource_type: EntityTypeName,
    resource_field: String,
    entities: S,
}

impl<S: EntitySource> CedarAuthorizer<S> {
    /// Parses `policies` (Cedar policy text) and the mapping's type names.
    pub fn new(policies: &str, mapping: &Mapping, entities: S) -> Result<Self, LoadError> {
        let policies = PolicySet::from_str(policies).map_err(|e| LoadError(e.to_string()))?;
        let principal_type = EntityTypeName::from_str(&mapping.principal_type)
            .map_err(|e| LoadError(e.to_string()))?;
        let resource_type = EntityTypeName::from_str(&mapping.resource_type)
            .map_err(|e| LoadError(e.to_string()))?;
        let action_type =
            EntityTypeName::from_str("Action").map_err(|e| LoadError(e.to_string()))?;
        Ok(Self {
            policies,
            action_type,
            principal_type,
            resource_type,
            resource_field: mapping.resource_field.clone(),
            entities,
        })
    }

    /// The entity source.
    pub fn entity_source(&self) -> &S {
        &self.entities
    }

    /// These policies and this mapping over another entity source, for as
    /// long as both are borrowed: for an application that builds a source
    /// per decision (one that keeps what it read for a later stage of the
    /// same decision, say) without parsing the policies again for each.
    pub fn with_entities<'a, T: EntitySource>(&'a self, entities: &'a T) -> WithEntities<'a, S, T> {
        WithEntities {
            cedar: self,
            entities,
        }
    }

    fn request(&self, r: &AuthzRequest<'_>) -> Result<Request, String> {
        let principal = EntityUid::from_type_name_and_id(
            self.principal_type.clone(),
            EntityId::new(r.principal().id()),
        );
        let action =
            EntityUid::from_type_name_and_id(self.action_type.clone(), EntityId::new(r.tool()));
        let resource_id = match r.scope().get(&self.resource_field) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            _ => {
                return Err(format!(
                    "the scope has no resource field `{}`",
                    self.resource_field
                ));
            }
        };
        let resource = EntityUid::from_type_name_and_id(
            self.resource_type.clone(),
            EntityId::new(resource_id),
        );
        let scope = restricted_map(r.scope()).map_err(|e| format!("context: {e}"))?;
        let arguments = restricted(r.arguments()).map_err(|e| format!("context: {e}"))?;
        let context = Context::from_pairs([
            ("scope".to_owned(), scope),
            ("arguments".to_owned(), arguments),
        ])
        .map_err(|e| e.to_string())?;
        Request::new(principal, action, resource, context, None).map_err(|e| e.to_string())
    }

    /// The source's entities with the attributes the principal's
    /// authentication vouched for ([`Principal::attributes`]: a token's
    /// claims) added to the principal's entity, made if the source has
    /// none. An attribute both give is an error, which denies: which of two
    /// values a policy read must never be a guess.
    ///
    /// [`Principal::attributes`]: toolgate::pipeline::Principal::attributes
    fn with_principal_attributes(
        &self,
        mut entities: Vec<EntityRecord>,
        r: &AuthzRequest<'_>,
    ) -> Result<Vec<EntityRecord>, String> {
        let attributes = r.principal().attributes();
        if attributes.is_empty() {
            return Ok(entities);
        }
        let type_name = self.principal_type.to_string();
        let id = r.principal().id();
        let at = match entities
            .iter()
            .position(|e| e.type_name == type_name && e.id == id)
        {
            Some(i) => i,
            None => {
                entities.push(EntityRecord::new(type_name.clone(), id));
                entities.len() - 1
            }
        };
        let record = &mut entities[at];
        for (name, value) in attributes {
            if record.attrs.iter().any(|(n, _)| n == name) {
                return Err(format!(
                    "the principal's attribute `{name}` comes both from its token and from the \
                     entity source"
                ));
            }
            record
                .attrs
                .push((name.clone(), Attr::Value(value.clone())));
        }
        Ok(entities)
    }

    async fn decide<T: EntitySource>(&self, source: &T, r: &AuthzRequest<'_>) -> AuthzDecision {
        let request = match self.request(r) {
            Ok(q) => q,
            Err(message) => return AuthzDecision::Error { message },
        };
        let entities = match source.entities(r).await {
            Ok(v) => v,
            Err(EntityError::Invalid(message)) => {
                return AuthzDecision::Error {
                    message: format!("loading entities: {message}"),
                };
            }
            Err(EntityError::Unavailable(message)) => {
                return AuthzDecision::Unavailable {
                    message: format!("loading entities: {message}"),
                };
            }
        };
        let entities = match self.with_principal_attributes(entities, r) {
            Ok(v) => v,
            Err(message) => return AuthzDecision::Error { message },
        };
        let entities = entities
            .iter()
            .map(entity)
            .collect::<Result<Vec<_>, _>>()
            .and_then(|list| Entities::from_entities(list, None).map_err(|e| e.to_string()));
        let entities = match entities {
            Ok(e) => e,
            Err(e) => {
                return AuthzDecision::Error {
                    message: format!("entities: {e}"),
                };
            }
        };
        let response = Engine::new().is_authorized(&request, &self.policies, &entities);
        let errors: Vec<String> = response
            .diagnostics()
            .errors()
            .map(ToString::to_string)
            .collect();
        if !errors.is_empty() {
            // Stricter than Cedar's default: an erroring policy is not just
            // skipped; the whole decision denies.
            return AuthzDecision::Error {
                message: errors.join("; "),
            };
        }
        match response.decision() {
            Decision::Allow => AuthzDecision::Allow,
            Decision::Deny => {
                let reasons: Vec<String> = response
                    .diagnostics()
                    .reason()
                    .map(ToString::to_string)
                    .collect();
                AuthzDecision::Deny {
                    message: if reasons.is_empty() {
                        "no policy permits this".to_owned()
                    } else {
                        format!("denied by {}", reasons.join(", "))
                    },
                }
            }
        }
    }
}

/// A JSON value as a Cedar value: strings, booleans, longs, sets and
/// records, nothing else. Built directly rather than through Cedar's JSON
/// reader, which costs more than the whole evaluation and would read a
/// model-chosen `{"__entity": …}` or `{"__extn": …}` as a reference or an
/// extension value; here every object is a plain record. Floats, nulls and
/// integers outside Cedar's 64-bit `Long` are errors, and so deny.
fn restricted(v: &Value) -> Result<RestrictedExpression, String> {
    Ok(match v {
        Value::Null => return Err("null has no Cedar value".to_owned()),
        Value::Bool(b) => RestrictedExpression::new_bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => RestrictedExpression::new_long(i),
            None => return Err(format!("{n} is not a Cedar Long")),
        },
        Value::String(s) => RestrictedExpression::new_string(s.clone()),
        Value::Array(items) => RestrictedExpression::new_set(
            items
                .iter()
                .map(restricted)
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Value::Object(map) => restricted_map(map)?,
    })
}

/// An entity type and id as a Cedar uid.
fn uid(type_name: &str, id: &str) -> Result<EntityUid, String> {
    let type_name = EntityTypeName::from_str(type_name).map_err(|e| e.to_string())?;
    Ok(EntityUid::from_type_name_and_id(
        type_name,
        EntityId::new(id),
    ))
}

/// A record as a Cedar entity.
fn entity(r: &EntityRecord) -> Result<Entity, String> {
    let attrs = r
        .attrs
        .iter()
        .map(|(name, value)| {
            let value = match value {
                Attr::Value(v) => restricted(v)?,
                Attr::Entity(t, id) => RestrictedExpression::new_entity_uid(uid(t, id)?),
            };
            Ok((name.clone(), value))
        })
        .collect::<Result<HashMap<_, _>, String>>()?;
    let parents = r
        .parents
        .iter()
        .map(|(t, id)| uid(t, id))
        .collect::<Result<HashSet<_>, String>>()?;
    Entity::new(uid(&r.type_name, &r.id)?, attrs, parents).map_err(|e| e.to_string())
}

fn restricted_map(map: &Map<String, Value>) -> Result<RestrictedExpression, String> {
    let fields = map
        .iter()
        .map(|(k, v)| Ok((k.clone(), restricted(v)?)))
        .collect::<Result<Vec<_>, String>>()?;
    RestrictedExpression::new_record(fields).map_err(|e| e.to_string())
}

impl<S: EntitySource> Authorizer for CedarAuthorizer<S> {
    fn authorize(&self, request: &AuthzRequest<'_>) -> impl Future<Output = AuthzDecision> + Send {
        self.decide(&self.entities, request)
    }
}

/// A [`CedarAuthorizer`]'s policies and mapping over a borrowed entity
/// source ([`CedarAuthorizer::with_entities`]); the authoriser's own source
/// is not asked.
pub struct WithEntities<'a, S, T> {
    cedar: &'a CedarAuthorizer<S>,
    entities: &'a T,
}

impl<S: EntitySource, T: EntitySource> Authorizer for WithEntities<'_, S, T> {
    fn authorize(&self, request: &AuthzRequest<'_>) -> impl Future<Output = AuthzDecision> + Send {
        self.cedar.decide(self.entities, request)
    }
}
