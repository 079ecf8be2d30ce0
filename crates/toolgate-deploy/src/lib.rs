//! # toolgate-deploy
//!
//! The per-tool wiring of a deployment file (docs/design.md §13): for each
//! policy tool, where Cedar's entities come from, where the resource's
//! current version is read, and who performs the write. No application
//! code: an application is described by its `[app_db]` and `[[tools]]`
//! sections.
//!
//! [`Deployment::load`] checks the sections against the policy, connects
//! to the application's database and prepares every query there, so a
//! mistake is a start-time [`ConfigError`] naming the tool and field, never
//! a failed decision later. The result holds the three parts the pipeline
//! takes:
//!
//! | part | core trait | per tool |
//! |---|---|---|
//! | [`DeployAuthorizer`] | `Authorizer` | Cedar with the tool's mapping and [`ToolEntities`] |
//! | [`DeployState`] | `StateSource` | `sql`, `http` or `none` |
//! | [`DeployExecutor`] | `Executor` | `client` or `webhook` |
//!
//! Entities come from `sql` queries or, with `source = "request"`, from the
//! authenticated application's request (`AuthzRequest::attributes`). A
//! tool with `state = { source = "none" }` has no version read: its
//! executor's write precondition alone decides.

#![warn(missing_docs)]

mod config;
mod db;
mod http;
mod params;
mod sources;
mod webhook;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use toolgate::claim::{ClaimRecord, ExecutorKind, ReconcileOutcome};
use toolgate::contract::Policy;
use toolgate::pipeline::{
    Authorizer, AuthzDecision, AuthzRequest, ExecError, ExecOutcome, ExecPermit, Executor,
    StateError, StateScope, StateSource, StateVersion,
};
use toolgate_cedar::{Attr, CedarAuthorizer, EntityError, EntityRecord, EntitySource, Mapping};

pub use config::{
    AppDbConfig, CedarConfig, ConfigError, DeploySection, EntityConfig, ExecutorConfig,
    StateConfig, ToolConfig,
};
pub use db::{AppDb, MAX_ROWS};
pub use http::MAX_BODY_BYTES;
pub use http::request_target;
pub use params::{Dialect, Rewritten, rewrite};
pub use sources::{EntityQuery, StateReader};
pub use webhook::{WebhookExecutor, call_bound, permit_body};

/// Default wait for a webhook's answer.
pub const DEFAULT_WEBHOOK_TIMEOUT_MS: u64 = 5000;
/// Default wait for an `http` state source.
pub const DEFAULT_STATE_TIMEOUT_MS: u64 = 2000;
/// Default limit on one application database query.
pub const DEFAULT_STATEMENT_TIMEOUT_MS: u64 = 2000;
/// How much longer than its executor's bound a claim's lease must run
/// (`lease_ms` against a webhook's `timeout_ms`, [`DeploySection::check_lease`]),
/// and how much of the remaining lease a webhook call leaves unused. It
/// covers what happens after the call answers and before the completion is
/// checked against the lease: reading the answer, the completion's
/// transaction, and the difference between the gate's clock and the claim
/// store's.
pub const LEASE_MARGIN_MS: u64 = 1000;
/// Longest timeout a file may set, for any of them.
pub const MAX_TIMEOUT_MS: u64 = 120_000;
/// Shortest webhook secret accepted: shorter ones can be guessed.
pub const MIN_SECRET_BYTES: usize = 16;

/// The application's own database connections kept open by default.
const DEFAULT_MAX_CONNECTIONS: u32 = 8;

// The sidecar holds the parts for the life of the process and shares them
// across request tasks: each must be `Send + Sync + 'static`.
const _: () = {
    const fn shareable<T: Send + Sync + 'static>() {}
    shareable::<DeployAuthorizer>();
    shareable::<DeployState>();
    shareable::<DeployExecutor>();
};

/// A loaded deployment: the three parts the pipeline takes.
pub struct Deployment {
    /// Cedar, per tool, over the tool's entity sources.
    pub authorizer: DeployAuthorizer,
    /// The state source, per tool.
    pub state: DeployState,
    /// The executor, per tool.
    pub executor: DeployExecutor,
}

