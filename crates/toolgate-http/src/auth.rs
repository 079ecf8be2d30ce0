//! The caller of a request: its bearer API key, looked up by the service
//! ([`toolgate_service::identity`]), or a signed token of one of the
//! deployment's issuers ([`toolgate_service::tokens`]), as the extractors
//! every protected handler takes. Only the `Authorization` header is read,
//! never the body.

use axum::extract::FromRequestParts;
use axum::http::request::Parts as RequestParts;
use axum::http::{HeaderMap, header};
use toolgate::pipeline::Principal;
use toolgate_service::{ExecutionMode, Issuers, REVIEW_CAPABILITY};

use crate::error::ApiError;
use crate::state::AppState;

/// An authenticated caller: the extractor every protected handler takes.
/// It reads only the `Authorization` header, never the body.
#[derive(Debug, Clone)]
pub struct Caller {
    pub principal: Principal,
    pub mode: ExecutionMode,
    /// The key may name the actor per request.
    pub act_for_users: bool,
}

impl Caller {
    pub fn require(&self, capability: &str) -> Result<(), ApiError> {
        if self.principal.has_capability(capability) {
            Ok(())
        } else {
            Err(ApiError::missing_capability(capability))
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in
/// any case), if the request has one. Public so that another front door on
/// the same keys (the MCP gateway) reads them the same way.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    toolgate_service::bearer_token(headers.get(header::AUTHORIZATION)?.to_str().ok()?)
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut RequestParts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let token = bearer(&parts.headers).ok_or_else(ApiError::unauthorized)?;
        let service = state.service();
        if let Some(key) = service.authenticate(token) {
            return Ok(Self {
                principal: key.principal.clone(),
                mode: key.mode,
                act_for_users: key.act_for_users,
            });
        }
        if service.issuers().is_empty() || !Issuers::looks_like_token(token) {
            return Err(ApiError::unauthorized());
        }
        // A person's token: the server's executor writes, and the token
        // names the person itself, so it never names another actor.
        let principal = service
            .verify_token(token)
            .await
            .map_err(|e| ApiError::invalid_token(&e))?;
        Ok(Self {
            principal,
            mode: ExecutionMode::InProcess,
            act_for_users: false,
        })
    }
}

/// A caller whose key holds `toolgate:review`: the extractor every reviewer
/// route takes, so that the capability is checked before anything of the
/// request past its `Authorization` header is read.
#[derive(Debug, Clone)]
pub struct Reviewer(pub Caller);

impl FromRequestParts<AppState> for Reviewer {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut RequestParts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, state).await?;
        caller.require(REVIEW_CAPABILITY)?;
        Ok(Self(caller))
    }
}
