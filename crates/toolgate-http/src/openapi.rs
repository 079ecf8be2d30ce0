//! `GET /openapi.json`: the OpenAPI 3.1 document, generated from the
//! handlers themselves. Each handler carries its `#[utoipa::path]`, and the
//! router registers it from that declaration (utoipa-axum's `routes!`), so
//! a route is served exactly where its documentation says and no route of
//! the API goes undocumented. The wire types come from `dto` and `error`.
//!
//! The document is committed as `docs/openapi.json`; `tests/openapi.rs`
//! fails when the served one differs (`TOOLGATE_BLESS=1` rewrites it).

use axum::body::Bytes;
use serde_json::{Value, json};
use toolgate::decode::Limits;
use toolgate::op::scope::MAX_SCOPE_STRING_BYTES;
use toolgate::op::{ScopeType, VERSION_SEEN};
use toolgate::provider::Provider;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use crate::dto::{EntityValue, ReconcileRequest, StrictJson};
use crate::error::{PROBLEM_JSON, Problem, ProblemCode};

/// The document's frame: everything but the paths and the schemas they
/// reference, which the router collects from the handlers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "toolgate",
        description = "The toolgate HTTP sidecar: decisions on LLM tool calls (docs/design.md §2, §9). \
            Decisions are `application/json` with an `outcome`, whatever their status; request \
            errors are RFC 9457 problems (`application/problem+json`) with a stable `code` \
            (docs/error-codes.md)."
    ),
    modifiers(&Bearer),
    components(schemas(Problem, ProblemCode, StrictJson, EntityValue, ReconcileRequest)),
    tags(
        (name = "decisions", description = "Decide one provider response"),
        (name = "claims", description = "Client completions, stuck claims, reconciliation"),
        (name = "review", description = "The reviewer queue"),
        (name = "service", description = "Probes, metrics and this document"),
    )
)]
pub(crate) struct Frame;

/// The `bearer` security scheme the operations name.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        api.components.get_or_insert_with(Default::default).add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API key from the deployment's configuration: Authorization: Bearer <key>",
                    ))
                    .build(),
            ),
        );
    }
}

/// A problem response that any operation can get from the HTTP layers
/// rather than from its handler.
fn layer_problem(description: &str) -> RefOr<utoipa::openapi::Response> {
    ResponseBuilder::new()
        .description(description)
        .content(
            PROBLEM_JSON,
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Problem")))
                .build(),
        )
        .build()
        .into()
}

/// Adds what the layers around every handler can answer: the deadline's
/// `408 request_timeout` and the body limit's `413 body_too_large` (by
/// `Content-Length`, whatever the method).
fn add_layer_responses(op: &mut Operation) {
    for (status, description) in [
        (
            "408",
            "`request_timeout`: the request did not finish before its deadline (a decision \
             that had started still runs to its end)",
        ),
        (
            "413",
            "`body_too_large`: the request body is over the limit",
        ),
    ] {
        op.responses
            .responses
            .entry(status.to_owned())
            .or_insert_with(|| layer_problem(description));
    }
}

/// The finished document: the router's paths in the frame, with the
/// layers' answers on every operation.
pub(crate) fn finish(mut api: utoipa::openapi::OpenApi) -> Value {
    for item in api.paths.paths.values_mut() {
        for op in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.options,
            &mut item.head,
            &mut item.patch,
            &mut item.trace,
        ]
        .into_iter()
        .flatten()
        {
            add_layer_responses(op);
        }
    }
    // Serialising utoipa's own types (maps of strings to schemas) cannot
    // fail; Null would make the drift test fail loudly if it ever did.
    let mut doc = serde_json::to_value(&api).unwrap_or(Value::Null);
    if let Some(request) = doc.pointer_mut("/components/schemas/DecisionRequest") {
        add_stream_rule(request);
    }
    doc
}

