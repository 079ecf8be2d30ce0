//! Request errors: everything that is not a decision. A decision, even a
//! `rejected` one, is a 2xx/4xx `application/json` response with an
//! outcome; an [`ApiError`] is a request the gate could not take (no key, a
//! malformed body, a store that did not answer), answered as an RFC 9457
//! problem (`application/problem+json`).
//!
//! Each problem has a stable code ([`ProblemCode`], `docs/error-codes.md`),
//! kept as the `code` extension member, and a `type` URI made from it
//! ([`PROBLEM_TYPE_BASE`] + code). The errors that axum and tower-http
//! produce themselves (an unknown route, a wrong method, the deadline, the
//! body limit, an extractor's rejection) are turned into problems too, by
//! [`fallback`], [`method_not_allowed`] and [`plain_errors_as_problems`].

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::dto::ClaimView;

/// The detail of every `503 store_unavailable`.
pub const UNAVAILABLE_DETAIL: &str = "a store or source this request needs did not answer; \
     nothing was decided or written: retry later";

/// The detail of every `500 deployment_error`.
pub const DEPLOYMENT_DETAIL: &str = "the deployment's configuration cannot answer this request \
     (a query returning more rows than one, or a value of a type it cannot read); nothing was \
     decided or written, and retrying gives the same answer: the operator's log says what to fix";

/// The media type of every error answer (RFC 9457 §3).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The `type` of a problem is this prefix followed by its code. The URIs
/// identify the problem types and are stable; they are not fetched (RFC 9457
/// §3.1.1: consumers should not dereference them), and each is documented in
/// `docs/error-codes.md` under its code.
pub const PROBLEM_TYPE_BASE: &str = "https://toolgate.dev/problems/";

/// Every request-error code, with its status and title. Stable: a code is
/// never reused with another meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProblemCode {
    /// 401: no bearer key, or one that is not configured.
    Unauthorized,
    /// 403: the key's principal lacks the endpoint's capability.
    MissingCapability,
    /// 422: the body is not strict JSON or not the endpoint's shape.
    InvalidBody,
    /// 422: `provider` names no supported provider.
    UnknownProvider,
    /// 422: a scope field no tool's operation key names.
    UnknownScopeField,
    /// 422: a scope value that is not a non-empty string or an integer.
    InvalidScope,
    /// 422: an action without `scope.version_seen`.
    MissingScope,
    /// 400: a malformed `Idempotency-Key` header.
    InvalidIdempotencyKey,
    /// 409: the first request with this `Idempotency-Key` is still running.
    IdempotencyKeyInFlight,
    /// 422: this `Idempotency-Key` came with another body before.
    IdempotencyKeyReused,
    /// 400: the `{key}` path segment is not an operation key.
    InvalidOperationKey,
    /// 422: the holder token is malformed.
    InvalidHolder,
    /// 422: a result or detail the result limits refuse.
    InvalidResult,
    /// 400: the query string does not parse.
    InvalidQuery,
    /// 400: a path parameter does not parse (an item id that is not a
    /// number).
    InvalidPath,
    /// 400 (or another 4xx): a request the HTTP layer could not read, for a
    /// reason no other code names.
    InvalidRequest,
    /// 400: `GET /v1/claims` without `stuck=true`.
    UnsupportedListing,
    /// 404: no such route, claim or reviewer item.
    NotFound,
    /// 404: the tool's state source found no resource for the request's
    /// scope (no row, or its URL answered 404): the request names
    /// something that does not exist; nothing was claimed.
    ResourceNotFound,
    /// 405: the route exists, the method does not (`Allow` lists those that
    /// do).
    MethodNotAllowed,
    /// 408: the request did not finish before its deadline.
    RequestTimeout,
    /// 409: a completion after the permit's lease.
    LeaseExpired,
    /// 409: a completion whose holder token owns no in-flight claim.
    StaleHolder,
    /// 409: a reconciliation of a claim that is not stuck.
    NotStuck,
    /// 409: approve or deny of an item that is not an open pending approval.
    NotPending,
    /// 409: a reviewer voting on their own proposal.
    SelfApproval,
    /// 409: a reviewer voting twice on one item.
    AlreadyVoted,
    /// 409: a reconciliation without an answer of a stuck claim whose write
    /// the server's executor does not own (a client-executed claim):
    /// nothing was asked or written.
    ExplicitAnswerRequired,
    /// 422: an explicit `applied` answer that is not a result the claim's
    /// own executor could have recorded (an MCP tool's output schema):
    /// nothing was written.
    AnswerRefused,
    /// 403: a decision request naming an `actor` with a key that may not act
    /// for users.
    ActorNotAllowed,
    /// 422: decision `entities` of a type the proposed tool's authoriser
    /// does not read from the request.
    UnexpectedEntities,
    /// 422: a scope field the deployment takes from the caller's identity,
    /// sent by the caller.
    IdentityScopeField,
    /// 413: the body is over the limit.
    BodyTooLarge,
    /// 413: a result (a completion's, a reconciliation answer) over the
    /// server's result cap: nothing was recorded.
    ResultTooLarge,
    /// 415: a body of a media type the endpoint does not read.
    UnsupportedMediaType,
    /// 500: a stored record failed its contract when read back.
    CorruptRecord,
    /// 500: a decision task failed unexpectedly.
    Internal,
    /// 500: the deployment's wiring cannot answer this request, and
    /// retrying will not change that (a state query that returns several
    /// rows, a column of a type it cannot read): not retryable.
    DeploymentError,
    /// 503: the claim store, state source or executor did not answer.
    StoreUnavailable,
    /// 503: `GET /readyz`: the claim store does not answer.
    NotReady,
    /// 503: the server is at its connection limit (or this peer at its
    /// own) and no idle connection could make room; or a probe-only
    /// connection asked for something other than a probe.
    TooManyConnections,
}

