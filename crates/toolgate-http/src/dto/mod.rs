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
use toolgate::contract::EnvelopeMode;
use toolgate::pipeline::{Decision, DecisionView, Outcome};
use toolgate::provider::Provider;
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
///
/// Serialised by hand, not with `#[serde(flatten)]`: flattening would move
/// `permit` and `review_item` off their places among the view's members,
/// and clients have had this order since the first release.
#[derive(Debug, Clone)]
pub struct DecisionResponse {
    /// The pipeline's flat view of the decision.
    pub view: DecisionView,
    /// The permit (`permitted` only).
    pub permit: Option<Permit>,
    /// The reviewer queue item, for decisions a person acts on.
    pub review_item: Option<u64>,
}

impl DecisionResponse {
    /// Pipeline decision `d` as sent, with `permit` for a `permitted` decision
    /// (see [`Permit::new`]) and `review_item`, the id of the reviewer queue
    /// item a person acts on, where there is one.
    pub fn from_decision(d: &Decision, permit: Option<Permit>, review_item: Option<u64>) -> Self {
        Self {
            view: d.view(),
            permit,
            review_item,
        }
    }
}

impl Serialize for DecisionResponse {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let v = &self.view;
        let mut o = s.serialize_struct("DecisionResponse", 15)?;
        o.serialize_field("outcome", &v.outcome)?;
        o.serialize_field("reason", &v.reason)?;
        o.serialize_field("message", &v.message)?;
        o.serialize_field("tool", &v.tool)?;
        o.serialize_field("reply", &v.reply)?;
        o.serialize_field("operation_key", &v.operation_key)?;
        o.serialize_field("fingerprint", &v.fingerprint)?;
        o.serialize_field("version_seen", &v.version_seen)?;
        o.serialize_field("current_version", &v.current_version)?;
        o.serialize_field("result", &v.result)?;
        o.serialize_field("prior", &v.prior)?;
        o.serialize_field("permit", &self.permit)?;
        o.serialize_field("stateless", &v.stateless)?;
        o.serialize_field("review_item", &self.review_item)?;
        o.serialize_field("budget", &v.budget)?;
        o.end()
    }
}

/// What a response adds to the view, for its schema alone.
#[derive(ToSchema)]
#[allow(dead_code, reason = "never built: only its schema is read")]
struct ResponseExtras {
    /// The permit (`permitted` only).
    permit: Option<Permit>,
    /// The reviewer queue item, for decisions a person acts on.
    review_item: Option<u64>,
}

impl utoipa::PartialSchema for DecisionResponse {
    /// The view's schema with the two members a response adds: one closed
    /// object, as the hand-written `Serialize` sends it.
    fn schema() -> RefOr<Schema> {
        let mut schema = <DecisionView as utoipa::PartialSchema>::schema();
        if let (RefOr::T(Schema::Object(o)), RefOr::T(Schema::Object(extras))) = (
            &mut schema,
            <ResponseExtras as utoipa::PartialSchema>::schema(),
        ) {
            o.properties.extend(extras.properties);
            o.description = Some(
                "A decision as sent: the pipeline's fixed keys, the permit for\n\
                 `permitted`, and the reviewer item for decisions a person acts on."
                    .to_owned(),
            );
        }
        schema
    }
}

impl ToSchema for DecisionResponse {
    fn name() -> std::borrow::Cow<'static, str> {
        "DecisionResponse".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        <DecisionView as ToSchema>::schemas(schemas);
        <ResponseExtras as ToSchema>::schemas(schemas);
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
    use toolgate::claim::{Fingerprint, ProposalRecord};
    use toolgate::pipeline::{BudgetReport, Operation, Reason, StateVersion};
    use toolgate::review::ItemDecision;

    fn operation() -> Operation {
        Operation {
            tool: "refund_order".into(),
            key: OperationKey::from_bytes([0xab; 32]),
            fingerprint: Fingerprint::from_bytes([0xcd; 32]),
            version_seen: StateVersion::new("3").expect("a version"),
        }
    }

    fn decisions() -> Vec<Decision> {
        let prior = ProposalRecord::new(
            "refund_order".into(),
            r#"{"amount_minor":500}"#.into(),
            r#"{"order_id":1001}"#.into(),
            "3".into(),
            "agent-ana".into(),
        )
        .expect("a record");
        vec![
            Decision::Conflict {
                operation: operation(),
                message: "already proposed".into(),
                result: Some(serde_json::json!({"refund_id": "r-1"})),
                prior,
            },
            Decision::PendingApproval {
                operation: operation(),
                reason: Reason::BudgetExceeded,
                message: "over budget".into(),
                budget: Some(BudgetReport {
                    name: "daily".into(),
                    limit: 100,
                    used: 90,
                    remaining: 10,
                    amount: 20,
                }),
            },
        ]
    }

    /// Review items keep the text the response form gave before the core
    /// knew the view: the same bytes, so old rows need no migration.
    #[test]
    fn a_reviewer_copy_is_the_response_form_byte_for_byte() {
        let arguments = serde_json::json!({"amount_minor": 500});
        for d in decisions() {
            let mut response =
                serde_json::to_value(DecisionResponse::from_decision(&d, None, None))
                    .expect("serialises");
            if let Value::Object(m) = &mut response {
                m.insert("arguments".into(), arguments.clone());
            }
            let kept = ItemDecision::of(&d, Some(&arguments));
            assert_eq!(kept.to_text(), response.to_string());
            // And a row's text reads back as the decision it was.
            assert_eq!(ItemDecision::decode(&kept.to_text()), Ok(kept));
        }
    }

    /// A response's members, in the order clients have had since the first
    /// release.
    #[test]
    fn a_response_keeps_its_member_order() {
        let d = &decisions()[0];
        // Objects keep their insertion order (serde_json's preserve_order).
        let order: Vec<String> =
            match serde_json::to_value(DecisionResponse::from_decision(d, None, Some(7))) {
                Ok(Value::Object(m)) => m.keys().cloned().collect(),
                _ => Vec::new(),
            };
        assert_eq!(
            order,
            [
                "outcome",
                "reason",
                "message",
                "tool",
                "reply",
                "operation_key",
                "fingerprint",
                "version_seen",
                "current_version",
                "result",
                "prior",
                "permit",
                "stateless",
                "review_item",
                "budget"
            ]
        );
    }
}