/// What `stream: true` asks of the rest of a decision request, which
/// utoipa's builders have no words for: the body as a string, from a
/// provider that streams ([`Provider::supports_stream`]).
fn add_stream_rule(request: &mut Value) {
    let streaming: Vec<&str> = Provider::ALL
        .into_iter()
        .filter(|p| p.supports_stream())
        .map(Provider::as_str)
        .collect();
    if let Some(obj) = request.as_object_mut() {
        obj.insert(
            "if".to_owned(),
            json!({"properties": {"stream": {"const": true}}, "required": ["stream"]}),
        );
        obj.insert(
            "then".to_owned(),
            json!({"properties": {
                "provider": {"enum": streaming},
                "response": {"type": "string"}
            }}),
        );
    }
}

/// The document as served and committed: pretty-printed, keys in a stable
/// order (utoipa keeps paths and schemas in sorted maps), one final newline.
pub fn pretty(doc: &Value) -> String {
    let mut text = serde_json::to_string_pretty(doc).unwrap_or_default();
    text.push('\n');
    text
}

/// The OpenAPI document of the router over `P` (the same for every `P`:
/// the components change what is decided, not the wire).
pub fn openapi_document() -> Value {
    let (_, api) = crate::routes::routes().split_for_parts();
    finish(api)
}

/// The served text, made once per router.
#[derive(Clone)]
pub(crate) struct ServedDocument(pub Bytes);

impl ServedDocument {
    pub(crate) fn new(doc: &Value) -> Self {
        Self(Bytes::from(pretty(doc)))
    }
}

/// Names the deployment's scope fields in the served document: a decision
/// request's `scope` holds these and no other (`unknown_scope_field`),
/// each of the type the policy gives it (`scope_types`, or the default:
/// `version_seen` a version, any other field a string) when every tool
/// naming it agrees; a field the tools type differently keeps the bounds
/// every request is held to.
pub(crate) fn name_scope_fields(
    doc: &mut Value,
    policy: &toolgate::contract::Policy,
    fields: &std::collections::BTreeSet<String>,
) {
    let Some(scope) = doc.pointer_mut("/components/schemas/DecisionRequest/properties/scope")
    else {
        return;
    };
    let properties: serde_json::Map<String, Value> = fields
        .iter()
        .map(|f| {
            let mut types = policy
                .tools()
                .iter()
                .filter(|t| f == VERSION_SEEN || t.operation_key().iter().any(|k| k == f))
                .map(|t| t.scope_type(f));
            let first = types.next();
            let agreed = first.filter(|t| types.all(|u| u == *t));
            (f.clone(), scope_value(agreed))
        })
        .collect();
    if let Some(obj) = scope.as_object_mut() {
        obj.insert("properties".to_owned(), Value::Object(properties));
        obj.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
}

/// The schema of a scope value of type `ty` (`ScopeType::canonicalise`),
/// or, without one, the bounds of every scope value.
fn scope_value(ty: Option<ScopeType>) -> Value {
    let bound = Limits::INTEROPERABLE_INTEGER;
    let no_control = crate::dto::NO_CONTROL;
    match ty {
        None => serde_json::to_value(crate::dto::scope_value_schema()).unwrap_or(Value::Null),
        Some(ScopeType::String) => json!({
            "type": "string", "minLength": 1, "maxLength": MAX_SCOPE_STRING_BYTES,
            "pattern": no_control,
            "description": "a string of 1 to 256 bytes of UTF-8 without control characters"
        }),
        // Fifteen digits at most: every such number is within ±(2^53−1).
        Some(ScopeType::Integer) => json!({"oneOf": [
            {"type": "integer", "minimum": -i128::from(bound), "maximum": bound},
            {"type": "string", "pattern": "^-?(0|[1-9][0-9]{0,14})$",
             "description": "the integer's decimal text, without leading zeros"}
        ]}),
        Some(ScopeType::Version) => json!({"oneOf": [
            {"type": "integer", "minimum": 0, "maximum": bound},
            {"type": "string", "minLength": 1, "maxLength": 128,
             "pattern": "^[^\\s\\u0000-\\u001f\\u007f-\\u009f]([^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f])?$",
             "description": "a version: 1 to 128 bytes without control, invisible or surrounding \
                 white space characters; digits alone are a number's canonical text (`7`, \
                 never `07`, `+7` or `-7`)"}
        ]}),
    }
}
