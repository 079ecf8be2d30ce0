//! `/mcp` over Streamable HTTP: rmcp's `StreamableHttpService` behind two
//! layers of toolgate's own.
//!
//! 1. **Authentication.** A request without a valid API key gets the
//!    sidecar's `401` problem before rmcp reads it, on every method (the
//!    key is checked again by the handler for each call).
//! 2. **Strict decoding.** rmcp parses JSON-RPC with serde_json, which keeps
//!    the last of two duplicate keys and rounds big integers. Each POST body
//!    is first read within the body limit and run through the core's strict
//!    decoder; a body it refuses is answered with a JSON-RPC parse error
//!    (`-32700`, HTTP 400) and never reaches rmcp, so no model-written
//!    argument can mean two things.
//! 3. **Sessions** ([`crate::sessions`]): each bound to the caller that
//!    opened it, capped per caller and in total, closed when idle.
//! 4. **Browser origins.** A request that carries an `Origin` is served
//!    only when it is one of [`HttpSettings::allowed_origins`] (rmcp's
//!    check, always on): a page on another site cannot drive a gateway
//!    its visitor can reach. Clients that send no `Origin` (SDKs, hosts)
//!    are not affected.
//! 5. **Errors are JSON-RPC.** Whatever the transport refuses (a batch, a
//!    media type, a body over the limit, a foreign origin) is answered
//!    with its status and a JSON-RPC error body, never `text/plain`.
//! 6. **Step-up.** A signed token's `tools/call` of a served tool whose
//!    capability the token does not carry is `403` with
//!    `WWW-Authenticate: Bearer error="insufficient_scope", scope="…"`
//!    naming the scopes that grant it (the MCP authorization spec's
//!    step-up): the host can ask its user for more. A key without the
//!    capability is answered as before, the tool unknown, since a key
//!    cannot be stepped up.
//!
//! The router is mountable: `Router::new().merge(toolgate_mcp::http::router(…))`
//! next to the sidecar's routes.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value;
use toolgate::decode::{Limits, decode_strict};
use toolgate_service::{Issuers, KeyRing};

use crate::gateway::Gateway;
use crate::sessions::{RpcMethod, SessionLimits, SessionOwner, Sessions};
use crate::wire::Decide;

/// The path the gateway is served at.
pub const MCP_PATH: &str = "/mcp";

/// HTTP settings of `/mcp`.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Host names (or `host:port`) the `Host` header may carry: rmcp refuses
    /// any other (DNS-rebinding protection). Loopback names by default.
    pub allowed_hosts: Vec<String>,
    /// Largest request body, in bytes.
    pub body_limit: usize,
    /// How long a POST body may take to arrive in full (`408` after it): a
    /// body that never ends holds no connection for longer.
    pub body_timeout: std::time::Duration,
    /// The deployment's public URL (`https://gate.example`), behind any
    /// TLS-terminating proxy: with token issuers, `/mcp` is an OAuth
    /// protected resource named from it, never from a request's `Host`.
    pub public_url: Option<String>,
    /// How many 2025-11-25 sessions, for how long.
    pub sessions: SessionLimits,
    /// Browser origins (`https://app.example.com`, `http://localhost:*`)
    /// allowed to call: a request with any other `Origin` is `403`. Empty
    /// refuses every request that carries one.
    pub allowed_origins: Vec<String>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            body_limit: 1 << 20,
            body_timeout: std::time::Duration::from_secs(10),
            public_url: None,
            sessions: SessionLimits::default(),
            allowed_origins: Vec::new(),
        }
    }
}

/// Where RFC 9728 puts the metadata of a resource at `/mcp`: the
/// well-known path with the resource's path appended (§3.1), and the bare
/// one, which clients of the 2025-06-18 revision ask first.
pub const RESOURCE_METADATA_PATHS: [&str; 2] = [
    "/.well-known/oauth-protected-resource/mcp",
    "/.well-known/oauth-protected-resource",
];

