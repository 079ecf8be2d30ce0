//! The deployment file as written (TOML), before any check. Unknown fields
//! are errors: a misspelt `lease_ms` must not silently keep the default.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use toolgate::pipeline::Principal;
use toolgate_service::{ApiKey, ExecutionMode};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    pub listen: Option<SocketAddr>,
    pub db: Option<String>,
    pub policy: PathBuf,
    pub cedar: Option<PathBuf>,
    pub lease_ms: Option<u64>,
    pub request_timeout_ms: Option<u64>,
    pub body_limit_bytes: Option<usize>,
    pub max_result_bytes: Option<usize>,
    pub idempotency_max_bytes: Option<usize>,
    pub idempotency_capacity: Option<usize>,
    pub header_read_timeout_ms: Option<u64>,
    pub connection_limit: Option<usize>,
    pub connection_limit_per_peer: Option<usize>,
    pub probe_headroom: Option<usize>,
    pub max_requests_per_connection: Option<u64>,
    pub max_connection_age_ms: Option<u64>,
    /// The URL reviewers open `/review` at: `https://…` (the session
    /// cookie is `Secure`) or `http://…` (it is not: loopback demos).
    pub public_url: Option<String>,
    /// `[review]`: the queue's bounds, and the optional webhook announcing
    /// new review items.
    pub review: Option<ReviewFile>,
    #[serde(default)]
    pub keys: Vec<KeyEntry>,
    /// `[[issuers]]`: token issuers whose signed tokens authenticate
    /// callers beside the keys.
    #[serde(default)]
    pub issuers: Vec<IssuerEntry>,
    /// The name of the program's built-in application (its state source,
    /// executor and Cedar entities), instead of [[tools]].
    pub application: Option<String>,
    /// Read as [`crate::DeploySection`] from the same text, so that its
    /// errors keep their own fields and lines; declared here so that the
    /// file's other fields can refuse unknown keys.
    #[expect(dead_code, reason = "read as DeploySection from the file's text")]
    pub app_db: Option<toml::Value>,
    pub tools: Option<toml::Value>,
    /// Read as [`crate::upstreams::McpSection`] from the same text.
    #[expect(dead_code, reason = "read as McpSection from the file's text")]
    pub upstreams: Option<toml::Value>,
}

/// `[review]`: the queue's bounds, and where new review items are
/// announced (docs/http-api.md). The signing secret comes from the
/// environment, never the file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReviewFile {
    pub webhook_url: Option<String>,
    pub webhook_secret_env: Option<String>,
    pub webhook_timeout_ms: Option<u64>,
    pub max_open_items: Option<u64>,
    pub max_open_items_per_principal: Option<u64>,
    pub rejection_window_ms: Option<u64>,
}

/// One `[[keys]]` entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeyEntry {
    sha256: String,
    principal: String,
    #[serde(default)]
    pub capabilities: Vec<String>,
    #[serde(default = "in_process")]
    execution: String,
    /// The key may name the actor per request (a service acting for its
    /// own users; docs/design.md §13).
    #[serde(default)]
    act_for_users: bool,
}

fn in_process() -> String {
    ExecutionMode::InProcess.as_str().to_owned()
}

impl KeyEntry {
    /// The key as the sidecar holds it; an error names the sub-field.
    pub fn to_api_key(&self) -> Result<ApiKey, (&'static str, String)> {
        let sha256 = ApiKey::parse_digest(&self.sha256).map_err(|e| (".sha256", e.0))?;
        let mode = ExecutionMode::parse(&self.execution).ok_or_else(|| {
            (
                ".execution",
                format!("{:?}: must be in_process or client", self.execution),
            )
        })?;
        let principal = Principal::new(self.principal.clone(), self.capabilities.iter().cloned())
            .map_err(|e| (".principal", e.to_string()))?;
        Ok(ApiKey {
            sha256,
            principal,
            mode,
            act_for_users: self.act_for_users,
        })
    }
}

/// One `[[issuers]]` entry, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct IssuerEntry {
    pub issuer: String,
    pub audience: String,
    pub jwks_url: Option<String>,
    pub algorithms: Option<Vec<String>>,
    pub clock_skew_secs: Option<u64>,
    pub principal_claim: Option<String>,
    pub client_claims: Option<Vec<String>>,
    #[serde(default)]
    pub scopes: std::collections::BTreeMap<String, Vec<String>>,
    pub groups_claim: Option<String>,
    #[serde(default)]
    pub groups: std::collections::BTreeMap<String, Vec<String>>,
    pub refetch_secs: Option<u64>,
    #[serde(default)]
    pub attributes: std::collections::BTreeMap<String, String>,
}
