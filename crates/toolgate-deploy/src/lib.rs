//! # toolgate-deploy
//!
//! The deployment file, whole: [`Deployment::load`] reads it once and
//! checks it in named steps (listen, keys, review, the settings, the
//! policy and Cedar files, the application, `[[upstreams]]`), connecting
//! to nothing. The serving programs only parse their arguments.
//!
//! Then the per-tool wiring (docs/design.md §13): for each
//! policy tool, where Cedar's entities come from, where the resource's
//! current version is read, and who performs the write. No application
//! code: an application is described by its `[app_db]` and `[[tools]]`
//! sections.
//!
//! [`Prepared::load`] checks the sections against the policy, connects
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

mod authorizer;
mod checks;
mod config;
mod db;
mod file;
mod http;
mod load;
mod params;
mod sources;
pub mod upstreams;
mod webhook;

use std::collections::HashMap;

use toolgate::claim::{ClaimRecord, ExecutorKind, ReconcileOutcome};
use toolgate::pipeline::{
    ExecError, ExecOutcome, ExecPermit, Executor, StateError, StateScope, StateSource, StateVersion,
};

pub use authorizer::{DeployAuthorizer, ToolEntities};
pub use config::{
    AppDbConfig, CedarConfig, ConfigError, DeploySection, EntityConfig, ExecutorConfig,
    StateConfig, ToolConfig,
};
pub use db::{AppDb, MAX_ROWS};
pub use file::{Application, BuiltIn, Deployment, HttpLimits, LoadedKey};
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
pub(crate) const DEFAULT_MAX_CONNECTIONS: u32 = 8;

// The sidecar holds the parts for the life of the process and shares them
// across request tasks: each must be `Send + Sync + 'static`.
const _: () = {
    const fn shareable<T: Send + Sync + 'static>() {}
    shareable::<DeployAuthorizer>();
    shareable::<DeployState>();
    shareable::<DeployExecutor>();
};

/// A deployment's `[[tools]]`, connected and prepared: the three parts the
/// pipeline takes. [`Deployment`] is the file they are read from.
pub struct Prepared {
    /// Cedar, per tool, over the tool's entity sources.
    pub authorizer: DeployAuthorizer,
    /// The state source, per tool.
    pub state: DeployState,
    /// The executor, per tool.
    pub executor: DeployExecutor,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("tools", &self.executor.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The state source of a deployment: each tool's [`StateReader`], or
/// none (`state = { source = "none" }`).
#[derive(Debug)]
pub struct DeployState {
    pub(crate) tools: HashMap<String, Option<StateReader>>,
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
    pub(crate) tools: HashMap<String, ToolExecutor>,
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