impl std::fmt::Debug for Deployment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deployment")
            .field("tools", &self.executor.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn tool_field(tool: &str, field: &str) -> String {
    format!("tools[{tool}].{field}")
}

fn timeout(field: &str, ms: Option<u64>, default_ms: u64) -> Result<Duration, ConfigError> {
    match ms {
        Some(0) => Err(ConfigError::new(field, "must be at least 1 ms")),
        Some(ms) if ms > MAX_TIMEOUT_MS => Err(ConfigError::new(
            field,
            format!("{ms} ms is longer than the limit, {MAX_TIMEOUT_MS} ms"),
        )),
        _ => Ok(http::timeout_or(ms, default_ms)),
    }
}

/// The signing secret a tool's `section` (`executor` or `state`) names.
fn read_secret(
    tool: &str,
    section: &str,
    env: Option<&str>,
    file: Option<&Path>,
    base: &Path,
) -> Result<Vec<u8>, ConfigError> {
    let (field, secret) = match (env, file) {
        (Some(var), None) => {
            let field = tool_field(tool, &format!("{section}.secret_env"));
            match std::env::var(var) {
                Ok(v) if !v.is_empty() => (field, v.into_bytes()),
                Ok(_) => {
                    return Err(ConfigError::new(
                        field,
                        format!("the environment variable {var} is empty"),
                    ));
                }
                Err(_) => {
                    return Err(ConfigError::new(
                        field,
                        format!("the environment variable {var} is not set"),
                    ));
                }
            }
        }
        (None, Some(path)) => {
            let field = tool_field(tool, &format!("{section}.secret_file"));
            let path = base.join(path);
            let mut bytes = std::fs::read(&path).map_err(|e| {
                ConfigError::new(&field, format!("reading {}: {e}", path.display()))
            })?;
            // A trailing newline is an editor's, not the secret's.
            while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                bytes.pop();
            }
            if bytes.is_empty() {
                return Err(ConfigError::new(
                    field,
                    format!("{} is empty", path.display()),
                ));
            }
            (field, bytes)
        }
        (Some(_), Some(_)) => {
            return Err(ConfigError::new(
                tool_field(tool, section),
                "set one of secret_env and secret_file, not both",
            ));
        }
        (None, None) => {
            let what = if section == "state" {
                "an http state source needs a secret to sign its GET: secret_env or \
                 secret_file here, or a webhook executor's"
            } else {
                "a webhook needs a secret: secret_env or secret_file"
            };
            return Err(ConfigError::new(
                tool_field(tool, &format!("{section}.secret_env")),
                what,
            ));
        }
    };
    if secret.len() < MIN_SECRET_BYTES {
        return Err(ConfigError::new(
            field,
            format!("the secret is shorter than {MIN_SECRET_BYTES} bytes"),
        ));
    }
    Ok(secret)
}

