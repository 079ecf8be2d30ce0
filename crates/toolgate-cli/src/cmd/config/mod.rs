//! The deployment file `serve --config` runs (one loader, so `config check`
//! accepts exactly what `serve` starts with): its model and the checks
//! `Deployment::load` makes. `check.rs` is `toolgate config check`, `db.rs`
//! where the database URL comes from (`--db`, `TOOLGATE_DB_URL`, the file).

mod check;
mod db;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toolgate::contract::Policy;
use toolgate::pipeline::{AuthzRequest, Principal};
use toolgate_cedar::{CedarAuthorizer, EntityError, EntityRecord, EntitySource};
use toolgate_deploy::DeploySection;
use toolgate_http::Settings;
use toolgate_service::{ApiKey, ExecutionMode, KeyRing};
use toolgate_support_desk::cedar as desk_cedar;

pub use check::{Command, check_file, run};
use db::check_db_url;
pub use db::{DB_URL_ENV, DbArgs, resolve_db};

/// The file as written (TOML). Unknown fields are errors: a misspelt
/// `lease_ms` must not silently keep the default.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    listen: Option<SocketAddr>,
    db: Option<String>,
    policy: PathBuf,
    cedar: Option<PathBuf>,
    lease_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    body_limit_bytes: Option<usize>,
    max_result_bytes: Option<usize>,
    idempotency_max_bytes: Option<usize>,
    idempotency_capacity: Option<usize>,
    header_read_timeout_ms: Option<u64>,
    connection_limit: Option<usize>,
    connection_limit_per_peer: Option<usize>,
    probe_headroom: Option<usize>,
    max_requests_per_connection: Option<u64>,
    max_connection_age_ms: Option<u64>,
    /// The URL reviewers open `/review` at: `https://…` (the session
    /// cookie is `Secure`) or `http://…` (it is not: loopback demos).
    public_url: Option<String>,
    /// `[review]`: the queue's bounds, and the optional webhook announcing
    /// new review items.
    review: Option<ReviewFile>,
    #[serde(default)]
    keys: Vec<KeyEntry>,
    /// `"support-desk"`: the built-in example application (its state
    /// source, executor and Cedar entities), instead of [[tools]].
    application: Option<String>,
    /// Read by toolgate-deploy (`DeploySection`) from the same text;
    /// declared here so that the file's other fields can refuse unknown keys.
    #[expect(
        dead_code,
        reason = "toolgate-deploy reads [app_db] from the file's text"
    )]
    app_db: Option<toml::Value>,
    tools: Option<toml::Value>,
    /// Read by toolgate-mcp (`McpSection`) from the same text.
    #[expect(
        dead_code,
        reason = "toolgate-mcp reads [[upstreams]] from the file's text"
    )]
    upstreams: Option<toml::Value>,
}

/// `[review]`: the queue's bounds, and where new review items are
/// announced (docs/http-api.md). The signing secret comes from the
/// environment, never the file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReviewFile {
    webhook_url: Option<String>,
    webhook_secret_env: Option<String>,
    webhook_timeout_ms: Option<u64>,
    max_open_items: Option<u64>,
    max_open_items_per_principal: Option<u64>,
    rejection_window_ms: Option<u64>,
}

/// The one built-in application a file may name.
pub const SUPPORT_DESK: &str = "support-desk";

/// What performs the tools' reads and writes.
pub enum Application {
    /// The support-desk example built into the binary (the demo's
    /// application, for replicas of it).
    SupportDesk,
    /// The file's own `[app_db]` and `[[tools]]`: any application, no Rust.
    Tools(DeploySection),
}

/// One `[[keys]]` entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    sha256: String,
    principal: String,
    #[serde(default)]
    capabilities: Vec<String>,
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

/// A deployment file, loaded and checked.
pub struct Deployment {
    pub listen: Option<SocketAddr>,
    /// The file's `db`, syntax-checked; `None` when the file has none.
    pub db: Option<String>,
    pub policy_path: PathBuf,
    pub policy: Policy,
    /// `None`: the support desk's policies.
    pub cedar_path: Option<PathBuf>,
    pub cedar: String,
    pub keys: Vec<LoadedKey>,
    /// The HTTP door's limits.
    pub settings: Settings,
    /// The service's: lease, result cap, review queue and webhook.
    pub service: toolgate_service::Settings,
    pub application: Application,
    /// `[[upstreams]]`: the MCP servers served at `/mcp`, checked (their
    /// pin files are read when the gateway starts).
    pub upstreams: Vec<toolgate_mcp::config::Upstream>,
}

/// A `[[keys]]` entry as the sidecar holds it, and its capabilities as
/// written (for `config check` to show).
pub struct LoadedKey {
    pub key: ApiKey,
    pub capabilities: Vec<String>,
}

