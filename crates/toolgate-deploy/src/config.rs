//! The deployment file's `[app_db]` and `[[tools]]` sections, as read
//! (serde, unknown fields refused), before anything is checked against the
//! policy or the application's database.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The two sections this crate reads from a deployment file. The rest of
/// the file (listen, db, policy, keys, …) belongs to the program that
/// serves it; [`DeploySection::from_toml`] ignores it.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DeploySection {
    /// The application's own database, for `sql` sources.
    #[serde(default)]
    pub app_db: Option<AppDbConfig>,
    /// One entry per policy tool served.
    #[serde(default)]
    pub tools: Vec<ToolConfig>,
}

/// `[app_db]`: the application's database. Never the claim store's
/// connection: a `sql` source reads the application's tables with the
/// application's (read-only) credentials.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AppDbConfig {
    /// `sqlite://…`, `postgres://…` or `mysql://…`, written in the file.
    #[serde(default)]
    pub url: Option<String>,
    /// The environment variable holding the URL (preferred: a password in
    /// a file is easily copied).
    #[serde(default)]
    pub url_env: Option<String>,
    /// Connections kept open to it (default 8).
    #[serde(default)]
    pub max_connections: Option<u32>,
    /// Longest a query may run, in milliseconds (default 2000).
    #[serde(default)]
    pub statement_timeout_ms: Option<u64>,
}

/// One `[[tools]]` entry.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    /// The policy tool this entry wires.
    pub name: String,
    /// Who performs the tool's writes.
    pub executor: ExecutorConfig,
    /// Where the resource's current version is read.
    pub state: StateConfig,
    /// How Cedar names the principal and the resource.
    pub cedar: CedarConfig,
    /// Where Cedar's entities come from.
    #[serde(default)]
    pub entities: Vec<EntityConfig>,
}

/// `executor = { kind = … }`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ExecutorConfig {
    /// The application performs the write itself with the permit it is
    /// handed, and completes the claim.
    Client,
    /// toolgate POSTs the signed permit to the application.
    Webhook {
        /// Absolute http(s) URL the permit is POSTed to.
        url: String,
        /// Absolute http(s) URL asked during reconciliation.
        status_url: String,
        /// Environment variable holding the signing secret.
        #[serde(default)]
        secret_env: Option<String>,
        /// File holding the signing secret (trailing newline ignored).
        #[serde(default)]
        secret_file: Option<PathBuf>,
        /// Longest wait for an answer, in milliseconds (default 5000).
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
    /// The tool is an MCP server's, behind the gateway (`[[upstreams]]`):
    /// the program serving the file sends it to that upstream, with the
    /// upstream's own timeout and status tool.
    McpUpstream,
}

/// `state = { source = … }`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(tag = "source", rename_all = "snake_case", deny_unknown_fields)]
pub enum StateConfig {
    /// One row, one column (string or integer) from the application's
    /// database.
    Sql {
        /// The query, with named parameters (`:order_id`, `:actor`).
        query: String,
    },
    /// `GET url` answering `{"version": …}`.
    Http {
        /// Absolute http(s) URL with `{field}` placeholders.
        url: String,
        /// Longest wait, in milliseconds (default 2000).
        #[serde(default)]
        timeout_ms: Option<u64>,
        /// Environment variable holding the secret the GET is signed with
        /// (default: the tool's webhook secret).
        #[serde(default)]
        secret_env: Option<String>,
        /// File holding that secret (trailing newline ignored).
        #[serde(default)]
        secret_file: Option<PathBuf>,
    },
    /// No state read.
    None,
}

/// `[tools.cedar]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CedarConfig {
    /// Entity type of principals, e.g. `Agent`.
    pub principal_type: String,
    /// Entity type of the resource, e.g. `Order`.
    pub resource_type: String,
    /// The scope field holding the resource id, e.g. `order_id`.
    pub resource_field: String,
}

/// One `[[tools.entities]]` entry.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(tag = "source", rename_all = "snake_case", deny_unknown_fields)]
pub enum EntityConfig {
    /// Rows of a query: column `id` is the entity id, `parent_<Type>`
    /// columns are parents, every other column an attribute.
    Sql {
        /// The Cedar entity type.
        #[serde(rename = "type")]
        type_name: String,
        /// The query, with named parameters.
        query: String,
    },
    /// Attributes sent by the authenticated application with the request.
    Request {
        /// The Cedar entity type.
        #[serde(rename = "type")]
        type_name: String,
    },
}

impl EntityConfig {
    /// The Cedar entity type it provides.
    pub fn type_name(&self) -> &str {
        match self {
            Self::Sql { type_name, .. } | Self::Request { type_name } => type_name,
        }
    }
}

impl DeploySection {
    /// Reads `[app_db]` and `[[tools]]` from a whole deployment file's
    /// text; other top-level keys are left to the program serving it.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        // Not `deny_unknown_fields` at the top: the other keys are the
        // serving program's. Inside the two sections every struct refuses
        // unknown fields. Read from the text (not a re-built table) so an
        // error carries its line.
        #[derive(Deserialize)]
        struct Whole {
            #[serde(default)]
            app_db: Option<AppDbConfig>,
            #[serde(default)]
            tools: Vec<ToolConfig>,
        }
        let whole: Whole = toml::from_str(text).map_err(|e| ConfigError::toml(text, &e))?;
        Ok(Self {
            app_db: whole.app_db,
            tools: whole.tools,
        })
    }
}

