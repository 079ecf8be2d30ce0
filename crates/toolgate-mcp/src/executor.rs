//! The upstream as the core's executor: the one place a gated `tools/call`
//! reaches an MCP server.
//!
//! [`UpstreamExecutor::execute`] runs only with a won claim's permit (the
//! core's types allow nothing else): it sends the validated arguments to the
//! tool's upstream with the operation key in `_meta`
//! (`io.toolgate/operation-key`), and records the upstream's
//! `CallToolResult`, as JSON, as the claim's result: what `executed` answers
//! and every `replayed` answers again. A result with `isError: true` is an
//! answer too (the upstream ran the tool and said so) and is recorded as
//! given. No answer (a timeout, a broken connection) and a JSON-RPC refusal
//! are [`ExecError`]s: the claim stays in flight, the caller is told
//! `needs_reconciliation`, and nothing is sent again.
//!
//! [`UpstreamExecutor::reconcile`] asks the tool's `status_tool` and never
//! calls the tool itself. "Applied" is recorded as a `CallToolResult` whose
//! text is the upstream's record of the write (marked `_meta`
//! `io.toolgate/reconciled`), so a later replay is a valid tool result;
//! "not applied" closes the claim for good (the status tool fenced the key).
//! A tool without a status tool is reconciled by an operator's answer.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use toolgate::claim::{ClaimRecord, JsonText, ReconcileOutcome};
use toolgate::pipeline::{ExecError, ExecOutcome, ExecPermit, Executor, ExecutorKind};

use crate::config::StatusToolFile;
use crate::upstream::{Status, UpstreamClient};

/// `_meta` key marking a result recorded by reconciliation.
pub const RECONCILED_META: &str = "io.toolgate/reconciled";

struct Route {
    client: Arc<UpstreamClient>,
    status_tool: Option<StatusToolFile>,
}

/// Sends each tool's writes to its upstream.
#[derive(Default)]
pub struct UpstreamExecutor {
    routes: HashMap<String, Route>,
}

impl std::fmt::Debug for UpstreamExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamExecutor")
            .field("tools", &self.routes.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl UpstreamExecutor {
    /// An executor with no tool yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends `tool` to `client`, reconciled through `status_tool` if given.
    pub fn route(
        &mut self,
        tool: &str,
        client: Arc<UpstreamClient>,
        status_tool: Option<StatusToolFile>,
    ) {
        self.routes.insert(
            tool.to_owned(),
            Route {
                client,
                status_tool,
            },
        );
    }

    fn route_of(&self, tool: &str) -> Result<&Route, ExecError> {
        // The catalog serves only mapped tools, so this is a wiring error;
        // nothing was sent, but say "unknown" rather than guess.
        self.routes
            .get(tool)
            .ok_or_else(|| ExecError::new(format!("no upstream serves tool {tool:?}")))
    }
}

/// The receipt recorded for an upstream's result: its JSON text.
fn receipt(value: &impl serde::Serialize) -> Result<JsonText, ExecError> {
    let text = serde_json::to_string(value)
        .map_err(|e| ExecError::new(format!("the upstream result has no JSON form: {e}")))?;
    JsonText::result(text)
        .map_err(|e| ExecError::new(format!("the upstream result cannot be recorded: {e}")))
}

impl Executor for UpstreamExecutor {
    async fn execute(&self, permit: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        let route = self.route_of(permit.tool())?;
        let arguments: Map<String, Value> = permit
            .arguments()
            .as_object()
            .cloned()
            .ok_or_else(|| ExecError::new("the validated arguments are not an object"))?;
        let result = route
            .client
            // The attempt's key (`<operation key>`, then `<key>.<n>`): an
            // attempt the status tool fenced never blocks the next one.
            .call(permit.tool(), arguments, &permit.idempotency_key())
            .await
            .map_err(|e| ExecError::new(e.to_string()))?;
        Ok(ExecOutcome::Applied {
            receipt: receipt(&result)?,
        })
    }

    /// Every tool it serves is an upstream's write: its claims are recorded
    /// as `mcp_upstream`, so reconciliation asks this executor (the tool's
    /// status tool) and no other.
    fn kind(&self, _tool: &str) -> ExecutorKind {
        ExecutorKind::McpUpstream
    }

    async fn reconcile(&self, claim: &ClaimRecord) -> Result<ReconcileOutcome, ExecError> {
        let route = self.route_of(claim.proposal.tool())?;
        let Some(status) = &route.status_tool else {
            return Err(ExecError::new(format!(
                "tool {:?} has no status tool: an operator answers (toolgate claims reconcile --applied/--not-applied)",
                claim.proposal.tool()
            )));
        };
        match route
            .client
            .status(&status.name, &status.key_argument, &claim.idempotency_key())
            .await
            .map_err(|e| ExecError::new(e.to_string()))?
        {
            Status::Applied(doc) => {
                let record = doc.get("result").cloned().unwrap_or(doc);
                let result = json!({
                    "content": [{"type": "text", "text": record.to_string()}],
                    "isError": false,
                    "_meta": {RECONCILED_META: true},
                });
                Ok(ReconcileOutcome::Applied {
                    receipt: receipt(&result)?,
                })
            }
            Status::NotApplied(doc) => Ok(ReconcileOutcome::NotApplied {
                detail: receipt(&doc)?,
            }),
        }
    }
}
