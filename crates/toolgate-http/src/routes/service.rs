//! `/healthz`, `/readyz`, `/metrics`, `/openapi.json`.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use toolgate::claim::ClaimStore;

use toolgate_service::METRICS_CAPABILITY;

use crate::auth::Caller;
use crate::dto::{Probe, ProbeStatus};
use crate::error::{ApiError, Problem, ProblemCode};
use crate::openapi::ServedDocument;
use crate::state::AppState;

/// Liveness: the process serves requests. Needs no key and touches
/// nothing, so a slow database never gets a healthy process restarted.
#[utoipa::path(get, path = "/healthz", tag = "service",
    responses((status = 200, description = "the process serves requests", body = Probe)))]
pub async fn healthz() -> Json<Probe> {
    Json(Probe {
        status: ProbeStatus::Ok,
    })
}

/// Readiness: the claim store answers (on SQLite, its writer thread runs
/// too). Needs no key; a load balancer sends no traffic while it is 503.
#[utoipa::path(get, path = "/readyz", tag = "service",
    responses(
        (status = 200, description = "the claim store answers", body = Probe),
        (status = 503, description = "`not_ready`: the claim store does not answer", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn readyz(State(app): State<AppState>) -> Result<Json<Probe>, ApiError> {
    match app.service().store().ready().await {
        Ok(()) => Ok(Json(Probe {
            status: ProbeStatus::Ready,
        })),
        Err(e) => {
            tracing::warn!(error = %e, "readiness: the claim store does not answer");
            Err(ApiError::new(
                ProblemCode::NotReady,
                format!("the claim store does not answer: {e}"),
            ))
        }
    }
}

/// Prometheus metrics. Needs a key holding `toolgate:metrics`: the
/// counters say who decides how much of what.
#[utoipa::path(get, path = "/metrics", tag = "service",
    responses(
        (status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`missing_capability`: the key lacks `toolgate:metrics`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn metrics(
    State(app): State<AppState>,
    caller: Caller,
) -> Result<impl IntoResponse, ApiError> {
    caller.require(METRICS_CAPABILITY)?;
    // The scrape-time gauges: a failed store read leaves the stuck gauge at
    // its last value rather than failing the whole scrape.
    let stuck = app
        .service()
        .store()
        .list_stuck(
            toolgate_service::clock::now_millis(),
            toolgate_service::metrics::STUCK_SCRAPE_CAP,
        )
        .await;
    let metrics = &app.service().metrics();
    let stuck = match stuck {
        Ok(entries) => Some(entries.len()),
        Err(e) => {
            tracing::warn!(error = %e, "metrics: could not count stuck claims");
            None
        }
    };
    // Open review items, from the claim database (every replica's).
    let open = {
        use toolgate::review::ReviewStore as _;
        app.service()
            .store()
            .open_items(toolgate_service::clock::now_millis())
            .await
    };
    let open = open.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "metrics: could not count open review items");
        0
    });
    metrics.observe_queues(stuck, usize::try_from(open).unwrap_or(usize::MAX));
    // Budget reservations held now, per budget of the policy; a failed read
    // leaves the gauges at their last values.
    match app.service().store().budget_reserved().await {
        Ok(reserved) => metrics.observe_budgets(
            app.policy()
                .tools()
                .iter()
                .flat_map(|t| t.budgets())
                .map(|b| b.name()),
            &reserved,
        ),
        Err(e) => tracing::warn!(error = %e, "metrics: could not read budget reservations"),
    }
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics.render(),
    ))
}

/// This document. Needs no key: it describes the API and holds no secret.
#[utoipa::path(get, path = "/openapi.json", tag = "service",
    responses((status = 200, description = "the OpenAPI 3.1 document (`docs/openapi.json`)", content_type = "application/json")))]
pub async fn openapi(Extension(doc): Extension<ServedDocument>) -> Response {
    let mut answer = doc.0.into_response();
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    answer
}
