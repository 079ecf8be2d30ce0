//! The claim routes' bodies: completing, reconciling and listing claims.

use super::*;

/// `POST /v1/claims/{key}/complete`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    /// The permit's holder token (hex).
    #[schema(schema_with = holder_schema)]
    pub holder: String,
    /// The write's result (a receipt), recorded and replayed to retries.
    #[schema(schema_with = strict_object)]
    pub result: Value,
}

/// `completed`.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompletedStatus {
    /// The result is recorded as the claim's (also the answer to a retry of
    /// the same completion); retries of the proposal replay it.
    Completed,
}

/// The answer to a completion.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteResponse {
    /// `completed`.
    pub status: CompletedStatus,
    /// The operation key (hex).
    pub operation_key: String,
}

/// `POST /v1/claims/{key}/reconcile`: what the downstream system says. An
/// empty body asks the server's executor instead.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileRequest {
    /// Whether the write happened downstream.
    pub applied: bool,
    /// The write's result (its receipt), when it was applied.
    #[serde(default)]
    pub result: Option<Value>,
    /// What the downstream system reported: why it was not applied (or,
    /// for compatibility, the receipt of an applied write).
    #[serde(default)]
    pub detail: Option<Value>,
}

/// The two shapes the handler takes: an applied write with its receipt
/// as `result` (or, for compatibility, as `detail`), or a write that did
/// not happen with a `detail`; `result` and `detail` are never both sent,
/// and a `result` is never sent for a write that did not happen.
impl utoipa::PartialSchema for ReconcileRequest {
    fn schema() -> RefOr<Schema> {
        let null = || ObjectBuilder::new().schema_type(Type::Null);
        let shape = |applied: ObjectBuilder, result: RefOr<Schema>, detail: RefOr<Schema>| {
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .property("applied", applied)
                .required("applied")
                .property("result", result)
                .property("detail", detail)
                .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        };
        let applied_doc = "whether the write happened downstream";
        utoipa::openapi::schema::AnyOfBuilder::new()
            .item(shape(
                ObjectBuilder::new()
                    .schema_type(Type::Boolean)
                    .enum_values(Some([true]))
                    .description(Some(applied_doc)),
                strict_json(),
                null().into(),
            ))
            .item(shape(
                ObjectBuilder::new()
                    .schema_type(Type::Boolean)
                    .description(Some(applied_doc)),
                null().into(),
                strict_json(),
            ))
            .description(Some(
                "What the downstream system says: `{\"applied\": true, \"result\": <receipt>}` \
                 or `{\"applied\": false, \"detail\": <why>}` (an applied write's receipt may \
                 come as `detail` too); never both `result` and `detail`",
            ))
            .into()
    }
}

impl ToSchema for ReconcileRequest {}

/// How a reconciliation closed the claim (also its audit outcome).
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReconciledStatus {
    /// The downstream system had applied the write: its receipt is now the
    /// claim's result.
    ReconciledApplied,
    /// The downstream system had not applied it and fenced the attempt's
    /// idempotency key: the attempt is closed, and the next proposal for
    /// the operation runs as a new attempt.
    ReconciledNotApplied,
}

/// The answer to a reconciliation that closed a stuck claim.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReconcileResponse {
    /// How the claim was closed.
    pub status: ReconciledStatus,
    /// The operation key (hex).
    pub operation_key: String,
    /// The receipt or detail now recorded as the claim's result.
    pub result: Option<Value>,
}

/// Who performs a claim's write (`docs/error-codes.md`, "Executor kinds").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorCode {
    /// A Rust executor in the gate's process: an empty reconciliation asks
    /// it.
    InProcess,
    /// The application, holding a permit: only an explicit answer
    /// (`applied`) reconciles the claim.
    Client,
    /// The application's webhook, called by the gate: an empty
    /// reconciliation asks its status URL.
    Webhook,
    /// An MCP server behind the gateway, sent the call by the gate: an
    /// empty reconciliation asks the tool's status tool.
    McpUpstream,
}

/// A claim's status.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClaimStatusCode {
    /// Claimed and not yet completed: the write may be running, or its
    /// outcome is unknown once the lease has passed.
    InFlight,
    /// A result is recorded; retries of the same proposal replay it.
    Completed,
}