/// `/mcp` as an OAuth 2.0 protected resource (RFC 9728): its identifier,
/// the authorization servers whose tokens it takes, and the scopes they
/// map to capabilities. Only for a deployment with issuers and a public
/// URL.
fn protected_resource(issuers: &Issuers, public_url: Option<&str>) -> Option<(String, String)> {
    let base = public_url?.trim_end_matches('/');
    if issuers.is_empty() {
        return None;
    }
    let metadata = serde_json::json!({
        "resource": format!("{base}{MCP_PATH}"),
        "authorization_servers": issuers.identifiers().collect::<Vec<_>>(),
        "bearer_methods_supported": ["header"],
        "scopes_supported": issuers.scopes(),
    });
    Some((
        metadata.to_string(),
        format!("{base}{}", RESOURCE_METADATA_PATHS[0]),
    ))
}

/// `/mcp` for `gateway`, with `keys` checked before rmcp sees a request.
pub fn router<D: Decide>(
    gateway: Gateway<D>,
    keys: KeyRing,
    issuers: Issuers,
    settings: &HttpSettings,
) -> Router {
    let mut config = StreamableHttpServerConfig::default();
    // Sessions for clients below 2026-07-28 (the TypeScript SDK 1.32);
    // 2026-07-28 requests are served statelessly whatever this says.
    config.legacy_session_mode = true;
    config.allowed_hosts.clone_from(&settings.allowed_hosts);
    config.max_request_body_bytes = settings.body_limit;
    let config = config
        .with_allowed_origins(settings.allowed_origins.iter().cloned())
        .enforce_origin_validation();
    let catalog_of = gateway.clone();
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(settings.sessions.idle);
    let manager = Arc::new(manager);
    let sessions = Arc::new(Sessions::new(settings.sessions, Arc::clone(&manager)));
    let service = StreamableHttpService::new(move || Ok(gateway.clone()), manager, config);
    let limit = settings.body_limit;
    let resource = protected_resource(&issuers, settings.public_url.as_deref());
    let metadata_url = resource.as_ref().map(|(_, url)| url.clone());
    let body = Arc::new(BodyCheck {
        limit,
        timeout: settings.body_timeout,
        capability_of: Box::new(move |tool| catalog_of.capability_of(tool)),
        issuers: issuers.clone(),
        metadata_url: metadata_url.clone(),
    });
    let router = Router::new()
        .nest_service(MCP_PATH, service)
        .layer(from_fn_with_state(sessions, crate::sessions::guard))
        .layer(from_fn_with_state(body, strict_body))
        .layer(from_fn(json_rpc_errors))
        .layer(from_fn_with_state(
            Arc::new(Callers {
                keys,
                issuers,
                metadata_url,
            }),
            authenticate,
        ));
    // Added after the layers: the metadata is public, as RFC 9728 means.
    match resource {
        Some((document, _)) => RESOURCE_METADATA_PATHS.iter().fold(router, |r, path| {
            let document = document.clone();
            r.route(
                path,
                axum::routing::get(move || async move {
                    (
                        [(header::CONTENT_TYPE, "application/json")],
                        document.clone(),
                    )
                }),
            )
        }),
        None => router,
    }
}

/// Who may call `/mcp`, and where a caller without a credential learns how
/// to get one.
struct Callers {
    keys: KeyRing,
    issuers: Issuers,
    /// The resource metadata's URL, for the `401`'s `WWW-Authenticate`.
    metadata_url: Option<String>,
}

/// The principal a signed token authenticated, put on the request by
/// [`authenticate`] for the handler ([`crate::Gateway`]) to read: rmcp hands
/// the handler the request's parts, extensions included.
#[derive(Debug, Clone)]
pub struct TokenCaller(pub toolgate::pipeline::Principal);

/// The token of the request's `Authorization: Bearer` header, read as
/// every door reads it ([`toolgate_service::bearer_token`]).
pub(crate) fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    toolgate_service::bearer_token(headers.get(header::AUTHORIZATION)?.to_str().ok()?)
}