impl ProblemCode {
    /// Every code, for the documentation check and the OpenAPI document.
    pub const ALL: [Self; 41] = [
        Self::Unauthorized,
        Self::MissingCapability,
        Self::InvalidBody,
        Self::UnknownProvider,
        Self::UnknownScopeField,
        Self::InvalidScope,
        Self::MissingScope,
        Self::InvalidIdempotencyKey,
        Self::IdempotencyKeyInFlight,
        Self::IdempotencyKeyReused,
        Self::InvalidOperationKey,
        Self::InvalidHolder,
        Self::InvalidResult,
        Self::InvalidQuery,
        Self::InvalidPath,
        Self::InvalidRequest,
        Self::UnsupportedListing,
        Self::NotFound,
        Self::ResourceNotFound,
        Self::MethodNotAllowed,
        Self::RequestTimeout,
        Self::LeaseExpired,
        Self::StaleHolder,
        Self::NotStuck,
        Self::NotPending,
        Self::SelfApproval,
        Self::AlreadyVoted,
        Self::ExplicitAnswerRequired,
        Self::AnswerRefused,
        Self::ActorNotAllowed,
        Self::UnexpectedEntities,
        Self::IdentityScopeField,
        Self::BodyTooLarge,
        Self::ResultTooLarge,
        Self::UnsupportedMediaType,
        Self::CorruptRecord,
        Self::Internal,
        Self::DeploymentError,
        Self::StoreUnavailable,
        Self::NotReady,
        Self::TooManyConnections,
    ];

