//! Reading a decision request: its body strictly decoded, the actor a key
//! may name, and the proposal and its request's facts checked for shape
//! before anything is decided.

use serde::de::DeserializeOwned;
use serde_json::Value;
use toolgate::contract::{CheckOptions, EnvelopeMode, MAX_ATTEMPTS};
use toolgate::decode::{self, Limits};
use toolgate::pipeline::Principal;
use toolgate::provider::Provider;

use super::problem_of;
use crate::auth::Caller;
use crate::dto::DecisionRequest;
use crate::error::{ApiError, ProblemCode};
use crate::state::AppState;

/// Decodes a request body strictly (duplicate keys, big integers, depth)
/// and reads it into `T`, whose unknown fields are refused.
pub fn strict_body<T: DeserializeOwned>(body: &[u8], max: usize) -> Result<T, ApiError> {
    let value =
        decode::decode_strict(body, &Limits::provider_body().with_max_bytes(max)).map_err(|r| {
            ApiError::new(
                ProblemCode::InvalidBody,
                format!("{}: {} at '{}'", r.code(), r.message(), r.pointer()),
            )
        })?;
    serde_json::from_value(value)
        .map_err(|e| ApiError::new(ProblemCode::InvalidBody, e.to_string()))
}

/// The request's principal (a delegated actor resolved) and its proposal,
/// checked for shape.
pub(super) fn read_request(
    app: &AppState,
    caller: &Caller,
    body: &[u8],
) -> Result<(Principal, Prepared), ApiError> {
    let mut req: DecisionRequest = strict_body(body, app.settings().body_limit)?;
    // Actor delegation (docs/design.md §13): only a key allowed to act for
    // users names the actor; it is then the principal every later stage
    // sees, and the key stays in the audit entry as `via`.
    let principal = match req.actor.take() {
        None => caller.principal.clone(),
        Some(_) if !caller.act_for_users => {
            return Err(ApiError::new(
                ProblemCode::ActorNotAllowed,
                "this API key may not name an actor; configure it with act_for_users = true",
            ));
        }
        Some(actor) => caller.principal.acting_for(actor).map_err(|e| {
            ApiError::new(ProblemCode::InvalidBody, format!("actor: {}", e.message()))
        })?,
    };
    Ok((principal, prepare(app, req)?))
}

/// One proposal, checked for shape, with the server-fixed facts of its
/// request.
#[derive(Debug)]
pub struct Prepared {
    pub provider: Provider,
    pub body: Vec<u8>,
    pub opts: CheckOptions,
    pub scope: serde_json::Map<String, Value>,
    /// Application-sent entities, checked for shape (not yet against the
    /// tool: that needs the proposal).
    pub entities: serde_json::Map<String, Value>,
}

fn prepare(app: &AppState, req: DecisionRequest) -> Result<Prepared, ApiError> {
    let provider = Provider::from_name(&req.provider).ok_or_else(|| {
        ApiError::new(
            ProblemCode::UnknownProvider,
            format!(
                "provider must be one of {}",
                Provider::ALL.map(Provider::as_str).join(", ")
            ),
        )
    })?;
    let body = match req.response {
        Value::String(s) => s.into_bytes(),
        other => {
            if req.stream {
                return Err(ApiError::new(
                    ProblemCode::InvalidBody,
                    "a stream must be sent as a string",
                ));
            }
            serde_json::to_vec(&other)
                .map_err(|e| ApiError::new(ProblemCode::InvalidBody, e.to_string()))?
        }
    };
    if req.stream && !provider.supports_stream() {
        return Err(ApiError::new(
            ProblemCode::InvalidBody,
            format!("streams are not accepted for {provider}"),
        ));
    }
    let attempt = req.attempt.unwrap_or(1);
    if !(1..=MAX_ATTEMPTS).contains(&attempt) {
        return Err(ApiError::new(
            ProblemCode::InvalidBody,
            format!("attempt must be 1 to {MAX_ATTEMPTS}"),
        ));
    }
    let mode = match req.envelope.as_deref() {
        None => EnvelopeMode::Native,
        Some(name) => crate::dto::ENVELOPE_MODES
            .into_iter()
            .find(|m| m.as_str() == name)
            .ok_or_else(|| {
                ApiError::new(
                    ProblemCode::InvalidBody,
                    "envelope must be native or structured",
                )
            })?,
    };
    // The bound every request keeps, whatever tool it proposes (or if it
    // proposes none, or one the policy does not have): known fields, and
    // values of at most 256 bytes.
    toolgate::pipeline::check_request_scope(app.service().scope_fields(), &req.scope)
        .map_err(|r| ApiError::new(problem_of(r.refusal), r.message))?;
    check_entities(&req.entities)?;
    Ok(Prepared {
        provider,
        body,
        opts: CheckOptions {
            stream: req.stream,
            attempt,
            mode,
        },
        scope: req.scope,
        entities: req.entities,
    })
}

/// Longest entity id or type name, in bytes (a claim label's limit).
const MAX_ENTITY_LABEL_BYTES: usize = 128;
/// Deepest nesting of arrays and objects in one attribute value.
const MAX_ATTRIBUTE_DEPTH: usize = 8;

/// The shape of a decision's `entities` (docs/http-api.md): type →
/// `{"id": <string>, <attribute>: <value>, …}`, values Cedar can take as
/// attributes. Whether the proposed tool reads a type is checked once the
/// proposal is known ([`unexpected_entity`]).
fn check_entities(entities: &serde_json::Map<String, Value>) -> Result<(), ApiError> {
    let bad = |m: String| Err(ApiError::new(ProblemCode::InvalidBody, m));
    for (ty, entity) in entities {
        let type_ok = ty.len() <= MAX_ENTITY_LABEL_BYTES
            && ty.split("::").all(|part| {
                part.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            });
        if !type_ok {
            return bad(format!(
                "entities: {ty:?} is not an entity type name (Cedar identifiers joined by ::)"
            ));
        }
        let Some(obj) = entity.as_object() else {
            return bad(format!(
                "entities.{ty} must be an object with an `id` and attributes"
            ));
        };
        match obj.get("id") {
            Some(Value::String(id))
                if !id.is_empty()
                    && id.len() <= MAX_ENTITY_LABEL_BYTES
                    && !id.chars().any(char::is_control) => {}
            _ => {
                return bad(format!(
                    "entities.{ty}.id must be a string of 1 to {MAX_ENTITY_LABEL_BYTES} bytes \
                     without control characters"
                ));
            }
        }
        for (name, value) in obj.iter().filter(|(k, _)| *k != "id") {
            if let Err(why) = attribute_value(value, 0) {
                return bad(format!("entities.{ty}.{name}: {why}"));
            }
        }
    }
    Ok(())
}

fn attribute_value(value: &Value, depth: usize) -> Result<(), String> {
    if depth > MAX_ATTRIBUTE_DEPTH {
        return Err(format!("nested deeper than {MAX_ATTRIBUTE_DEPTH} levels"));
    }
    match value {
        Value::String(_) | Value::Bool(_) => Ok(()),
        Value::Number(n) if n.is_i64() => Ok(()),
        Value::Number(n) => Err(format!("{n} is not a 64-bit integer")),
        Value::Null => Err("null is not an attribute value; leave the attribute out".into()),
        Value::Array(items) => items.iter().try_for_each(|v| attribute_value(v, depth + 1)),
        Value::Object(fields) => fields
            .values()
            .try_for_each(|v| attribute_value(v, depth + 1)),
    }
}
