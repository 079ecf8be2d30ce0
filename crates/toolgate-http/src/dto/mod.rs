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
use toolgate::claim::{
    ClaimRecord, CorruptRow, ExecutorKind, HolderToken, Lease, OperationKey, ProposalRecord,
};
use toolgate::contract;
use toolgate::contract::EnvelopeMode;
use toolgate::pipeline::{self, Decision, Outcome};
use toolgate::provider::{Provider, StopClass};
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

/// The outcome of a decision (`docs/error-codes.md`, "Pipeline decisions").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeCode {
    /// Reply text, no action (200): deliver `reply`.
    Answer,
    /// The model declined (200): `reply` is the policy's `abstain_message`.
    Abstain,
    /// The claim was won, the server's executor applied the write with the
    /// validated version as its precondition, and `result` is recorded (201).
    Executed,
    /// The same operation key and fingerprint already completed (200):
    /// `result` is the recorded one, and nothing new happened.
    Replayed,
    /// The same operation key and fingerprint is claimed and its lease is
    /// live (409): retry later, unchanged.
    InFlight,
    /// The same operation key with another fingerprint (422): `prior` is the
    /// earlier proposal, `result` its result if it completed; a person decides.
    Conflict,
    /// The version the model read is not current, or the write's
    /// precondition failed (409): `version_seen` and `current_version`
    /// carry both versions.
    StateChanged,
    /// A claim's outcome is unknown (409): reconcile it
    /// (`POST /v1/claims/{key}/reconcile`), never execute it again.
    NeedsReconciliation,
    /// The tool needs a person's approval of exactly this proposal and none
    /// was given yet (202): `review_item` is the item a reviewer acts on.
    PendingApproval,
    /// A client-executed claim was won (200): perform the write under
    /// `permit`, then complete the claim with its holder token.
    Permitted,
    /// The proposal broke a rule (422): `reason` says which.
    Rejected,
    /// The principal lacks the tool's capability, or the authoriser said no
    /// (403).
    Forbidden,
    /// The provider reported a refusal (200): terminal, never a parse
    /// error; `stateless.stop` keeps its category and explanation.
    Refused,
    /// The output limit was reached or the stream was cut (200): nothing
    /// the model wrote was parsed.
    Truncated,
    /// The provider's content filter stopped the output or blocked the
    /// prompt (200).
    ContentFiltered,
}

impl From<Outcome> for OutcomeCode {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Answer => Self::Answer,
            Outcome::Abstain => Self::Abstain,
            Outcome::Executed => Self::Executed,
            Outcome::Replayed => Self::Replayed,
            Outcome::InFlight => Self::InFlight,
            Outcome::Conflict => Self::Conflict,
            Outcome::StateChanged => Self::StateChanged,
            Outcome::NeedsReconciliation => Self::NeedsReconciliation,
            Outcome::PendingApproval => Self::PendingApproval,
            Outcome::Permitted => Self::Permitted,
            Outcome::Rejected => Self::Rejected,
            Outcome::Forbidden => Self::Forbidden,
            Outcome::Refused => Self::Refused,
            Outcome::Truncated => Self::Truncated,
            Outcome::ContentFiltered => Self::ContentFiltered,
        }
    }
}

