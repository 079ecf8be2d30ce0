//! Bearer API keys: stored as SHA-256 digests, each naming a principal, its
//! capabilities and how its tool calls are executed.
//!
//! The server never keeps a key in clear text. A presented key is hashed
//! and looked up by digest; comparing digests of a 256-bit hash leaks
//! nothing useful about the key through timing.

use std::collections::HashMap;
use std::fmt;

use axum::extract::FromRequestParts;
use axum::http::request::Parts as RequestParts;
use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};
use toolgate::pipeline::Principal;

use crate::error::ApiError;
use crate::state::{AppState, GateComponents};

/// The capability that opens the reviewer page and the approval endpoints.
pub const REVIEW_CAPABILITY: &str = "toolgate:review";
/// The capability that lists stuck claims and reconciles them.
pub const OPERATE_CAPABILITY: &str = "toolgate:operate";
/// The capability that reads `GET /metrics`: the counters say who decides
/// how much of what, so a scraper gets its own key rather than an agent's.
pub const METRICS_CAPABILITY: &str = "toolgate:metrics";

/// Who performs the write of an action decided for this key's principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutionMode {
    /// The server's executor applies it (the deployment's in-process or
    /// webhook executor).
    InProcess,
    /// The caller applies it: the decision is `permitted` and carries a
    /// permit; the caller completes the claim with the holder token.
    Client,
}

impl ExecutionMode {
    /// The configuration spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InProcess => "in_process",
            Self::Client => "client",
        }
    }

    /// Parses the configuration spelling.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "in_process" => Some(Self::InProcess),
            "client" => Some(Self::Client),
            _ => None,
        }
    }
}

/// One configured key: its digest and what it stands for.
#[derive(Debug, Clone)]
pub struct ApiKey {
    /// SHA-256 of the key text.
    pub sha256: [u8; 32],
    /// The principal the key authenticates.
    pub principal: Principal,
    /// Who executes this principal's actions.
    pub mode: ExecutionMode,
    /// Whether the key may name the actor per request (`"actor"` in
    /// `POST /v1/decisions`; docs/design.md §13): a service that acts on
    /// behalf of its own end users. A key without it that sends `actor` is
    /// refused with `actor_not_allowed`.
    pub act_for_users: bool,
}

/// A configuration problem with the keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError(pub String);

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "api keys: {}", self.0)
    }
}

impl std::error::Error for KeyError {}

impl ApiKey {
    /// SHA-256 of `key`, as configuration stores it.
    pub fn digest(key: &str) -> [u8; 32] {
        Sha256::digest(key.as_bytes()).into()
    }

    /// Reads a digest written as 64 hex digits.
    pub fn parse_digest(hex_text: &str) -> Result<[u8; 32], KeyError> {
        let bytes = hex::decode(hex_text)
            .map_err(|_| KeyError("sha256 must be 64 hexadecimal digits".into()))?;
        <[u8; 32]>::try_from(bytes.as_slice())
            .map_err(|_| KeyError("sha256 must be 64 hexadecimal digits".into()))
    }
}

/// The configured keys, looked up by digest.
#[derive(Debug, Clone, Default)]
pub struct KeyRing {
    by_digest: HashMap<[u8; 32], ApiKey>,
}

impl KeyRing {
    /// A ring of `keys`; two keys with one digest or one principal id are a
    /// configuration error (which one would a request be?).
    pub fn new(keys: impl IntoIterator<Item = ApiKey>) -> Result<Self, KeyError> {
        let mut by_digest = HashMap::new();
        let mut ids = std::collections::HashSet::new();
        for k in keys {
            if !ids.insert(k.principal.id().to_owned()) {
                return Err(KeyError(format!(
                    "principal {:?} has two keys",
                    k.principal.id()
                )));
            }
            if by_digest.insert(k.sha256, k).is_some() {
                return Err(KeyError("two entries share one key digest".into()));
            }
        }
        Ok(Self { by_digest })
    }

    /// The key whose digest matches `presented`, if any.
    pub fn lookup(&self, presented: &str) -> Option<&ApiKey> {
        self.by_digest.get(&ApiKey::digest(presented))
    }

    /// How many keys are configured.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// Whether no key is configured.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }
}

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
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

impl<P: GateComponents> FromRequestParts<AppState<P>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut RequestParts,
        state: &AppState<P>,
    ) -> Result<Self, Self::Rejection> {
        let token = bearer(&parts.headers).ok_or_else(ApiError::unauthorized)?;
        let key = state
            .keys()
            .lookup(token)
            .ok_or_else(ApiError::unauthorized)?;
        Ok(Self {
            principal: key.principal.clone(),
            mode: key.mode,
            act_for_users: key.act_for_users,
        })
    }
}

/// A caller whose key holds `toolgate:review`: the extractor every reviewer
/// route takes, so that the capability is checked before anything of the
/// request past its `Authorization` header is read.
#[derive(Debug, Clone)]
pub struct Reviewer(pub Caller);

impl<P: GateComponents> FromRequestParts<AppState<P>> for Reviewer {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut RequestParts,
        state: &AppState<P>,
    ) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, state).await?;
        caller.require(REVIEW_CAPABILITY)?;
        Ok(Self(caller))
    }
}
