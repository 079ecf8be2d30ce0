//! Who a caller is: bearer API keys, stored as SHA-256 digests, each naming
//! a principal, its capabilities and how its tool calls are executed. Every
//! door authenticates through [`KeyRing::lookup`], so a key means the same
//! principal on HTTP and on MCP.
//!
//! The server never keeps a key in clear text. A presented key is hashed
//! and looked up by digest; comparing digests of a 256-bit hash leaks
//! nothing useful about the key through timing.

use std::collections::HashMap;
use std::fmt;

use sha2::{Digest, Sha256};
use toolgate::pipeline::Principal;

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

/// The token of an `Authorization` header's value `Bearer <token>` (the
/// scheme in any case), if it is one. Every door reads its header through
/// this, so a token means the same on each.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_token_is_read_in_any_case_of_the_scheme_and_never_empty() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bEaReR  abc "), Some("abc"));
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearerabc"), None);
    }
}
