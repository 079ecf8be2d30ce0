//! Loading a deployment: [`Prepared::load`] as its named steps. Read the
//! file, pair each `[[tools]]` entry with its policy tool, open the
//! application's database if a query needs it, then, per tool, its
//! executor, its state source, its entities and its Cedar authoriser. Each
//! step checks what it builds; a mistake is a [`ConfigError`] naming the
//! field, never a tool left out.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use toolgate::contract::{Policy, ToolContract};
use toolgate_cedar::{CedarAuthorizer, Mapping};

use crate::authorizer::{DeployAuthorizer, ToolEntities};
use crate::checks::{
    check_entity_columns, check_param_types, check_params, check_version_column, no_app_db,
    timeout, tool_field,
};
use crate::config::{
    AppDbConfig, ConfigError, DeploySection, EntityConfig, ExecutorConfig, StateConfig, ToolConfig,
};
use crate::db::AppDb;
use crate::params::Dialect;
use crate::sources::{self, EntityQuery, StateReader};
use crate::webhook::WebhookExecutor;
use crate::{
    DEFAULT_MAX_CONNECTIONS, DEFAULT_STATE_TIMEOUT_MS, DEFAULT_STATEMENT_TIMEOUT_MS,
    DEFAULT_WEBHOOK_TIMEOUT_MS, DeployExecutor, DeployState, MIN_SECRET_BYTES, Prepared,
    ToolExecutor, http,
};

impl Prepared {
    /// Reads `[app_db]` and `[[tools]]` from the deployment file at `path`
    /// and loads them (see [`Prepared::load`]). Relative paths in the
    /// sections are relative to the file's directory.
    pub async fn from_file(
        path: &Path,
        policy: &Policy,
        cedar_policies: &str,
    ) -> Result<Self, ConfigError> {
        let section = read_section(path)?;
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
        let tools = pair_with_policy(section, policy)?;
        let db = open_app_db(section).await?;
        let client = http::client().map_err(|e| ConfigError::new("", e))?;
        let mut authorizers = HashMap::new();
        let mut states = HashMap::new();
        let mut executors = HashMap::new();
        for (tool, contract) in tools {
            let load = ToolLoad::new(tool, contract, base, db.as_ref(), &client);
            let (executor, webhook_secret) = load.executor()?;
            let state = load.state_source(webhook_secret).await?;
            let authorizer = load.authorizer(cedar_policies).await?;
            authorizers.insert(tool.name.clone(), authorizer);
            states.insert(tool.name.clone(), state);
            executors.insert(tool.name.clone(), executor);
        }
        Ok(Self {
            authorizer: DeployAuthorizer { tools: authorizers },
            state: DeployState { tools: states },
            executor: DeployExecutor { tools: executors },
        })
    }
}

/// The deployment file's `[app_db]` and `[[tools]]` sections.
fn read_section(path: &Path) -> Result<DeploySection, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new("", format!("reading: {e}")).in_file(path))?;
    DeploySection::from_toml(&text).map_err(|e| e.in_file(path))
}

/// Each `[[tools]]` entry with its policy tool: one entry per policy tool,
/// and none for a tool the policy does not have.
fn pair_with_policy<'a>(
    section: &'a DeploySection,
    policy: &'a Policy,
) -> Result<Vec<(&'a ToolConfig, &'a ToolContract)>, ConfigError> {
    let mut seen = BTreeSet::new();
    let mut paired = Vec::with_capacity(section.tools.len());
    for tool in &section.tools {
        if !seen.insert(tool.name.as_str()) {
            return Err(ConfigError::new(
                tool_field(&tool.name, "name"),
                "a second [[tools]] entry for the same tool",
            ));
        }
        let contract = policy.tool(&tool.name).ok_or_else(|| {
            ConfigError::new(
                tool_field(&tool.name, "name"),
                format!("the policy has no tool `{}`", tool.name),
            )
        })?;
        paired.push((tool, contract));
    }
    if let Some(missing) = policy.tools().iter().find(|c| !seen.contains(c.name())) {
        return Err(ConfigError::new(
            "tools",
            format!(
                "the policy's tool `{}` has no [[tools]] entry",
                missing.name()
            ),
        ));
    }
    Ok(paired)
}

