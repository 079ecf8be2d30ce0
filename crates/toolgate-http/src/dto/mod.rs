//! Wire formats. Request bodies go through the strict decoder first
//! (duplicate keys, big integers, depth and size are refused there), then
//! into these types with unknown fields refused: a body carries no field
//! the server did not ask for, least of all an identity.
//!
//! Every response body is one of the types here (or an
//! [`crate::error::Problem`]), so the OpenAPI document, which is derived
//! from them, describes what is sent. Response types carry
//! `#[serde(deny_unknown_fields)]` although they are only serialised: it
//! makes their schemas closed (`additionalProperties: false`), so the
//! document promises exactly these members and the validation test
//! (`tests/openapi.rs`) catches a member sent but not declared.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use toolgate::claim::{ClaimRecord, CorruptRow, ExecutorKind, HolderToken, Lease, OperationKey};
use toolgate::contract;
use toolgate::contract::EnvelopeMode;
use toolgate::pipeline::{BudgetReport, Decision, Outcome, PriorProposal, Reason};
use toolgate::provider::{Provider, Stop};
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{
    AdditionalProperties, ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type,
};
use utoipa::openapi::{RefOr, Required};
use utoipa::{IntoParams, ToSchema};

mod schema;

pub use schema::*;

/// `POST /v1/decisions`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// `anthropic`, `openai-chat`, `openai-responses`, `gemini` or
    /// `envelope`.
    #[schema(schema_with = provider_schema, example = "openai-chat")]
    pub provider: String,
    /// The raw provider response body: as JSON, or as a string holding it
    /// (byte for byte what the provider sent; a stream must be a string).
    /// Sending the string keeps what re-encoding loses: duplicate keys and
    /// integers past 2^53 are then judged as the provider sent them.
    #[schema(schema_with = response_schema)]
    pub response: Value,
    /// The server-fixed scope: the fields the policy's operation keys name
    /// (for a shop's refunds, `customer_id` and `order_id`) and `version_seen`,
    /// the resource version the model was shown. Strings or integers.
    #[serde(default)]
    #[schema(schema_with = scope_schema)]
    pub scope: Map<String, Value>,
    /// The body is a Server-Sent Events stream (given as a string).
    #[serde(default)]
    pub stream: bool,
    /// 1 for the original model attempt, 2 for the one repair re-ask.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 2)]
    pub attempt: Option<u32>,
    /// `native` (default) or `structured`.
    #[serde(default)]
    #[schema(schema_with = envelope_schema)]
    pub envelope: Option<String>,
    /// The end user this request acts for, for a key configured with
    /// `act_for_users` (a service acting on behalf of its users): the
    /// principal the capability check and the authoriser see, with the
    /// key's capabilities, and the proposer recorded on the claim; the
    /// key's own principal is kept in the audit entry as `via`. 1 to 128
    /// bytes without control characters. Any other key that sends it is
    /// refused with `actor_not_allowed` (403). Never taken from the model.
    #[serde(default)]
    #[schema(example = "agent-ana")]
    pub actor: Option<String>,
    /// Entities the application vouches for, for the authoriser alone:
    /// entity type → `{"id": "<id>", "<attribute>": <value>, …}`, one
    /// entity per type (`{"Customer": {"id": "c-1", "tier": "gold"}}`).
    /// Attribute values are strings, booleans, integers, and arrays and
    /// objects of those. Trusted as the authenticated application's word
    /// (never the model's); read only for types the proposed tool's
    /// deployment declares with `source = "request"` — any other type is
    /// refused with `unexpected_entities` (422). Never part of the
    /// operation key, the fingerprint, the claim or the permit.
    #[serde(default)]
    #[schema(schema_with = entities_schema)]
    pub entities: Map<String, Value>,
}

/// The stateless stages' detail, when they ended the decision.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Stateless {
    /// JSON pointer to the offending value, where known.
    pub pointer: Option<String>,
    /// The provider's stop, where the body was read that far.
    pub stop: Option<Stop>,
    /// Whether the one bounded re-ask is still allowed.
    pub repairable: bool,
    /// Which model attempt this was.
    pub attempt: u32,
}