/// A claim's proposal as listed for operators.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimProposal {
    /// The validated arguments (null if the stored text no longer decodes).
    #[schema(value_type = Option<Object>)]
    pub arguments: Option<Value>,
    /// The version the proposing model read.
    pub version_seen: String,
    /// The principal that proposed it.
    pub proposer: String,
}

/// A claim as listed for operators. Never its holder token.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimView {
    /// The operation key (hex).
    pub operation_key: String,
    /// The proposal's fingerprint (hex).
    pub fingerprint: String,
    /// The tool.
    pub tool: String,
    /// `in_flight` or `completed`.
    pub status: ClaimStatusCode,
    /// Who performs the write: reconciliation asks only this executor, and
    /// a `client` claim is closed only by an explicit answer.
    pub executor: ExecutorCode,
    /// When it was claimed (Unix ms).
    pub claimed_at: i64,
    /// When its lease ends or ended (Unix ms).
    pub lease_expires_at: i64,
    /// Which attempt of the operation the row holds, from 1.
    pub attempt: u32,
    /// The key the attempt's write is recorded under downstream, and what
    /// its reconciliation asks about (and fences).
    pub idempotency_key: String,
    /// How long past its lease it is (0 while the lease runs).
    pub stuck_for_ms: i64,
    /// What was proposed, and by whom.
    pub proposal: ClaimProposal,
    /// The recorded result, once completed.
    pub result: Option<Value>,
}

impl ClaimView {
    /// `r` as listed at `now` (Unix ms).
    pub fn new(r: &ClaimRecord, now: i64) -> Self {
        Self {
            operation_key: r.key.to_hex(),
            fingerprint: r.fingerprint.to_hex(),
            tool: r.proposal.tool().to_owned(),
            status: match r.status {
                toolgate::claim::ClaimStatus::InFlight => ClaimStatusCode::InFlight,
                toolgate::claim::ClaimStatus::Completed => ClaimStatusCode::Completed,
            },
            executor: match r.executor {
                ExecutorKind::InProcess => ExecutorCode::InProcess,
                ExecutorKind::Client => ExecutorCode::Client,
                ExecutorKind::Webhook => ExecutorCode::Webhook,
                ExecutorKind::McpUpstream => ExecutorCode::McpUpstream,
            },
            claimed_at: r.claimed_at.0,
            lease_expires_at: r.lease_expires_at.0,
            attempt: r.attempt,
            idempotency_key: r.idempotency_key(),
            stuck_for_ms: now.saturating_sub(r.lease_expires_at.0).max(0),
            proposal: ClaimProposal {
                arguments: r.proposal.arguments_value().ok(),
                version_seen: r.proposal.version_seen().to_owned(),
                proposer: r.proposal.proposer().to_owned(),
            },
            result: r.result().and_then(|t| t.value().ok()),
        }
    }
}

/// A stored row that failed validation: reported by its raw key, never
/// shown.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CorruptView {
    /// The raw `operation_key` column (hex), whatever its length.
    pub raw_key: String,
    /// The column that failed.
    pub field: String,
    /// What was wrong with it.
    pub message: String,
}

/// One entry of the stuck listing: a claim, or a row that failed
/// validation.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
pub enum ListedClaim {
    /// A claim (boxed: a corrupt row is much smaller).
    Claim(Box<ClaimView>),
    /// A corrupt row.
    Corrupt {
        /// What failed.
        corrupt: CorruptView,
    },
}

impl ListedClaim {
    /// `entry` as listed at `now` (Unix ms): the claim, or, for a row that
    /// failed validation, its raw key and what was wrong.
    pub fn new(entry: &Result<ClaimRecord, CorruptRow>, now: i64) -> Self {
        match entry {
            Ok(r) => Self::Claim(Box::new(ClaimView::new(r, now))),
            Err(c) => Self::Corrupt {
                corrupt: CorruptView {
                    raw_key: hex::encode(&c.raw_key),
                    field: c.problem.field().to_owned(),
                    message: c.problem.message().to_owned(),
                },
            },
        }
    }
}

/// `GET /v1/claims?stuck=true`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimList {
    /// Claims in flight past their lease, oldest first.
    pub claims: Vec<ListedClaim>,
}
