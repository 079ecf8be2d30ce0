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
use toolgate::decode::{Limits, decode_strict};
use toolgate_service::{Issuers, KeyRing};

use crate::gateway::Gateway;
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
    /// The deployment's public URL (`https://gate.example`), behind any
    /// TLS-terminating proxy: with token issuers, `/mcp` is an OAuth
    /// protected resource named from it, never from a request's `Host`.
    pub public_url: Option<String>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            body_limit: 1 << 20,
            public_url: None,
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
    let service = StreamableHttpService::new(
        move || Ok(gateway.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let limit = settings.body_limit;
    let resource = protected_resource(&issuers, settings.public_url.as_deref());
    let metadata_url = resource.as_ref().map(|(_, url)| url.clone());
    let router = Router::new()
        .nest_service(MCP_PATH, service)
        .layer(from_fn(move |req: Request, next: Next| {
            strict_body(limit, req, next)
        }))
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
    if callers.keys.lookup(token).is_some() {
        return next.run(req).await;
    }
    if callers.issuers.is_empty() || !Issuers::looks_like_token(token) {
        return refuse();
    }
    match callers.issuers.verify(token).await {
        Ok(principal) => {
            req.extensions_mut().insert(TokenCaller(principal));
            next.run(req).await
        }
        Err(e) => {
            tracing::info!(reason = e.code(), "a bearer token refused on /mcp");
            refuse()
        }
    }
}

/// The HTTP door's `401` problem (docs/error-codes.md, `unauthorized`), so
/// a missing key reads the same on `/mcp` as on `/v1`; with token issuers,
/// `WWW-Authenticate` points at the resource metadata (RFC 9728 §5.1),
/// where an MCP host starts its OAuth discovery.
fn unauthorized(metadata_url: Option<&str>) -> Response {
    let challenge = metadata_url.map_or_else(
        || "Bearer".to_owned(),
        |url| format!("Bearer resource_metadata=\"{url}\""),
    );
    let problem = serde_json::json!({
        "type": "https://toolgate.dev/problems/unauthorized",
        "title": "Unauthorized",
        "status": 401,
        "detail": "a valid API key is required: Authorization: Bearer <key>",
        "code": "unauthorized",
    });
    (
        StatusCode::UNAUTHORIZED,
        [
            (header::CONTENT_TYPE, "application/problem+json"),
            (header::WWW_AUTHENTICATE, challenge.as_str()),
        ],
        problem.to_string(),
    )
        .into_response()
}

async fn strict_body(limit: usize, req: Request, next: Next) -> Response {
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => {
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is over {limit} bytes"),
            )
                .into_response();
        }
    };
    if let Err(r) = decode_strict(&bytes, &Limits::provider_body().with_max_bytes(limit)) {
        let error = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {
                "code": -32700,
                "message": format!("parse error: {r}"),
                "data": {"code": r.code().as_str(), "pointer": r.pointer()},
            },
        });
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            error.to_string(),
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