/// The application's database, opened only if a query needs it.
async fn open_app_db(section: &DeploySection) -> Result<Option<AppDb>, ConfigError> {
    let needs_db = section.tools.iter().any(|t| {
        matches!(t.state, StateConfig::Sql { .. })
            || t.entities
                .iter()
                .any(|e| matches!(e, EntityConfig::Sql { .. }))
    });
    match (&section.app_db, needs_db) {
        (Some(cfg), true) => connect(cfg).await.map(Some),
        (None, true) => {
            let field = section
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
            Err(ConfigError::new(
                field,
                "a `sql` source needs the application's database: add [app_db]",
            ))
        }
        (_, false) => Ok(None),
    }
}

/// One `[[tools]]` entry being loaded, with what its steps share.
struct ToolLoad<'a> {
    name: &'a str,
    tool: &'a ToolConfig,
    contract: &'a ToolContract,
    /// The scope fields of the tool's operation key: the only names a
    /// query or URL may use, besides `actor`.
    keys: BTreeSet<&'a str>,
    /// Where relative secret files are.
    base: &'a Path,
    db: Option<&'a AppDb>,
    dialect: Dialect,
    client: &'a reqwest::Client,
}

impl<'a> ToolLoad<'a> {
    fn new(
        tool: &'a ToolConfig,
        contract: &'a ToolContract,
        base: &'a Path,
        db: Option<&'a AppDb>,
        client: &'a reqwest::Client,
    ) -> Self {
        Self {
            name: &tool.name,
            tool,
            contract,
            keys: contract
                .operation_key()
                .iter()
                .map(String::as_str)
                .collect(),
            base,
            db,
            dialect: db.map_or(Dialect::Sqlite, AppDb::dialect),
            client,
        }
    }

    fn field(&self, field: &str) -> String {
        tool_field(self.name, field)
    }

    /// The tool's executor, and a webhook's secret, which the http state
    /// source signs with unless it names its own.
    fn executor(&self) -> Result<(ToolExecutor, Option<Vec<u8>>), ConfigError> {
        if self.tool.executor == ExecutorConfig::McpUpstream {
            return Ok((ToolExecutor::McpUpstream, None));
        }
        let ExecutorConfig::Webhook {
            url,
            status_url,
            secret_env,
            secret_file,
            timeout_ms,
        } = &self.tool.executor
        else {
            return Ok((ToolExecutor::Client, None));
        };
        let url =
            http::absolute_url(url).map_err(|e| ConfigError::new(self.field("executor.url"), e))?;
        let status_url = http::absolute_url(status_url)
            .map_err(|e| ConfigError::new(self.field("executor.status_url"), e))?;
        let wait = timeout(
            &self.field("executor.timeout_ms"),
            *timeout_ms,
            DEFAULT_WEBHOOK_TIMEOUT_MS,
        )?;
        let secret = read_secret(
            self.name,
            "executor",
            secret_env.as_deref(),
            secret_file.as_deref(),
            self.base,
        )?;
        let webhook =
            WebhookExecutor::new(self.client.clone(), url, status_url, secret.clone(), wait);
        Ok((ToolExecutor::Webhook(Box::new(webhook)), Some(secret)))
    }