/// What is wrong with a deployment file, and where; the file is always
/// named and the field never empty (`line 3` for a TOML error).
pub use toolgate_deploy::ConfigError;

impl Deployment {
    /// Reads `path` and everything it names (the policy and Cedar files,
    /// relative to its directory), and checks each part: the TOML, the
    /// policy (with its schema audit), the Cedar policies, the keys, the
    /// settings and the database URL's syntax. Connects to nothing.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let err = |field: &str, message: String| ConfigError::new(field, message).in_file(path);
        // A section's error without a field is about the section as a whole.
        let section_err = |section: &str, field: &str, message: &str| {
            err(
                if field.is_empty() { section } else { field },
                message.to_owned(),
            )
        };
        let text = std::fs::read_to_string(path).map_err(|e| err("file", e.to_string()))?;
        let file: File = toml::from_str(&text).map_err(|e| {
            let field = e.span().map_or_else(
                || "TOML".to_owned(),
                |s| format!("line {}", 1 + text[..s.start].matches('\n').count()),
            );
            err(&field, e.message().to_owned())
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let application = match (file.application.as_deref(), file.tools.is_some()) {
            (Some(SUPPORT_DESK), false) => Application::SupportDesk,
            (Some(SUPPORT_DESK), true) => {
                return Err(err(
                    "application",
                    format!("\"{SUPPORT_DESK}\" brings its own wiring: remove [[tools]] or it"),
                ));
            }
            (Some(other), _) => {
                return Err(err(
                    "application",
                    format!("{other:?}: the only built-in application is \"{SUPPORT_DESK}\""),
                ));
            }
            (None, _) => {
                let section = DeploySection::from_toml(&text)
                    .map_err(|e| section_err("tools", e.field(), e.message()))?;
                if section.tools.is_empty() {
                    return Err(err(
                        "tools",
                        format!(
                            "no [[tools]]: each policy tool needs an entry saying where its \
                             entities and version are read and who writes (docs/deploy.md); \
                             application = \"{SUPPORT_DESK}\" runs the built-in example instead"
                        ),
                    ));
                }
                Application::Tools(section)
            }
        };
        let upstreams = toolgate_mcp::config::McpSection::from_toml(&text)
            .and_then(|section| section.check(base))
            .map_err(|e| section_err("upstreams", e.field(), e.message()))?;
        check_upstream_tools(&upstreams, &application).map_err(|(f, m)| err(&f, m))?;
        let policy_path = base.join(&file.policy);
        let policy_text = std::fs::read_to_string(&policy_path)
            .map_err(|e| err("policy", format!("reading {}: {e}", policy_path.display())))?;
        // A scope field the gateway takes from the argument of its own name
        // may be an argument too (docs/policy.md); with no upstreams this
        // is `Policy::load`.
        let policy = Policy::load_with(
            &policy_text,
            &toolgate_mcp::config::argument_scopes(&upstreams),
        )
        .map_err(|e| err("policy", format!("{}: {e}", policy_path.display())))?;
        let (cedar_path, cedar) = match &file.cedar {
            Some(p) => {
                let p = base.join(p);
                let text = std::fs::read_to_string(&p)
                    .map_err(|e| err("cedar", format!("reading {}: {e}", p.display())))?;
                (Some(p), text)
            }
            None if matches!(application, Application::SupportDesk) => {
                (None, desk_cedar::POLICIES.to_owned())
            }
            None => {
                return Err(err(
                    "cedar",
                    "required with [[tools]]: the file of Cedar policies the tools are decided by"
                        .to_owned(),
                ));
            }
        };
        if matches!(application, Application::SupportDesk) {
            // Parsed as `serve` parses them, with no entities to read. With
            // [[tools]], each tool's mapping parses them when it loads.
            CedarAuthorizer::new(&cedar, &desk_cedar::mapping(), NoEntities)
                .map_err(|e| err("cedar", e.to_string()))?;
        }
        let mut keys = Vec::with_capacity(file.keys.len());
        for (i, k) in file.keys.iter().enumerate() {
            let key = k
                .to_api_key()
                .map_err(|(f, m)| err(&format!("keys[{i}]{f}"), m))?;
            keys.push(LoadedKey {
                key,
                capabilities: k.capabilities.clone(),
            });
        }
        if keys.is_empty() {
            return Err(err(
                "keys",
                "no [[keys]]: every request would be refused (toolgate keys new makes one)"
                    .to_owned(),
            ));
        }
        KeyRing::new(keys.iter().map(|k| k.key.clone())).map_err(|e| err("keys", e.to_string()))?;
        if matches!(application, Application::Tools(_))
            && let Some(i) = keys
                .iter()
                .position(|k| k.key.mode == ExecutionMode::Client)
        {
            // A client key would take every decision as the client's to
            // write, and a webhook tool's executor would never be called.
            return Err(err(
                &format!("keys[{i}].execution"),
                "\"client\" with [[tools]]: each tool's executor decides who writes \
                 (executor = { kind = \"client\" } hands the permit to the caller); \
                 remove the line or write \"in_process\""
                    .to_owned(),
            ));
        }
        let positive = |field: &str, v: Option<u64>| match v {
            Some(0) => Err(err(field, "must be greater than 0".to_owned())),
            _ => Ok(v),
        };
        let lease_ms = positive("lease_ms", file.lease_ms)?;
        let timeout_ms = positive("request_timeout_ms", file.request_timeout_ms)?;
        let header_ms = positive("header_read_timeout_ms", file.header_read_timeout_ms)?;
        for (field, v) in [
            ("body_limit_bytes", file.body_limit_bytes),
            ("max_result_bytes", file.max_result_bytes),
            ("connection_limit", file.connection_limit),
            ("connection_limit_per_peer", file.connection_limit_per_peer),
            ("idempotency_capacity", file.idempotency_capacity),
        ] {
            if v == Some(0) {
                return Err(err(field, "must be greater than 0".to_owned()));
            }
        }
        let max_requests = positive(
            "max_requests_per_connection",
            file.max_requests_per_connection,
        )?;
        let max_age_ms = positive("max_connection_age_ms", file.max_connection_age_ms)?;
        if let Some(url) = &file.public_url {
            let lower = url.to_ascii_lowercase();
            let host = lower
                .strip_prefix("https://")
                .or_else(|| lower.strip_prefix("http://"));
            if host.is_none_or(str::is_empty) {
                return Err(err(
                    "public_url",
                    "must be an http:// or https:// URL (the address reviewers open /review at)"
                        .to_owned(),
                ));
            }
        }
        // One meaning of "too large" for a result: the store's ceiling
        // (what any stored result must meet when read back) bounds the cap.
        let ceiling = toolgate::claim::RESULT_JSON_LIMITS.max_bytes();
        if let Some(cap) = file.max_result_bytes
            && cap > ceiling
        {
            return Err(err(
                "max_result_bytes",
                format!("{cap} is over {ceiling}, the largest result a claim store records"),
            ));
        }
        let review_webhook = match &file.review {
            None => None,
            Some(r) => match (&r.webhook_url, &r.webhook_secret_env) {
                (None, None) => None,
                (None, Some(_)) => {
                    return Err(err(
                        "review.webhook_url",
                        "missing: webhook_secret_env signs the webhook's requests".to_owned(),
                    ));
                }
                (Some(_), None) => {
                    return Err(err(
                        "review.webhook_secret_env",
                        "missing: the webhook's requests must be signed".to_owned(),
                    ));
                }
                (Some(url), Some(secret_env)) => {
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        return Err(err(
                            "review.webhook_url",
                            "must be an http:// or https:// URL".to_owned(),
                        ));
                    }
                    let secret = std::env::var(secret_env)
                        .ok()
                        .filter(|s| !s.is_empty())
                        .ok_or_else(|| {
                            err(
                                "review.webhook_secret_env",
                                format!("{secret_env} is not set or empty"),
                            )
                        })?;
                    let timeout = positive("review.webhook_timeout_ms", r.webhook_timeout_ms)?;
                    Some(toolgate_service::ReviewWebhook {
                        url: url.clone(),
                        secret: secret.into_bytes(),
                        timeout: timeout.map_or(Duration::from_secs(5), Duration::from_millis),
                    })
                }
            },
        };
        let defaults = Settings::default();
        let service_defaults = toolgate_service::Settings::default();
        let mut review_queue = service_defaults.review_queue;
        if let Some(r) = &file.review {
            for (field, v) in [
                ("review.max_open_items", r.max_open_items),
                (
                    "review.max_open_items_per_principal",
                    r.max_open_items_per_principal,
                ),
                ("review.rejection_window_ms", r.rejection_window_ms),
            ] {
                if v == Some(0) {
                    return Err(err(field, "must be greater than 0".to_owned()));
                }
            }
            review_queue.total = r.max_open_items.unwrap_or(review_queue.total);
            review_queue.per_principal = r
                .max_open_items_per_principal
                .unwrap_or(review_queue.per_principal);
            if let Some(ms) = r.rejection_window_ms {
                review_queue.rejection_window_ms = i64::try_from(ms)
                    .map_err(|_| err("review.rejection_window_ms", "is out of range".to_owned()))?;
            }
        }
        let service = toolgate_service::Settings {
            review_webhook,
            lease: lease_ms.map_or(service_defaults.lease, Duration::from_millis),
            max_result_bytes: file
                .max_result_bytes
                .unwrap_or(service_defaults.max_result_bytes),
            review_queue,
            public_url: file.public_url.clone(),
        };
        let settings = Settings {
            request_timeout: timeout_ms.map_or(defaults.request_timeout, Duration::from_millis),
            body_limit: file.body_limit_bytes.unwrap_or(defaults.body_limit),
            idempotency_max_bytes: file
                .idempotency_max_bytes
                .unwrap_or(defaults.idempotency_max_bytes),
            header_read_timeout: header_ms
                .map_or(defaults.header_read_timeout, Duration::from_millis),
            max_connections: file.connection_limit.unwrap_or(defaults.max_connections),
            max_connections_per_peer: file
                .connection_limit_per_peer
                .unwrap_or(defaults.max_connections_per_peer),
            probe_headroom: file.probe_headroom.unwrap_or(defaults.probe_headroom),
            max_requests_per_connection: max_requests
                .unwrap_or(defaults.max_requests_per_connection),
            max_connection_age: max_age_ms
                .map_or(defaults.max_connection_age, Duration::from_millis),
            idempotency_capacity: file
                .idempotency_capacity
                .unwrap_or(defaults.idempotency_capacity),
        };
        if let Application::Tools(section) = &application {
            // Checked here, before anything connects, so that `serve` and
            // `config check` both refuse it.
            let lease_ms = u64::try_from(service.lease.as_millis()).unwrap_or(u64::MAX);
            section
                .check_lease(lease_ms)
                .map_err(|e| err(e.field(), e.message().to_owned()))?;
            toolgate_mcp::config::check_lease(&upstreams, lease_ms)
                .map_err(|e| err(e.field(), e.message().to_owned()))?;
        }
        if let Some(db) = &file.db {
            check_db_url(db).map_err(|m| err("db", m))?;
        }
        Ok(Self {
            listen: file.listen,
            db: file.db,
            policy_path,
            policy,
            cedar_path,
            cedar,
            keys,
            settings,
            service,
            application,
            upstreams,
        })
    }
}

