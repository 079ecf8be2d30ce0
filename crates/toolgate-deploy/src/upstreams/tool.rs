//! Each served tool's mapping (`[[upstreams.tools]]`): where its
//! operation-key fields and the version the model read come from, as
//! written and as checked, and the checks on pointers, `_meta` keys and
//! the read rate.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{ConfigError, Upstream, is_name};

/// The identity claims a scope field may name. With API keys the principal's
/// id is the only claim there is; a JWT's claims would add more.
pub const IDENTITY_CLAIMS: &[&str] = &["principal"];

/// One `[[upstreams.tools]]` entry, as written.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ToolFile {
    /// The tool: its name at the upstream, in the pin file and in the policy.
    pub name: String,
    /// Where each operation-key field comes from.
    #[serde(default)]
    pub scope: BTreeMap<String, ScopeSourceFile>,
    /// Where the version the model read comes from: required for a write,
    /// refused for a read tool (`read = true` in the policy).
    #[serde(default)]
    pub version_seen: Option<VersionSourceFile>,
    /// The upstream tool asked during reconciliation, if any (writes only).
    #[serde(default)]
    pub status_tool: Option<StatusToolFile>,
    /// A read tool's rate: calls a minute per principal (none by default).
    #[serde(default)]
    pub rate_per_minute: Option<u32>,
}

/// `scope.FIELD = { from = … }`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(tag = "from", rename_all = "snake_case", deny_unknown_fields)]
pub enum ScopeSourceFile {
    /// A JSON pointer into the call's arguments.
    Argument {
        /// `/order_id`.
        pointer: String,
    },
    /// A claim of the caller's identity.
    Identity {
        /// `principal`.
        claim: String,
    },
    /// A key of the request's `_meta`.
    Meta {
        /// `io.example/tenant`.
        key: String,
    },
}

/// `version_seen = { from = … }`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(tag = "from", rename_all = "snake_case", deny_unknown_fields)]
pub enum VersionSourceFile {
    /// A JSON pointer into the arguments (`expected_version`).
    Argument {
        /// `/expected_version`.
        pointer: String,
    },
    /// A key of the request's `_meta`.
    Meta {
        /// `io.example/version`.
        key: String,
    },
}

/// `status_tool = { name = …, key_argument = … }`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StatusToolFile {
    /// The upstream tool that answers "was it applied?".
    pub name: String,
    /// Its argument that takes the operation key.
    pub key_argument: String,
}

/// A checked per-tool mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolMapping {
    /// The tool's name.
    pub name: String,
    /// Operation-key field → where its value comes from.
    pub scope: BTreeMap<String, ScopeSource>,
    /// Where `version_seen` comes from; `None` for a read tool.
    pub version_seen: Option<VersionSource>,
    /// The reconciliation tool, if any.
    pub status_tool: Option<StatusToolFile>,
    /// A read tool's rate, calls a minute per principal.
    pub rate_per_minute: Option<u32>,
}

/// Where one scope value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeSource {
    /// The argument at this JSON pointer.
    Argument(String),
    /// The caller's principal id.
    Principal,
    /// This `_meta` key of the request.
    Meta(String),
}

/// Where the version the model read comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionSource {
    /// The argument at this JSON pointer.
    Argument(String),
    /// This `_meta` key of the request.
    Meta(String),
}

/// The scope fields the deployment takes from each tool's arguments and
/// from the caller's identity, for the policy loader
/// ([`toolgate::contract::Policy::load_with`]): a field mapped from the
/// argument of its own name may then be an argument too, and every other
/// collision is still refused; a field from the identity is filled in by
/// the gate and refused when a caller sends it, through either door.
pub fn argument_scopes(upstreams: &[Upstream]) -> toolgate::contract::ArgumentScopes {
    let mut scopes = toolgate::contract::ArgumentScopes::new();
    for t in upstreams.iter().flat_map(|u| &u.tools) {
        for (field, source) in &t.scope {
            match source {
                ScopeSource::Argument(pointer) => scopes.insert(&t.name, field, pointer),
                // Filled in by the gate on every door, never sent.
                ScopeSource::Principal => scopes.insert_identity(&t.name, field),
                ScopeSource::Meta(_) => {}
            }
        }
    }
    scopes
}

