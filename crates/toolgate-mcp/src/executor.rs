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
//!
//! An upstream with `token_exchange` is called as the person: each person
//! has a connection of their own, made with the token their own exchanged
//! for this upstream ([`crate::exchange`]), and made again when that token
//! changes. The status tool is asked over the gateway's own connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};
use toolgate::claim::{ClaimRecord, JsonText, ReconcileOutcome};
use toolgate::pipeline::{
    AllowedRead, Credential, ExecError, ExecOutcome, ExecPermit, Executor, ExecutorKind, Principal,
};

use crate::config::{StatusToolFile, Upstream};
use crate::exchange::Exchanger;

/// Most people with a connection of their own to one upstream at once;
/// past it one is dropped (it closes when its last call ends) and made
/// again at that person's next call.
pub const MAX_PERSONAL_CONNECTIONS: usize = 256;
use crate::upstream::{Status, UpstreamClient};

/// `_meta` key marking a result recorded by reconciliation.
pub const RECONCILED_META: &str = "io.toolgate/reconciled";

struct Route {
    client: Arc<UpstreamClient>,
    status_tool: Option<StatusToolFile>,
    as_person: Option<Arc<AsPerson>>,
    output: Output,
}

/// What an explicit answer for a tool's claim must be.
enum Output {
    /// The tool declares no output schema: any JSON, recorded as its text.
    Free,
    /// Its pinned output schema, which an answer's structured content must
    /// meet (clients validate a replay against it).
    Checked(Box<toolgate::contract::Schema>),
    /// A pinned output schema the gate cannot check: no explicit answer
    /// can be verified, so none is recorded.
    Unchecked(String),
}

/// The people's own connections to one upstream.
pub struct AsPerson {
    upstream: Upstream,
    exchanger: Arc<Exchanger>,
    // Each with the exchanged token it was made with.
    connections: Mutex<HashMap<String, (Credential, Arc<UpstreamClient>)>>,
}

impl AsPerson {
    /// Calls to `upstream` as the person, with tokens from `exchanger`.
    pub fn new(upstream: Upstream, exchanger: Arc<Exchanger>) -> Self {
        Self {
            upstream,
            exchanger,
            connections: Mutex::new(HashMap::new()),
        }
    }