/// Why, where an outcome has a reason: the stateless stages' rejection
/// reasons and the pipeline's own (`docs/error-codes.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    /// `rejected`: over a byte limit (provider body, envelope, arguments or
    /// reply).
    TooLarge,
    /// `rejected`: more nested containers than the nesting limit.
    TooDeep,
    /// `rejected`: an object repeats a key (escaped spellings count).
    DuplicateKey,
    /// `rejected`: an integer beyond ±(2^53−1), or a float that is not
    /// finite or underflows to zero.
    NumberOutOfRange,
    /// `rejected`: not JSON. In JSON the model wrote, the first attempt is
    /// `repairable` (one re-ask with `attempt: 2`).
    InvalidJson,
    /// `rejected`: a key the envelope or the tool's arguments do not declare
    /// (`approved_by`, `actor_id`, …).
    UnknownKey,
    /// `rejected`: the arguments fail the tool's schema, or are not an
    /// object.
    InvalidArguments,
    /// `rejected`: the tool named is not in the policy.
    UnknownTool,
    /// `rejected`: more than one tool call in one turn.
    MultipleActions,
    /// `rejected`: the envelope lacks a member or has one of the wrong type.
    InvalidEnvelope,
    /// `rejected`: a native tool call in a turn read as a structured-output
    /// envelope (`envelope: "structured"`).
    UnexpectedToolCall,
    /// `rejected`: a stop value toolgate does not classify, or none: fail
    /// closed.
    UnknownStop,
    /// `rejected`: the body is JSON but not the provider's response shape
    /// (or a stream event is out of order).
    MalformedResponse,
    /// `forbidden`: the principal does not hold the capability the tool
    /// names.
    MissingCapability,
    /// `forbidden`: the authoriser denied this actor this resource now, or
    /// could not evaluate (one generic message for both).
    NotAuthorized,
    /// `forbidden`: the authoriser could not evaluate. The sidecar answers
    /// `not_authorized` instead, so a client never receives this code; it is
    /// in the server log and the audit entry.
    AuthorizationError,
    /// `rejected`: the tool's operation key names a scope field the request
    /// did not carry (a server configuration error; nothing was claimed).
    MissingScope,
    /// `rejected`: a scope value is not of its field's type (`scope_types`).
    /// The sidecar answers it as the problem `invalid_scope` (422), not as a
    /// decision.
    InvalidScope,
    /// `state_changed`: the gate read a version other than `version_seen`;
    /// nothing was claimed.
    VersionMismatch,
    /// `state_changed`: the executor's conditional write found another
    /// version; nothing was written and the claim is closed as not applied.
    PreconditionFailed,
    /// `needs_reconciliation`: the claim is in flight past its lease.
    LeaseExpired,
    /// `needs_reconciliation`: the completion matched no row (the claim was
    /// reconciled or taken over while the executor ran).
    LeaseLost,
    /// `needs_reconciliation`: the executor could not say whether the write
    /// happened; the claim stays in flight until reconciled.
    ExecutorFailed,
    /// `pending_approval`: no approval bound to this operation key,
    /// fingerprint and version.
    ApprovalRequired,
    /// `rejected`: a reviewer denied exactly this proposal; nothing was
    /// claimed, and other arguments or a new version ask again.
    ApprovalDenied,
    /// `pending_approval` or `rejected`, as the budget declares: this
    /// proposal's amount would pass one of the tool's budgets in its window;
    /// `budget` says which. Nothing was claimed or reserved.
    BudgetExceeded,
    /// `executed`: a person approved this proposal over a budget, and its
    /// amount was reserved with the approval (beyond the limit if still over).
    BudgetExceededApproved,
}

impl From<contract::RejectReason> for ReasonCode {
    fn from(r: contract::RejectReason) -> Self {
        use contract::RejectReason as R;
        match r {
            R::TooLarge => Self::TooLarge,
            R::TooDeep => Self::TooDeep,
            R::DuplicateKey => Self::DuplicateKey,
            R::NumberOutOfRange => Self::NumberOutOfRange,
            R::InvalidJson => Self::InvalidJson,
            R::UnknownKey => Self::UnknownKey,
            R::InvalidArguments => Self::InvalidArguments,
            R::UnknownTool => Self::UnknownTool,
            R::MultipleActions => Self::MultipleActions,
            R::InvalidEnvelope => Self::InvalidEnvelope,
            R::UnexpectedToolCall => Self::UnexpectedToolCall,
            R::UnknownStop => Self::UnknownStop,
            R::MalformedResponse => Self::MalformedResponse,
        }
    }
}

impl From<pipeline::Reason> for ReasonCode {
    fn from(r: pipeline::Reason) -> Self {
        use pipeline::Reason as R;
        match r {
            R::Contract(c) => c.into(),
            R::MissingCapability => Self::MissingCapability,
            R::NotAuthorized => Self::NotAuthorized,
            R::AuthorizationError => Self::AuthorizationError,
            R::MissingScope => Self::MissingScope,
            R::InvalidScope => Self::InvalidScope,
            R::VersionMismatch => Self::VersionMismatch,
            R::PreconditionFailed => Self::PreconditionFailed,
            R::LeaseExpired => Self::LeaseExpired,
            R::LeaseLost => Self::LeaseLost,
            R::ExecutorFailed => Self::ExecutorFailed,
            R::ApprovalRequired => Self::ApprovalRequired,
            R::ApprovalDenied => Self::ApprovalDenied,
            R::BudgetExceeded => Self::BudgetExceeded,
            R::BudgetExceededApproved => Self::BudgetExceededApproved,
        }
    }
}

