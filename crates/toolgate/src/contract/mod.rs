//! The stateless stages (docs/design.md §5–§6): provider body → stop class → strict
//! decode → envelope → tool contract → canonical arguments and fingerprint.
//!
//! [`check`] cannot fail: every input gives a [`Decision`] (cedar's
//! `is_authorized` style). An `action` decision means the proposal passed
//! every stateless stage; it is **not** permission to act: capability,
//! authorisation, state and the claim are the pipeline's job.

mod envelope;
pub mod explain;
pub mod export;
mod policy;
pub mod schema;

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde_json::{Value, json};

pub use envelope::{Envelope, EnvelopeError};
pub use policy::{
    DEFAULT_ARGUMENT_MAX_BYTES, DEFAULT_REPLY_MAX_BYTES, Policy, PolicyError, ToolContract,
};
pub use schema::{AuditError, Schema, Violation};

use crate::decode::{DecodeCode, Json, Limits, Rejection, decode_borrowed};
use crate::op::{
    Fingerprint, FingerprintError, canonical_json, fingerprint::fingerprint_canonical,
};
use crate::provider::{
    self, Provider, ProviderError, RawArguments, RawToolCall, Stop, StopClass, Turn,
};

/// The outcome of the stateless stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A proposal that passed every stateless stage.
    Action,
    /// A reply, no action.
    Answer,
    /// The model declined; the policy's fixed message is the reply.
    Abstain,
    /// The proposal broke a rule; see the [`Reason`].
    Rejected,
    /// The provider reported a refusal.
    Refused,
    /// Output limit or a cut stream: nothing was parsed.
    Truncated,
    /// The provider's filter stopped the output.
    ContentFiltered,
}

impl Outcome {
    /// Every outcome, for documentation checks.
    pub const ALL: [Self; 7] = [
        Self::Action,
        Self::Answer,
        Self::Abstain,
        Self::Rejected,
        Self::Refused,
        Self::Truncated,
        Self::ContentFiltered,
    ];

    /// The stable snake_case code.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Action => "action",
            Self::Answer => "answer",
            Self::Abstain => "abstain",
            Self::Rejected => "rejected",
            Self::Refused => "refused",
            Self::Truncated => "truncated",
            Self::ContentFiltered => "content_filtered",
        }
    }
}

/// Why a proposal was rejected. Stable snake_case codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Over a byte limit (body, envelope, arguments or reply).
    TooLarge,
    /// Over the nesting limit.
    TooDeep,
    /// An object repeats a key.
    DuplicateKey,
    /// An integer outside ±(2^53−1), or a non-finite number.
    NumberOutOfRange,
    /// Model-authored JSON (envelope text, tool arguments) is not JSON.
    InvalidJson,
    /// A key the envelope or the tool's arguments do not declare.
    UnknownKey,
    /// The arguments fail the tool's schema, or are not an object.
    InvalidArguments,
    /// The tool is not in the policy.
    UnknownTool,
    /// More than one tool call in one turn.
    MultipleActions,
    /// The envelope is missing a member or has one of the wrong type.
    InvalidEnvelope,
    /// A tool call in a turn read as a structured-output envelope.
    UnexpectedToolCall,
    /// A stop value toolgate does not know, or none: fail closed.
    UnknownStop,
    /// The body is JSON but not the provider's response shape.
    MalformedResponse,
}

impl Reason {
    /// Every reason, for documentation checks.
    pub const ALL: [Self; 13] = [
        Self::TooLarge,
        Self::TooDeep,
        Self::DuplicateKey,
        Self::NumberOutOfRange,
        Self::InvalidJson,
        Self::UnknownKey,
        Self::InvalidArguments,
        Self::UnknownTool,
        Self::MultipleActions,
        Self::InvalidEnvelope,
        Self::UnexpectedToolCall,
        Self::UnknownStop,
        Self::MalformedResponse,
    ];

    /// The stable snake_case code.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::TooLarge => "too_large",
            Self::TooDeep => "too_deep",
            Self::DuplicateKey => "duplicate_key",
            Self::NumberOutOfRange => "number_out_of_range",
            Self::InvalidJson => "invalid_json",
            Self::UnknownKey => "unknown_key",
            Self::InvalidArguments => "invalid_arguments",
            Self::UnknownTool => "unknown_tool",
            Self::MultipleActions => "multiple_actions",
            Self::InvalidEnvelope => "invalid_envelope",
            Self::UnexpectedToolCall => "unexpected_tool_call",
            Self::UnknownStop => "unknown_stop",
            Self::MalformedResponse => "malformed_response",
        }
    }
}

