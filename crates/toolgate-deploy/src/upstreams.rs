//! The deployment file's MCP part (plain data, no MCP client: toolgate-mcp
//! serves what is read here): `[[upstreams]]`, each with the tools the
//! gateway serves from it (`[[upstreams.tools]]`): where each operation-key
//! field comes from, and where `version_seen` comes from.
//!
//! ```toml
//! [[upstreams]]
//! name = "shop"
//! url = "http://127.0.0.1:8931/mcp"         # Streamable HTTP, or:
//! # command = "python3"  args = ["shop_mcp.py", "serve-stdio"]
//! bearer_env = "SHOP_MCP_TOKEN"              # the gateway's own credential
//! # token_exchange = { token_url = "https://id.example/token", client_id = "toolgate",
//! #                    client_secret_env = "TOOLGATE_EXCHANGE_SECRET" }   # calls as the person
//! pins = "shop.pins.toml"                    # written by `toolgate mcp import`
//! connect_timeout_ms = 5000
//! call_timeout_ms = 30000
//! refresh_secs = 60                          # compare with the pins again
//!
//! [[upstreams.tools]]
//! name = "refund_order"
//! scope.order_id = { from = "argument", pointer = "/order_id" }
//! scope.agent = { from = "identity", claim = "principal" }
//! version_seen = { from = "argument", pointer = "/expected_version" }
//! status_tool = { name = "refund_status", key_argument = "operation_key" }
//! ```
//!
//! Read as written first (serde, unknown fields refused, so a misspelt
//! `bearer_emv` is an error rather than a gateway without a credential),
//! then checked field by field ([`McpSection::check`]), each error naming
//! the field as `upstreams[shop].tools[refund_order].scope.order_id`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

mod tool;

pub use tool::{
    IDENTITY_CLAIMS, ScopeSource, ScopeSourceFile, StatusToolFile, ToolFile, ToolMapping,
    VersionSource, VersionSourceFile, argument_scopes,
};

/// Default wait for an upstream to answer `initialize`/`server/discover`.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Default wait for one upstream `tools/call` (or `tools/list`).
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 30_000;
/// Default interval between two comparisons of an upstream's `tools/list`
/// with its pins while the gateway serves.
pub const DEFAULT_REFRESH_SECS: u64 = 60;
/// Longest refresh interval a file may set: a day.
pub const MAX_REFRESH_SECS: u64 = 86_400;
/// Longest timeout a file may set: ten minutes. A claim's lease must outlast
/// the call it covers, so an unbounded call would need an unbounded lease.
pub const MAX_TIMEOUT_MS: u64 = 600_000;
/// The MCP part of a deployment file, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpSection {
    /// The `[[upstreams]]` entries, in file order.
    pub upstreams: Vec<UpstreamFile>,
}

/// One `[[upstreams]]` entry, as written.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UpstreamFile {
    /// The upstream's name (`toolgate mcp import --upstream NAME`).
    pub name: String,
    /// Streamable HTTP endpoint.
    #[serde(default)]
    pub url: Option<String>,
    /// Or: a program spoken to over stdio.
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables set for the child, beyond a minimal
    /// environment (`PATH`, `HOME`, `LANG`): nothing of the gateway's own
    /// environment leaks to it otherwise.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The environment variable holding the gateway's bearer token for this
    /// upstream (HTTP only). Never the caller's.
    #[serde(default)]
    pub bearer_env: Option<String>,
    /// The pin file (relative to the deployment file's directory).
    pub pins: PathBuf,
    /// Longest wait for the connection and handshake, in milliseconds.
    #[serde(default)]
    pub connect_timeout_ms: Option<u64>,
    /// Longest wait for one call, in milliseconds.
    #[serde(default)]
    pub call_timeout_ms: Option<u64>,
    /// Seconds between two comparisons of the upstream's `tools/list` with
    /// the pins while serving; `0` compares at start (and on the upstream's
    /// `notifications/tools/list_changed`) only.
    #[serde(default)]
    pub refresh_secs: Option<u64>,
    /// The tools served from this upstream.
    #[serde(default)]
    pub tools: Vec<ToolFile>,
    /// Call its tools as the person (HTTP only): the caller's token
    /// exchanged for one of this upstream's (RFC 8693).
    #[serde(default)]
    pub token_exchange: Option<TokenExchangeFile>,
    /// Its pinned resources and resource templates, passed through to
    /// callers with this capability; none are served without it.
    #[serde(default)]
    pub resources: Option<EntryAccessFile>,
    /// Its pinned prompts, likewise.
    #[serde(default)]
    pub prompts: Option<EntryAccessFile>,
}