    fn connections(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (Credential, Arc<UpstreamClient>)>> {
        self.connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The person's connection, with a token exchanged for theirs.
    async fn client(&self, principal: &Principal) -> Result<Arc<UpstreamClient>, ExecError> {
        let person = principal.id();
        let token = self
            .exchanger
            .token_for(person, principal.credential())
            .await
            .map_err(|e| ExecError::new(format!("nothing was sent: {e}")))?;
        if let Some((with, client)) = self.connections().get(person)
            && *with == token
        {
            return Ok(Arc::clone(client));
        }
        let client = Arc::new(
            UpstreamClient::connect_as(&self.upstream, token.expose())
                .await
                .map_err(|e| ExecError::new(format!("nothing was sent: {e}")))?,
        );
        let mut connections = self.connections();
        if connections.len() >= MAX_PERSONAL_CONNECTIONS
            && !connections.contains_key(person)
            && let Some(any) = connections.keys().next().cloned()
        {
            connections.remove(&any);
        }
        connections.insert(person.to_owned(), (token, Arc::clone(&client)));
        Ok(client)
    }
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
                as_person: None,
                output: Output::Free,
            },
        );
    }

    /// Calls `tool` as the person through `as_person`; its status tool, if
    /// any, over `client`, the gateway's own connection.
    pub fn route_as_person(
        &mut self,
        tool: &str,
        client: Arc<UpstreamClient>,
        status_tool: Option<StatusToolFile>,
        as_person: Arc<AsPerson>,
    ) {
        self.routes.insert(
            tool.to_owned(),
            Route {
                client,
                status_tool,
                as_person: Some(as_person),
                output: Output::Free,
            },
        );
    }

    /// Says that `tool` (already routed) declares `schema` as its pinned
    /// output schema: an explicit answer for one of its claims must meet it
    /// ([`Executor::answered`]).
    pub fn expect_output(&mut self, tool: &str, schema: &Value) {
        if let Some(route) = self.routes.get_mut(tool) {
            route.output = match toolgate::contract::Schema::compile(schema) {
                Ok(s) => Output::Checked(Box::new(s)),
                Err(e) => Output::Unchecked(e.to_string()),
            };
        }
    }

    /// Forwards a read the gate allowed to its upstream, as the person
    /// where the upstream is called so; the result comes back as given.
    /// Nothing is recorded: a read is not claimed.
    pub async fn read(
        &self,
        read: &AllowedRead,
        principal: &Principal,
    ) -> Result<rmcp::model::CallToolResult, ExecError> {
        let (client, arguments) = self
            .target(read.tool(), read.arguments(), principal)
            .await?;
        client
            .read(read.tool(), arguments)
            .await
            .map_err(|e| ExecError::new(e.to_string()))
    }

    /// The connection `tool` is sent over for `principal` (theirs, where
    /// the upstream is called as the person), and the validated arguments.
    async fn target(
        &self,
        tool: &str,
        arguments: &Value,
        principal: &Principal,
    ) -> Result<(Arc<UpstreamClient>, Map<String, Value>), ExecError> {
        let route = self.route_of(tool)?;
        let arguments = arguments
            .as_object()
            .cloned()
            .ok_or_else(|| ExecError::new("the validated arguments are not an object"))?;
        let client = match &route.as_person {
            Some(p) => p.client(principal).await?,
            None => Arc::clone(&route.client),
        };
        Ok((client, arguments))
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
fn receipt_of(value: &impl serde::Serialize) -> Result<JsonText, ExecError> {
    let text = serde_json::to_string(value)
        .map_err(|e| ExecError::new(format!("the upstream result has no JSON form: {e}")))?;
    JsonText::result(text)
        .map_err(|e| ExecError::new(format!("the upstream result cannot be recorded: {e}")))
}

impl Executor for UpstreamExecutor {
    async fn execute(&self, permit: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        let (client, arguments) = self
            .target(permit.tool(), permit.arguments(), permit.principal())
            .await?;
        let result = client
            // The attempt's key (`<operation key>`, then `<key>.<n>`): an
            // attempt the status tool fenced never blocks the next one.
            .call(permit.tool(), arguments, &permit.idempotency_key())
            .await
            .map_err(|e| ExecError::new(e.to_string()))?;
        Ok(ExecOutcome::Applied {
            receipt: receipt_of(&result)?,
        })
    }

    /// Every tool it serves is an upstream's write: its claims are recorded
    /// as `mcp_upstream`, so reconciliation asks this executor (the tool's
    /// status tool) and no other.
    fn kind(&self, _tool: &str) -> ExecutorKind {
        ExecutorKind::McpUpstream
    }

    /// An operator's "applied" as the `CallToolResult` a replay answers:
    /// the tool's output given alone becomes its text and, for a tool with
    /// an output schema, its structured content, checked against that
    /// schema; a whole `CallToolResult` is taken as it is (an error result
    /// is no applied write). Marked `_meta` `io.toolgate/reconciled`.
    fn answered(&self, tool: &str, receipt: JsonText) -> Result<JsonText, ExecError> {
        let route = self.route_of(tool)?;
        let value = receipt
            .value()
            .map_err(|e| ExecError::new(format!("the answer is not JSON: {e}")))?;
        receipt_of(&shape_answer(tool, &route.output, value)?)
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
                    receipt: receipt_of(&result)?,
                })
            }
            Status::NotApplied(doc) => Ok(ReconcileOutcome::NotApplied {
                detail: receipt_of(&doc)?,
            }),
        }
    }
}