impl From<DecodeCode> for Reason {
    fn from(code: DecodeCode) -> Self {
        match code {
            DecodeCode::TooLarge => Self::TooLarge,
            DecodeCode::TooDeep => Self::TooDeep,
            DecodeCode::DuplicateKey => Self::DuplicateKey,
            DecodeCode::NumberOutOfRange => Self::NumberOutOfRange,
            DecodeCode::InvalidJson => Self::InvalidJson,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a provider turn maps onto the envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EnvelopeMode {
    /// Native tool calls: text parts are the reply, one tool call is the
    /// action, none is an answer (or an abstention when there is no text).
    #[default]
    Native,
    /// Structured output: the turn's text is the envelope JSON; tool calls
    /// are not expected.
    Structured,
}

impl EnvelopeMode {
    /// The stable name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Structured => "structured",
        }
    }
}

/// The number of model attempts a turn may take: the original plus one
/// bounded repair (a re-ask after `invalid_json`), never more.
pub const MAX_ATTEMPTS: u32 = 2;

/// Options for one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// The body is a Server-Sent Events stream.
    pub stream: bool,
    /// Which attempt this body answers: 1 for the original, 2 for the repair.
    pub attempt: u32,
    /// How a provider turn maps onto the envelope. Ignored for
    /// [`Provider::Envelope`], which is always structured.
    pub mode: EnvelopeMode,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            stream: false,
            attempt: 1,
            mode: EnvelopeMode::Native,
        }
    }
}

/// A proposal that passed every stateless stage.
#[derive(Debug, Clone, PartialEq)]
pub struct ProposedAction {
    /// The tool's name (a tool of the policy; shared with it).
    pub tool: Arc<str>,
    /// The provider's call id, for native tool calls that have one.
    pub call_id: Option<String>,
    /// The strictly decoded, schema-valid arguments.
    pub arguments: Value,
    /// Their RFC 8785 canonical JSON text.
    pub canonical_arguments: String,
    /// SHA-256 of the canonical text.
    pub fingerprint: Fingerprint,
    /// The capability the tool needs (from the policy; shared with it).
    pub capability: Arc<str>,
    /// Whether each operation needs a person's approval (from the policy).
    pub needs_approval: bool,
}

/// The result of [`check`]: a value, never an error.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// What happened.
    pub outcome: Outcome,
    /// Why, for `rejected`.
    pub reason: Option<Reason>,
    /// JSON pointer to the offending value, where known. Pointers into a
    /// tool's arguments are relative to the arguments object.
    pub pointer: Option<String>,
    /// Human-readable detail.
    pub message: Option<String>,
    /// The tool named by the model, when there was exactly one (shared with
    /// the policy when it is one of its tools).
    pub tool: Option<Arc<str>>,
    /// The validated proposal, for `action`.
    pub action: Option<ProposedAction>,
    /// The reply to deliver: the model's for `answer`/`action`, the policy's
    /// fixed message for `abstain`.
    pub reply: Option<String>,
    /// The provider's stop, where the body was read that far.
    pub stop: Option<Stop>,
    /// Which attempt this was.
    pub attempt: u32,
    /// Whether the one bounded repair (a re-ask) is still allowed: only for
    /// `invalid_json` in model-authored JSON on the first attempt. A
    /// refusal or a truncation is never repairable.
    pub repairable: bool,
}

impl Decision {
    fn new(outcome: Outcome, stop: Option<Stop>, attempt: u32) -> Self {
        Self {
            outcome,
            reason: None,
            pointer: None,
            message: None,
            tool: None,
            action: None,
            reply: None,
            stop,
            attempt,
            repairable: false,
        }
    }

    fn rejected(
        reason: Reason,
        pointer: impl Into<String>,
        message: impl Into<String>,
        stop: Option<Stop>,
        attempt: u32,
    ) -> Self {
        Self {
            reason: Some(reason),
            pointer: Some(pointer.into()),
            message: Some(message.into()),
            ..Self::new(Outcome::Rejected, stop, attempt)
        }
    }