/// How the provider's turn ended (`docs/error-codes.md`, "Stop classes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StopClassCode {
    /// A natural end of the turn.
    Complete,
    /// The turn ended to call tools.
    ToolUse,
    /// The output limit was reached, or the stream was cut (`raw` is
    /// `stream_cut`).
    Truncated,
    /// The provider refused.
    Refused,
    /// The provider's content filter stopped the output.
    ContentFiltered,
    /// A stop value toolgate does not know, or none: never an action.
    Unknown,
}

impl From<StopClass> for StopClassCode {
    fn from(c: StopClass) -> Self {
        match c {
            StopClass::Complete => Self::Complete,
            StopClass::ToolUse => Self::ToolUse,
            StopClass::Truncated => Self::Truncated,
            StopClass::Refused => Self::Refused,
            StopClass::ContentFiltered => Self::ContentFiltered,
            StopClass::Unknown => Self::Unknown,
        }
    }
}

/// The provider's stop.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StopView {
    /// toolgate's classification.
    pub class: StopClassCode,
    /// The provider's own value (`max_tokens`, `length`, `SAFETY`, …).
    pub raw: Option<String>,
    /// Refusal or filter category, where the provider gives one.
    pub category: Option<String>,
    /// Refusal text or explanation, where the provider gives one.
    pub explanation: Option<String>,
}

/// The stateless stages' detail, when they ended the decision.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Stateless {
    /// JSON pointer to the offending value, where known.
    pub pointer: Option<String>,
    /// The provider's stop, where the body was read that far.
    pub stop: Option<StopView>,
    /// Whether the one bounded re-ask is still allowed.
    pub repairable: bool,
    /// Which model attempt this was.
    pub attempt: u32,
}

impl Stateless {
    fn new(d: &contract::Checked) -> Self {
        Self {
            pointer: d.pointer.clone(),
            stop: d.stop.as_ref().map(|s| StopView {
                class: s.class.into(),
                raw: s.raw.as_deref().map(str::to_owned),
                category: s.category.clone(),
                explanation: s.explanation.clone(),
            }),
            repairable: d.repairable,
            attempt: d.attempt,
        }
    }
}

/// A proposal as recorded with its claim.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PriorProposal {
    /// The tool.
    pub tool: String,
    /// The validated arguments (null if the stored text no longer decodes).
    #[schema(value_type = Option<Object>)]
    pub arguments: Option<Value>,
    /// The version the proposing model read.
    pub version_seen: String,
    /// The principal that proposed it.
    pub proposer: String,
}

impl PriorProposal {
    fn new(p: &ProposalRecord) -> Self {
        Self {
            tool: p.tool().to_owned(),
            arguments: p.arguments_value().ok(),
            version_seen: p.version_seen().to_owned(),
            proposer: p.proposer().to_owned(),
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
    pub outcome: OutcomeCode,
    /// The reason code, where one applies.
    pub reason: Option<ReasonCode>,
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
    pub budget: Option<BudgetDto>,
}

/// A budget as a `budget_exceeded` decision reports it (docs/policy.md,
/// "Budgets"): amounts in the argument's own units.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetDto {
    /// The budget's name.
    pub name: String,
    /// Its limit per scope and window.
    pub limit: i64,
    /// Already reserved in this window and scope, without this proposal.
    pub used: i64,
    /// `limit - used`.
    pub remaining: i64,
    /// This proposal's amount.
    pub amount: i64,
}

impl DecisionResponse {
    /// Pipeline decision `d` as sent, with `permit` for a `permitted` decision
    /// (see [`Permit::new`]) and `review_item`, the id of the reviewer queue
    /// item a person acts on, where there is one.
    pub fn from_decision(d: &Decision, permit: Option<Permit>, review_item: Option<u64>) -> Self {
        Self {
            outcome: d.outcome().into(),
            reason: d.reason().map(Into::into),
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
            budget: d.budget().map(|b| BudgetDto {
                name: b.name.clone(),
                limit: b.limit,
                used: b.used,
                remaining: b.remaining,
                amount: b.amount,
            }),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spelled<T: Serialize>(v: T) -> String {
        serde_json::to_value(v)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    #[test]
    fn wire_enums_spell_every_code_as_the_core_does() {
        for o in Outcome::ALL {
            assert_eq!(spelled(OutcomeCode::from(o)), o.as_str());
        }
        for r in contract::RejectReason::ALL {
            assert_eq!(spelled(ReasonCode::from(r)), r.as_str());
        }
        for r in pipeline::Reason::OWN {
            assert_eq!(spelled(ReasonCode::from(r)), r.as_str());
        }
        for c in StopClass::ALL {
            assert_eq!(spelled(StopClassCode::from(c)), c.as_str());
        }
    }
}