/// `resources = { capability = … }` or `prompts = { capability = … }`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EntryAccessFile {
    /// What a caller must hold to list and read them.
    pub capability: String,
}

/// `[upstreams.token_exchange]`, as written.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TokenExchangeFile {
    /// The issuer's token endpoint.
    pub token_url: String,
    /// The gateway's client id at the issuer.
    pub client_id: String,
    /// The environment variable holding its client secret (HTTP Basic).
    pub client_secret_env: String,
    /// The `resource` asked for; by default the upstream's URL.
    #[serde(default)]
    pub resource: Option<String>,
    /// The `audience` asked for, if the issuer wants one.
    #[serde(default)]
    pub audience: Option<String>,
    /// The `scope` asked for.
    #[serde(default)]
    pub scope: Option<String>,
}

/// A checked token exchange: how the gateway gets a person's token for an
/// upstream (RFC 8693), with the caller's token as the subject token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenExchange {
    /// The token endpoint (https, or http on loopback).
    pub token_url: String,
    /// The gateway's client id.
    pub client_id: String,
    /// The environment variable holding its secret.
    pub client_secret_env: String,
    /// The `resource` parameter: the upstream's URL unless set.
    pub resource: String,
    /// The `audience` parameter, if any.
    pub audience: Option<String>,
    /// The `scope` parameter, if any.
    pub scope: Option<String>,
}

/// Where an upstream is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// Streamable HTTP.
    Http {
        /// The endpoint.
        url: String,
        /// The environment variable holding the gateway's bearer token.
        bearer_env: Option<String>,
    },
    /// A child process on stdio.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Its extra environment.
        env: BTreeMap<String, String>,
    },
}

/// A checked upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// Its name.
    pub name: String,
    /// How it is reached.
    pub transport: Transport,
    /// The pin file, resolved against the deployment file's directory.
    pub pins: PathBuf,
    /// Connection and handshake timeout.
    pub connect_timeout: Duration,
    /// Per-call timeout.
    pub call_timeout: Duration,
    /// How often the pins are compared again while serving; `None`: only
    /// at start and when the upstream says its list changed.
    pub refresh: Option<Duration>,
    /// The tools served from it.
    pub tools: Vec<ToolMapping>,
    /// Whether its tools are called as the person, and how.
    pub token_exchange: Option<TokenExchange>,
    /// The capability its pinned resources need, if they are served.
    pub resources_capability: Option<String>,
    /// The capability its pinned prompts need, if they are served.
    pub prompts_capability: Option<String>,
}

use crate::ConfigError;

impl McpSection {
    /// Reads `[[upstreams]]` from a whole deployment file's text; the other
    /// top-level keys belong to the program serving it and are left alone.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        #[derive(Deserialize)]
        struct Whole {
            #[serde(default)]
            upstreams: Vec<UpstreamFile>,
        }
        let whole: Whole = toml::from_str(text).map_err(|e| ConfigError::toml(text, &e))?;
        Ok(Self {
            upstreams: whole.upstreams,
        })
    }

    /// Checks every upstream and tool mapping; pin files are resolved
    /// against `base` (the deployment file's directory). Reads nothing.
    pub fn check(&self, base: &Path) -> Result<Vec<Upstream>, ConfigError> {
        let mut names = BTreeSet::new();
        let mut tools = BTreeMap::new();
        let mut out = Vec::with_capacity(self.upstreams.len());
        for (i, u) in self.upstreams.iter().enumerate() {
            let at = format!("upstreams[{}]", label(&u.name, i));
            if !is_name(&u.name) {
                return Err(ConfigError::new(
                    format!("{at}.name"),
                    "an upstream name is 1-64 characters of [A-Za-z0-9_-]",
                ));
            }
            if !names.insert(u.name.as_str()) {
                return Err(ConfigError::new(
                    format!("{at}.name"),
                    format!("upstream `{}` is declared twice", u.name),
                ));
            }
            let upstream = check_upstream(u, &at, base)?;
            for t in &upstream.tools {
                // One tool name, one upstream: the client sees one flat list.
                if let Some(other) = tools.insert(t.name.clone(), u.name.clone()) {
                    return Err(ConfigError::new(
                        format!("{at}.tools[{}]", t.name),
                        format!("tool `{}` is also served from upstream `{other}`", t.name),
                    ));
                }
            }
            out.push(upstream);
        }
        Ok(out)
    }
}

