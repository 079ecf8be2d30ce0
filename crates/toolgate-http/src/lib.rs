//! # toolgate-http
//!
//! The HTTP sidecar: [`router`] turns an [`AppState`] into an axum
//! [`Router`] that an application can serve on its own or nest inside its
//! own router. This is the only crate that knows HTTP status codes and wire
//! formats; the decisions themselves come from `toolgate::pipeline::decide`.
//!
//! ## What the router serves
//!
//! | endpoint | who |
//! |---|---|
//! | `GET /healthz`, `GET /readyz`, `GET /openapi.json` | anyone (no key) |
//! | `POST /v1/decisions` | any API key; the principal is the key's |
//! | `POST /v1/claims/{key}/complete` | the proposer of a `permitted` decision, with its holder token |
//! | `GET /v1/claims?stuck=true`, `POST /v1/claims/{key}/reconcile` | keys with `toolgate:operate` |
//! | `GET /v1/review/items`, `POST /v1/review/items/{id}/approve\|deny` | keys with `toolgate:review` |
//! | `GET /review` (HTML) | a reviewer session (login form, cookie) |
//! | `GET /metrics` | keys with `toolgate:metrics` |
//!
//! A missing or unknown key is `401` everywhere but the probes and the
//! OpenAPI document (which holds no secret). Identity
//! never comes from a request body: the principal, its capabilities and its
//! execution mode are the configured key's.
//!
//! ## Statuses (docs/design.md §2)
//!
//! | outcome | status |
//! |---|---|
//! | `answer`, `abstain`, `replayed`, `permitted`, `refused`, `truncated`, `content_filtered` | 200 |
//! | `executed` | 201 |
//! | `pending_approval` | 202 |
//! | `forbidden` | 403 |
//! | `in_flight`, `state_changed`, `needs_reconciliation` | 409 |
//! | `conflict`, `rejected` | 422 |
//!
//! Request errors (not decisions) are RFC 9457 problems,
//! `application/problem+json` with `type`, `title`, `status`, `detail`,
//! `instance` where there is a resource, and the stable `code` listed in
//! `docs/error-codes.md` ("HTTP request errors"). That includes the 404 of
//! an unknown path, the 405 of a wrong method, the deadline's 408 and the
//! body limit's 413. The OpenAPI document is generated from the handlers
//! ([`openapi_document`], committed as `docs/openapi.json`).
//!
//! ## Robustness
//!
//! Every request body is bounded before it is read ([`Settings::body_limit`],
//! `413`); every request has a deadline ([`Settings::request_timeout`],
//! `408`). A decision that has started runs to its end on its own task even
//! if the client goes away or the deadline passes, so a claim is never left
//! half-written by a dropped connection; [`AppState::drain`] waits for those
//! tasks at shutdown.

mod access;
mod auth;
mod clock;
pub mod dto;
mod error;
mod idempotency;
mod metrics;
mod openapi;
mod review;
mod routes;
mod state;

pub use access::{REQUEST_ID, RequestId, TRACEPARENT, TraceContext};
pub use auth::{
    ApiKey, ExecutionMode, KeyError, KeyRing, METRICS_CAPABILITY, OPERATE_CAPABILITY,
    REVIEW_CAPABILITY,
};
pub use error::{ApiError, PROBLEM_JSON, PROBLEM_TYPE_BASE, Problem, ProblemCode};
pub use openapi::{openapi_document, pretty as openapi_text};
pub use state::{AppState, Backends, Parts, Settings};

use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware::{from_fn_with_state, map_response};
use axum::{Extension, Router};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

/// The sidecar's routes with their body limit, deadline and request
/// logging. Embeddable: nest it under a prefix of an application's router.
pub fn router<P: Parts>(state: AppState<P>) -> Router {
    let settings = state.settings().clone();
    let access_state = state.clone();
    let limits = error::Limits {
        body_limit: settings.body_limit,
        request_timeout: settings.request_timeout,
    };
    let (routes, api) = routes::routes::<P>().split_for_parts();
    let document = openapi::ServedDocument::new(&openapi::finish(api));
    routes
        // Unknown paths and wrong methods get problems too (axum still
        // adds `Allow` to a 405).
        .fallback(error::fallback)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(Extension(document))
        .with_state(state)
        // A body over the limit is refused before it is read (413), by
        // Content-Length or while streaming; the extractor limit is the
        // same so the two agree.
        .layer(DefaultBodyLimit::max(settings.body_limit))
        .layer(RequestBodyLimitLayer::new(settings.body_limit))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            settings.request_timeout,
        ))
        // The layers' and extractors' own error answers (the 408 above, a
        // 413, a form of the wrong media type) as problems.
        .layer(map_response(move |r| {
            error::plain_errors_as_problems(limits, r)
        }))
        // Outermost, so the access log and the HTTP metrics see the status
        // the client got, the deadline's 408 and the limit's 413 included.
        .layer(from_fn_with_state(access_state, access::layer::<P>))
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets the
/// requests in progress finish and waits for every decision task of
/// `state` (a claim is never abandoned between claim and completion by a
/// shutdown). `grace` bounds the wait for idle keep-alive connections.
pub async fn serve<P: Parts>(
    listener: tokio::net::TcpListener,
    state: AppState<P>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let app = router(state.clone());
    // Histogram samples are folded into buckets on this timer, not only on
    // a scrape, so an unscraped server does not grow (docs/http-api.md).
    let upkeep_state = state.clone();
    let upkeep = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep_state.inner.metrics.upkeep();
        }
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let signal = async move {
        shutdown.await;
        tracing::info!("shutdown requested: finishing requests in progress");
        let _ = stop_tx.send(true);
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(signal);
    let mut stop_rx2 = stop_rx.clone();
    tokio::select! {
        r = server => r?,
        // Keep-alive connections that never send another request would
        // hold graceful shutdown open forever; after the grace period the
        // server future is dropped (requests already answered, decisions
        // still drained below).
        () = async move {
            let _ = stop_rx2.wait_for(|s| *s).await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!("grace period over: closing idle connections");
        }
    }
    drop(stop_rx);
    upkeep.abort();
    state.drain().await;
    tracing::info!("every decision in progress finished; exiting");
    Ok(())
}