    /// The decision as one JSON object with a fixed set of keys (absent
    /// values are `null`), as `toolgate check` prints it.
    pub fn to_json(&self) -> Value {
        let stop = self.stop.as_ref().map(|s| {
            json!({
                "class": s.class.as_str(),
                "raw": s.raw,
                "category": s.category,
                "explanation": s.explanation,
            })
        });
        let a = self.action.as_ref();
        json!({
            "outcome": self.outcome.as_str(),
            "reason": self.reason.map(Reason::as_str),
            "pointer": self.pointer,
            "message": self.message,
            "tool": self.tool.as_deref(),
            "call_id": a.and_then(|a| a.call_id.clone()),
            "arguments": a.map(|a| a.arguments.clone()),
            "fingerprint": a.map(|a| a.fingerprint.to_hex()),
            "capability": a.map(|a| &*a.capability),
            "needs_approval": a.map(|a| a.needs_approval),
            "reply": self.reply,
            "stop": stop,
            "attempt": self.attempt,
            "repairable": self.repairable,
        })
    }
}

/// Runs every stateless stage on one raw provider body.
///
/// ```
/// use toolgate::contract::{check, CheckOptions, Outcome, Policy};
/// use toolgate::provider::Provider;
///
/// let policy = Policy::load(r#"
///     version = 1
///     abstain_message = "A colleague will follow up."
///     [[tools]]
///     name = "refund_order"
///     capability = "refund:issue"
///     operation_key = ["customer_id", "order_id", "version_seen"]
///     schema = '''{"type":"object","additionalProperties":false,
///                  "required":["amount_minor"],
///                  "properties":{"amount_minor":{"type":"integer","minimum":1,"maximum":2000}}}'''
/// "#).unwrap();
/// let body = br#"{"outcome":"action","reply":"Done.",
///   "proposed_action":{"tool":"refund_order","arguments":{"amount_minor":1500}}}"#;
/// let d = check(&policy, Provider::Envelope, body, &CheckOptions::default());
/// assert_eq!(d.outcome, Outcome::Action);
///
/// let float = br#"{"outcome":"action","reply":"Done.",
///   "proposed_action":{"tool":"refund_order","arguments":{"amount_minor":1500.0}}}"#;
/// let d = check(&policy, Provider::Envelope, float, &CheckOptions::default());
/// assert_eq!(d.reason.map(|r| r.as_str()), Some("invalid_arguments"));
/// ```
pub fn check(policy: &Policy, provider: Provider, body: &[u8], opts: &CheckOptions) -> Decision {
    let attempt = opts.attempt;
    if provider == Provider::Envelope {
        if opts.stream {
            return Decision::rejected(
                Reason::MalformedResponse,
                "",
                "the envelope provider has no stream form",
                None,
                attempt,
            );
        }
        return structured(policy, body, Stop::envelope(), attempt);
    }
    let limits = Limits::provider_body().with_max_bytes(policy.body_max_bytes());
    let body = match provider::decode(provider, body, opts.stream, &limits) {
        Ok(body) => body,
        Err(e) => return unreadable(e, attempt),
    };
    let turn = match body.turn() {
        Ok(turn) => turn,
        Err(e) => return unreadable(e, attempt),
    };
    let Turn {
        text,
        tool_calls,
        stop,
    } = turn;
    match stop.class {
        // INVARIANT: nothing the model wrote is parsed in these three arms.
        StopClass::Truncated => return Decision::new(Outcome::Truncated, Some(stop), attempt),
        StopClass::Refused => return Decision::new(Outcome::Refused, Some(stop), attempt),
        StopClass::ContentFiltered => {
            return Decision::new(Outcome::ContentFiltered, Some(stop), attempt);
        }
        StopClass::Unknown => {
            let message = format!(
                "stop value {} is not one toolgate classifies; failing closed",
                stop.raw
                    .as_deref()
                    .map_or("(none)".to_owned(), |r| format!("{r:?}"))
            );
            return Decision::rejected(Reason::UnknownStop, "", message, Some(stop), attempt);
        }
        StopClass::Complete | StopClass::ToolUse => {}
    }
    match opts.mode {
        EnvelopeMode::Structured => {
            if let Some(call) = tool_calls.first() {
                let mut d = Decision::rejected(
                    Reason::UnexpectedToolCall,
                    "",
                    "a structured-output turn carries its action in the envelope, not as a tool call",
                    Some(stop),
                    attempt,
                );
                d.tool = Some(call.name.as_ref().into());
                return d;
            }
            structured(policy, text.as_bytes(), stop, attempt)
        }
        EnvelopeMode::Native => native(policy, text, &tool_calls, stop, attempt),
    }
}

