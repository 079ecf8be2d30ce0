//! Wire formats. Request bodies go through the strict decoder first
//! (duplicate keys, big integers, depth and size are refused there), then
//! into these types with unknown fields refused: a body carries no field
//! the server did not ask for, least of all an identity.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use toolgate::claim::{ClaimRecord, Lease};
use toolgate::pipeline::{Decision, Outcome};
use utoipa::ToSchema;

/// `POST /v1/decisions`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// `anthropic`, `openai-chat`, `openai-responses`, `gemini` or
    /// `envelope`.
    pub provider: String,
    /// The raw provider response body: as JSON, or as a string holding it
    /// (byte for byte what the provider sent, streams included).
    #[schema(value_type = Object)]
    pub response: Value,
    /// The server-fixed scope: the fields the policy's operation keys name
    /// (for the support desk `customer_id`, `ticket_id`) and `version_seen`,
    /// the resource version the model was shown. Strings or integers.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub scope: Map<String, Value>,
    /// The body is a Server-Sent Events stream (given as a string).
    #[serde(default)]
    pub stream: bool,
    /// 1 for the original model attempt, 2 for the one repair re-ask.
    #[serde(default)]
    pub attempt: Option<u32>,
    /// `native` (default) or `structured`.
    #[serde(default)]
    pub envelope: Option<String>,
}

/// A permit for a client-executed write (outcome `permitted`).
#[derive(Debug, Serialize, ToSchema)]
pub struct Permit {
    /// The operation key (hex): the claim to complete.
    pub operation_key: String,
    /// The holder token (hex): proof of ownership for the completion.
    pub holder: String,
    /// When the lease ends (Unix ms). Past it the claim needs
    /// reconciliation; a completion is refused.
    pub lease_expires_at: i64,
    /// The validated arguments, canonical (RFC 8785).
    #[schema(value_type = Object)]
    pub arguments: Value,
    /// The same, as the exact canonical text that was fingerprinted.
    pub canonical_arguments: String,
    /// The version the gate validated: apply the write only where the
    /// resource still has it (`… WHERE version = ?`).
    pub precondition_version: String,
}

impl Permit {
    pub fn new(lease: &Lease, canonical: &str, arguments: Value, precondition: &str) -> Self {
        Self {
            operation_key: lease.key.to_hex(),
            holder: lease.holder.to_hex(),
            lease_expires_at: lease.expires_at.0,
            arguments,
            canonical_arguments: canonical.to_owned(),
            precondition_version: precondition.to_owned(),
        }
    }
}

/// A decision as sent: the pipeline's fixed keys, the permit for
/// `permitted`, and the reviewer item for decisions a person acts on.
#[derive(Debug, Serialize, ToSchema)]
pub struct DecisionResponse {
    /// The outcome code (`docs/design.md` §2).
    pub outcome: String,
    /// The reason code, where one applies.
    pub reason: Option<String>,
    /// Human-readable detail.
    pub message: Option<String>,
    /// The tool.
    pub tool: Option<String>,
    /// The reply to deliver.
    pub reply: Option<String>,
    /// The operation key (hex).
    pub operation_key: Option<String>,
    /// The proposal's fingerprint (hex).
    pub fingerprint: Option<String>,
    /// The version the model read.
    pub version_seen: Option<String>,
    /// The current version (`state_changed`).
    pub current_version: Option<String>,
    /// The recorded result (`executed`, `replayed`, a completed `conflict`).
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// The prior proposal (`conflict`, `in_flight`, `needs_reconciliation`).
    #[schema(value_type = Option<Object>)]
    pub prior: Option<Value>,
    /// The permit (`permitted` only).
    pub permit: Option<Permit>,
    /// The stateless stages' detail (pointer, stop class, repairable) when
    /// they ended the decision.
    #[schema(value_type = Option<Object>)]
    pub stateless: Option<Value>,
    /// The reviewer queue item, for decisions a person acts on.
    pub review_item: Option<u64>,
}

impl DecisionResponse {
    pub fn from_decision(d: &Decision, permit: Option<Permit>, review_item: Option<u64>) -> Self {
        let j = d.to_json();
        let text = |k: &str| j.get(k).and_then(Value::as_str).map(str::to_owned);
        let stateless = d.stateless.as_ref().map(|s| {
            let full = s.to_json();
            json!({
                "pointer": full.get("pointer"),
                "stop": full.get("stop"),
                "repairable": full.get("repairable"),
                "attempt": full.get("attempt"),
            })
        });
        Self {
            outcome: d.outcome.as_str().to_owned(),
            reason: text("reason"),
            message: text("message"),
            tool: text("tool"),
            reply: text("reply"),
            operation_key: text("operation_key"),
            fingerprint: text("fingerprint"),
            version_seen: text("version_seen"),
            current_version: text("current_version"),
            result: d.result.clone(),
            prior: j.get("prior").filter(|p| !p.is_null()).cloned(),
            permit,
            stateless,
            review_item,
        }
    }
}

/// The HTTP status of each outcome (`docs/design.md` §2).
pub fn status_of(outcome: Outcome) -> u16 {
    match outcome {
        Outcome::Answer
        | Outcome::Abstain
        | Outcome::Replayed
        | Outcome::Permitted
        | Outcome::Refused
        | Outcome::Truncated
        | Outcome::ContentFiltered => 200,
        Outcome::Executed => 201,
        Outcome::PendingApproval => 202,
        Outcome::Forbidden => 403,
        Outcome::InFlight | Outcome::StateChanged | Outcome::NeedsReconciliation => 409,
        Outcome::Conflict | Outcome::Rejected => 422,
    }
}

/// `POST /v1/claims/{key}/complete`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    /// The permit's holder token (hex).
    pub holder: String,
    /// The write's result (a receipt), recorded and replayed to retries.
    #[schema(value_type = Object)]
    pub result: Value,
}

/// The answer to a completion.
#[derive(Debug, Serialize, ToSchema)]
pub struct CompleteResponse {
    /// `completed`.
    pub status: String,
    /// The operation key (hex).
    pub operation_key: String,
}

/// `POST /v1/claims/{key}/reconcile`: what the downstream system says. An
/// empty body asks the server's executor instead.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReconcileRequest {
    /// Whether the write happened downstream.
    pub applied: bool,
    /// Its receipt (applied) or what the downstream system reported (not
    /// applied).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub detail: Value,
}

/// A claim as listed for operators.
pub fn claim_json(r: &ClaimRecord, now: i64) -> Value {
    json!({
        "operation_key": r.key.to_hex(),
        "fingerprint": r.fingerprint.to_hex(),
        "tool": r.proposal.tool(),
        "status": r.status.as_str(),
        "claimed_at": r.claimed_at.0,
        "lease_expires_at": r.lease_expires_at.0,
        "stuck_for_ms": now.saturating_sub(r.lease_expires_at.0).max(0),
        "proposal": {
            "arguments": r.proposal.arguments_value().ok(),
            "version_seen": r.proposal.version_seen(),
            "proposer": r.proposal.proposer(),
        },
        "result": r.result().and_then(|t| t.value().ok()),
    })
}