async fn authenticate(
    State(callers): State<Arc<Callers>>,
    mut req: Request,
    next: Next,
) -> Response {
    let refuse = || unauthorized(callers.metadata_url.as_deref());
    let Some(token) = bearer(req.headers()) else {
        return refuse();
    };
    if let Some(key) = callers.keys.lookup(token) {
        let owner = SessionOwner(format!("key:{}", key.principal.id()));
        req.extensions_mut().insert(owner);
        return next.run(req).await;
    }
    if callers.issuers.is_empty() || !Issuers::looks_like_token(token) {
        return refuse();
    }
    match callers.issuers.verify(token).await {
        Ok(principal) => {
            let owner = SessionOwner(format!("person:{}", principal.id()));
            req.extensions_mut().insert(owner);
            req.extensions_mut().insert(TokenCaller(principal));
            next.run(req).await
        }
        Err(e) => {
            tracing::info!(reason = e.code(), "a bearer token refused on /mcp");
            unauthorized_token(callers.metadata_url.as_deref(), &e)
        }
    }
}

/// The HTTP door's `401` problem (docs/error-codes.md, `unauthorized`), so
/// a missing key reads the same on `/mcp` as on `/v1`; with token issuers,
/// `WWW-Authenticate` points at the resource metadata (RFC 9728 §5.1),
/// where an MCP host starts its OAuth discovery.
fn unauthorized(metadata_url: Option<&str>) -> Response {
    problem(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "a valid API key is required: Authorization: Bearer <key>",
        &challenge(&[], metadata_url),
    )
}

/// A signed token refused: the `401` of [`unauthorized`], with RFC 6750's
/// `error="invalid_token"` and the reason's stable code
/// ([`toolgate_service::TokenError::code`]) as its description and in the
/// detail, so a host's log says which check failed.
fn unauthorized_token(metadata_url: Option<&str>, e: &toolgate_service::TokenError) -> Response {
    problem(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        &format!("the bearer token is refused: {e}"),
        &challenge(
            &[("error", "invalid_token"), ("error_description", e.code())],
            metadata_url,
        ),
    )
}

/// `403 insufficient_scope`: the token is valid, but no scope it carries
/// grants `capability`; `scopes` are the ones that would (RFC 6750 §3.1).
fn insufficient_scope(metadata_url: Option<&str>, capability: &str, scopes: &[&str]) -> Response {
    let scope = scopes.join(" ");
    let mut params = vec![("error", "insufficient_scope")];
    if !scope.is_empty() {
        params.push(("scope", scope.as_str()));
    }
    let detail = if scope.is_empty() {
        format!("the token lacks the capability {capability}, which no scope grants")
    } else {
        format!("the token lacks the capability {capability}: it needs the scope {scope}")
    };
    problem(
        StatusCode::FORBIDDEN,
        "insufficient_scope",
        &detail,
        &challenge(&params, metadata_url),
    )
}

/// A `Bearer` challenge: `params` in order, then the resource metadata's
/// URL. Every value here is the server's own (a code, a configured scope or
/// URL), never a caller's text.
fn challenge(params: &[(&str, &str)], metadata_url: Option<&str>) -> String {
    let mut parts: Vec<String> = params.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    if let Some(url) = metadata_url {
        parts.push(format!("resource_metadata=\"{url}\""));
    }
    if parts.is_empty() {
        "Bearer".to_owned()
    } else {
        format!("Bearer {}", parts.join(", "))
    }
}

/// A problem document (docs/error-codes.md) with its challenge.
fn problem(status: StatusCode, code: &str, detail: &str, challenge: &str) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    let body = serde_json::json!({
        "type": format!("https://toolgate.dev/problems/{code}"),
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
        "code": code,
    });
    (
        status,
        [
            (header::CONTENT_TYPE, "application/problem+json"),
            (header::WWW_AUTHENTICATE, challenge),
        ],
        body.to_string(),
    )
        .into_response()
}

