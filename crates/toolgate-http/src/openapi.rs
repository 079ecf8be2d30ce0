//! `GET /openapi.json`: the OpenAPI document, generated from the wire types
//! (`dto`) and the path declarations below. The handlers are generic over
//! the pluggable parts, so each path is declared once here on a
//! non-generic item carrying the real request and response types.

#![expect(
    dead_code,
    reason = "the items below exist only for their utoipa path declarations"
)]

use serde_json::Value;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use crate::dto::{
    CompleteRequest, CompleteResponse, DecisionRequest, DecisionResponse, Permit, ReconcileRequest,
};

/// Decide one provider response.
#[utoipa::path(post, path = "/v1/decisions", request_body = DecisionRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "IETF draft: a repeat with the same body replays the response; 409 while the first runs; 422 with another body")),
    responses(
        (status = 200, description = "answer, abstain, replayed, permitted, refused, truncated, content_filtered", body = DecisionResponse),
        (status = 201, description = "executed", body = DecisionResponse),
        (status = 202, description = "pending_approval", body = DecisionResponse),
        (status = 401, description = "missing or unknown API key"),
        (status = 403, description = "forbidden", body = DecisionResponse),
        (status = 409, description = "in_flight, state_changed, needs_reconciliation; or idempotency_key_in_flight", body = DecisionResponse),
        (status = 413, description = "body over the limit"),
        (status = 422, description = "conflict, rejected; or a malformed request (error codes)", body = DecisionResponse),
    ),
    security(("bearer" = [])))]
fn decisions() {}

/// Complete a client-executed claim with the permit's holder token.
#[utoipa::path(post, path = "/v1/claims/{key}/complete", request_body = CompleteRequest,
    params(("key" = String, Path, description = "operation key (hex)")),
    responses(
        (status = 200, body = CompleteResponse),
        (status = 403, description = "not_proposer"),
        (status = 404, description = "no such claim"),
        (status = 409, description = "stale_holder or lease_expired: nothing written"),
    ),
    security(("bearer" = [])))]
fn complete() {}

/// Stuck claims (in flight past their lease). Needs `toolgate:operate`.
#[utoipa::path(get, path = "/v1/claims",
    params(("stuck" = bool, Query, description = "must be true"), ("limit" = Option<u32>, Query)),
    responses((status = 200, description = "{\"claims\": [...]}")),
    security(("bearer" = [])))]
fn claims() {}

/// Reconcile a stuck claim. Needs `toolgate:operate`. Empty body: ask the
/// server's executor.
#[utoipa::path(post, path = "/v1/claims/{key}/reconcile", request_body(content = Option<ReconcileRequest>),
    params(("key" = String, Path, description = "operation key (hex)")),
    responses((status = 200, description = "reconciled"), (status = 409, description = "not_stuck")),
    security(("bearer" = [])))]
fn reconcile() {}

/// The reviewer queue. Needs `toolgate:review`.
#[utoipa::path(get, path = "/v1/review/items", responses((status = 200)), security(("bearer" = [])))]
fn review_items() {}

/// Approve a pending action: it runs through the pipeline again with an
/// approval bound to its operation key, fingerprint and version.
#[utoipa::path(post, path = "/v1/review/items/{id}/approve", params(("id" = u64, Path)),
    responses((status = 200), (status = 409, description = "not_pending")), security(("bearer" = [])))]
fn approve() {}

/// Deny a pending action.
#[utoipa::path(post, path = "/v1/review/items/{id}/deny", params(("id" = u64, Path)),
    responses((status = 200), (status = 409, description = "not_pending")), security(("bearer" = [])))]
fn deny() {}

/// Liveness; needs no key.
#[utoipa::path(get, path = "/healthz", responses((status = 200)))]
fn healthz() {}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", responses((status = 200, content_type = "text/plain")), security(("bearer" = [])))]
fn metrics() {}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "toolgate",
        description = "The toolgate HTTP sidecar: decisions on LLM tool calls (docs/design.md §2, §9)."
    ),
    paths(
        decisions,
        complete,
        claims,
        reconcile,
        review_items,
        approve,
        deny,
        healthz,
        metrics
    ),
    components(schemas(
        DecisionRequest,
        DecisionResponse,
        Permit,
        CompleteRequest,
        CompleteResponse,
        ReconcileRequest
    ))
)]
struct Doc;

/// The OpenAPI document as JSON.
pub fn openapi_document() -> Value {
    let mut doc = Doc::openapi();
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
    );
    serde_json::to_value(&doc).unwrap_or(Value::Null)
}