    /// The stable snake_case code.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Unauthorized => "unauthorized",
            Self::MissingCapability => "missing_capability",
            Self::InvalidBody => "invalid_body",
            Self::UnknownProvider => "unknown_provider",
            Self::UnknownScopeField => "unknown_scope_field",
            Self::InvalidScope => "invalid_scope",
            Self::MissingScope => "missing_scope",
            Self::InvalidIdempotencyKey => "invalid_idempotency_key",
            Self::IdempotencyKeyInFlight => "idempotency_key_in_flight",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
            Self::InvalidOperationKey => "invalid_operation_key",
            Self::InvalidHolder => "invalid_holder",
            Self::InvalidResult => "invalid_result",
            Self::InvalidQuery => "invalid_query",
            Self::InvalidPath => "invalid_path",
            Self::InvalidRequest => "invalid_request",
            Self::UnsupportedListing => "unsupported_listing",
            Self::NotFound => "not_found",
            Self::ResourceNotFound => "resource_not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::RequestTimeout => "request_timeout",
            Self::LeaseExpired => "lease_expired",
            Self::StaleHolder => "stale_holder",
            Self::NotStuck => "not_stuck",
            Self::NotPending => "not_pending",
            Self::SelfApproval => "self_approval",
            Self::AlreadyVoted => "already_voted",
            Self::ExplicitAnswerRequired => "explicit_answer_required",
            Self::AnswerRefused => "answer_refused",
            Self::ActorNotAllowed => "actor_not_allowed",
            Self::UnexpectedEntities => "unexpected_entities",
            Self::IdentityScopeField => "identity_scope_field",
            Self::BodyTooLarge => "body_too_large",
            Self::ResultTooLarge => "result_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::CorruptRecord => "corrupt_record",
            Self::Internal => "internal",
            Self::DeploymentError => "deployment_error",
            Self::StoreUnavailable => "store_unavailable",
            Self::NotReady => "not_ready",
            Self::TooManyConnections => "too_many_connections",
        }
    }

    /// The status a problem of this code is sent with.
    pub const fn status(self) -> StatusCode {
        match self {
            Self::InvalidIdempotencyKey
            | Self::InvalidOperationKey
            | Self::InvalidQuery
            | Self::InvalidPath
            | Self::InvalidRequest
            | Self::UnsupportedListing => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::MissingCapability | Self::ActorNotAllowed => StatusCode::FORBIDDEN,
            Self::NotFound | Self::ResourceNotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::IdempotencyKeyInFlight
            | Self::LeaseExpired
            | Self::StaleHolder
            | Self::NotStuck
            | Self::NotPending
            | Self::SelfApproval
            | Self::AlreadyVoted
            | Self::ExplicitAnswerRequired => StatusCode::CONFLICT,
            Self::BodyTooLarge | Self::ResultTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::AnswerRefused
            | Self::InvalidBody
            | Self::UnknownProvider
            | Self::UnknownScopeField
            | Self::InvalidScope
            | Self::MissingScope
            | Self::UnexpectedEntities
            | Self::IdentityScopeField
            | Self::IdempotencyKeyReused
            | Self::InvalidHolder
            | Self::InvalidResult => StatusCode::UNPROCESSABLE_ENTITY,
            Self::CorruptRecord | Self::Internal | Self::DeploymentError => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            Self::StoreUnavailable | Self::NotReady | Self::TooManyConnections => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }

    /// The problem type's title: short, the same for every occurrence
    /// (RFC 9457 §3.1.3); the occurrence's specifics go in `detail`.
    pub const fn title(self) -> &'static str {
        match self {
            Self::Unauthorized => "Unauthorized",
            Self::MissingCapability => "Missing capability",
            Self::InvalidBody => "Invalid request body",
            Self::UnknownProvider => "Unknown provider",
            Self::UnknownScopeField => "Unknown scope field",
            Self::InvalidScope => "Invalid scope value",
            Self::MissingScope => "Missing scope",
            Self::InvalidIdempotencyKey => "Invalid Idempotency-Key",
            Self::IdempotencyKeyInFlight => "Idempotency-Key in flight",
            Self::IdempotencyKeyReused => "Idempotency-Key reused",
            Self::InvalidOperationKey => "Invalid operation key",
            Self::InvalidHolder => "Invalid holder token",
            Self::InvalidResult => "Invalid result",
            Self::InvalidQuery => "Invalid query string",
            Self::InvalidPath => "Invalid path parameter",
            Self::InvalidRequest => "Invalid request",
            Self::UnsupportedListing => "Unsupported listing",
            Self::NotFound => "Not found",
            Self::ResourceNotFound => "Resource not found",
            Self::MethodNotAllowed => "Method not allowed",
            Self::RequestTimeout => "Request timeout",
            Self::LeaseExpired => "Lease expired",
            Self::StaleHolder => "Stale holder token",
            Self::NotStuck => "Claim not stuck",
            Self::NotPending => "Item not pending",
            Self::SelfApproval => "Own proposal",
            Self::AlreadyVoted => "Already voted",
            Self::ExplicitAnswerRequired => "Explicit answer required",
            Self::AnswerRefused => "Answer refused",
            Self::ActorNotAllowed => "Actor not allowed",
            Self::UnexpectedEntities => "Unexpected entities",
            Self::IdentityScopeField => "Scope field from the identity",
            Self::BodyTooLarge => "Request body too large",
            Self::ResultTooLarge => "Result too large",
            Self::UnsupportedMediaType => "Unsupported media type",
            Self::CorruptRecord => "Corrupt record",
            Self::Internal => "Internal error",
            Self::DeploymentError => "Deployment error",
            Self::StoreUnavailable => "Store unavailable",
            Self::NotReady => "Not ready",
            Self::TooManyConnections => "Too many connections",
        }
    }

    /// The problem type URI: [`PROBLEM_TYPE_BASE`] followed by the code.
    pub fn type_uri(self) -> String {
        format!("{PROBLEM_TYPE_BASE}{}", self.as_str())
    }
}

