//! The endpoints, one file per group.
//!
//! The API's routes are registered from their handlers' `#[utoipa::path]`
//! declarations (`routes!`), which also builds the OpenAPI document: a path
//! is served exactly where the document says. The reviewer page is HTML for
//! a browser and stays out of the API document.

mod claims;
pub(crate) mod decisions;

mod item_id;
mod review_api;
mod review_page;
mod service;

use axum::middleware::map_response;
use axum::routing::{get, post};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    use utoipa::OpenApi as _;
    OpenApiRouter::with_openapi(crate::openapi::Frame::openapi())
        .routes(routes!(service::healthz))
        .routes(routes!(service::readyz))
        .routes(routes!(service::metrics))
        .routes(routes!(service::openapi))
        .routes(routes!(decisions::post))
        .routes(routes!(claims::list))
        .routes(routes!(claims::complete))
        .routes(routes!(claims::reconcile))
        .routes(routes!(review_api::list))
        .routes(routes!(review_api::get_item))
        .routes(routes!(review_api::approve))
        .routes(routes!(review_api::deny))
        .routes(routes!(review_api::resolve))
        .routes(routes!(review_api::dismiss))
        .merge(review_pages().into())
}

/// The reviewer page: HTML for a browser, every response of it (the
/// method-not-allowed ones included) under the page's own headers.
fn review_pages() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/review", get(review_page::page))
        .route("/review/login", post(review_page::login))
        .route("/review/logout", post(review_page::logout))
        .route("/review/items/{id}", get(review_page::item_page))
        .route("/review/items/{id}/approve", post(review_page::approve))
        .route("/review/items/{id}/deny", post(review_page::deny))
        .route("/review/items/{id}/resolve", post(review_page::resolve))
        .route("/review/items/{id}/dismiss", post(review_page::dismiss))
        .route("/review/items/{id}/reconcile", post(review_page::reconcile))
        .layer(map_response(review_page::page_headers))
}
