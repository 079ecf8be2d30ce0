//! The decision seam and the mapping of decisions to the MCP wire.
//!
//! The gateway decides nothing itself. A `tools/call` becomes a
//! [`GatedCall`] (the authenticated principal, the contract stage's verdict
//! on the arguments, the scope fields and the version the deployment maps
//! from the call), one [`Decide::decide`] call turns it into the core's
//! [`Decision`], and [`to_wire`] maps that decision to the answer the client
//! gets (docs/mcp.md, "Outcomes on the wire"):
//!
//! | decision | `tools/call` answer |
//! |---|---|
//! | `executed` | the upstream's `CallToolResult`, unchanged |
//! | `replayed` | the recorded `CallToolResult`, with `_meta` `io.toolgate/outcome` = `"replayed"` |
//! | `rejected`, `forbidden`, `conflict`, `state_changed`, `in_flight`, `needs_reconciliation`, `pending_approval` | a result with `isError: true`, one short text for the model, and `_meta` `io.toolgate/decision` = `{outcome, reason, …}` for the host; the same object in `structuredContent` only when the tool has no `outputSchema` (clients validate even error results against it) |
//! | `rejected` with `unknown_tool` | a JSON-RPC error (invalid params) |
//! | `pending_approval`, to a caller that declared URL-mode elicitation | `URLElicitationRequiredError` (`-32042`) naming the review page ([`url_elicitation`]) |
//!
//! Outcomes that only a provider body can produce (`answer`, `abstain`,
//! `refused`, `truncated`, `content_filtered`) and the client-executed
//! `permitted` never come from a gateway decision; if one does, the call
//! fails with an internal error rather than an invented answer.

use std::future::Future;

use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, ErrorCode, MetaObject};
use serde_json::{Map, Value, json};
use toolgate::contract::{Checked, RejectReason};
use toolgate::decode::{Limits, decode_strict};
use toolgate::pipeline::{Decision, Outcome, Principal, Reason, Rejection};

/// `_meta` key carrying the operation key to the upstream.
pub const OPERATION_KEY_META: &str = "io.toolgate/operation-key";
/// `_meta` key marking a replayed result.
pub const OUTCOME_META: &str = "io.toolgate/outcome";
/// `_meta` key carrying a gate decision for the host.
pub const DECISION_META: &str = "io.toolgate/decision";

/// One `tools/call`, prepared for the core's decision. Everything in it
/// comes from the authenticated caller and the deployment's mapping; the
/// model's part is only the arguments inside `proposal`.
#[derive(Debug, Clone)]
pub struct GatedCall {
    /// The authenticated caller (from its API key, never from the request).
    pub principal: Principal,
    /// The contract stage's verdict on the tool and its arguments: an
    /// `action`, or the rejection (`unknown_key`, `invalid_arguments`, …).
    pub proposal: Checked,
    /// The operation-key fields as the deployment maps them (from the
    /// arguments, the caller's identity, the request's `_meta`), not yet
    /// canonical: the core canonicalises each by its declared type.
    pub scope: Map<String, Value>,
    /// The version the model read.
    pub version_seen: VersionSeen,
}

/// One `tools/call` of a read tool (`read = true` in the policy),
/// prepared for the service's read: no version, nothing to claim.
#[derive(Debug, Clone)]
pub struct GatedRead {
    /// The authenticated caller.
    pub principal: Principal,
    /// The contract stage's verdict on the tool and its arguments.
    pub proposal: Checked,
    /// The ids the call names, as the deployment maps them.
    pub scope: Map<String, Value>,
    /// The tool's rate, calls a minute per principal.
    pub per_minute: Option<u32>,
}

/// What a read came to.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadForWire {
    /// Allowed and forwarded: the upstream's result, unchanged.
    Forwarded(CallToolResult),
    /// Not allowed (`rejected`, `forbidden`): answered as any decision.
    Denied(DecisionForWire),
}

