//! The reviewer item id of a `/…/items/{id}` path, for the JSON routes and
//! the reviewer page alike: a path that is not a number is `invalid_path`.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;

use crate::error::{ApiError, ProblemCode};

/// The `{id}` of a reviewer item route.
#[derive(Debug, Clone, Copy)]
pub struct ItemId(pub u64);

impl<S: Send + Sync> FromRequestParts<S> for ItemId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<u64>::from_request_parts(parts, state)
            .await
            .map(|Path(id)| Self(id))
            .map_err(|e| ApiError::new(ProblemCode::InvalidPath, e.body_text()))
    }
}