/// How much longer than the longest upstream call a claim's lease must
/// last: the margin the deployment's webhook rule uses, for the same reason
/// (the gate's own call must be over before anyone may reconcile it).
pub const LEASE_MARGIN_MS: u64 = 1_000;

/// Checks that a claim's lease (`lease_ms`) outlasts every upstream's
/// `call_timeout_ms` plus [`LEASE_MARGIN_MS`]: a lease that ended while the
/// gate's call could still land would let reconciliation record "not
/// applied" for a write that then commits (docs/design.md invariant 8).
/// The error is on `lease_ms` and names the upstream's field too.
pub fn check_lease(upstreams: &[Upstream], lease_ms: u64) -> Result<(), ConfigError> {
    let Some(u) = upstreams.iter().find(|u| {
        let bound = u64::try_from(u.call_timeout.as_millis()).unwrap_or(u64::MAX);
        lease_ms < bound.saturating_add(LEASE_MARGIN_MS)
    }) else {
        return Ok(());
    };
    let bound = u64::try_from(u.call_timeout.as_millis()).unwrap_or(u64::MAX);
    Err(ConfigError::new(
        "lease_ms",
        format!(
            "{lease_ms} ms is shorter than upstreams[{name}].call_timeout_ms ({bound} ms) plus \
             the {LEASE_MARGIN_MS} ms margin: a claim's lease must outlast the upstream call it \
             covers; set lease_ms to at least {} or lower upstreams[{name}].call_timeout_ms",
            bound.saturating_add(LEASE_MARGIN_MS),
            name = u.name,
        ),
    ))
}

fn label(name: &str, i: usize) -> String {
    if is_name(name) {
        name.to_owned()
    } else {
        i.to_string()
    }
}

fn check_upstream(u: &UpstreamFile, at: &str, base: &Path) -> Result<Upstream, ConfigError> {
    let field = |f: &str| format!("{at}.{f}");
    let transport = match (&u.url, &u.command) {
        (Some(_), Some(_)) | (None, None) => {
            return Err(ConfigError::new(
                at.to_owned(),
                "set exactly one of `url` (Streamable HTTP) and `command` (stdio)",
            ));
        }
        (Some(url), None) => {
            if !(url.starts_with("http://") || url.starts_with("https://"))
                || url.len() <= "https://".len()
            {
                return Err(ConfigError::new(
                    field("url"),
                    "must be an absolute http:// or https:// URL",
                ));
            }
            if !u.args.is_empty() || !u.env.is_empty() {
                return Err(ConfigError::new(
                    field("args"),
                    "`args` and `env` belong to a `command` upstream",
                ));
            }
            if let Some(var) = &u.bearer_env
                && !is_env_name(var)
            {
                return Err(ConfigError::new(
                    field("bearer_env"),
                    "must name an environment variable ([A-Za-z_][A-Za-z0-9_]*)",
                ));
            }
            Transport::Http {
                url: url.clone(),
                bearer_env: u.bearer_env.clone(),
            }
        }
        (None, Some(command)) => {
            if command.trim().is_empty() {
                return Err(ConfigError::new(field("command"), "must not be empty"));
            }
            if u.bearer_env.is_some() {
                return Err(ConfigError::new(
                    field("bearer_env"),
                    "a stdio upstream takes no bearer token; give it its credential in `env`",
                ));
            }
            if let Some(k) = u.env.keys().find(|k| !is_env_name(k)) {
                return Err(ConfigError::new(
                    field("env"),
                    format!("`{k}` is not an environment variable name"),
                ));
            }
            Transport::Stdio {
                command: command.clone(),
                args: u.args.clone(),
                env: u.env.clone(),
            }
        }
    };
    if u.pins.as_os_str().is_empty() {
        return Err(ConfigError::new(field("pins"), "must name a file"));
    }
    let timeout = |f: &str, v: Option<u64>, default: u64| {
        let ms = v.unwrap_or(default);
        if ms == 0 || ms > MAX_TIMEOUT_MS {
            Err(ConfigError::new(
                field(f),
                format!("must be 1 to {MAX_TIMEOUT_MS} milliseconds"),
            ))
        } else {
            Ok(Duration::from_millis(ms))
        }
    };
    let connect_timeout = timeout(
        "connect_timeout_ms",
        u.connect_timeout_ms,
        DEFAULT_CONNECT_TIMEOUT_MS,
    )?;
    let call_timeout = timeout(
        "call_timeout_ms",
        u.call_timeout_ms,
        DEFAULT_CALL_TIMEOUT_MS,
    )?;
    let refresh = match u.refresh_secs.unwrap_or(DEFAULT_REFRESH_SECS) {
        0 => None,
        s if s <= MAX_REFRESH_SECS => Some(Duration::from_secs(s)),
        _ => {
            return Err(ConfigError::new(
                field("refresh_secs"),
                format!("must be 0 (off) to {MAX_REFRESH_SECS} seconds"),
            ));
        }
    };
    let mut seen = BTreeSet::new();
    let mut tools = Vec::with_capacity(u.tools.len());
    for (i, t) in u.tools.iter().enumerate() {
        let at = format!("{at}.tools[{}]", label(&t.name, i));
        if !is_name(&t.name) {
            return Err(ConfigError::new(
                format!("{at}.name"),
                "a tool name is 1-64 characters of [A-Za-z0-9_-]",
            ));
        }
        if !seen.insert(t.name.as_str()) {
            return Err(ConfigError::new(
                format!("{at}.name"),
                format!("tool `{}` is declared twice", t.name),
            ));
        }
        tools.push(tool::check_tool(t, &at)?);
    }
    let token_exchange = u
        .token_exchange
        .as_ref()
        .map(|x| check_exchange(x, &transport, &field))
        .transpose()?;
    let access = |a: &Option<EntryAccessFile>, f: &str| -> Result<Option<String>, ConfigError> {
        let Some(a) = a else { return Ok(None) };
        let c = a.capability.trim();
        if c.is_empty() || c.len() > 128 || c.chars().any(char::is_control) {
            return Err(ConfigError::new(
                field(&format!("{f}.capability")),
                "a capability is 1-128 characters without control characters",
            ));
        }
        Ok(Some(c.to_owned()))
    };
    Ok(Upstream {
        name: u.name.clone(),
        transport,
        pins: base.join(&u.pins),
        connect_timeout,
        call_timeout,
        refresh,
        tools,
        token_exchange,
        resources_capability: access(&u.resources, "resources")?,
        prompts_capability: access(&u.prompts, "prompts")?,
    })
}

