//! The endpoints, one file per group.

mod claims;
pub(crate) mod decisions;
mod review_api;
mod review_page;
mod service;

use axum::Router;
use axum::routing::{get, post};

use crate::state::{AppState, Parts};

pub fn routes<P: Parts>() -> Router<AppState<P>> {
    Router::new()
        .route("/healthz", get(service::healthz))
        .route("/metrics", get(service::metrics::<P>))
        .route("/openapi.json", get(service::openapi::<P>))
        .route("/v1/decisions", post(decisions::post::<P>))
        .route("/v1/claims", get(claims::list::<P>))
        .route("/v1/claims/{key}/complete", post(claims::complete::<P>))
        .route("/v1/claims/{key}/reconcile", post(claims::reconcile::<P>))
        .route("/v1/review/items", get(review_api::list::<P>))
        .route(
            "/v1/review/items/{id}/approve",
            post(review_api::approve::<P>),
        )
        .route("/v1/review/items/{id}/deny", post(review_api::deny::<P>))
        .route("/review", get(review_page::page::<P>))
        .route("/review/login", post(review_page::login::<P>))
        .route("/review/logout", post(review_page::logout::<P>))
        .route(
            "/review/items/{id}/approve",
            post(review_page::approve::<P>),
        )
        .route("/review/items/{id}/deny", post(review_page::deny::<P>))
}
