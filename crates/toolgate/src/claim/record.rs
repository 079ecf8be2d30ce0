//! The data a claim store keeps: the proposal record written once at claim
//! time and the claim row around it.
//!
//! Every constructor validates, and the stores build records read back from
//! storage through the same constructors ([`ClaimRecord::from_stored`]), so
//! a corrupt row becomes a [`CorruptRecord`] value and is never shown or
//! acted upon (docs/design.md §8: records read back pass the same contract as fresh
//! proposals).

use std::fmt;

use serde::Deserialize as _;
use serde_json::Value;

use super::ids::{Fingerprint, HolderToken, IdError, OperationKey};
use crate::decode::{self, Limits};

/// A point in time as milliseconds since the Unix epoch.
///
/// The core reads no clock: the caller passes `now` into every operation,
/// which keeps lease decisions deterministic and testable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnixMillis(pub i64);

impl UnixMillis {
    /// This instant plus `ms` milliseconds, saturating.
    #[must_use]
    pub const fn plus_millis(self, ms: i64) -> Self {
        Self(self.0.saturating_add(ms))
    }
}

/// A reading of a clock, for the edges (the core reads none): before 1970
/// reads as 0, past `i64::MAX` milliseconds as `i64::MAX`.
impl From<std::time::SystemTime> for UnixMillis {
    fn from(t: std::time::SystemTime) -> Self {
        let ms = t
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Self(ms)
    }
}

impl fmt::Display for UnixMillis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A claim row's status (docs/design.md §8). Stored as the text of
/// [`Self::as_str`], which is its serde form too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::ToSchema),
    schema(as = ClaimStatusCode, description = "A claim's status.")
)]
pub enum ClaimStatus {
    /// Claimed; the executor may be running. Only the holder can complete it.
    InFlight,
    /// A result is recorded. Retries with the same fingerprint replay it.
    Completed,
}

impl ClaimStatus {
    /// Every status.
    pub const ALL: [Self; 2] = [Self::InFlight, Self::Completed];

    /// The stored text.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InFlight => "in_flight",
            Self::Completed => "completed",
        }
    }

    /// Parses the stored text; anything else is corruption.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// Who performs the write a claim stands for (docs/design.md §13). Recorded
/// with the claim, so that reconciliation asks only the executor that owns
/// the write, and a claim whose write the application performed itself
/// (`client`) is closed only by an explicit answer. Serde spells each kind
/// as its stored text ([`ExecutorKind::as_str`]).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::ToSchema),
    schema(
        as = ExecutorCode,
        description = "Who performs a claim's write (`docs/error-codes.md`, \"Executor kinds\")."
    )
)]
pub enum ExecutorKind {
    /// A Rust executor running inside the gate's process.
    #[default]
    InProcess,
    /// The application, holding a permit (the HTTP sidecar's client mode).
    Client,
    /// The application's webhook, called by the gate.
    Webhook,
    /// An MCP server behind the gateway, sent the `tools/call` by the gate
    /// (reconciled through the tool's status tool).
    McpUpstream,
}

impl ExecutorKind {
    /// Every kind, for documentation checks.
    pub const ALL: [Self; 4] = [
        Self::InProcess,
        Self::Client,
        Self::Webhook,
        Self::McpUpstream,
    ];

    /// The stored text.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InProcess => "in_process",
            Self::Client => "client",
            Self::Webhook => "webhook",
            Self::McpUpstream => "mcp_upstream",
        }
    }

    /// Parses the stored text; anything else is corruption.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

impl std::fmt::Display for ExecutorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a completed claim got its result. Stored as the text of
/// [`Self::as_str`] next to the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resolution {
    /// The holder ran the executor and recorded its receipt.
    Executed,
    /// An operator reconciled an expired claim; the downstream system said
    /// the write had happened. The result is its receipt.
    ReconciledApplied,
    /// An operator reconciled an expired claim; the downstream system said
    /// the write had not happened, and fenced the attempt's idempotency key
    /// so that a late commit of it can never succeed (docs/design.md
    /// invariant 8). The attempt is over for good; the same operation may
    /// run again only as a new attempt ([`ClaimRecord::attempt`] + 1),
    /// authorised, read and budgeted again.
    ReconciledNotApplied,
}