pub(super) fn check_tool(t: &ToolFile, at: &str) -> Result<ToolMapping, ConfigError> {
    let mut scope = BTreeMap::new();
    for (f, source) in &t.scope {
        let here = format!("{at}.scope.{f}");
        if !is_name(f) {
            return Err(ConfigError::new(
                here,
                "a scope field is 1-64 characters of [A-Za-z0-9_-]",
            ));
        }
        if f == toolgate::op::VERSION_SEEN {
            return Err(ConfigError::new(
                here,
                "`version_seen` has its own setting: `version_seen = { from = … }`",
            ));
        }
        let source = match source {
            ScopeSourceFile::Argument { pointer } => {
                check_pointer(pointer).map_err(|m| ConfigError::new(&here, m))?;
                ScopeSource::Argument(pointer.clone())
            }
            ScopeSourceFile::Identity { claim } => {
                if !IDENTITY_CLAIMS.contains(&claim.as_str()) {
                    return Err(ConfigError::new(
                        here,
                        format!(
                            "unknown identity claim `{claim}` (an API key's identity has: {})",
                            IDENTITY_CLAIMS.join(", ")
                        ),
                    ));
                }
                ScopeSource::Principal
            }
            ScopeSourceFile::Meta { key } => {
                check_meta_key(key).map_err(|m| ConfigError::new(&here, m))?;
                ScopeSource::Meta(key.clone())
            }
        };
        scope.insert(f.clone(), source);
    }
    let here = format!("{at}.version_seen");
    let version_seen = match &t.version_seen {
        None => None,
        Some(VersionSourceFile::Argument { pointer }) => {
            check_pointer(pointer).map_err(|m| ConfigError::new(&here, m))?;
            Some(VersionSource::Argument(pointer.clone()))
        }
        Some(VersionSourceFile::Meta { key }) => {
            check_meta_key(key).map_err(|m| ConfigError::new(&here, m))?;
            Some(VersionSource::Meta(key.clone()))
        }
    };
    if t.rate_per_minute == Some(0) {
        return Err(ConfigError::new(
            format!("{at}.rate_per_minute"),
            "at least 1 call a minute (leave it out for no rate)",
        ));
    }
    if let Some(s) = &t.status_tool {
        if !is_name(&s.name) || s.name == t.name {
            return Err(ConfigError::new(
                format!("{at}.status_tool.name"),
                "must name another tool of the upstream ([A-Za-z0-9_-], 1-64)",
            ));
        }
        if s.key_argument.is_empty() || s.key_argument.len() > 64 {
            return Err(ConfigError::new(
                format!("{at}.status_tool.key_argument"),
                "must name the status tool's argument that takes the operation key",
            ));
        }
    }
    Ok(ToolMapping {
        name: t.name.clone(),
        scope,
        version_seen,
        status_tool: t.status_tool.clone(),
        rate_per_minute: t.rate_per_minute,
    })
}

/// An RFC 6901 pointer naming a member below the root: `""` (the whole
/// arguments object) is not a scope value, and `~` must be `~0` or `~1`.
fn check_pointer(pointer: &str) -> Result<(), String> {
    if !pointer.starts_with('/') || pointer.len() < 2 {
        return Err(format!(
            "pointer {pointer:?} must be a JSON pointer to an argument, such as \"/order_id\""
        ));
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(format!(
                "pointer {pointer:?}: `~` must be followed by 0 or 1 (RFC 6901)"
            ));
        }
    }
    Ok(())
}

fn check_meta_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > 128 || key.chars().any(char::is_control) {
        return Err("a `_meta` key is 1-128 characters without control characters".to_owned());
    }
    // The protocol's own keys say how the request travels, not what it
    // names; a scope read from them would let a client library's default
    // pick the resource.
    if key.starts_with("io.modelcontextprotocol/") || key.starts_with("io.toolgate/") {
        return Err(format!(
            "`{key}` is reserved for the protocol or for toolgate itself"
        ));
    }
    Ok(())
}