fn check_exchange(
    x: &TokenExchangeFile,
    transport: &Transport,
    field: &dyn Fn(&str) -> String,
) -> Result<TokenExchange, ConfigError> {
    let at = |f: &str| field(&format!("token_exchange.{f}"));
    let Transport::Http { url, .. } = transport else {
        return Err(ConfigError::new(
            field("token_exchange"),
            "a stdio upstream has no person to call as: token exchange is for `url` upstreams",
        ));
    };
    if !crate::file::settings::secure_url(&x.token_url) {
        return Err(ConfigError::new(
            at("token_url"),
            "must be an https:// URL (http:// only on 127.0.0.1 or localhost): the caller's \
             token travels in it",
        ));
    }
    if x.client_id.is_empty() {
        return Err(ConfigError::new(at("client_id"), "must not be empty"));
    }
    if !is_env_name(&x.client_secret_env) {
        return Err(ConfigError::new(
            at("client_secret_env"),
            "must name an environment variable ([A-Za-z_][A-Za-z0-9_]*)",
        ));
    }
    Ok(TokenExchange {
        token_url: x.token_url.clone(),
        client_id: x.client_id.clone(),
        client_secret_env: x.client_secret_env.clone(),
        resource: x.resource.clone().unwrap_or_else(|| url.clone()),
        audience: x.audience.clone(),
        scope: x.scope.clone(),
    })
}