/// An operator's "applied" answer `value` for a claim of `tool` as the
/// `CallToolResult` a replay answers ([`UpstreamExecutor::answered`]).
fn shape_answer(tool: &str, output: &Output, value: Value) -> Result<Value, ExecError> {
    let mut result = if value.get("content").is_some_and(Value::is_array) {
        let r: rmcp::model::CallToolResult = serde_json::from_value(value.clone())
            .map_err(|e| ExecError::new(format!("the answer is not a CallToolResult: {e}")))?;
        if r.is_error == Some(true) {
            return Err(ExecError::new(
                "an error result (isError: true) is not an applied write",
            ));
        }
        value
    } else {
        let mut r = json!({
            "content": [{"type": "text", "text": value.to_string()}],
            "isError": false,
        });
        if !matches!(*output, Output::Free) {
            r["structuredContent"] = value;
        }
        r
    };
    match output {
        Output::Free => {}
        Output::Checked(schema) => {
            let structured = result.get("structuredContent").ok_or_else(|| {
                    ExecError::new(format!(
                        "tool {tool:?} declares an output schema: the answer needs its structured content"
                    ))
                })?;
            schema.validate(structured).map_err(|v| {
                ExecError::new(format!(
                    "the answer does not meet tool {tool:?}'s output schema: {v}"
                ))
            })?;
        }
        Output::Unchecked(why) => {
            return Err(ExecError::new(format!(
                "tool {tool:?}'s output schema cannot be checked by the gate ({why}): \
                     reconcile through its status tool"
            )));
        }
    }
    if let Some(o) = result.as_object_mut() {
        let meta = o.entry("_meta").or_insert_with(|| json!({}));
        if let Some(m) = meta.as_object_mut() {
            m.insert(RECONCILED_META.to_owned(), json!(true));
        }
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(schema: Value) -> Output {
        Output::Checked(Box::new(
            toolgate::contract::Schema::compile(&schema).unwrap(),
        ))
    }

    #[test]
    fn an_answer_becomes_the_result_a_replay_can_answer() {
        let out = shape_answer("refund", &Output::Free, json!({"refund_id": 7})).unwrap();
        assert_eq!(out["content"][0]["text"], json!(r#"{"refund_id":7}"#));
        assert_eq!(out["isError"], json!(false));
        assert!(out.get("structuredContent").is_none());
        assert_eq!(out["_meta"][RECONCILED_META], json!(true));
        let r: rmcp::model::CallToolResult = serde_json::from_value(out).unwrap();
        assert_eq!(r.is_error, Some(false));
    }

    #[test]
    fn an_answer_meets_the_tools_output_schema_or_is_refused() {
        let schema = checked(json!({
            "type": "object",
            "properties": {"refund_id": {"type": "integer"}},
            "required": ["refund_id"]
        }));
        let ok = shape_answer("refund", &schema, json!({"refund_id": 7})).unwrap();
        assert_eq!(ok["structuredContent"], json!({"refund_id": 7}));
        let bad = shape_answer("refund", &schema, json!({"refund_id": "seven"})).unwrap_err();
        assert!(bad.to_string().contains("output schema"), "{bad}");
        let none = shape_answer("refund", &schema, json!("done")).unwrap_err();
        assert!(none.to_string().contains("output schema"), "{none}");
        // A whole result without structured content, for a tool that has
        // an output schema: refused too.
        let text_only = json!({"content": [{"type": "text", "text": "ok"}]});
        assert!(shape_answer("refund", &schema, text_only).is_err());
        let uncheckable = Output::Unchecked("a $ref to elsewhere".into());
        assert!(shape_answer("refund", &uncheckable, json!({"refund_id": 7})).is_err());
    }

    #[test]
    fn an_error_result_is_no_applied_write() {
        let e = json!({"content": [{"type": "text", "text": "failed"}], "isError": true});
        assert!(shape_answer("refund", &Output::Free, e).is_err());
        let whole = json!({"content": [{"type": "text", "text": "ok"}], "isError": false});
        let out = shape_answer("refund", &Output::Free, whole).unwrap();
        assert_eq!(out["content"][0]["text"], json!("ok"));
        assert_eq!(out["_meta"][RECONCILED_META], json!(true));
    }
}