impl Resolution {
    /// The stored text.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Executed => "executed",
            Self::ReconciledApplied => "reconciled_applied",
            Self::ReconciledNotApplied => "reconciled_not_applied",
        }
    }

    /// Parses the stored text; anything else is corruption.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "executed" => Some(Self::Executed),
            "reconciled_applied" => Some(Self::ReconciledApplied),
            "reconciled_not_applied" => Some(Self::ReconciledNotApplied),
            _ => None,
        }
    }
}

/// Limits for JSON kept in a proposal record (arguments and scope). The
/// same limits apply when a record is written and when it is read back, so
/// anything a store accepted can be read again.
pub const RECORD_JSON_LIMITS: Limits = Limits::provider_body().with_max_bytes(64 * 1024);

/// Limits for a recorded result (an executor's receipt).
pub const RESULT_JSON_LIMITS: Limits = Limits::provider_body();

/// Longest tool name, version or proposer text a record accepts, in bytes.
pub const MAX_LABEL_BYTES: usize = 256;

/// Why a record, fresh or read back, is not valid. For a stored row this
/// means corruption: the row must not be shown or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct CorruptRecord {
    field: &'static str,
    message: String,
}

impl CorruptRecord {
    /// A problem with one field.
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }

    /// The column or field that failed validation.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// What was wrong with it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<(&'static str, IdError)> for CorruptRecord {
    fn from((field, e): (&'static str, IdError)) -> Self {
        Self::new(field, e.to_string())
    }
}