impl DeploySection {
    /// The longest a tool's executor may run one call, where the gate bounds
    /// it: a webhook's `timeout_ms` (or its default). `client` tools have
    /// none: the application applies the permit up to the lease's end,
    /// which its `lease_expires_at` says.
    pub fn executor_bounds(&self) -> impl Iterator<Item = (&str, u64)> {
        self.tools.iter().filter_map(|t| match &t.executor {
            // An upstream's call is bounded by its own `call_timeout_ms`,
            // which the program serving the upstreams checks.
            ExecutorConfig::Client | ExecutorConfig::McpUpstream => None,
            ExecutorConfig::Webhook { timeout_ms, .. } => Some((
                t.name.as_str(),
                timeout_ms.unwrap_or(crate::DEFAULT_WEBHOOK_TIMEOUT_MS),
            )),
        })
    }

    /// Checks that a claim's lease (`lease_ms`) outlasts every executor
    /// call it can cover, plus [`crate::LEASE_MARGIN_MS`]: a lease that ends
    /// while the gate's own call can still land would let reconciliation
    /// record "not applied" for a write that then commits (docs/design.md
    /// invariant 8). The error is on `lease_ms` and names the executor's
    /// field too.
    pub fn check_lease(&self, lease_ms: u64) -> Result<(), ConfigError> {
        let margin = crate::LEASE_MARGIN_MS;
        match self
            .executor_bounds()
            .find(|(_, bound)| lease_ms < bound.saturating_add(margin))
        {
            None => Ok(()),
            Some((tool, bound)) => Err(ConfigError::new(
                "lease_ms",
                format!(
                    "{lease_ms} ms is shorter than tools[{tool}].executor.timeout_ms \
                     ({bound} ms) plus the {margin} ms margin: a claim's lease must outlast \
                     the webhook call it covers; set lease_ms to at least {} or lower \
                     tools[{tool}].executor.timeout_ms",
                    bound.saturating_add(margin)
                ),
            )),
        }
    }
}

/// A configuration error found at start: the field (`tools[refund_order].
/// executor.url`) and what is wrong with it. Display prefixes the file
/// once [`ConfigError::in_file`] has named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    file: Option<PathBuf>,
    field: String,
    message: String,
}

impl ConfigError {
    /// An error about `field` (empty for the file as a whole).
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            file: None,
            field: field.into(),
            message: message.into(),
        }
    }

    /// The TOML reader's error `e` in `text`, at its line: a deployment
    /// file that does not parse, or a section of it that does not match
    /// its fields.
    pub fn toml(text: &str, e: &toml::de::Error) -> Self {
        let message = match e.span() {
            Some(span) => {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                format!("line {line}: {}", e.message())
            }
            None => e.message().to_owned(),
        };
        Self::new("", message)
    }

    /// The same error, naming the file it was found in.
    #[must_use]
    pub fn in_file(mut self, file: &Path) -> Self {
        self.file = Some(file.to_owned());
        self
    }

    /// The field, e.g. `tools[refund_order].state.query`.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}: ", file.display())?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_only_its_sections_and_refuses_unknown_fields_in_them() {
        let s = DeploySection::from_toml(
            r#"
            listen = "127.0.0.1:1"
            [app_db]
            url = "sqlite::memory:"
            [[tools]]
            name = "t"
            executor = { kind = "client" }
            state = { source = "sql", query = "SELECT 1" }
            cedar = { principal_type = "A", resource_type = "R", resource_field = "id" }
            [[tools.entities]]
            type = "R"
            source = "sql"
            query = "SELECT 1 AS id"
            "#,
        )
        .unwrap();
        assert_eq!(s.tools[0].executor, ExecutorConfig::Client);
        assert_eq!(s.tools[0].entities[0].type_name(), "R");

        let e = DeploySection::from_toml(
            r#"
            [[tools]]
            name = "t"
            executor = { kind = "webhook", url = "http://a/", status_url = "http://a/s", secrt_env = "X" }
            state = { source = "none" }
            cedar = { principal_type = "A", resource_type = "R", resource_field = "id" }
            "#,
        )
        .unwrap_err();
        assert!(e.message().contains("secrt_env"), "{e}");
        assert!(e.message().starts_with("line 4: "), "{e}");
    }

    fn webhook_tool(timeout: Option<u64>) -> DeploySection {
        let timeout = timeout.map_or(String::new(), |t| format!(", timeout_ms = {t}"));
        DeploySection::from_toml(&format!(
            r#"
            [[tools]]
            name = "refund_order"
            executor = {{ kind = "webhook", url = "http://a/", status_url = "http://a/s"{timeout} }}
            state = {{ source = "none" }}
            cedar = {{ principal_type = "A", resource_type = "R", resource_field = "id" }}
            "#
        ))
        .unwrap()
    }

    #[test]
    fn a_lease_must_outlast_the_webhook_call_and_the_margin() {
        let s = webhook_tool(Some(3000));
        let e = s.check_lease(2000).unwrap_err();
        assert_eq!(e.field(), "lease_ms");
        assert!(
            e.message()
                .contains("tools[refund_order].executor.timeout_ms (3000 ms)"),
            "{e}"
        );
        assert!(e.message().contains("at least 4000"), "{e}");
        assert!(s.check_lease(3999).is_err());
        s.check_lease(4000).unwrap();
        // The default timeout counts when the file sets none.
        let d = webhook_tool(None);
        assert!(d.check_lease(5999).is_err());
        d.check_lease(6000).unwrap();
        // A client tool has no call of the gate's to outlast.
        let c = DeploySection::from_toml(
            r#"
            [[tools]]
            name = "t"
            executor = { kind = "client" }
            state = { source = "none" }
            cedar = { principal_type = "A", resource_type = "R", resource_field = "id" }
            "#,
        )
        .unwrap();
        c.check_lease(1).unwrap();
    }
}