/// A body that could not be read as a turn at all.
fn unreadable(e: ProviderError, attempt: u32) -> Decision {
    match e {
        ProviderError::Body(r) => {
            // The provider's own JSON is broken: re-asking the model is not a
            // repair for that, so this is never repairable.
            Decision::rejected(
                Reason::from(r.code()),
                r.pointer(),
                format!("provider body: {}", r.message()),
                None,
                attempt,
            )
        }
        ProviderError::Malformed { pointer, message } => {
            Decision::rejected(Reason::MalformedResponse, pointer, message, None, attempt)
        }
    }
}

/// Structured style: `text` is the envelope JSON.
fn structured(policy: &Policy, text: &[u8], stop: Stop, attempt: u32) -> Decision {
    let limits = Limits::envelope().with_max_bytes(policy.envelope_max_bytes());
    let value = match decode_borrowed(text, &limits) {
        Ok(v) => v,
        Err(r) => return model_json_rejection(&r, "", Some(stop), attempt),
    };
    let envelope = match envelope::parse(value.root(), policy.reply_max_bytes()) {
        Ok(e) => e,
        Err(e) => return Decision::rejected(e.reason, e.pointer, e.message, Some(stop), attempt),
    };
    match envelope {
        Envelope::Answer { reply } => Decision {
            reply: Some(reply.to_owned()),
            ..Decision::new(Outcome::Answer, Some(stop), attempt)
        },
        Envelope::Abstain => abstain(policy, stop, attempt),
        Envelope::Action {
            reply,
            tool,
            arguments,
        } => contract(
            policy,
            Proposal {
                tool,
                call_id: None,
                arguments: Args::Decoded(arguments),
                reply: Cow::Borrowed(reply),
            },
            "/proposed_action/arguments",
            stop,
            attempt,
        ),
    }
}

