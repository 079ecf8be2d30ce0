//! Helpers shared by the observability tests: a router over a fresh desk,
//! and request builders.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt;
use toolgate_http::Settings;
use tower::ServiceExt;

use crate::support::*;

/// A router over a fresh in-memory desk, with the keys above.
pub fn router_with(settings: Settings) -> Router {
    let desk = DeskRef::default();
    desk.set_version("t-1", "7");
    desk.set_version("t-2", "3");
    let components = toolgate_http::Components {
        authorizer: desk.clone(),
        state: desk.clone(),
        claims: toolgate::claim::MemoryClaimStore::new(),
        executor: desk,
    };
    let policy = toolgate::contract::Policy::load(POLICY).unwrap();
    toolgate_http::router(toolgate_http::AppState::new(
        policy,
        components,
        keys(),
        settings,
    ))
}

pub async fn send(app: &Router, req: Request<Body>) -> (StatusCode, HeaderMap, String) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

pub fn post(path: &str, key: &str) -> axum::http::request::Builder {
    Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
}

pub fn get(path: &str, key: &str) -> Request<Body> {
    Request::get(path)
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .body(Body::empty())
        .unwrap()
}