/// Where the version the model read came from.
#[derive(Debug, Clone, PartialEq)]
pub enum VersionSeen {
    /// A value from the arguments or `_meta`, not yet canonical.
    Read(Value),
    /// The mapped argument or `_meta` key is absent from the call: the core
    /// answers `missing_scope` (nothing is authorised, read or claimed).
    Missing,
}

/// What the core decided, and what the wire needs beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionForWire {
    /// The decision.
    pub decision: Decision,
    /// For `pending_approval`: the review item's page on toolgate, where a
    /// person approves it.
    pub review_url: Option<String>,
}

/// Why a call got no decision. The client gets a JSON-RPC internal error
/// without the detail; the operator's log gets the detail, its cause kept
/// ([`std::error::Error::source`]).
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// An infrastructure failure behind the decision: a store, state
    /// source or authoriser that could not answer.
    #[error(transparent)]
    Gate(#[from] toolgate::pipeline::GateError),
    /// The decision's task ended without an answer (it panicked).
    #[error("the decision task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
    /// The upstream could not be asked (a stand-in that calls it itself).
    #[error("upstream: {0}")]
    Upstream(#[from] crate::upstream::UpstreamError),
    /// The core refused a call whose proposal is no action: the catalog
    /// only prepares actions, so this is a gateway bug, not the model's.
    #[error("refused without a proposed action: {0}")]
    RefusedWithoutAction(String),
    /// The tool's mapping is one the deployment refuses when it loads.
    #[error("not served: {0}")]
    NotServed(&'static str),
    /// An allowed read could not be forwarded, or got no answer.
    #[error("read: {0}")]
    Read(#[source] toolgate::pipeline::ExecError),
}

/// The one decision function, as the gateway sees it. The implementation
/// is the service's decision ([`crate::served::Served`], which runs the core's
/// decision of docs/design.md §1 on a task of its own, so a caller that goes
/// away never abandons a claim); the gateway never decides itself.
pub trait Decide: Send + Sync + 'static {
    /// Decides one call.
    fn decide(
        &self,
        call: GatedCall,
    ) -> impl Future<Output = Result<DecisionForWire, DecideError>> + Send;

    /// Judges one read and, if it is allowed, forwards it.
    fn read(
        &self,
        call: GatedRead,
    ) -> impl Future<Output = Result<ReadForWire, DecideError>> + Send;

    /// Records a call of a tool `principal` cannot see (unknown, or hidden
    /// by its capabilities), answered as an unknown tool.
    fn unknown_tool(&self, principal: &Principal, tool: &str) -> impl Future<Output = ()> + Send;
}

/// The answer to a `tools/call` for `decided`. `has_output_schema` says
/// whether the tool declares an `outputSchema`, which decides where the
/// decision object may go.
pub fn to_wire(
    decided: &DecisionForWire,
    has_output_schema: bool,
) -> Result<CallToolResult, ErrorData> {
    let d = &decided.decision;
    match d {
        Decision::Executed { result, .. } => recorded(result, has_output_schema),
        Decision::Replayed { result, .. } => {
            let mut r = recorded(result, has_output_schema)?;
            let meta = r.meta.get_or_insert_with(|| MetaObject(Map::new()));
            meta.0.insert(OUTCOME_META.to_owned(), json!("replayed"));
            Ok(r)
        }
        Decision::Rejected(Rejection::UnknownTool { tool, .. }) => Err(unknown_tool(tool)),
        Decision::Rejected(Rejection::Contract(c))
            if c.reason == Some(RejectReason::UnknownTool) =>
        {
            Err(unknown_tool(c.tool.as_deref().unwrap_or("")))
        }
        Decision::Rejected(_)
        | Decision::Forbidden { .. }
        | Decision::Conflict { .. }
        | Decision::StateChanged { .. }
        | Decision::InFlight { .. }
        | Decision::NeedsReconciliation { .. }
        | Decision::PendingApproval { .. } => {
            let object = decision_object(decided);
            let mut r = CallToolResult::error(vec![ContentBlock::text(model_text(decided))]);
            let mut meta = Map::new();
            meta.insert(DECISION_META.to_owned(), object.clone());
            r.meta = Some(MetaObject(meta));
            if !has_output_schema {
                r.structured_content = Some(object);
            }
            Ok(r)
        }
        Decision::Answer(_)
        | Decision::Abstain(_)
        | Decision::Refused(_)
        | Decision::Truncated(_)
        | Decision::ContentFiltered(_)
        | Decision::Permitted { .. } => Err(ErrorData::internal_error(
            format!(
                "the gate decided `{}`, which a tools/call cannot answer",
                d.outcome()
            ),
            None,
        )),
    }
}

/// JSON-RPC error code of `URLElicitationRequiredError` (protocol
/// 2025-11-25): the request cannot proceed until the user has completed an
/// interaction at a URL.
pub const URL_ELICITATION_REQUIRED: i32 = -32042;

/// The answer to a `pending_approval` with a review page for a caller that
/// declared URL-mode elicitation (`capabilities.elicitation.url`):
/// `URLElicitationRequiredError`, whose one elicitation is the review
/// item's page. The client shows it to its user and may retry the same
/// call once approved; nothing the client answers approves anything (the
/// approval is a reviewer's, on toolgate's own authenticated page). The
/// decision object rides along in `data` for the host. `None` for any other
/// decision.
pub fn url_elicitation(decided: &DecisionForWire) -> Option<ErrorData> {
    let url = decided.review_url.as_ref()?;
    let d = &decided.decision;
    if d.outcome() != Outcome::PendingApproval {
        return None;
    }
    let message = model_text(decided);
    // One operation, one review page: its retries are the same interaction.
    let id = d.key().map_or_else(|| url.clone(), |k| k.to_hex());
    let data = json!({
        "elicitations": [{
            "mode": "url",
            "elicitationId": id,
            "url": url,
            "message": message,
        }],
        DECISION_META: decision_object(decided),
    });
    Some(ErrorData::new(
        ErrorCode(URL_ELICITATION_REQUIRED),
        message,
        Some(data),
    ))
}

/// A JSON-RPC error for a tool the caller cannot see or the policy lacks:
/// the same answer for both, so a hidden tool is indistinguishable from an
/// unknown one.
pub fn unknown_tool(tool: &str) -> ErrorData {
    ErrorData::invalid_params(format!("unknown tool: {tool:?}"), None)
}

/// The recorded `CallToolResult`, as the upstream answered it, made
/// readable by every client of either revision:
/// - `resultType: "complete"` when it has none (recorded from an older
///   upstream, or by reconciliation): 2026-07-28 clients require it, and
///   rmcp takes it out again for older ones;
/// - for a tool with an `outputSchema`, a result recorded by reconciliation
///   (its text is the upstream's record, `_meta` `io.toolgate/reconciled`)
///   carries that record as `structuredContent` too, which clients require
///   of such a tool.
fn recorded(result: &Value, has_output_schema: bool) -> Result<CallToolResult, ErrorData> {
    // An answer recorded as given (by a door that did not shape it): its
    // JSON as the result's text, so a replay is still a valid result.
    if !result.get("content").is_some_and(Value::is_array) {
        let mut r = CallToolResult::success(vec![ContentBlock::text(result.to_string())])
            .with_meta(Some(MetaObject(
                [(crate::executor::RECONCILED_META.to_owned(), json!(true))]
                    .into_iter()
                    .collect(),
            )));
        r.result_type = Some(rmcp::model::ResultType::COMPLETE);
        return Ok(r);
    }
    let mut r: CallToolResult = serde_json::from_value(result.clone()).map_err(|e| {
        ErrorData::internal_error(
            format!("the recorded result is not a CallToolResult: {e}"),
            None,
        )
    })?;
    if r.result_type.is_none() {
        r.result_type = Some(rmcp::model::ResultType::COMPLETE);
    }
    let reconciled = r
        .meta
        .as_ref()
        .is_some_and(|m| m.0.get(crate::executor::RECONCILED_META) == Some(&json!(true)));
    if has_output_schema && reconciled && r.structured_content.is_none() {
        r.structured_content = r
            .content
            .first()
            .and_then(|c| c.as_text())
            .and_then(|t| decode_strict(t.text.as_bytes(), &Limits::provider_body()).ok())
            .filter(Value::is_object);
    }
    Ok(r)
}

/// `{outcome, reason, message, …}` for the host: the decision's flat view
/// ([`toolgate::pipeline::DecisionView`]) without what the host must not
/// see or cannot use (the prior proposal's arguments, a result recorded for
/// someone else's proposal), absent members left out, plus the review page.
fn decision_object(decided: &DecisionForWire) -> Value {
    let v = decided.decision.view();
    let mut o = Map::new();
    o.insert("outcome".into(), json!(v.outcome.as_str()));
    o.insert("reason".into(), json!(v.reason.map(Reason::as_str)));
    if let Some(m) = v.message {
        o.insert("message".into(), json!(m));
    }
    if let Some(p) = v.stateless.and_then(|c| c.pointer) {
        o.insert("pointer".into(), json!(p));
    }
    if let Some(k) = v.operation_key {
        o.insert("operation_key".into(), json!(k));
    }
    if let Some(s) = v.version_seen {
        o.insert("version_seen".into(), json!(s));
    }
    if let Some(s) = v.current_version {
        o.insert("current_version".into(), json!(s));
    }
    if let Some(b) = v.budget {
        o.insert("budget".into(), b.to_json());
    }
    if let (Outcome::PendingApproval, Some(url)) = (v.outcome, &decided.review_url) {
        o.insert("review_url".into(), json!(url));
    }
    Value::Object(o)
}

/// One short sentence for the model: what happened and what to do, never
/// "try again" for an outcome where retrying blindly is wrong.
fn model_text(decided: &DecisionForWire) -> String {
    let d = &decided.decision;
    let detail = d.message().map(|m| format!(" ({m})")).unwrap_or_default();
    match d.outcome() {
        Outcome::Rejected => format!(
            "Rejected by the gate: {}{detail}. Nothing was done; correct the call before trying again.",
            d.reason().map_or("rejected", Reason::as_str)
        ),
        Outcome::Forbidden => {
            "Forbidden: this caller may not do this to this resource. Nothing was done; do not retry."
                .to_owned()
        }
        Outcome::Conflict => format!(
            "Conflict: this operation was already proposed with different arguments{detail}. Nothing was done; a person decides."
        ),
        Outcome::StateChanged => {
            let current = d
                .current_version()
                .map(|v| format!(" (now {})", v.as_str()))
                .unwrap_or_default();
            format!(
                "The resource changed since it was read{current}. Nothing was done; read it again before deciding."
            )
        }
        Outcome::InFlight => {
            "The same operation is being executed right now. Do not send it again; its result will be recorded."
                .to_owned()
        }
        Outcome::NeedsReconciliation => {
            "The outcome of this operation is unknown and is being reconciled. Do not send it again."
                .to_owned()
        }
        Outcome::PendingApproval => match &decided.review_url {
            Some(url) => format!(
                "This operation waits for a person's approval: {url}. Call it again, unchanged, once approved."
            ),
            None => "This operation waits for a person's approval. Call it again, unchanged, once approved."
                .to_owned(),
        },
        other => format!("The gate decided `{other}`."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate::claim::{Fingerprint, OperationKey, ProposalRecord};
    use toolgate::pipeline::{BudgetReport, Operation, StateVersion};

    fn operation() -> Operation {
        Operation {
            tool: "refund_order".into(),
            key: OperationKey::from_bytes([0xab; 32]),
            fingerprint: Fingerprint::from_bytes([0xcd; 32]),
            version_seen: StateVersion::new("3").unwrap(),
        }
    }

    fn prior() -> ProposalRecord {
        ProposalRecord::new(
            "refund_order".into(),
            r#"{"amount_minor":500}"#.into(),
            r#"{"order_id":1001}"#.into(),
            "3".into(),
            "agent-ana".into(),
        )
        .unwrap()
    }

    fn upstream_result() -> Value {
        json!({
            "content": [{"type": "text", "text": "{\"refund_id\": 1, \"version\": 4}"}],
            "isError": false,
            "_meta": {"io.example/trace": "t-1"}
        })
    }

    fn executed(result: Value) -> Decision {
        Decision::Executed {
            operation: operation(),
            result,
            reply: String::new(),
            over_budget_approved: false,
        }
    }

    fn wire(decision: Decision, has_output_schema: bool) -> Value {
        let r = to_wire(
            &DecisionForWire {
                decision,
                review_url: None,
            },
            has_output_schema,
        )
        .unwrap();
        serde_json::to_value(r).unwrap()
    }

    #[test]
    fn executed_is_the_upstream_result_unchanged() {
        let v = wire(executed(upstream_result()), false);
        // Parsed into rmcp's type and written back: the same JSON, with the
        // resultType 2026-07-28 requires (rmcp strips it for older peers).
        let mut want = upstream_result();
        want["resultType"] = json!("complete");
        assert_eq!(v, want);
        let mut with = upstream_result();
        with["resultType"] = json!("complete");
        assert_eq!(wire(executed(with.clone()), false), with);
    }

    /// A result recorded by reconciliation, as the executor writes it.
    fn reconciled() -> Value {
        json!({
            "content": [{"type": "text", "text": "{\"refund_id\":7,\"version\":5}"}],
            "isError": false,
            "_meta": {crate::executor::RECONCILED_META: true},
        })
    }

    #[test]
    fn a_reconciled_result_is_structured_for_a_tool_with_an_output_schema() {
        let replay = |result: Value, schema: bool| {
            wire(
                Decision::Replayed {
                    operation: operation(),
                    result,
                    reply: String::new(),
                    prior: prior(),
                },
                schema,
            )
        };
        let v = replay(reconciled(), true);
        assert_eq!(
            v["structuredContent"],
            json!({"refund_id": 7, "version": 5})
        );
        assert_eq!(v["resultType"], json!("complete"));
        // Without an output schema the text is enough, and an upstream's
        // own result is never rewritten.
        assert!(
            replay(reconciled(), false)
                .get("structuredContent")
                .is_none()
        );
        assert!(
            replay(upstream_result(), true)
                .get("structuredContent")
                .is_none()
        );
        // A record that is not an object gives no structured content.
        let mut text = reconciled();
        text["content"][0]["text"] = json!("applied");
        assert!(replay(text, true).get("structuredContent").is_none());
    }

    #[test]
    fn replayed_is_the_recorded_result_marked_in_meta() {
        let executed = wire(executed(upstream_result()), false);
        let replayed = wire(
            Decision::Replayed {
                operation: operation(),
                result: upstream_result(),
                reply: String::new(),
                prior: prior(),
            },
            false,
        );
        assert_eq!(replayed["_meta"][OUTCOME_META], json!("replayed"));
        // The upstream's own _meta stays, and nothing else changes.
        assert_eq!(replayed["_meta"]["io.example/trace"], json!("t-1"));
        let mut without = replayed.clone();
        without["_meta"]
            .as_object_mut()
            .unwrap()
            .remove(OUTCOME_META);
        assert_eq!(without, executed);
    }

    #[test]
    fn an_answer_recorded_as_given_replays_as_its_text() {
        // An operator's receipt recorded unshaped (before answers were
        // shaped, or by the review page): still a valid result, never an
        // internal error on every retry.
        let r = to_wire(
            &DecisionForWire {
                decision: executed(json!({"refund_id": 1})),
                review_url: None,
            },
            false,
        )
        .unwrap();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["content"][0]["text"], json!(r#"{"refund_id":1}"#));
        assert_eq!(v["isError"], json!(false));
        assert_eq!(v["_meta"][crate::executor::RECONCILED_META], json!(true));
    }

    #[test]
    fn a_recorded_result_with_content_that_is_not_a_call_tool_result_is_an_internal_error() {
        let e = to_wire(
            &DecisionForWire {
                decision: executed(json!({"content": "not a list"})),
                review_url: None,
            },
            false,
        );
        // `content` that is not an array reads as an answer recorded as
        // given; an array of blocks no SDK knows does not.
        assert!(e.is_ok());
        let e = to_wire(
            &DecisionForWire {
                decision: executed(json!({"content": [{"type": 7}]})),
                review_url: None,
            },
            false,
        )
        .unwrap_err();
        assert_eq!(e.code, rmcp::model::ErrorCode::INTERNAL_ERROR);
    }

    fn state_changed() -> Decision {
        Decision::StateChanged {
            operation: operation(),
            reason: Reason::VersionMismatch,
            message: "version 3 was read; the order is at 4".into(),
            current_version: Some(StateVersion::new("4").unwrap()),
            result: None,
            prior: None,
        }
    }

    #[test]
    fn a_gate_outcome_is_an_error_result_with_the_decision_in_meta() {
        let v = wire(state_changed(), false);
        assert_eq!(v["isError"], json!(true));
        let decision = json!({
            "outcome": "state_changed",
            "reason": "version_mismatch",
            "message": "version 3 was read; the order is at 4",
            "operation_key": "ab".repeat(32),
            "version_seen": "3",
            "current_version": "4",
        });
        assert_eq!(v["_meta"][DECISION_META], decision);
        assert_eq!(v["structuredContent"], decision);
        let text = v["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("read it again"), "{text}");
        assert!(text.contains("now 4"), "{text}");
    }

    /// Clients validate even an error result's structuredContent against
    /// the tool's outputSchema (the TypeScript SDK 1.32 refuses the whole
    /// result), so it is left out for tools that declare one.
    #[test]
    fn no_structured_content_for_a_tool_with_an_output_schema() {
        let v = wire(state_changed(), true);
        assert!(v.get("structuredContent").is_none(), "{v}");
        assert_eq!(v["_meta"][DECISION_META]["outcome"], json!("state_changed"));
    }

    #[test]
    fn every_gate_outcome_maps_to_an_error_result() {
        let cases = vec![
            Decision::Forbidden {
                tool: "refund_order".into(),
                fingerprint: Fingerprint::from_bytes([1; 32]),
                reason: Reason::NotAuthorized,
                message: "not authorised for this resource now".into(),
            },
            Decision::Conflict {
                operation: operation(),
                message: "another amount was proposed for this operation".into(),
                result: Some(upstream_result()),
                prior: prior(),
            },
            Decision::InFlight {
                operation: operation(),
                prior: prior(),
            },
            Decision::NeedsReconciliation {
                operation: operation(),
                reason: Reason::ExecutorFailed,
                message: "the upstream did not answer".into(),
                prior: None,
            },
            Decision::PendingApproval {
                operation: operation(),
                reason: Reason::BudgetExceeded,
                message: "over the daily budget".into(),
                budget: Some(BudgetReport {
                    name: "daily".into(),
                    limit: 1000,
                    used: 900,
                    remaining: 100,
                    amount: 500,
                }),
            },
            Decision::Rejected(Rejection::Scope {
                reason: Reason::InvalidScope,
                tool: "refund_order".into(),
                fingerprint: Fingerprint::from_bytes([2; 32]),
                message: "order_id: \"042\" is not an integer".into(),
            }),
        ];
        let expected = [
            ("forbidden", Some("not_authorized")),
            ("conflict", None),
            ("in_flight", None),
            ("needs_reconciliation", Some("executor_failed")),
            ("pending_approval", Some("budget_exceeded")),
            ("rejected", Some("invalid_scope")),
        ];
        for (d, (outcome, reason)) in cases.into_iter().zip(expected) {
            let v = wire(d, false);
            assert_eq!(v["isError"], json!(true), "{v}");
            let o = &v["_meta"][DECISION_META];
            assert_eq!(o["outcome"], json!(outcome), "{v}");
            assert_eq!(o["reason"], json!(reason), "{v}");
            // A conflict's prior result belongs to someone else's proposal.
            assert!(!v.to_string().contains("refund_id"), "{v}");
            assert!(v["content"][0]["text"].as_str().unwrap().len() < 300);
        }
    }

    fn pending_approval(review_url: &str) -> DecisionForWire {
        DecisionForWire {
            decision: Decision::PendingApproval {
                operation: operation(),
                reason: Reason::ApprovalRequired,
                message: "a person approves each refund".into(),
                budget: None,
            },
            review_url: Some(review_url.into()),
        }
    }

    #[test]
    fn pending_approval_carries_the_review_page() {
        let url = "https://gate.example/review?item=17";
        let r = to_wire(&pending_approval(url), false).unwrap();
        let v = serde_json::to_value(r).unwrap();
        assert_eq!(v["_meta"][DECISION_META]["review_url"], json!(url));
        assert!(v["content"][0]["text"].as_str().unwrap().contains(url));
    }

    #[test]
    fn url_mode_elicitation_names_the_review_page_and_only_for_approvals() {
        let url = "https://gate.example/review/items/17";
        let pending = pending_approval(url);
        let e = url_elicitation(&pending).unwrap();
        assert_eq!(e.code, ErrorCode(URL_ELICITATION_REQUIRED));
        let data = e.data.unwrap();
        let elicitation = &data["elicitations"][0];
        assert_eq!(elicitation["mode"], json!("url"));
        assert_eq!(elicitation["url"], json!(url));
        assert_eq!(elicitation["elicitationId"], json!("ab".repeat(32)));
        assert!(elicitation["message"].as_str().unwrap().contains(url));
        assert_eq!(data[DECISION_META]["outcome"], json!("pending_approval"));
        // Without a page there is nothing to open: today's answer stays.
        let no_page = DecisionForWire {
            review_url: None,
            ..pending.clone()
        };
        assert_eq!(url_elicitation(&no_page), None);
        let in_flight = DecisionForWire {
            decision: Decision::InFlight {
                operation: operation(),
                prior: prior(),
            },
            ..pending
        };
        assert_eq!(url_elicitation(&in_flight), None);
    }

    #[test]
    fn an_unknown_tool_is_a_protocol_error() {
        let e = to_wire(
            &DecisionForWire {
                decision: Decision::Rejected(Rejection::UnknownTool {
                    tool: "drop_tables".into(),
                    message: "not in the policy".into(),
                }),
                review_url: None,
            },
            false,
        )
        .unwrap_err();
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert_eq!(e, unknown_tool("drop_tables"));
    }

    #[test]
    fn provider_only_outcomes_are_internal_errors() {
        let policy = toolgate::contract::Policy::load(
            r#"
            version = 1
            abstain_message = "no"
            [[tools]]
            name = "t"
            capability = "c"
            operation_key = ["k"]
            schema = '{"type": "object", "additionalProperties": false}'
            "#,
        )
        .unwrap();
        let answer = toolgate::contract::check(
            &policy,
            toolgate::provider::Provider::Envelope,
            br#"{"outcome": "answer", "reply": "hello"}"#,
            &toolgate::contract::CheckOptions::default(),
        );
        let e = to_wire(
            &DecisionForWire {
                decision: Decision::Answer(answer),
                review_url: None,
            },
            false,
        )
        .unwrap_err();
        assert_eq!(e.code, rmcp::model::ErrorCode::INTERNAL_ERROR);
    }
}
