//! # toolgate-http
//!
//! The HTTP sidecar: [`router`] turns an [`AppState`] into an axum
//! [`Router`] that an application can serve on its own or nest inside its
//! own router. It is a door of [`toolgate_service::Service`]: it decodes
//! requests, asks the service, and maps what it answers to HTTP statuses
//! and wire bodies; the decisions themselves are the service's.
//!
//! ## What the router serves
//!
//! | endpoint | who |
//! |---|---|
//! | `GET /healthz`, `GET /readyz`, `GET /openapi.json` | anyone (no key) |
//! | `POST /v1/decisions` | any API key; the principal is the key's |
//! | `POST /v1/claims/{key}/complete` | the proposer of a `permitted` decision, with its holder token |
//! | `GET /v1/claims?stuck=true`, `POST /v1/claims/{key}/reconcile` | keys with `toolgate:operate` |
//! | `GET /v1/review/items`, `POST /v1/review/items/{id}/approve\|deny\|resolve\|dismiss` | keys with `toolgate:review` |
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

#![warn(missing_docs)]

mod access;
mod auth;
mod conn;
pub mod dto;
mod error;
mod idempotency;
mod openapi;
mod review;
mod routes;
mod state;

pub use access::{REQUEST_ID, RequestId, TRACEPARENT, TraceContext};
pub use auth::bearer;
pub use error::{ApiError, PROBLEM_JSON, PROBLEM_TYPE_BASE, Problem, ProblemCode};
pub use openapi::{openapi_document, pretty as openapi_text};
pub use state::{AppState, Settings};
pub use toolgate::pipeline::sent_reason;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{from_fn_with_state, map_response};
use axum::response::IntoResponse;
use axum::{Extension, Router};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tower::ServiceExt;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

/// The sidecar's routes with their body limit, deadline and request
/// logging. Embeddable: nest it under a prefix of an application's router.
pub fn router(state: AppState) -> Router {
    let settings = state.settings().clone();
    let access_state = state.clone();
    let limits = error::Limits {
        body_limit: settings.body_limit,
        request_timeout: settings.request_timeout,
    };
    let (routes, api) = routes::routes().split_for_parts();
    let mut doc = openapi::finish(api);
    openapi::name_scope_fields(&mut doc, state.policy(), state.service().scope_fields());
    let document = openapi::ServedDocument::new(&doc);
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
        .layer(from_fn_with_state(access_state, access::layer))
}

/// How often [`serve`] folds histogram samples into their buckets.
const UPKEEP_PERIOD: Duration = Duration::from_secs(5);

/// Runs `f` every `period` until the task is aborted.
fn every(period: Duration, f: impl Fn() + Send + 'static) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            f();
        }
    })
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets the
/// requests in progress finish and waits for every decision task of
/// `state` (a claim is never abandoned between claim and completion by a
/// shutdown). `grace` bounds the wait for idle keep-alive connections.
///
/// Each connection must send a request's headers within
/// [`Settings::header_read_timeout`] or it is closed. Connections are
/// admitted fairly (the `conn` module): at most
/// [`Settings::max_connections`], and [`Settings::max_connections_per_peer`]
/// from one IP; a connection past a limit takes the slot of the
/// longest-idle keep-alive connection it competes with; when none is idle,
/// [`Settings::probe_headroom`] more connections answer `/healthz` and
/// `/readyz` only; beyond that a connection gets `503
/// too_many_connections` and is closed. A connection ends after
/// [`Settings::max_requests_per_connection`] requests or
/// [`Settings::max_connection_age`]. So neither slow clients (slowloris)
/// nor idle keep-alive sockets hold the server: the probes answer, and each
/// connection's buffers are bounded by the body limit.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    serve_with(listener, state, Router::new(), shutdown, grace).await
}

