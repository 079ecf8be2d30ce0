//! The deployment file `serve --config` runs (one loader, so `config check`
//! accepts exactly what `serve` starts with), `toolgate config check`, and
//! where the database URL comes from (`--db`, `TOOLGATE_DB_URL`, the file).

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde::Deserialize;
use toolgate::contract::Policy;
use toolgate::pipeline::{AuthzRequest, Principal};
use toolgate_cedar::{CedarAuthorizer, EntityError, EntityRecord, EntitySource};
use toolgate_deploy::DeploySection;
use toolgate_http::{ApiKey, ExecutionMode, KeyRing, Settings};
use toolgate_store::{AnyClaimStore, Backend, redact_url};
use toolgate_support_desk::cedar as desk_cedar;

use crate::io::{io_failure, print_line};

/// The environment variable that names the database when `--db` does not:
/// unlike an argument, it does not show in `ps` to every user of the host.
pub const DB_URL_ENV: &str = "TOOLGATE_DB_URL";

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
    pub settings: Settings,
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

/// What is wrong with a deployment file, and where.
#[derive(Debug)]
pub struct ConfigError {
    pub file: PathBuf,
    /// The field (`policy`, `keys[1].execution`, `line 3` for a TOML error).
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.file.display(),
            self.field,
            self.message
        )
    }
}

impl Deployment {
    /// Reads `path` and everything it names (the policy and Cedar files,
    /// relative to its directory), and checks each part: the TOML, the
    /// policy (with its schema audit), the Cedar policies, the keys, the
    /// settings and the database URL's syntax. Connects to nothing.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let err = |field: &str, message: String| ConfigError {
            file: path.to_owned(),
            field: field.to_owned(),
            message,
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
                let section = DeploySection::from_toml(&text).map_err(|e| {
                    err(
                        if e.field().is_empty() {
                            "tools"
                        } else {
                            e.field()
                        },
                        e.message().to_owned(),
                    )
                })?;
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
            .map_err(|e| {
                err(
                    if e.field().is_empty() {
                        "upstreams"
                    } else {
                        e.field()
                    },
                    e.message().to_owned(),
                )
            })?;
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
                    Some(toolgate_http::ReviewWebhook {
                        url: url.clone(),
                        secret: secret.into_bytes(),
                        timeout: timeout.map_or(Duration::from_secs(5), Duration::from_millis),
                    })
                }
            },
        };
        let defaults = Settings::default();
        let mut review_queue = defaults.review_queue;
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
        let settings = Settings {
            review_webhook,
            lease: lease_ms.map_or(defaults.lease, Duration::from_millis),
            request_timeout: timeout_ms.map_or(defaults.request_timeout, Duration::from_millis),
            body_limit: file.body_limit_bytes.unwrap_or(defaults.body_limit),
            max_result_bytes: file.max_result_bytes.unwrap_or(defaults.max_result_bytes),
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
            review_queue,
            public_url: file.public_url.clone(),
        };
        if let Application::Tools(section) = &application {
            // Checked here, before anything connects, so that `serve` and
            // `config check` both refuse it.
            let lease_ms = u64::try_from(settings.lease.as_millis()).unwrap_or(u64::MAX);
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

/// The URL's syntax as the store reads it, and the certificate files it
/// names (`sslrootcert`, `sslcert`, `sslkey`, `ssl-ca`, ...) exist, so a
/// typo shows here rather than at the first connection.
fn check_db_url(url: &str) -> Result<Backend, String> {
    let backend = AnyClaimStore::check_url(url).map_err(|e| e.message().to_owned())?;
    if let Some((_, query)) = url.split_once('?') {
        for (name, value) in query.split('&').filter_map(|p| p.split_once('=')) {
            let is_file = matches!(
                name.to_ascii_lowercase().as_str(),
                "sslrootcert" | "sslcert" | "sslkey" | "ssl-ca" | "ssl-cert" | "ssl-key"
            );
            // sqlx also takes the certificate itself (PEM) inline.
            if is_file && !value.starts_with("-----BEGIN") && !Path::new(value).is_file() {
                return Err(format!(
                    "{}: {name}: no such file: {value}",
                    redact_url(url)
                ));
            }
        }
    }
    Ok(backend)
}

/// Where a command's database URL came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbSource {
    Flag,
    Env,
    File(PathBuf),
}

impl fmt::Display for DbSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flag => f.write_str("--db"),
            Self::Env => f.write_str(DB_URL_ENV),
            Self::File(p) => write!(f, "`db` in {}", p.display()),
        }
    }
}