/// An error answer as sent (RFC 9457 problem details, with toolgate's
/// stable `code` as an extension member). Closed in the OpenAPI document
/// (`deny_unknown_fields`): these are all the members a problem has.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Problem {
    /// The problem type: `https://toolgate.dev/problems/<code>`.
    #[serde(rename = "type")]
    #[schema(example = "https://toolgate.dev/problems/unauthorized")]
    pub type_uri: String,
    /// The problem type's short summary, the same for every occurrence.
    pub title: String,
    /// The HTTP status, repeated for clients that lose it.
    pub status: u16,
    /// What went wrong this time.
    pub detail: String,
    /// The resource the problem is about (a path relative to the sidecar),
    /// where there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The stable code (`docs/error-codes.md`).
    pub code: ProblemCode,
    /// `not_stuck` only: the claim as it is now, if it exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim: Option<ClaimView>,
}

/// A request error with its code, status and detail.
#[derive(Debug, Clone)]
pub struct ApiError {
    code: ProblemCode,
    status: StatusCode,
    detail: String,
    instance: Option<String>,
    // Boxed: rare, and it would make every `Result<_, ApiError>` large.
    claim: Option<Box<ClaimView>>,
    /// The tool a refused proposal named, for its audit entry; never sent.
    tool: Option<Box<str>>,
}