/// [`serve`], with `beside` merged next to the sidecar's routes (the MCP
/// gateway's `/mcp`): on the same listener and connection limits, but
/// outside the sidecar's request deadline and body limit, which would end
/// a long-lived event stream; `beside` brings its own. Decisions it starts
/// through the same [`toolgate_service::Service`] are drained at shutdown
/// like the sidecar's.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    state: AppState,
    beside: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let settings = state.settings().clone();
    let app = router(state.clone()).merge(beside);
    // Histogram samples are folded into buckets on this timer, not only on
    // a scrape, so an unscraped server does not grow (docs/http-api.md).
    let upkeep_state = state.clone();
    let upkeep = every(UPKEEP_PERIOD, move || {
        upkeep_state.service().metrics().upkeep()
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let registry = Arc::new(conn::Registry::new(&settings));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors (EMFILE) or a connection reset before
                // it was taken: keep serving; pause so an exhausted
                // descriptor table does not spin the loop.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (id, conn) = match registry.admit(peer.ip()) {
            conn::Admission::Served(id, conn) => (id, conn),
            conn::Admission::Refused => {
                tokio::spawn(refuse(stream));
                continue;
            }
        };
        let app = app.clone();
        let registry = Arc::clone(&registry);
        let mut stop = stop_rx.clone();
        let settings = settings.clone();
        tokio::spawn(async move {
            serve_connection(stream, app, &conn, &settings, &mut stop).await;
            registry.leave(id);
        });
    }
    tracing::info!("shutdown requested: finishing requests in progress");
    drop(listener);
    let _ = stop_tx.send(true);
    registry.close_all();
    // Every connection leaves the registry when it closes. Keep-alive
    // connections that never send another request (or a request that
    // never finishes its headers) are not waited for past `grace`; the
    // decisions they started are still drained below.
    let deadline = tokio::time::Instant::now() + grace;
    while registry.open() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if registry.open() > 0 {
        tracing::warn!("grace period over: closing idle connections");
    }
    drop(stop_rx);
    upkeep.abort();
    state.drain().await;
    tracing::info!("every decision in progress finished; exiting");
    Ok(())
}

/// Serves one admitted connection until it ends, is evicted, reaches its
/// age or request count, or the server stops.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    app: Router,
    conn: &Arc<conn::Conn>,
    settings: &Settings,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) {
    let max_requests = match conn.kind {
        conn::Kind::Regular => settings.max_requests_per_connection.max(1),
        conn::Kind::Probe => 1,
    };
    let shared = Arc::clone(conn);
    let service = hyper::service::service_fn(move |req: axum::http::Request<Incoming>| {
        let app = app.clone();
        let conn = Arc::clone(&shared);
        async move {
            let n = conn.begin();
            let probe_path = matches!(req.uri().path(), "/healthz" | "/readyz");
            let mut response = if conn.kind == conn::Kind::Probe && !probe_path {
                ApiError::new(
                    ProblemCode::TooManyConnections,
                    "the server is at its connection limit: this connection answers only \
                     /healthz and /readyz; retry on a new connection",
                )
                .into_response()
            } else {
                match app.oneshot(req.map(axum::body::Body::new)).await {
                    Ok(r) => r,
                    Err(never) => match never {},
                }
            };
            if n >= max_requests {
                // The last answer on this connection: the client opens a
                // new one for its next request.
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            // Busy until its body has been sent, not when its head is
            // ready: a long-lived event stream (`GET /mcp`) is never the
            // idle connection closed to make room.
            let busy = conn::Busy(conn);
            let response = response.map(move |body| {
                axum::body::Body::new(http_body_util::BodyExt::map_frame(body, move |frame| {
                    let _busy = &busy;
                    frame
                }))
            });
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout);
    let served = builder.serve_connection(TokioIo::new(stream), service);
    let mut served = std::pin::pin!(served);
    let aged = tokio::time::sleep(settings.max_connection_age);
    tokio::select! {
        r = served.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            return;
        }
        _ = async { stop.wait_for(|s| *s).await.map(|_| ()) } => {}
        () = conn.close.notified() => {}
        () = aged => {}
    }
    // Finish the request in progress, then close (an idle connection
    // closes at once).
    served.as_mut().graceful_shutdown();
    let _ = served.await;
}

/// Answers a connection no slot could take: `503 too_many_connections`
/// (a problem, `Connection: close`), written without reading the
/// request, then closed.
async fn refuse(mut stream: tokio::net::TcpStream) {
    let body = ApiError::new(
        ProblemCode::TooManyConnections,
        "the server is at its connection limit, and so is the headroom kept for probes; \
         retry shortly",
    )
    .body();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: {PROBLEM_JSON}\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&body).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// The metrics upkeep is a timer, not a side effect of a scrape: with
    /// nobody scraping, histogram samples are still folded into buckets
    /// (`metrics-exporter-prometheus` keeps each raw sample until then).
    #[tokio::test]
    async fn upkeep_runs_again_and_again_without_a_scrape() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&runs);
        let task = every(Duration::from_millis(5), move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        while runs.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        task.abort();
        assert!(runs.load(Ordering::SeqCst) >= 3);
    }
}