/// The database URL by precedence: `--db`, then `TOOLGATE_DB_URL` (when
/// set and not empty), then the deployment file's `db`. `None` when none
/// names one; the caller applies its default or refuses.
pub fn resolve_db(flag: Option<&str>, file: Option<(&str, &Path)>) -> Option<(String, DbSource)> {
    if let Some(url) = flag {
        return Some((url.to_owned(), DbSource::Flag));
    }
    if let Ok(url) = std::env::var(DB_URL_ENV)
        && !url.is_empty()
    {
        return Some((url, DbSource::Env));
    }
    file.map(|(url, path)| (url.to_owned(), DbSource::File(path.to_owned())))
}

/// The database flags of the operator commands (`claims stuck`,
/// `claims reconcile`).
#[derive(clap::Args)]
pub struct DbArgs {
    /// The claim store: sqlite://PATH, postgres://... or mysql://...
    /// Without it: $TOOLGATE_DB_URL, then `db` in --config's file.
    #[arg(long, value_name = "URL")]
    db: Option<String>,
    /// A deployment file (as for `serve --config`) whose `db` names the
    /// store when neither --db nor TOOLGATE_DB_URL does.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

impl DbArgs {
    /// The deployment file given with --config, if any.
    pub fn config(&self) -> Option<&Path> {
        self.config.as_deref()
    }

    /// The URL to open, or the message to print (exit 2). The file is
    /// read only when neither --db nor the environment names a database,
    /// so a broken file does not stand in the way of an explicit URL.
    pub fn url(&self) -> Result<String, String> {
        if let Some((url, _)) = resolve_db(self.db.as_deref(), None) {
            return Ok(url);
        }
        let Some(path) = &self.config else {
            return Err(format!(
                "no database: give --db URL, set {DB_URL_ENV}, or --config FILE"
            ));
        };
        Deployment::load(path)
            .map_err(|e| e.to_string())?
            .db
            .ok_or_else(|| {
                format!(
                    "no database: {} has no `db`, and neither --db nor {DB_URL_ENV} is set",
                    path.display()
                )
            })
    }
}

/// Check a deployment's configuration.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    Check(CheckArgs),
}

/// Validate a deployment file without starting anything.
///
/// Reads FILE as `toolgate serve --config FILE` does and checks every part:
/// the TOML and its fields, the policy it names (loaded with its schema
/// audit), the Cedar policies, each [[keys]] entry (digest, principal,
/// capabilities, execution mode; no principal twice), the settings, and
/// the database URL's syntax (and that certificate files it names exist),
/// and each [[tools]] entry: its executor, state source and entity sources
/// against the policy, with every SQL query prepared against the
/// application's database ([app_db]; a read-only connection, the only one
/// it makes). It never connects to the claim store and binds nothing.
///
/// The database checked is the one `serve` would use: --db, else
/// TOOLGATE_DB_URL, else the file's `db`.
///
/// Prints what it found, one line per part, and exits 0; on the first
/// problem prints `FILE: FIELD: what is wrong` on stderr and exits 2.
///
/// Example:
///
///   $ toolgate config check /etc/toolgate/deploy.toml
///   config /etc/toolgate/deploy.toml: ok
///   listen 127.0.0.1:8080
///   db postgres://toolgate:***@db.internal/toolgate?sslmode=verify-full (PostgreSQL, from `db` in ...)
///   policy /etc/toolgate/policy.toml: 1 tool (apply_goodwill_credit)
///   ...
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
struct CheckArgs {
    /// The deployment file (TOML), as given to `serve --config`.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Check this database URL instead of TOOLGATE_DB_URL or the file's.
    #[arg(long, value_name = "URL")]
    db: Option<String>,
}

pub fn run(args: Args) -> ExitCode {
    match args.command {
        Command::Check(args) => check(&args),
    }
}

/// `toolgate config check FILE` with no `--db`: what `toolgate init` ends
/// with, so the scaffold is judged by the same checks as any file.
pub fn check_file(file: &Path) -> ExitCode {
    check(&CheckArgs {
        file: file.to_path_buf(),
        db: None,
    })
}