fn label(field: &'static str, text: String) -> Result<String, CorruptRecord> {
    if text.is_empty() {
        return Err(CorruptRecord::new(field, "is empty"));
    }
    if text.len() > MAX_LABEL_BYTES {
        return Err(CorruptRecord::new(
            field,
            format!("is {} bytes; the limit is {MAX_LABEL_BYTES}", text.len()),
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(CorruptRecord::new(field, "contains a control character"));
    }
    Ok(text)
}

/// JSON text that the strict decoder accepts, kept byte for byte.
///
/// Stores keep the text, not a re-serialised value, so what was written is
/// exactly what is read back (and what a fingerprint was computed over).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonText(String);

impl JsonText {
    fn parse(
        field: &'static str,
        text: String,
        limits: &Limits,
        object_only: bool,
    ) -> Result<Self, CorruptRecord> {
        let value = decode::decode_strict(text.as_bytes(), limits).map_err(|r| {
            CorruptRecord::new(
                field,
                format!("{}: {} at '{}'", r.code(), r.message(), r.pointer()),
            )
        })?;
        if object_only && !value.is_object() {
            return Err(CorruptRecord::new(field, "is not a JSON object"));
        }
        Ok(Self(text))
    }

    /// A recorded result: any JSON value the strict decoder accepts under
    /// [`RESULT_JSON_LIMITS`].
    pub fn result(text: String) -> Result<Self, CorruptRecord> {
        Self::parse("result", text, &RESULT_JSON_LIMITS, false)
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Decodes the text again (strictly). It was validated on construction,
    /// so this only fails if the limits changed in between.
    pub fn value(&self) -> Result<Value, decode::Rejection> {
        decode::decode_strict(self.0.as_bytes(), &RESULT_JSON_LIMITS)
    }

    /// Whether this result says its write did not happen: an object whose
    /// `applied` is `false` (the pipeline's closure after a failed
    /// precondition, or an explicit not-applied answer). A completion with
    /// such a result gives the claim's budget reservations back.
    pub fn is_not_applied(&self) -> bool {
        /// The one field read; the rest of the result is the writer's.
        #[derive(serde::Deserialize)]
        struct Flag {
            applied: bool,
        }
        self.value()
            .ok()
            .filter(Value::is_object)
            .and_then(|v| Flag::deserialize(&v).ok())
            .is_some_and(|f| !f.applied)
    }
}

/// What was proposed, written once at claim time and never updated: the
/// `conflict` outcome shows it to a person, and reconciliation reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProposalRecord {
    tool: String,
    arguments: JsonText,
    scope: JsonText,
    version_seen: String,
    proposer: String,
}

impl ProposalRecord {
    /// Builds a record, validating every field:
    ///
    /// - `tool`, `version_seen`, `proposer`: non-empty, at most
    ///   [`MAX_LABEL_BYTES`] bytes, no control characters;
    /// - `arguments`: the canonical arguments as JSON text, a JSON object
    ///   the strict decoder accepts under [`RECORD_JSON_LIMITS`];
    /// - `scope`: the server-fixed scope fields, likewise an object.
    ///
    /// Stores call this for rows they read back, so the checks are the same
    /// both ways.
    pub fn new(
        tool: String,
        arguments: String,
        scope: String,
        version_seen: String,
        proposer: String,
    ) -> Result<Self, CorruptRecord> {
        Ok(Self {
            tool: label("tool", tool)?,
            arguments: JsonText::parse("arguments", arguments, &RECORD_JSON_LIMITS, true)?,
            scope: JsonText::parse("scope", scope, &RECORD_JSON_LIMITS, true)?,
            version_seen: label("version_seen", version_seen)?,
            proposer: label("proposer", proposer)?,
        })
    }

    /// The tool's name.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The canonical arguments, byte for byte as written.
    pub fn arguments(&self) -> &str {
        self.arguments.as_str()
    }

    /// The canonical arguments, strictly decoded (for re-running the tool's
    /// contract on a record read back from storage).
    pub fn arguments_value(&self) -> Result<Value, decode::Rejection> {
        decode::decode_strict(self.arguments.as_str().as_bytes(), &RECORD_JSON_LIMITS)
    }

    /// The server-fixed scope as JSON text.
    pub fn scope(&self) -> &str {
        self.scope.as_str()
    }

    /// The resource version the model read.
    pub fn version_seen(&self) -> &str {
        &self.version_seen
    }

    /// Who proposed it (the authenticated actor, never the model).
    pub fn proposer(&self) -> &str {
        &self.proposer
    }
}

/// A claim row as read back from a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRecord {
    /// The operation.
    pub key: OperationKey,
    /// The fingerprint of the proposal that claimed it.
    pub fingerprint: Fingerprint,
    /// The proposal record written at claim time.
    pub proposal: ProposalRecord,
    /// `in_flight` or `completed`.
    pub status: ClaimStatus,
    /// The token of the attempt that won the claim.
    pub holder: HolderToken,
    /// When the holder's lease ends. An in-flight claim past this instant
    /// is stuck: it needs reconciliation, never a second execution.
    pub lease_expires_at: UnixMillis,
    /// When the claim was won.
    pub claimed_at: UnixMillis,
    /// Which attempt of the operation this row holds, from 1. A new attempt
    /// replaces a row reconciled as not applied, and only such a row.
    pub attempt: u32,
    /// Who performs the write: reconciliation asks only this executor.
    pub executor: ExecutorKind,
    /// Completion: when, how and with what result. `Some` exactly when the
    /// status is `completed`.
    pub completion: Option<CompletionRecord>,
}

/// The completed part of a claim row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionRecord {
    /// When the result was recorded.
    pub completed_at: UnixMillis,
    /// How the claim was completed.
    pub resolution: Resolution,
    /// The recorded result (the executor's receipt), byte for byte.
    pub result: JsonText,
}

/// The columns of a claim row as a store read them, before validation.
/// Stores fill this from their row type and call
/// [`ClaimRecord::from_stored`]; nothing else turns a row into a record.
#[derive(Debug, Clone, Default)]
pub struct StoredClaim {
    /// `operation_key` column.
    pub key: Vec<u8>,
    /// `fingerprint` column.
    pub fingerprint: Vec<u8>,
    /// `tool` column.
    pub tool: String,
    /// `arguments` column.
    pub arguments: String,
    /// `scope` column.
    pub scope: String,
    /// `version_seen` column.
    pub version_seen: String,
    /// `proposer` column.
    pub proposer: String,
    /// `status` column.
    pub status: String,
    /// `holder` column.
    pub holder: Vec<u8>,
    /// `lease_expires_at` column.
    pub lease_expires_at: i64,
    /// `claimed_at` column.
    pub claimed_at: i64,
    /// `completed_at` column.
    pub completed_at: Option<i64>,
    /// `resolution` column.
    pub resolution: Option<String>,
    /// `result` column.
    pub result: Option<String>,
    /// `executor` column.
    pub executor: String,
    /// `attempt` column.
    pub attempt: i64,
}

