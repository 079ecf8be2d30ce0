//! The endpoints, one file per group.
//!
//! The API's routes are registered from their handlers' `#[utoipa::path]`
//! declarations (`routes!`), which also builds the OpenAPI document: a path
//! is served exactly where the document says. The reviewer page is HTML for
//! a browser and stays out of the API document.

mod claims;
pub(crate) mod decisions;

pub use decisions::decide_proposal;
mod item_id;
mod review_api;
mod review_page;
mod service;

use axum::middleware::map_response;
use axum::routing::{get, post};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::{AppState, GateComponents};

pub fn routes<P: GateComponents>() -> OpenApiRouter<AppState<P>> {
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
        .merge(review_pages::<P>().into())
}

/// The reviewer page: HTML for a browser, every response of it (the
/// method-not-allowed ones included) under the page's own headers.
fn review_pages<P: GateComponents>() -> axum::Router<AppState<P>> {
    axum::Router::new()
        .route("/review", get(review_page::page::<P>))
        .route("/review/login", post(review_page::login::<P>))
        .route("/review/logout", post(review_page::logout::<P>))
        .route("/review/items/{id}", get(review_page::item_page::<P>))
        .route(
            "/review/items/{id}/approve",
            post(review_page::approve::<P>),
        )
        .route("/review/items/{id}/deny", post(review_page::deny::<P>))
        .route(
            "/review/items/{id}/resolve",
            post(review_page::resolve::<P>),
        )
        .route(
            "/review/items/{id}/dismiss",
            post(review_page::dismiss::<P>),
        )
        .route(
            "/review/items/{id}/reconcile",
            post(review_page::reconcile::<P>),
        )
        .layer(map_response(review_page::page_headers))
}