fn check(args: &CheckArgs) -> ExitCode {
    let d = match Deployment::load(&args.file) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("toolgate config check: {e}");
            return ExitCode::from(2);
        }
    };
    let mut out = vec![format!("config {}: ok", args.file.display())];
    out.push(match d.listen {
        Some(a) => format!("listen {a}"),
        None => "listen 127.0.0.1:8080 (default)".to_owned(),
    });
    let file_db = d.db.as_deref().map(|db| (db, args.file.as_path()));
    match resolve_db(args.db.as_deref(), file_db) {
        Some((url, source)) => match check_db_url(&url) {
            Ok(backend) => out.push(format!(
                "db {} ({}, from {source})",
                redact_url(&url),
                backend_name(backend)
            )),
            Err(message) => {
                let field = match source {
                    DbSource::File(_) => "db".to_owned(),
                    other => other.to_string(),
                };
                eprintln!(
                    "toolgate config check: {}: {field}: {message}",
                    args.file.display()
                );
                return ExitCode::from(2);
            }
        },
        None => {
            eprintln!(
                "toolgate config check: {}: db: no database: the file has no `db`, and \
                 neither --db nor {DB_URL_ENV} is set",
                args.file.display()
            );
            return ExitCode::from(2);
        }
    }
    let tools: Vec<&str> = d.policy.tools().iter().map(|t| t.name()).collect();
    out.push(format!(
        "policy {}: {} tool{} ({})",
        d.policy_path.display(),
        tools.len(),
        if tools.len() == 1 { "" } else { "s" },
        tools.join(", ")
    ));
    out.push(match &d.cedar_path {
        Some(p) => format!("cedar {}: parsed", p.display()),
        None => "cedar: the support desk's policies (built in)".to_owned(),
    });
    match &d.application {
        Application::SupportDesk => {
            out.push(format!("application {SUPPORT_DESK}: built in"));
        }
        Application::Tools(section) => {
            // The one check that needs a connection: every query is
            // prepared against the application's database, as at start.
            let base = args.file.parent().unwrap_or(Path::new("."));
            let loaded = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
                .and_then(|rt| {
                    rt.block_on(toolgate_deploy::Deployment::load(
                        section, base, &d.policy, &d.cedar,
                    ))
                    .map_err(|e| e.in_file(&args.file).to_string())
                });
            if let Err(e) = loaded {
                eprintln!("toolgate config check: {e}");
                return ExitCode::from(2);
            }
            for t in &section.tools {
                let executor = match &t.executor {
                    toolgate_deploy::ExecutorConfig::Client => "client".to_owned(),
                    toolgate_deploy::ExecutorConfig::McpUpstream => "mcp_upstream".to_owned(),
                    toolgate_deploy::ExecutorConfig::Webhook { url, .. } => {
                        format!("webhook {url}")
                    }
                };
                let entities: Vec<&str> = t.entities.iter().map(|e| e.type_name()).collect();
                out.push(format!(
                    "tool {}: executor {executor}, entities [{}], queries prepared",
                    t.name,
                    entities.join(", ")
                ));
            }
        }
    }
    out.push(format!("keys: {}", d.keys.len()));
    for k in &d.keys {
        out.push(format!(
            "  {} capabilities=[{}] execution={}{}",
            k.key.principal.id(),
            k.capabilities.join(","),
            k.key.mode.as_str(),
            if k.key.act_for_users {
                " act_for_users"
            } else {
                ""
            }
        ));
    }
    let s = &d.settings;
    out.push(format!(
        "lease {} ms, request timeout {} ms, body limit {} bytes",
        s.lease.as_millis(),
        s.request_timeout.as_millis(),
        s.body_limit
    ));
    out.push(format!(
        "result cap {} bytes, header read timeout {} ms, connection limit {} ({} per peer, \
         {} for probes beyond it), Idempotency-Key memory {} answers and {} bytes per principal",
        s.max_result_bytes,
        s.header_read_timeout.as_millis(),
        s.max_connections,
        s.max_connections_per_peer,
        s.probe_headroom,
        s.idempotency_capacity,
        s.idempotency_max_bytes
    ));
    out.push(format!(
        "review queue: {} open items, {} per principal; a rejection opens one item per \
         principal and reason per {} ms; reviewer page cookie {}",
        s.review_queue.total,
        s.review_queue.per_principal,
        s.review_queue.rejection_window_ms,
        if s.public_url
            .as_deref()
            .is_some_and(|u| u.to_ascii_lowercase().starts_with("http://"))
        {
            "not Secure (public_url is http://)"
        } else {
            "Secure"
        }
    ));
    match print_line(&out.join("\n")) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => io_failure("writing stdout", &e),
    }
}

fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::Sqlite => "SQLite",
        Backend::Postgres => "PostgreSQL",
        Backend::MySql => "MySQL/MariaDB",
    }
}