/// A served tool's capability, by name (the gateway's current catalog).
type CapabilityOf = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// What the body layer needs: the limit, and for step-up the served tools'
/// capabilities and the scopes that grant them.
struct BodyCheck {
    limit: usize,
    timeout: std::time::Duration,
    capability_of: CapabilityOf,
    issuers: Issuers,
    metadata_url: Option<String>,
}

impl BodyCheck {
    /// The `403` for a token's `tools/call` of a served tool it lacks the
    /// capability for, if this body is one.
    fn step_up(&self, caller: &TokenCaller, body: &serde_json::Value) -> Option<Response> {
        if body.get("method")?.as_str()? != "tools/call" {
            return None;
        }
        let tool = body.get("params")?.get("name")?.as_str()?;
        let capability = (self.capability_of)(tool)?;
        if caller.0.has_capability(&capability) {
            return None;
        }
        let scopes = self.issuers.scopes_granting(&capability);
        Some(insufficient_scope(
            self.metadata_url.as_deref(),
            &capability,
            &scopes,
        ))
    }
}

/// A JSON-RPC error with no request id (the transport's own, or one for a
/// message that could not be read), as its JSON text.
pub(crate) fn json_rpc_error_body(code: i32, message: &str, data: Option<Value>) -> String {
    let mut error = serde_json::json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    serde_json::json!({"jsonrpc": "2.0", "id": null, "error": error}).to_string()
}

/// [`json_rpc_error_body`] as a response with `status`.
pub(crate) fn json_rpc_error(
    status: StatusCode,
    code: i32,
    message: &str,
    data: Option<Value>,
) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json_rpc_error_body(code, message, data),
    )
        .into_response()
}

/// Longest transport error text kept, in bytes.
const MAX_ERROR_TEXT: usize = 4096;

/// A transport error that is not JSON (rmcp answers `text/plain` for a
/// batch, a media type, a foreign origin; this crate for a body over the
/// limit) as a JSON-RPC error with the same status: a client reads every
/// `/mcp` error the same way.
async fn json_rpc_errors(req: Request, next: Next) -> Response {
    let response = next.run(req).await;
    let status = response.status();
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.contains("json") || t.starts_with("text/event-stream"));
    if !(status.is_client_error() || status.is_server_error()) || json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = match to_bytes(body, MAX_ERROR_TEXT).await {
        Ok(b) if !b.is_empty() => String::from_utf8_lossy(&b).into_owned(),
        _ => status.canonical_reason().unwrap_or("error").to_owned(),
    };
    // -32600 (invalid request) for what the client sent, -32603 for the
    // server's own failure.
    let code = if status.is_client_error() {
        -32600
    } else {
        -32603
    };
    let body = json_rpc_error_body(code, &text, None);
    parts.headers.insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}

async fn strict_body(State(check): State<Arc<BodyCheck>>, req: Request, next: Next) -> Response {
    let limit = check.limit;
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match tokio::time::timeout(check.timeout, to_bytes(body, limit)).await {
        Ok(Ok(b)) => b,
        // Answered as JSON-RPC by the layer around this one.
        Err(_) => {
            return (
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} ms",
                    check.timeout.as_millis()
                ),
            )
                .into_response();
        }
        Ok(Err(_)) => {
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is over {limit} bytes"),
            )
                .into_response();
        }
    };
    let decoded = decode_strict(&bytes, &Limits::provider_body().with_max_bytes(limit));
    let mut parts = parts;
    if let Ok(body) = &decoded {
        let method = body
            .get("method")
            .and_then(|m| m.as_str())
            .map(str::to_owned);
        parts.extensions.insert(RpcMethod(method));
    }
    if let Ok(body) = &decoded
        && let Some(caller) = parts.extensions.get::<TokenCaller>()
        && let Some(refused) = check.step_up(caller, body)
    {
        return refused;
    }
    if let Err(r) = decoded {
        let data = serde_json::json!({"code": r.code().as_str(), "pointer": r.pointer()});
        return json_rpc_error(
            StatusCode::BAD_REQUEST,
            -32700,
            &format!("parse error: {r}"),
            Some(data),
        );
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