impl ApiError {
    /// A request error of `code`, sent with the code's status.
    pub fn new(code: ProblemCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            status: code.status(),
            detail: detail.into(),
            instance: None,
            claim: None,
            tool: None,
        }
    }

    /// Notes the tool the refused proposal named (its audit entry keeps
    /// it; the problem does not show it).
    pub(crate) fn for_tool(mut self, tool: &str) -> Self {
        self.tool = Some(tool.into());
        self
    }

    /// The tool the refused proposal named, if noted.
    pub(crate) fn tool(&self) -> Option<&str> {
        self.tool.as_deref()
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stable code.
    pub fn code(&self) -> ProblemCode {
        self.code
    }

    /// Names the resource the problem is about.
    pub(crate) fn at(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }

    /// Attaches the claim (`not_stuck`).
    pub(crate) fn with_claim(mut self, claim: Option<ClaimView>) -> Self {
        self.claim = claim.map(Box::new);
        self
    }

    /// The `401` every protected route answers without a valid key.
    pub fn unauthorized() -> Self {
        Self::new(
            ProblemCode::Unauthorized,
            "a valid API key is required: Authorization: Bearer <key>",
        )
    }

    /// A bearer token of the token's shape that no issuer of the
    /// deployment verifies (`401 unauthorized`, the reason in the detail).
    pub fn invalid_token(e: &toolgate_service::TokenError) -> Self {
        Self::new(
            ProblemCode::Unauthorized,
            format!("the bearer token is refused: {e}"),
        )
    }

    pub(crate) fn missing_capability(capability: &str) -> Self {
        Self::new(
            ProblemCode::MissingCapability,
            format!("this key's principal lacks the capability {capability}"),
        )
    }

    pub(crate) fn not_found(detail: impl Into<String>) -> Self {
        Self::new(ProblemCode::NotFound, detail)
    }

    /// `503 store_unavailable` with a generic detail: what failed (a SQL
    /// error naming a table, a host, a path) goes to the operator's log,
    /// never to the caller.
    pub(crate) fn unavailable(internal: impl std::fmt::Display) -> Self {
        tracing::warn!(error = %internal, "a store or source did not answer");
        Self::new(ProblemCode::StoreUnavailable, UNAVAILABLE_DETAIL)
    }

    /// `404 resource_not_found`: the state source found no resource for the
    /// request's scope. The request's fault, not an outage: logged at info,
    /// and the source's words (which table, which host) stay in the log.
    pub(crate) fn resource_not_found(internal: impl std::fmt::Display) -> Self {
        tracing::info!(error = %internal, "the request's resource does not exist");
        Self::new(
            ProblemCode::ResourceNotFound,
            "the state source has no resource for this scope; nothing was decided or written",
        )
    }

    /// `500 deployment_error` with a generic detail; the specifics (which
    /// query, which column) go to the operator's log.
    pub(crate) fn deployment(internal: impl std::fmt::Display) -> Self {
        tracing::error!(error = %internal, "the deployment cannot answer this request");
        Self::new(ProblemCode::DeploymentError, DEPLOYMENT_DETAIL)
    }

    /// The problem document.
    pub fn problem(&self) -> Problem {
        Problem {
            type_uri: self.code.type_uri(),
            title: self.code.title().to_owned(),
            status: self.status.as_u16(),
            detail: self.detail.clone(),
            instance: self.instance.clone(),
            code: self.code,
            claim: self.claim.as_deref().cloned(),
        }
    }

    /// The problem document as bytes.
    pub(crate) fn body(&self) -> Vec<u8> {
        // A struct of strings and numbers: serialising it cannot fail.
        serde_json::to_vec(&self.problem()).unwrap_or_default()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code.as_str(), detail = %self.detail, "request failed");
        } else {
            tracing::debug!(code = self.code.as_str(), status = %self.status, "request refused");
        }
        let mut response = (self.status, self.body()).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"toolgate\""),
            );
        }
        response
    }
}

/// The router's fallback: a path no route serves.
pub(crate) async fn fallback(uri: Uri) -> ApiError {
    ApiError::not_found(format!("no endpoint at {}", uri.path()))
}

/// A route's answer to a method it does not serve; axum adds the `Allow`
/// header listing the ones it does.
pub(crate) async fn method_not_allowed(method: axum::http::Method, uri: Uri) -> ApiError {
    ApiError::new(
        ProblemCode::MethodNotAllowed,
        format!("{} does not accept {method}", uri.path()),
    )
}

/// Longest text body of a layer's or extractor's error kept as `detail`.
const MAX_PLAIN_DETAIL: usize = 4096;

/// What [`plain_errors_as_problems`] needs to word its details.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub body_limit: usize,
    pub request_timeout: Duration,
}