/// Native style: text parts are the reply, one tool call is the action.
///
/// An empty turn (no text, or only whitespace, and no tool call) with a
/// normal stop is an abstention: the model produced neither a reply nor an
/// action, which is exactly what `abstain` means, and the application's
/// fixed message is shown instead of an empty bubble.
fn native(
    policy: &Policy,
    text: Cow<'_, str>,
    calls: &[RawToolCall<'_>],
    stop: Stop,
    attempt: u32,
) -> Decision {
    if let Err(e) = envelope::check_reply(&text, policy.reply_max_bytes()) {
        return Decision::rejected(e.reason, e.pointer, e.message, Some(stop), attempt);
    }
    match calls {
        [] if text.trim().is_empty() => abstain(policy, stop, attempt),
        [] => Decision {
            reply: Some(text.into_owned()),
            ..Decision::new(Outcome::Answer, Some(stop), attempt)
        },
        [call] => {
            let arguments = match &call.arguments {
                RawArguments::Value(v) => Args::Decoded(*v),
                RawArguments::Implied(v) => Args::Implied(v),
                RawArguments::Text(t) => Args::Text(t),
            };
            contract(
                policy,
                Proposal {
                    tool: &call.name,
                    call_id: call.id.as_deref(),
                    arguments,
                    reply: text,
                },
                "",
                stop,
                attempt,
            )
        }
        many => {
            let names: Vec<&str> = many.iter().map(|c| c.name.as_ref()).collect();
            Decision::rejected(
                Reason::MultipleActions,
                "",
                format!(
                    "{} tool calls in one turn ({}); toolgate admits exactly one",
                    many.len(),
                    names.join(", ")
                ),
                Some(stop),
                attempt,
            )
        }
    }
}

fn abstain(policy: &Policy, stop: Stop, attempt: u32) -> Decision {
    Decision {
        reply: Some(policy.abstain_message().to_owned()),
        ..Decision::new(Outcome::Abstain, Some(stop), attempt)
    }
}

/// A decoder rejection of JSON the model wrote; only `invalid_json` on the
/// first attempt may be repaired.
fn model_json_rejection(r: &Rejection, prefix: &str, stop: Option<Stop>, attempt: u32) -> Decision {
    let mut d = Decision::rejected(
        Reason::from(r.code()),
        format!("{prefix}{}", r.pointer()),
        r.message(),
        stop,
        attempt,
    );
    d.repairable = r.code() == DecodeCode::InvalidJson && attempt < MAX_ATTEMPTS;
    d
}

enum Args<'a> {
    /// Already decoded (envelope `arguments`, Anthropic `input`, Gemini `args`).
    Decoded(Json<'a>),
    /// Not in the body; implied by the provider's format.
    Implied(&'a Value),
    /// JSON text still to be strictly decoded.
    Text(&'a str),
}

/// One tool call on its way through the contract stage.
struct Proposal<'a> {
    tool: &'a str,
    call_id: Option<&'a str>,
    arguments: Args<'a>,
    reply: Cow<'a, str>,
}

/// The tool contract stage. `at` prefixes pointers for envelope-borne
/// arguments, which live at `/proposed_action/arguments`.
fn contract(
    policy: &Policy,
    proposal: Proposal<'_>,
    at: &str,
    stop: Stop,
    attempt: u32,
) -> Decision {
    let tool = proposal.tool;
    let reject = |reason: Reason, pointer: String, message: String, stop: Stop| {
        let mut d = Decision::rejected(reason, pointer, message, Some(stop), attempt);
        d.tool = Some(tool.into());
        d
    };
    let Some(contract) = policy.tool(tool) else {
        return reject(
            Reason::UnknownTool,
            String::new(),
            format!("tool {tool:?} is not in the policy"),
            stop,
        );
    };
    let limits = Limits::envelope().with_max_bytes(contract.max_argument_bytes());
    // Arguments decoded as part of a larger document are held to the
    // tool's own byte limit as if they had arrived alone.
    let too_large = |size: usize| {
        (size > contract.max_argument_bytes()).then(|| {
            reject(
                Reason::TooLarge,
                at.to_owned(),
                format!(
                    "arguments are {size} bytes; the limit is {}",
                    contract.max_argument_bytes()
                ),
                stop.clone(),
            )
        })
    };
    let arguments = match proposal.arguments {
        // The tape decoder accepts and rejects exactly what `decode` does
        // (its rejections are `decode`'s), and is the faster of the two.
        Args::Text(text) => match decode_borrowed(text.as_bytes(), &limits) {
            Ok(doc) => doc.root().to_value(),
            Err(r) => {
                let mut d = model_json_rejection(&r, at, Some(stop), attempt);
                d.tool = Some(tool.into());
                return d;
            }
        },
        Args::Decoded(v) => {
            if let Some(d) = too_large(v.compact_len()) {
                return d;
            }
            v.to_value()
        }
        Args::Implied(v) => {
            if let Some(d) = too_large(serialized_len(v)) {
                return d;
            }
            v.clone()
        }
    };
    let Some(map) = arguments.as_object() else {
        return reject(
            Reason::InvalidArguments,
            at.to_owned(),
            "arguments must be a JSON object".to_owned(),
            stop,
        );
    };
    // Unknown keys get their own reason, before the schema runs, so that
    // `approved_by` or `actor_id` is reported as what it is: an attempt to
    // supply something the contract did not ask for.
    if let Some(k) = map.keys().find(|k| !contract.properties().contains(*k)) {
        return reject(
            Reason::UnknownKey,
            format!("{at}/{}", schema::escape(k)),
            format!("`{k}` is not an argument of {tool}"),
            stop,
        );
    }
    if let Err(v) = contract.schema().validate(&arguments) {
        return reject(
            Reason::InvalidArguments,
            format!("{at}{}", v.instance_pointer),
            format!("{} (keyword `{}`)", v.message, v.keyword),
            stop,
        );
    }
    let canonical = match canonical_json(&arguments) {
        Ok(c) => c,
        Err(FingerprintError::NumberOutOfRange(p)) => {
            return reject(
                Reason::NumberOutOfRange,
                format!("{at}{p}"),
                "integer beyond ±(2^53-1)".to_owned(),
                stop,
            );
        }
        Err(e @ FingerprintError::NotCanonicalisable(_)) => {
            return reject(Reason::InvalidArguments, at.to_owned(), e.to_string(), stop);
        }
    };
    let fingerprint = fingerprint_canonical(&canonical);
    let mut d = Decision::new(Outcome::Action, Some(stop), attempt);
    d.tool = Some(contract.shared_name());
    d.reply = Some(proposal.reply.into_owned());
    d.action = Some(ProposedAction {
        tool: contract.shared_name(),
        call_id: proposal.call_id.map(str::to_owned),
        arguments,
        canonical_arguments: canonical,
        fingerprint,
        capability: contract.shared_capability(),
        needs_approval: contract.needs_approval(),
    });
    d
}

/// The compact serialised length of `v` (as `serde_json` writes it), without
/// building the text.
fn serialized_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, v) {
        Ok(()) => count.0,
        // Serialising a Value cannot fail; if it ever did, fail closed.
        Err(_) => usize::MAX,
    }
}