/// The MCP gateway's tools and the `[[tools]]` wiring agree: each tool an
/// upstream serves has a `[[tools]]` entry with `executor = { kind =
/// "mcp_upstream" }` (its entities and state are read as any tool's), and
/// each such entry names a tool an upstream serves, so an upstream's tool
/// is never written by another executor and an `mcp_upstream` entry never
/// lacks its upstream. `version_seen = { from = "none" }` is refused: the
/// replay window it needs is not built.
fn check_upstream_tools(
    upstreams: &[toolgate_mcp::config::Upstream],
    application: &Application,
) -> Result<(), (String, String)> {
    use toolgate_mcp::config::VersionSource;
    let served: Vec<(&str, &str)> = upstreams
        .iter()
        .flat_map(|u| {
            u.tools
                .iter()
                .map(move |t| (u.name.as_str(), t.name.as_str()))
        })
        .collect();
    let section = match application {
        Application::Tools(section) => section,
        Application::SupportDesk if upstreams.is_empty() => return Ok(()),
        Application::SupportDesk => {
            return Err((
                "upstreams".to_owned(),
                format!(
                    "the MCP gateway needs [[tools]]: \"{SUPPORT_DESK}\" wires its own tools only"
                ),
            ));
        }
    };
    for u in upstreams {
        for t in &u.tools {
            if matches!(t.version_seen, VersionSource::None { .. }) {
                return Err((
                    format!("upstreams[{}].tools[{}].version_seen", u.name, t.name),
                    "{ from = \"none\" } is not served yet: take the version from an argument \
                     or from _meta"
                        .to_owned(),
                ));
            }
        }
    }
    for (upstream, tool) in &served {
        let entry = section.tools.iter().find(|t| t.name == *tool);
        if !entry.is_some_and(|t| t.executor == toolgate_deploy::ExecutorConfig::McpUpstream) {
            return Err((
                format!("tools[{tool}].executor"),
                format!(
                    "upstream `{upstream}` serves `{tool}`: its [[tools]] entry needs \
                     executor = {{ kind = \"mcp_upstream\" }} (and its state and cedar)"
                ),
            ));
        }
    }
    if let Some(t) = section.tools.iter().find(|t| {
        t.executor == toolgate_deploy::ExecutorConfig::McpUpstream
            && !served.iter().any(|(_, s)| *s == t.name)
    }) {
        return Err((
            format!("tools[{}].executor", t.name),
            "\"mcp_upstream\", but no [[upstreams.tools]] entry serves this tool".to_owned(),
        ));
    }
    Ok(())
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

/// An entity source for parsing Cedar policies only: `config check` never
/// authorises anything.
struct NoEntities;

impl EntitySource for NoEntities {
    async fn entities(&self, _: &AuthzRequest<'_>) -> Result<Vec<EntityRecord>, EntityError> {
        Err(EntityError::Invalid(
            "no entities: the policies were only parsed".to_owned(),
        ))
    }
}