impl Stateless {
    fn new(d: &contract::Checked) -> Self {
        Self {
            pointer: d.pointer.clone(),
            stop: d.stop.clone(),
            repairable: d.repairable,
            attempt: d.attempt,
        }
    }
}

/// A permit for a client-executed write (outcome `permitted`).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Permit {
    /// The operation key (hex): the claim to complete.
    pub operation_key: String,
    /// The holder token (hex): proof of ownership for the completion.
    pub holder: String,
    /// When the lease ends (Unix ms): the last moment the application may
    /// apply the write. Past it the claim may be reconciled, a completion is
    /// refused, and a write must not be applied (a reconciliation that
    /// found it not applied may already have let a new attempt run).
    pub lease_expires_at: i64,
    /// Which attempt of the operation this permit is for, from 1: an
    /// attempt reconciled as not applied is followed by the next.
    pub attempt: u32,
    /// The key to record the write under downstream: the operation key
    /// for attempt 1, `<operation key>.<attempt>` after it.
    pub idempotency_key: String,
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
    /// The permit for the won claim `lease`: `canonical` is the canonical
    /// argument text that was fingerprinted, `arguments` the same as JSON, and
    /// `precondition` the version the write must still find.
    pub fn new(lease: &Lease, canonical: &str, arguments: Value, precondition: &str) -> Self {
        Self {
            operation_key: lease.key.to_hex(),
            holder: lease.holder.to_hex(),
            lease_expires_at: lease.expires_at.0,
            attempt: lease.attempt,
            idempotency_key: lease.idempotency_key(),
            arguments,
            canonical_arguments: canonical.to_owned(),
            precondition_version: precondition.to_owned(),
        }
    }
}

/// A decision as sent: the pipeline's fixed keys, the permit for
/// `permitted`, and the reviewer item for decisions a person acts on.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionResponse {
    /// The outcome code (`docs/design.md` §2).
    pub outcome: Outcome,
    /// The reason code, where one applies.
    pub reason: Option<Reason>,
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
    pub result: Option<Value>,
    /// The prior proposal (`conflict`, `in_flight`, `needs_reconciliation`).
    pub prior: Option<PriorProposal>,
    /// The permit (`permitted` only).
    pub permit: Option<Permit>,
    /// The stateless stages' detail (pointer, stop class, repairable) when
    /// they ended the decision.
    pub stateless: Option<Stateless>,
    /// The reviewer queue item, for decisions a person acts on.
    pub review_item: Option<u64>,
    /// The budget that refused the reservation (`budget_exceeded`).
    pub budget: Option<BudgetReport>,
}

impl DecisionResponse {
    /// Pipeline decision `d` as sent, with `permit` for a `permitted` decision
    /// (see [`Permit::new`]) and `review_item`, the id of the reviewer queue
    /// item a person acts on, where there is one.
    pub fn from_decision(d: &Decision, permit: Option<Permit>, review_item: Option<u64>) -> Self {
        Self {
            outcome: d.outcome(),
            reason: d.reason(),
            message: d.message().map(str::to_owned),
            tool: d.tool().map(str::to_owned),
            reply: d.reply().map(str::to_owned),
            operation_key: d.key().map(|k| k.to_hex()),
            fingerprint: d.fingerprint().map(|f| f.to_hex()),
            version_seen: d.version_seen().map(|v| v.as_str().to_owned()),
            current_version: d.current_version().map(|v| v.as_str().to_owned()),
            result: d.result().cloned(),
            prior: d.prior().map(PriorProposal::new),
            permit,
            stateless: d.stateless().map(Stateless::new),
            review_item,
            budget: d.budget().cloned(),
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

mod claims;
mod review;

pub use claims::*;
pub use review::*;

/// What a probe reports when the service answers.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStatus {
    /// `/healthz`: the process serves requests.
    Ok,
    /// `/readyz`: the claim store answers too.
    Ready,
}

/// `GET /healthz`, `GET /readyz`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    /// `ok` (liveness) or `ready` (readiness).
    pub status: ProbeStatus,
}