/// Turns the error answers that are not ours into problems: the 408 of the
/// deadline layer, the 413 of the body limit (by `Content-Length` in the
/// layer, or while streaming in the body extractor), and the plain-text
/// rejections of axum's extractors (a form of the wrong media type, say).
///
/// An answer is left alone when it is not an error, or is JSON (a decision,
/// or already a problem), or is a page for a browser (the reviewer page's
/// sign-in form). Headers other than the body's own are kept (`Allow`,
/// `x-request-id`).
pub(crate) async fn plain_errors_as_problems(limits: Limits, response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let media = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if media.starts_with("application/json")
        || media.starts_with(PROBLEM_JSON)
        || media.starts_with("text/html")
    {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_PLAIN_DETAIL)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let (code, detail) = match status {
        StatusCode::REQUEST_TIMEOUT => (
            ProblemCode::RequestTimeout,
            format!(
                "the request did not finish within {} ms; a decision that had started still \
                 runs to its end: send the same proposal again to read its outcome",
                limits.request_timeout.as_millis()
            ),
        ),
        StatusCode::PAYLOAD_TOO_LARGE => (
            ProblemCode::BodyTooLarge,
            format!(
                "the request body is over the limit of {} bytes",
                limits.body_limit
            ),
        ),
        StatusCode::NOT_FOUND => (ProblemCode::NotFound, text),
        StatusCode::METHOD_NOT_ALLOWED => (ProblemCode::MethodNotAllowed, text),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (ProblemCode::UnsupportedMediaType, text),
        StatusCode::UNPROCESSABLE_ENTITY => (ProblemCode::InvalidBody, text),
        s if s.is_server_error() => (ProblemCode::Internal, text),
        _ => (ProblemCode::InvalidRequest, text),
    };
    let detail = if detail.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("request refused")
            .to_owned()
    } else {
        detail
    };
    let mut error = ApiError::new(code, detail);
    // The status the layer chose stands (an `invalid_request` may be any
    // 4xx, an `internal` any 5xx); the code names the kind.
    error.status = status;
    let mut answer = error.into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            answer.headers_mut().append(name.clone(), value.clone());
        }
    }
    answer
}

#[cfg(test)]
mod tests {
    use axum::body::Body;

    use super::*;

    #[test]
    fn codes_serialise_as_their_stable_spelling_and_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for code in ProblemCode::ALL {
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::Value::String(code.as_str().to_owned())
            );
            assert!(seen.insert(code.as_str()), "{} twice", code.as_str());
            assert!(code.status().is_client_error() || code.status().is_server_error());
        }
    }

    #[test]
    fn a_problem_carries_type_title_status_detail_and_code() {
        let e = ApiError::new(ProblemCode::StaleHolder, "nothing was written").at("/v1/claims/ab");
        let p = serde_json::to_value(e.problem()).unwrap();
        assert_eq!(p["type"], "https://toolgate.dev/problems/stale_holder");
        assert_eq!(p["title"], "Stale holder token");
        assert_eq!(p["status"], 409);
        assert_eq!(p["detail"], "nothing was written");
        assert_eq!(p["instance"], "/v1/claims/ab");
        assert_eq!(p["code"], "stale_holder");
        assert!(p.get("claim").is_none());
    }

    #[tokio::test]
    #[expect(
        clippy::disallowed_methods,
        reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
    )]
    async fn layer_errors_become_problems_and_keep_their_headers() {
        let limits = Limits {
            body_limit: 10,
            request_timeout: Duration::from_millis(1500),
        };
        let mut plain = Response::new(Body::empty());
        *plain.status_mut() = StatusCode::REQUEST_TIMEOUT;
        plain
            .headers_mut()
            .insert("x-request-id", HeaderValue::from_static("r-1"));
        let answer = plain_errors_as_problems(limits, plain).await;
        assert_eq!(answer.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(answer.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        assert_eq!(answer.headers()["x-request-id"], "r-1");
        let body = axum::body::to_bytes(answer.into_body(), 10_000)
            .await
            .unwrap();
        let p: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(p["code"], "request_timeout");
        assert!(p["detail"].as_str().unwrap().contains("1500 ms"), "{p}");
        // A decision (JSON) passes through untouched.
        let mut decision = Response::new(Body::from("{\"outcome\":\"rejected\"}"));
        *decision.status_mut() = StatusCode::UNPROCESSABLE_ENTITY;
        decision.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let same = plain_errors_as_problems(limits, decision).await;
        assert_eq!(same.headers()[header::CONTENT_TYPE], "application/json");
    }
}