impl ClaimRecord {
    /// Validates a stored row. Any inconsistency (a key of the wrong length,
    /// invalid JSON, an unknown status, a completed row without a result or
    /// an in-flight row with one) is a [`CorruptRecord`].
    pub fn from_stored(row: StoredClaim) -> Result<Self, CorruptRecord> {
        let key = OperationKey::from_slice(&row.key).map_err(|e| ("operation_key", e))?;
        let fingerprint =
            Fingerprint::from_slice(&row.fingerprint).map_err(|e| ("fingerprint", e))?;
        let holder = HolderToken::from_slice(&row.holder).map_err(|e| ("holder", e))?;
        let status = ClaimStatus::parse(&row.status)
            .ok_or_else(|| CorruptRecord::new("status", "is not in_flight or completed"))?;
        let attempt = u32::try_from(row.attempt)
            .ok()
            .filter(|a| *a >= 1)
            .ok_or_else(|| CorruptRecord::new("attempt", "is not a number from 1"))?;
        let executor = ExecutorKind::parse(&row.executor).ok_or_else(|| {
            CorruptRecord::new("executor", "is not in_process, client or webhook")
        })?;
        let proposal = ProposalRecord::new(
            row.tool,
            row.arguments,
            row.scope,
            row.version_seen,
            row.proposer,
        )?;
        let completion = match (status, row.completed_at, row.resolution, row.result) {
            (ClaimStatus::InFlight, None, None, None) => None,
            (ClaimStatus::InFlight, ..) => {
                return Err(CorruptRecord::new(
                    "status",
                    "in_flight row carries completion data",
                ));
            }
            (ClaimStatus::Completed, Some(at), Some(resolution), Some(result)) => {
                Some(CompletionRecord {
                    completed_at: UnixMillis(at),
                    resolution: Resolution::parse(&resolution)
                        .ok_or_else(|| CorruptRecord::new("resolution", "is not a known value"))?,
                    result: JsonText::result(result)?,
                })
            }
            (ClaimStatus::Completed, ..) => {
                return Err(CorruptRecord::new(
                    "status",
                    "completed row lacks completed_at, resolution or result",
                ));
            }
        };
        Ok(Self {
            key,
            fingerprint,
            proposal,
            status,
            holder,
            lease_expires_at: UnixMillis(row.lease_expires_at),
            claimed_at: UnixMillis(row.claimed_at),
            attempt,
            executor,
            completion,
        })
    }

    /// The idempotency key the downstream system knows this row's attempt
    /// by ([`OperationKey::attempt_key`]).
    pub fn idempotency_key(&self) -> String {
        self.key.attempt_key(self.attempt)
    }

    /// Whether the attempt was closed as reconciled not applied: the only
    /// state in which the operation may run again, as a new attempt.
    pub fn reopenable(&self) -> bool {
        self.completion
            .as_ref()
            .is_some_and(|c| c.resolution == Resolution::ReconciledNotApplied)
    }

    /// Whether the claim is in flight and its lease has ended at `now`.
    pub fn is_stuck(&self, now: UnixMillis) -> bool {
        self.status == ClaimStatus::InFlight && self.lease_expires_at <= now
    }

    /// The recorded result, if completed.
    pub fn result(&self) -> Option<&JsonText> {
        self.completion.as_ref().map(|c| &c.result)
    }