    /// Where the tool's current version is read; `None` when the
    /// executor's precondition alone decides (a webhook's 409/412, or the
    /// application's own check with `client`).
    async fn state_source(
        &self,
        webhook_secret: Option<Vec<u8>>,
    ) -> Result<Option<StateReader>, ConfigError> {
        match &self.tool.state {
            StateConfig::None => Ok(None),
            StateConfig::Http {
                url,
                timeout_ms,
                secret_env,
                secret_file,
            } => {
                let field = self.field("state.url");
                for p in sources::placeholders(url).map_err(|e| ConfigError::new(&field, e))? {
                    if p != "actor" && !self.keys.contains(p.as_str()) {
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
                    (env, file, _) => read_secret(
                        self.name,
                        "state",
                        env.as_deref(),
                        file.as_deref(),
                        self.base,
                    )?,
                };
                Ok(Some(StateReader::Http {
                    client: self.client.clone(),
                    template: url.clone(),
                    secret,
                    timeout: timeout(
                        &self.field("state.timeout_ms"),
                        *timeout_ms,
                        DEFAULT_STATE_TIMEOUT_MS,
                    )?,
                }))
            }
            StateConfig::Sql { query } => {
                let field = self.field("state.query");
                let (db, prepared) = self.prepare(&field, query).await?;
                if prepared.columns.len() != 1 {
                    return Err(ConfigError::new(
                        &field,
                        format!(
                            "must return one column (the version), not {}",
                            prepared.columns.len()
                        ),
                    ));
                }
                check_version_column(&field, &prepared, self.dialect)?;
                Ok(Some(StateReader::Sql {
                    db: db.clone(),
                    query: prepared,
                }))
            }
        }
    }

    /// A query of the tool's, checked for its parameter names, prepared on
    /// the application's database, and checked for its parameter types.
    async fn prepare(
        &self,
        field: &str,
        query: &str,
    ) -> Result<(&'a AppDb, crate::db::Query), ConfigError> {
        check_params(field, query, self.dialect, &self.keys)?;
        // A `sql` source opened the database (`open_app_db`); were it not
        // open, the tool must not load without the source.
        let db = self.db.ok_or_else(|| no_app_db(field))?;
        let prepared = db
            .prepare(query)
            .await
            .map_err(|e| ConfigError::new(field, format!("does not prepare: {e}")))?;
        check_param_types(field, &prepared, self.contract)?;
        Ok((db, prepared))
    }

    /// Cedar for this tool: its mapping, over its entity sources.
    async fn authorizer(
        &self,
        cedar_policies: &str,
    ) -> Result<CedarAuthorizer<ToolEntities>, ConfigError> {
        let cedar = &self.tool.cedar;
        if !self.keys.contains(cedar.resource_field.as_str()) {
            return Err(ConfigError::new(
                self.field("cedar.resource_field"),
                format!(
                    "`{}` is not a scope field of the tool's operation_key",
                    cedar.resource_field
                ),
            ));
        }
        let entities = self.entities().await?;
        for (role, ty) in [
            ("principal_type", &cedar.principal_type),
            ("resource_type", &cedar.resource_type),
        ] {
            if !self
                .tool
                .entities
                .iter()
                .any(|e| e.type_name() == ty.as_str())
            {
                return Err(ConfigError::new(
                    self.field(&format!("cedar.{role}")),
                    format!("no [[tools.entities]] entry provides `{ty}`"),
                ));
            }
        }
        let mapping = Mapping {
            principal_type: cedar.principal_type.clone(),
            resource_type: cedar.resource_type.clone(),
            resource_field: cedar.resource_field.clone(),
        };
        CedarAuthorizer::new(cedar_policies, &mapping, entities)
            .map_err(|e| ConfigError::new(self.field("cedar"), e.to_string()))
    }

    /// Where Cedar's entities come from: one source per entity type, a
    /// `sql` query prepared now or the application's `request`.
    async fn entities(&self) -> Result<ToolEntities, ConfigError> {
        let mut queries = Vec::new();
        let mut request_types = BTreeSet::new();
        let mut types = BTreeSet::new();
        for entity in &self.tool.entities {
            // Named by type, which a reader finds in the file; a second
            // entry for a type is refused just below.
            let field = self.field(&format!("entities[{}]", entity.type_name()));
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
                    let (_, prepared) = self.prepare(&field, query).await?;
                    if !prepared.columns.iter().any(|c| c == "id") {
                        return Err(ConfigError::new(
                            &field,
                            "must return a column `id` (the entity id)",
                        ));
                    }
                    check_entity_columns(&field, type_name, &prepared, self.dialect)?;
                    queries.push(EntityQuery {
                        type_name: type_name.clone(),
                        query: prepared,
                    });
                }
            }
        }
        Ok(ToolEntities {
            db: self.db.cloned(),
            queries,
            request_types,
        })
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