/// The named parameters of `sql` that are neither one of `keys` nor
/// `actor`, as a configuration error at `field`.
fn check_params(
    field: &str,
    sql: &str,
    dialect: Dialect,
    keys: &BTreeSet<&str>,
) -> Result<(), ConfigError> {
    let names = params::names(sql, dialect).map_err(|e| ConfigError::new(field, e))?;
    for name in names {
        if name != "actor" && !keys.contains(name.as_str()) {
            return Err(ConfigError::new(
                field,
                format!(
                    "`:{name}` is not a scope field of the tool's operation_key ({}) nor `actor`",
                    keys.iter().copied().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// On PostgreSQL, a parameter compared with an integer column is inferred
/// as an integer and one compared with text as text, and the two do not
/// convert: a `string` scope field bound where the database expects an
/// integer (or the reverse) would fail every decision. Caught here, at
/// start. MySQL and SQLite convert, and infer nothing.
fn check_param_types(
    field: &str,
    query: &db::Query,
    contract: &toolgate::contract::ToolContract,
) -> Result<(), ConfigError> {
    use toolgate::op::ScopeType;
    for (name, inferred) in query.rewritten.binds.iter().zip(&query.param_types) {
        let integer_bind = name != "actor" && contract.scope_type(name) == ScopeType::Integer;
        let wants_integer = matches!(inferred.as_str(), "INT2" | "INT4" | "INT8" | "NUMERIC");
        let wants_text = matches!(inferred.as_str(), "TEXT" | "VARCHAR" | "BPCHAR" | "NAME");
        let bound = if integer_bind { "an integer" } else { "text" };
        if (integer_bind && wants_text) || (!integer_bind && wants_integer) {
            return Err(ConfigError::new(
                field,
                format!(
                    "the database expects {inferred} for `:{name}`, which is bound as {bound} \
                     (its scope type in the policy); declare it in scope_types or cast it in \
                     the query"
                ),
            ));
        }
    }
    Ok(())
}

/// The types of an entity query's columns, as the database reported them
/// when it prepared the query: a type the row reader cannot take would
/// deny every decision that reads the entity, so it is refused now, naming
/// the entity type and the column.
fn check_entity_columns(
    field: &str,
    entity_type: &str,
    query: &db::Query,
    dialect: Dialect,
) -> Result<(), ConfigError> {
    for (column, ty) in query.columns.iter().zip(&query.column_types) {
        let kind = db::column_kind(dialect, ty);
        let is_id = column == "id" || column.starts_with("parent_");
        match kind {
            None => {
                return Err(ConfigError::new(
                    field,
                    format!(
                        "entity type `{entity_type}`: column `{column}` has SQL type {ty}, \
                         which no Cedar value is read from: cast it to an integer, text or \
                         boolean in the query (docs/deploy.md, type mapping)"
                    ),
                ));
            }
            Some(db::ColumnKind::Bool) if is_id => {
                return Err(ConfigError::new(
                    field,
                    format!(
                        "entity type `{entity_type}`: column `{column}` is an entity id and \
                         has SQL type {ty}: an id must be an integer or text"
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The state query's one column must hold a version: an integer or text.
fn check_version_column(
    field: &str,
    query: &db::Query,
    dialect: Dialect,
) -> Result<(), ConfigError> {
    for (column, ty) in query.columns.iter().zip(&query.column_types) {
        if matches!(
            db::column_kind(dialect, ty),
            None | Some(db::ColumnKind::Bool)
        ) {
            return Err(ConfigError::new(
                field,
                format!(
                    "column `{column}` has SQL type {ty}, which is not a version: return an \
                     integer or text (cast it in the query)"
                ),
            ));
        }
    }
    Ok(())
}

impl Deployment {
    /// Reads `[app_db]` and `[[tools]]` from the deployment file at `path`
    /// and loads them (see [`Deployment::load`]). Relative paths in the
    /// sections are relative to the file's directory.
    pub async fn from_file(
        path: &Path,
        policy: &Policy,
        cedar_policies: &str,
    ) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new("", format!("reading: {e}")).in_file(path))?;
        let section = DeploySection::from_toml(&text).map_err(|e| e.in_file(path))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::load(&section, base, policy, cedar_policies)
            .await
            .map_err(|e| e.in_file(path))
    }

    /// Checks `section` against `policy`, connects to the application's
    /// database, prepares every query there and builds each tool's parts.
    /// `cedar_policies` is the Cedar policy text every tool is decided by.
    /// Every error names the field: the caller adds the file
    /// ([`ConfigError::in_file`]) and exits 2.
    pub async fn load(
        section: &DeploySection,
        base: &Path,
        policy: &Policy,
        cedar_policies: &str,
    ) -> Result<Self, ConfigError> {
        let mut seen = BTreeSet::new();
        for tool in &section.tools {
            if !seen.insert(tool.name.as_str()) {
                return Err(ConfigError::new(
                    tool_field(&tool.name, "name"),
                    "a second [[tools]] entry for the same tool",
                ));
            }
            if policy.tool(&tool.name).is_none() {
                return Err(ConfigError::new(
                    tool_field(&tool.name, "name"),
                    format!("the policy has no tool `{}`", tool.name),
                ));
            }
        }
        for contract in policy.tools() {
            if !seen.contains(contract.name()) {
                return Err(ConfigError::new(
                    "tools",
                    format!(
                        "the policy's tool `{}` has no [[tools]] entry",
                        contract.name()
                    ),
                ));
            }
        }

        // The application's database is opened only if a query needs it.
        let needs_db = section.tools.iter().any(|t| {
            matches!(t.state, StateConfig::Sql { .. })
                || t.entities
                    .iter()
                    .any(|e| matches!(e, EntityConfig::Sql { .. }))
        });
        let db = match (&section.app_db, needs_db) {
            (Some(cfg), true) => Some(connect(cfg).await?),
            (None, true) => {
                let t = section
                    .tools
                    .iter()
                    .find(|t| matches!(t.state, StateConfig::Sql { .. }))
                    .map(|t| tool_field(&t.name, "state.query"))
                    .or_else(|| {
                        section
                            .tools
                            .first()
                            .map(|t| tool_field(&t.name, "entities"))
                    })
                    .unwrap_or_default();
                return Err(ConfigError::new(
                    t,
                    "a `sql` source needs the application's database: add [app_db]",
                ));
            }
            (_, false) => None,
        };
        let dialect = db.as_ref().map_or(Dialect::Sqlite, AppDb::dialect);

        let client = http::client().map_err(|e| ConfigError::new("", e))?;
        let mut authorizers = HashMap::new();
        let mut states = HashMap::new();
        let mut executors = HashMap::new();
        for tool in &section.tools {
            let name = tool.name.as_str();
            // INVARIANT: checked above that every entry names a policy tool.
            let Some(contract) = policy.tool(name) else {
                continue;
            };
            let keys: BTreeSet<&str> = contract
                .operation_key()
                .iter()
                .map(String::as_str)
                .collect();

            // The http state source signs with the webhook's secret unless
            // it names its own.
            let mut webhook_secret = None;
            let executor = match &tool.executor {
                ExecutorConfig::Client => ToolExecutor::Client,
                ExecutorConfig::McpUpstream => ToolExecutor::McpUpstream,
                ExecutorConfig::Webhook {
                    url,
                    status_url,
                    secret_env,
                    secret_file,
                    timeout_ms,
                } => {
                    let url = http::absolute_url(url)
                        .map_err(|e| ConfigError::new(tool_field(name, "executor.url"), e))?;
                    let status_url = http::absolute_url(status_url).map_err(|e| {
                        ConfigError::new(tool_field(name, "executor.status_url"), e)
                    })?;
                    let wait = timeout(
                        &tool_field(name, "executor.timeout_ms"),
                        *timeout_ms,
                        DEFAULT_WEBHOOK_TIMEOUT_MS,
                    )?;
                    let secret = read_secret(
                        name,
                        "executor",
                        secret_env.as_deref(),
                        secret_file.as_deref(),
                        base,
                    )?;
                    webhook_secret = Some(secret.clone());
                    ToolExecutor::Webhook(Box::new(WebhookExecutor::new(
                        client.clone(),
                        url,
                        status_url,
                        secret,
                        wait,
                    )))
                }
            };

            let state = match &tool.state {
                // The executor's precondition alone decides: a webhook's
                // 409/412, or the application's own check with `client`.
                StateConfig::None => None,
                StateConfig::Http {
                    url,
                    timeout_ms,
                    secret_env,
                    secret_file,
                } => {
                    let field = tool_field(name, "state.url");
                    for p in sources::placeholders(url).map_err(|e| ConfigError::new(&field, e))? {
                        if p != "actor" && !keys.contains(p.as_str()) {
                            return Err(ConfigError::new(
                                &field,
                                format!(
                                    "`{{{p}}}` is not a scope field of the tool's operation_key nor `actor`"
                                ),
                            ));
                        }
                    }
                    // Checked with the placeholders filled by a sample value:
                    // the template itself need not parse (`{` in a host).
                    let sample = url.replace(['{', '}'], "");
                    http::absolute_url(&sample).map_err(|e| ConfigError::new(&field, e))?;
                    let secret = match (secret_env, secret_file, webhook_secret) {
                        (None, None, Some(shared)) => shared,
                        (env, file, _) => {
                            read_secret(name, "state", env.as_deref(), file.as_deref(), base)?
                        }
                    };
                    Some(StateReader::Http {
                        client: client.clone(),
                        template: url.clone(),
                        secret,
                        timeout: timeout(
                            &tool_field(name, "state.timeout_ms"),
                            *timeout_ms,
                            DEFAULT_STATE_TIMEOUT_MS,
                        )?,
                    })
                }
                StateConfig::Sql { query } => {
                    let field = tool_field(name, "state.query");
                    check_params(&field, query, dialect, &keys)?;
                    // `needs_db` was true, so `db` is open; were it not, the
                    // tool must not load without its state read.
                    let db = db.as_ref().ok_or_else(|| no_app_db(&field))?;
                    let prepared = db
                        .prepare(query)
                        .await
                        .map_err(|e| ConfigError::new(&field, format!("does not prepare: {e}")))?;
                    check_param_types(&field, &prepared, contract)?;
                    if prepared.columns.len() != 1 {
                        return Err(ConfigError::new(
                            &field,
                            format!(
                                "must return one column (the version), not {}",
                                prepared.columns.len()
                            ),
                        ));
                    }
                    check_version_column(&field, &prepared, dialect)?;
                    Some(StateReader::Sql {
                        db: db.clone(),
                        query: prepared,
                    })
                }
            };

            let cedar = &tool.cedar;
            if !keys.contains(cedar.resource_field.as_str()) {
                return Err(ConfigError::new(
                    tool_field(name, "cedar.resource_field"),
                    format!(
                        "`{}` is not a scope field of the tool's operation_key",
                        cedar.resource_field
                    ),
                ));
            }
            let mut queries = Vec::new();
            let mut request_types = BTreeSet::new();
            let mut types = BTreeSet::new();
            for entity in &tool.entities {
                // Named by type, which a reader finds in the file; a second
                // entry for a type is refused just below.
                let field = tool_field(name, &format!("entities[{}]", entity.type_name()));
                if !types.insert(entity.type_name()) {
                    return Err(ConfigError::new(
                        format!("{field}.type"),
                        format!("a second source for `{}`", entity.type_name()),
                    ));
                }
                match entity {
                    EntityConfig::Request { type_name } => {
                        request_types.insert(type_name.clone());
                    }
                    EntityConfig::Sql { type_name, query } => {
                        let field = format!("{field}.query");
                        check_params(&field, query, dialect, &keys)?;
                        let db = db.as_ref().ok_or_else(|| no_app_db(&field))?;
                        let prepared = db.prepare(query).await.map_err(|e| {
                            ConfigError::new(&field, format!("does not prepare: {e}"))
                        })?;
                        check_param_types(&field, &prepared, contract)?;
                        if !prepared.columns.iter().any(|c| c == "id") {
                            return Err(ConfigError::new(
                                &field,
                                "must return a column `id` (the entity id)",
                            ));
                        }
                        check_entity_columns(&field, type_name, &prepared, dialect)?;
                        queries.push(EntityQuery {
                            type_name: type_name.clone(),
                            query: prepared,
                        });
                    }
                }
            }
            for (role, ty) in [
                ("principal_type", &cedar.principal_type),
                ("resource_type", &cedar.resource_type),
            ] {
                if !types.contains(ty.as_str()) {
                    return Err(ConfigError::new(
                        tool_field(name, &format!("cedar.{role}")),
                        format!("no [[tools.entities]] entry provides `{ty}`"),
                    ));
                }
            }
            let mapping = Mapping {
                principal_type: cedar.principal_type.clone(),
                resource_type: cedar.resource_type.clone(),
                resource_field: cedar.resource_field.clone(),
            };
            let entities = ToolEntities {
                db: db.clone(),
                queries,
                request_types,
            };
            let authorizer = CedarAuthorizer::new(cedar_policies, &mapping, entities)
                .map_err(|e| ConfigError::new(tool_field(name, "cedar"), e.to_string()))?;

            authorizers.insert(name.to_owned(), authorizer);
            states.insert(name.to_owned(), state);
            executors.insert(name.to_owned(), executor);
        }
        Ok(Self {
            authorizer: DeployAuthorizer { tools: authorizers },
            state: DeployState { tools: states },
            executor: DeployExecutor { tools: executors },
        })
    }
}

async fn connect(cfg: &AppDbConfig) -> Result<AppDb, ConfigError> {
    let (field, url) = match (&cfg.url, &cfg.url_env) {
        (Some(url), None) => ("app_db.url", url.clone()),
        (None, Some(var)) => match std::env::var(var) {
            Ok(v) if !v.is_empty() => ("app_db.url_env", v),
            _ => {
                return Err(ConfigError::new(
                    "app_db.url_env",
                    format!("the environment variable {var} is not set"),
                ));
            }
        },
        _ => {
            return Err(ConfigError::new(
                "app_db",
                "set exactly one of url and url_env",
            ));
        }
    };
    let max = match cfg.max_connections {
        Some(0) => {
            return Err(ConfigError::new(
                "app_db.max_connections",
                "must be at least 1",
            ));
        }
        Some(n) => n,
        None => DEFAULT_MAX_CONNECTIONS,
    };
    let wait = timeout(
        "app_db.statement_timeout_ms",
        cfg.statement_timeout_ms,
        DEFAULT_STATEMENT_TIMEOUT_MS,
    )?;
    AppDb::connect(&url, max, wait)
        .await
        .map_err(|e| ConfigError::new(field, e))
}

/// The state source of a deployment: each tool's [`StateReader`], or
/// none (`state = { source = "none" }`).
#[derive(Debug)]
pub struct DeployState {
    tools: HashMap<String, Option<StateReader>>,
}

impl StateSource for DeployState {
    async fn current_version(&self, scope: StateScope<'_>) -> Result<StateVersion, StateError> {
        match self.tools.get(scope.tool()) {
            Some(Some(reader)) => reader.read(scope.scope(), scope.principal().id()).await,
            // Never asked: `reads_state` is false for it.
            Some(None) => Err(StateError::new(format!(
                "tool `{}` has no state source (state.source = \"none\")",
                scope.tool()
            ))),
            None => Err(StateError::new(format!(
                "no state source for tool `{}`",
                scope.tool()
            ))),
        }
    }

    fn reads_state(&self, tool: &str) -> bool {
        // An unknown tool is read (and fails): only an explicit `none`
        // skips the comparison.
        !matches!(self.tools.get(tool), Some(None))
    }
}

/// One tool's executor.
#[derive(Debug)]
pub enum ToolExecutor {
    /// The application writes with the permit it is handed.
    Client,
    /// toolgate POSTs the signed permit.
    Webhook(Box<WebhookExecutor>),
    /// An MCP upstream's tool: the serving program's executor sends it
    /// there and wraps this one; this one performs nothing for it.
    McpUpstream,
}

/// The executor of a deployment: `client` or `webhook`, per tool.
#[derive(Debug)]
pub struct DeployExecutor {
    tools: HashMap<String, ToolExecutor>,
}

impl DeployExecutor {
    /// The executor configured for `tool`.
    pub fn tool(&self, tool: &str) -> Option<&ToolExecutor> {
        self.tools.get(tool)
    }
}

impl Executor for DeployExecutor {
    async fn execute(&self, permit: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        match self.tools.get(permit.tool()) {
            Some(ToolExecutor::Webhook(w)) => w.execute(permit).await,
            // The write is the application's: the decision hands it the
            // permit and the claim stays in flight until it completes.
            Some(ToolExecutor::Client) => Ok(ExecOutcome::Deferred),
            Some(ToolExecutor::McpUpstream) => Err(ExecError::new(format!(
                "tool `{}` is an MCP upstream's and no gateway executor serves it",
                permit.tool()
            ))),
            None => Err(ExecError::new(format!(
                "no executor for tool `{}`",
                permit.tool()
            ))),
        }
    }

    fn kind(&self, tool: &str) -> ExecutorKind {
        match self.tools.get(tool) {
            Some(ToolExecutor::Webhook(_)) => ExecutorKind::Webhook,
            Some(ToolExecutor::McpUpstream) => ExecutorKind::McpUpstream,
            // A tool with no entry never reaches an executor (the load
            // refuses a policy tool without one); `client` claims no write.
            Some(ToolExecutor::Client) | None => ExecutorKind::Client,
        }
    }

    async fn reconcile(&self, claim: &ClaimRecord) -> Result<ReconcileOutcome, ExecError> {
        let tool = claim.proposal.tool();
        match self.tools.get(tool) {
            Some(ToolExecutor::Webhook(w)) => w.reconcile(claim).await,
            // Invariant 13: no executor answers for a write it does not own.
            Some(ToolExecutor::Client) => Err(ExecError::new(format!(
                "tool `{tool}` is executed by the client: only the application or an operator \
                 can say whether its write happened"
            ))),
            Some(ToolExecutor::McpUpstream) => Err(ExecError::new(format!(
                "tool `{tool}` is an MCP upstream's: its status tool answers, through the gateway"
            ))),
            None => Err(ExecError::new(format!("no executor for tool `{tool}`"))),
        }
    }
}

/// Cedar's entities for one tool: its `sql` entity queries, run with the
/// decision's scope and actor, and its `request` types, taken from the
/// application's request.
#[derive(Debug)]
pub struct ToolEntities {
    db: Option<AppDb>,
    queries: Vec<EntityQuery>,
    request_types: BTreeSet<String>,
}

impl ToolEntities {
    /// Whether entities of `entity_type` are read from the request.
    pub fn reads_from_request(&self, entity_type: &str) -> bool {
        self.request_types.contains(entity_type)
    }

    /// The `request` entities of one decision: every declared type must be
    /// sent (Cedar would otherwise decide without the attributes the
    /// policies assume), and no other type may be.
    fn request_entities(&self, request: &AuthzRequest<'_>) -> Result<Vec<EntityRecord>, String> {
        let sent = request.attributes();
        if let Some(ty) = sent.keys().find(|t| !self.request_types.contains(*t)) {
            return Err(format!(
                "the request carries a `{ty}` entity, which this tool does not read from the \
                 request"
            ));
        }
        let mut out = Vec::new();
        for ty in &self.request_types {
            let entity = sent.get(ty).and_then(Value::as_object).ok_or_else(|| {
                format!(
                    "the request carries no `{ty}` entity, which this tool reads from the \
                     request (source = \"request\")"
                )
            })?;
            let id = entity
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("the request's `{ty}` entity has no string `id`"))?;
            let mut record = EntityRecord::new(ty, id);
            for (name, value) in entity.iter().filter(|(k, _)| *k != "id") {
                record = record.attr(name.clone(), Attr::Value(value.clone()));
            }
            out.push(record);
        }
        Ok(out)
    }
}

impl EntitySource for ToolEntities {
    async fn entities(&self, request: &AuthzRequest<'_>) -> Result<Vec<EntityRecord>, EntityError> {
        let mut out = self.request_entities(request)?;
        let Some(db) = &self.db else {
            return Ok(out);
        };
        for q in &self.queries {
            let binds = sources::binds(&q.query, request.scope(), request.principal().id())
                .map_err(|e| format!("{}: {e}", q.type_name))?;
            // A failed query is the application's database not answering;
            // rows it answered that cannot be read (150 of them, a NUMERIC
            // column) deny, as every retry would meet them again: a
            // decision (`forbidden`, the detail in the log and the audit
            // entry's `authorization_error`), never a retry-later.
            let rows = db.fetch(&q.query, &binds).await.map_err(|e| match e {
                db::FetchError::Unavailable(m) => {
                    EntityError::Unavailable(format!("{}: {m}", q.type_name))
                }
                db::FetchError::Unreadable(m) => {
                    EntityError::Invalid(format!("{}: {m}", q.type_name))
                }
            })?;
            for row in &rows {
                out.push(sources::row_entity(&q.type_name, row)?);
            }
        }
        Ok(out)
    }
}

/// The authoriser of a deployment: Cedar, with each tool's mapping and
/// entity sources.
pub struct DeployAuthorizer {
    tools: HashMap<String, CedarAuthorizer<ToolEntities>>,
}

impl std::fmt::Debug for DeployAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeployAuthorizer")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl DeployAuthorizer {
    /// The entity source of `tool`.
    pub fn entities(&self, tool: &str) -> Option<&ToolEntities> {
        self.tools.get(tool).map(CedarAuthorizer::entity_source)
    }
}

impl Authorizer for DeployAuthorizer {
    async fn authorize(&self, request: &AuthzRequest<'_>) -> AuthzDecision {
        match self.tools.get(request.tool()) {
            Some(cedar) => cedar.authorize(request).await,
            None => AuthzDecision::Error {
                message: format!("no authoriser for tool `{}`", request.tool()),
            },
        }
    }

    fn accepts_request_entity(&self, tool: &str, entity_type: &str) -> bool {
        self.entities(tool)
            .is_some_and(|e| e.reads_from_request(entity_type))
    }
}

/// An SQL source without an open `[app_db]`: the load refuses the tool
/// rather than serving it without the source.
fn no_app_db(field: &str) -> ConfigError {
    ConfigError::new(field, "an SQL query needs [app_db], which is not open")
}