pub(crate) fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn is_env_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
        listen = "127.0.0.1:8080"
        policy = "policy.toml"

        [[upstreams]]
        name = "shop"
        url = "http://127.0.0.1:8931/mcp"
        bearer_env = "SHOP_MCP_TOKEN"
        pins = "shop.pins.toml"
        call_timeout_ms = 2000

        [[upstreams.tools]]
        name = "refund_order"
        scope.order_id = { from = "argument", pointer = "/order_id" }
        scope.agent = { from = "identity", claim = "principal" }
        scope.tenant = { from = "meta", key = "io.shop/tenant" }
        version_seen = { from = "argument", pointer = "/expected_version" }
        status_tool = { name = "refund_status", key_argument = "operation_key" }

        [[upstreams]]
        name = "local"
        command = "python3"
        args = ["shop_mcp.py", "serve-stdio"]
        env = { SHOP_DB = "shop.sqlite" }
        pins = "local.pins.toml"

        [[upstreams.tools]]
        name = "note"
        version_seen = { from = "meta", key = "io.local/version" }
    "#;

    fn checked(text: &str) -> Result<Vec<Upstream>, ConfigError> {
        McpSection::from_toml(text)?.check(Path::new("/etc/toolgate"))
    }

    #[test]
    fn a_token_exchange_is_for_http_upstreams_over_a_safe_url() {
        let with = |exchange: &str| {
            GOOD.replace(
                "        call_timeout_ms = 2000\n",
                &format!("        call_timeout_ms = 2000\n        token_exchange = {exchange}\n"),
            )
        };
        let ups = checked(&with(
            r#"{ token_url = "https://id.example/token", client_id = "toolgate", client_secret_env = "X_SECRET" }"#,
        ))
        .unwrap();
        let x = ups[0].token_exchange.as_ref().unwrap();
        // The resource asked for is the upstream's own URL unless set.
        assert_eq!(x.resource, "http://127.0.0.1:8931/mcp");
        assert_eq!((x.audience.as_deref(), x.scope.as_deref()), (None, None));
        assert!(ups[1].token_exchange.is_none());
        for (exchange, field, says) in [
            (
                r#"{ token_url = "http://id.example/token", client_id = "t", client_secret_env = "X" }"#,
                "upstreams[shop].token_exchange.token_url",
                "https://",
            ),
            (
                r#"{ token_url = "https://id.example/token", client_id = "", client_secret_env = "X" }"#,
                "upstreams[shop].token_exchange.client_id",
                "empty",
            ),
            (
                r#"{ token_url = "https://id.example/token", client_id = "t", client_secret_env = "not a var" }"#,
                "upstreams[shop].token_exchange.client_secret_env",
                "environment variable",
            ),
        ] {
            let e = checked(&with(exchange)).unwrap_err();
            assert_eq!(e.field(), field, "{e}");
            assert!(e.message().contains(says), "{e}");
        }
        let e = checked(&with(
            r#"{ token_url = "https://id.example/token", client_id = "t", client_secret = "inline" }"#,
        ))
        .unwrap_err();
        assert!(e.to_string().contains("client_secret"), "{e}");
        // A stdio child has no person to call as.
        let stdio = GOOD.replace(
            "        pins = \"local.pins.toml\"\n",
            "        pins = \"local.pins.toml\"\n        token_exchange = { token_url = \"https://id.example/token\", client_id = \"t\", client_secret_env = \"X\" }\n",
        );
        let e = checked(&stdio).unwrap_err();
        assert_eq!(e.field(), "upstreams[local].token_exchange", "{e}");
    }

    #[test]
    fn a_whole_file_reads_into_checked_upstreams() {
        let ups = checked(GOOD).unwrap();
        assert_eq!(ups.len(), 2);
        assert_eq!(
            ups[0].transport,
            Transport::Http {
                url: "http://127.0.0.1:8931/mcp".into(),
                bearer_env: Some("SHOP_MCP_TOKEN".into())
            }
        );
        assert_eq!(ups[0].pins, Path::new("/etc/toolgate/shop.pins.toml"));
        assert_eq!(ups[0].call_timeout, Duration::from_millis(2000));
        assert_eq!(
            ups[0].connect_timeout,
            Duration::from_millis(DEFAULT_CONNECT_TIMEOUT_MS)
        );
        let refund = &ups[0].tools[0];
        assert_eq!(
            refund.scope["order_id"],
            ScopeSource::Argument("/order_id".into())
        );
        assert_eq!(refund.scope["agent"], ScopeSource::Principal);
        assert_eq!(
            refund.scope["tenant"],
            ScopeSource::Meta("io.shop/tenant".into())
        );
        assert_eq!(
            refund.version_seen,
            Some(VersionSource::Argument("/expected_version".into()))
        );
        assert!(matches!(ups[1].transport, Transport::Stdio { .. }));
        assert_eq!(
            ups[1].tools[0].version_seen,
            Some(VersionSource::Meta("io.local/version".into()))
        );
    }

    #[test]
    fn pins_are_compared_again_every_minute_unless_told_otherwise() {
        let ups = checked(GOOD).unwrap();
        assert_eq!(
            ups[0].refresh,
            Some(Duration::from_secs(DEFAULT_REFRESH_SECS))
        );
        let set = |secs: &str| {
            checked(&GOOD.replacen(
                "call_timeout_ms = 2000",
                &format!("call_timeout_ms = 2000\nrefresh_secs = {secs}"),
                1,
            ))
        };
        assert_eq!(set("5").unwrap()[0].refresh, Some(Duration::from_secs(5)));
        assert_eq!(set("0").unwrap()[0].refresh, None);
        let e = set("86401").unwrap_err();
        assert_eq!(e.field(), "upstreams[shop].refresh_secs");
        assert!(e.message().contains("0 (off)"), "{e}");
    }

    #[test]
    fn no_upstreams_is_no_gateway() {
        assert!(checked("listen = \"127.0.0.1:1\"").unwrap().is_empty());
    }

    /// Each broken file fails with the field it names and a message that
    /// says what to write instead.
    #[test]
    fn errors_name_the_field() {
        let cases: &[(&str, &str, &str, &str)] = &[
            // (replace this, with this, field, message contains)
            (
                "bearer_env = \"SHOP_MCP_TOKEN\"",
                "bearer_emv = \"SHOP_MCP_TOKEN\"",
                "",
                "bearer_emv",
            ),
            (
                "url = \"http://127.0.0.1:8931/mcp\"",
                "url = \"http://127.0.0.1:8931/mcp\"\ncommand = \"x\"",
                "upstreams[shop]",
                "exactly one of",
            ),
            (
                "url = \"http://127.0.0.1:8931/mcp\"",
                "url = \"ftp://x/mcp\"",
                "upstreams[shop].url",
                "absolute http",
            ),
            (
                "pointer = \"/order_id\"",
                "pointer = \"order_id\"",
                "upstreams[shop].tools[refund_order].scope.order_id",
                "JSON pointer",
            ),
            (
                "claim = \"principal\"",
                "claim = \"email\"",
                "upstreams[shop].tools[refund_order].scope.agent",
                "unknown identity claim `email`",
            ),
            (
                "key = \"io.shop/tenant\"",
                "key = \"io.toolgate/operation-key\"",
                "upstreams[shop].tools[refund_order].scope.tenant",
                "reserved",
            ),
            (
                "call_timeout_ms = 2000",
                "call_timeout_ms = 0",
                "upstreams[shop].call_timeout_ms",
                "milliseconds",
            ),
            (
                "name = \"local\"",
                "name = \"shop\"",
                "upstreams[shop].name",
                "declared twice",
            ),
            (
                "name = \"note\"",
                "name = \"refund_order\"",
                "upstreams[local].tools[refund_order]",
                "also served from upstream `shop`",
            ),
            (
                "env = { SHOP_DB = \"shop.sqlite\" }",
                "env = { \"SHOP DB\" = \"shop.sqlite\" }",
                "upstreams[local].env",
                "not an environment variable",
            ),
            (
                "status_tool = { name = \"refund_status\", key_argument = \"operation_key\" }",
                "status_tool = { name = \"refund_order\", key_argument = \"operation_key\" }",
                "upstreams[shop].tools[refund_order].status_tool.name",
                "another tool",
            ),
        ];
        for (from, to, field, contains) in cases {
            assert!(GOOD.contains(from), "{from}");
            let e = checked(&GOOD.replacen(from, to, 1)).unwrap_err();
            assert_eq!(e.field(), *field, "{e}");
            assert!(e.message().contains(contains), "{e}");
        }
    }

    #[test]
    fn a_lease_must_outlast_every_upstream_call_and_the_margin() {
        let ups = checked(GOOD).unwrap();
        // shop: 2000 ms; local: the 30000 ms default.
        let e = check_lease(&ups, 30_999).unwrap_err();
        assert_eq!(e.field(), "lease_ms");
        assert!(
            e.message()
                .contains("upstreams[local].call_timeout_ms (30000 ms)"),
            "{e}"
        );
        assert!(e.message().contains("at least 31000"), "{e}");
        check_lease(&ups, 31_000).unwrap();
        let e = check_lease(&ups[..1], 2_999).unwrap_err();
        assert!(
            e.message().contains("upstreams[shop].call_timeout_ms"),
            "{e}"
        );
        check_lease(&ups[..1], 3_000).unwrap();
        check_lease(&[], 1).unwrap();
    }

    #[test]
    fn argument_scopes_are_the_fields_taken_from_arguments() {
        let scopes = argument_scopes(&checked(GOOD).unwrap());
        assert_eq!(scopes.get("refund_order", "order_id"), Some("/order_id"));
        // From the identity and from _meta: not the arguments'.
        assert_eq!(scopes.get("refund_order", "agent"), None);
        assert_eq!(scopes.get("refund_order", "tenant"), None);
        assert_eq!(scopes.get("note", "order_id"), None);
    }
}