    /// Whether the claim was completed by `holder`'s own execution with
    /// exactly `result` (byte for byte): what a completion retried after a
    /// lost answer finds, and answers as recorded without writing again.
    pub fn completed_by(&self, holder: &HolderToken, result: &JsonText) -> bool {
        self.holder == *holder
            && self.completion.as_ref().is_some_and(|c| {
                c.resolution == Resolution::Executed && c.result.as_str() == result.as_str()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_spells_every_claim_status_as_stored() {
        crate::assert_serde_spells_codes(ClaimStatus::ALL, ClaimStatus::as_str);
        let parsed = ClaimStatus::ALL.map(|s| ClaimStatus::parse(s.as_str()));
        assert_eq!(parsed, ClaimStatus::ALL.map(Some));
    }

    #[test]
    fn serde_spells_every_executor_kind_as_stored() {
        crate::assert_serde_spells_codes(ExecutorKind::ALL, ExecutorKind::as_str);
    }

    fn stored() -> StoredClaim {
        StoredClaim {
            key: vec![1; 32],
            fingerprint: vec![2; 32],
            tool: "refund_order".into(),
            arguments: r#"{"amount_minor":1500,"reason_code":"late_delivery"}"#.into(),
            scope: r#"{"customer":"c-1","order":"o-9"}"#.into(),
            version_seen: "7".into(),
            proposer: "agent:42".into(),
            status: "in_flight".into(),
            holder: vec![3; 16],
            lease_expires_at: 2_000,
            claimed_at: 1_000,
            completed_at: None,
            resolution: None,
            result: None,
            executor: "client".into(),
            attempt: 1,
        }
    }

    #[test]
    fn a_valid_row_round_trips() {
        let r = ClaimRecord::from_stored(stored()).unwrap();
        assert_eq!(r.status, ClaimStatus::InFlight);
        assert_eq!(r.executor, ExecutorKind::Client);
        assert_eq!(
            r.proposal.arguments(),
            r#"{"amount_minor":1500,"reason_code":"late_delivery"}"#
        );
        assert!(!r.is_stuck(UnixMillis(1_999)));
        assert!(r.is_stuck(UnixMillis(2_000)));
    }

    #[test]
    fn corrupt_rows_are_errors_naming_the_field() {
        type Corrupt = Box<dyn Fn(&mut StoredClaim)>;
        let cases: Vec<(&str, Corrupt)> = vec![
            ("operation_key", Box::new(|r| r.key.truncate(31))),
            ("fingerprint", Box::new(|r| r.fingerprint.push(0))),
            ("holder", Box::new(|r| r.holder.clear())),
            ("arguments", Box::new(|r| r.arguments = "{\"a\":".into())),
            ("arguments", Box::new(|r| r.arguments = "[1]".into())),
            (
                "arguments",
                Box::new(|r| r.arguments = r#"{"a":1,"a":2}"#.into()),
            ),
            ("scope", Box::new(|r| r.scope = "null".into())),
            ("tool", Box::new(|r| r.tool.clear())),
            ("proposer", Box::new(|r| r.proposer = "a\nb".into())),
            ("status", Box::new(|r| r.status = "done".into())),
            ("executor", Box::new(|r| r.executor = "remote".into())),
            ("executor", Box::new(|r| r.executor.clear())),
            ("attempt", Box::new(|r| r.attempt = 0)),
            ("attempt", Box::new(|r| r.attempt = i64::from(u32::MAX) + 1)),
            ("status", Box::new(|r| r.result = Some("{}".into()))),
            (
                "status",
                Box::new(|r| {
                    r.status = "completed".into();
                    r.completed_at = Some(5);
                }),
            ),
            (
                "resolution",
                Box::new(|r| {
                    r.status = "completed".into();
                    r.completed_at = Some(5);
                    r.resolution = Some("magic".into());
                    r.result = Some("{}".into());
                }),
            ),
            (
                "result",
                Box::new(|r| {
                    r.status = "completed".into();
                    r.completed_at = Some(5);
                    r.resolution = Some("executed".into());
                    r.result = Some("NaN".into());
                }),
            ),
        ];
        for (field, corrupt) in cases {
            let mut row = stored();
            corrupt(&mut row);
            let err = ClaimRecord::from_stored(row).unwrap_err();
            assert_eq!(err.field(), field, "{err}");
        }
    }
}
