//! `/healthz`, `/metrics`, `/openapi.json`.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::{Value, json};

use crate::auth::Caller;
use crate::state::{AppState, Parts};

/// Liveness: no key needed, touches nothing.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

pub async fn metrics<P: Parts>(
    State(app): State<AppState<P>>,
    _caller: Caller,
) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.inner.metrics.render(),
    )
}

pub async fn openapi<P: Parts>(_state: State<AppState<P>>, _caller: Caller) -> Json<Value> {
    Json(crate::openapi::openapi_document())
}
