//! [`check`]: every stateless stage in order, and the tool contract stage
//! that makes a [`ProposedAction`] (the only place one is made).

use std::borrow::Cow;

use serde_json::Value;

use super::decision::{Checked, ProposedAction};
use super::envelope::{self, Envelope};
use super::policy::Policy;
use super::schema;
use super::vocab::{CheckOutcome, EnvelopeMode, MAX_ATTEMPTS, RejectReason};
use crate::decode::{DecodeCode, Json, Limits, Rejection, decode_tape};
use crate::op::{FingerprintError, canonical_json, fingerprint::fingerprint_canonical};
use crate::provider::{
    self, Provider, ProviderError, RawArguments, RawToolCall, Stop, StopClass, Turn,
};

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

/// Runs every stateless stage on one raw provider body.
///
/// ```
/// use toolgate::contract::{check, CheckOptions, CheckOutcome, Policy};
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
/// assert_eq!(d.outcome(), CheckOutcome::Action);
///
/// let float = br#"{"outcome":"action","reply":"Done.",
///   "proposed_action":{"tool":"refund_order","arguments":{"amount_minor":1500.0}}}"#;
/// let d = check(&policy, Provider::Envelope, float, &CheckOptions::default());
/// assert_eq!(d.reason.map(|r| r.as_str()), Some("invalid_arguments"));
/// ```
pub fn check(policy: &Policy, provider: Provider, body: &[u8], opts: &CheckOptions) -> Checked {
    let attempt = opts.attempt;
    if provider == Provider::Envelope {
        if opts.stream {
            return Checked::rejected(
                RejectReason::MalformedResponse,
                "",
                "the envelope provider has no stream form",
                None,
                attempt,
            );
        }
        return structured(policy, body, Stop::envelope(), attempt);
    }
    let limits = Limits::provider_body().with_max_bytes(policy.body_max_bytes());
    let body = match provider::decode_body(provider, body, opts.stream, &limits) {
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
        StopClass::Truncated => return Checked::new(CheckOutcome::Truncated, Some(stop), attempt),
        StopClass::Refused => return Checked::new(CheckOutcome::Refused, Some(stop), attempt),
        StopClass::ContentFiltered => {
            return Checked::new(CheckOutcome::ContentFiltered, Some(stop), attempt);
        }
        StopClass::Unknown => {
            let message = format!(
                "stop value {} is not one toolgate classifies; failing closed",
                stop.raw
                    .as_deref()
                    .map_or("(none)".to_owned(), |r| format!("{r:?}"))
            );
            return Checked::rejected(RejectReason::UnknownStop, "", message, Some(stop), attempt);
        }
        StopClass::Complete | StopClass::ToolUse => {}
    }
    match opts.mode {
        EnvelopeMode::Structured => {
            if let Some(call) = tool_calls.first() {
                let mut d = Checked::rejected(
                    RejectReason::UnexpectedToolCall,
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

/// The tool contract stage alone, for a front door that receives a tool
/// name and its arguments rather than a provider body (an MCP
/// `tools/call`). `arguments` is the raw JSON text of the arguments object:
/// it is strictly decoded here (duplicate keys, numbers beyond ±(2^53−1),
/// nesting and the tool's byte limit), then held to the contract exactly as
/// [`check`] holds a proposed action: the tool must be in the policy, every
/// key must be a declared argument, the schema must accept the object, and
/// the canonical arguments and fingerprint are computed the same way, so a
/// call and the same action in an envelope get the same fingerprint.
///
/// Pointers in a rejection are relative to the arguments object (`/amount_minor`),
/// there is no reply, and the stop is a complete turn's: nothing here was
/// cut off or refused by a provider.
///
/// ```
/// use toolgate::contract::{check_call, CheckOutcome, Policy};
///
/// let policy = Policy::load(r#"
///     version = 1
///     abstain_message = "A colleague will follow up."
///     [[tools]]
///     name = "refund_order"
///     capability = "refund:issue"
///     operation_key = ["order_id", "version_seen"]
///     schema = '''{"type":"object","additionalProperties":false,
///                  "properties":{"amount_minor":{"type":"integer","minimum":1}}}'''
/// "#).unwrap();
/// let d = check_call(&policy, "refund_order", br#"{"amount_minor": 1500}"#);
/// assert_eq!(d.outcome(), CheckOutcome::Action);
///
/// let twice = check_call(&policy, "refund_order", br#"{"amount_minor": 1, "amount_minor": 1500}"#);
/// assert_eq!(twice.reason.map(|r| r.as_str()), Some("duplicate_key"));
/// ```
pub fn check_call(policy: &Policy, tool: &str, arguments: &[u8]) -> Checked {
    contract(
        policy,
        Proposal {
            tool,
            call_id: None,
            arguments: Args::Text(arguments),
            reply: Cow::Borrowed(""),
        },
        "",
        Stop::envelope(),
        1,
    )
}

/// A body that could not be read as a turn at all.
fn unreadable(e: ProviderError, attempt: u32) -> Checked {
    match e {
        ProviderError::Body(r) => {
            // The provider's own JSON is broken: re-asking the model is not a
            // repair for that, so this is never repairable.
            Checked::rejected(
                RejectReason::from(r.code()),
                r.pointer(),
                format!("provider body: {}", r.message()),
                None,
                attempt,
            )
        }
        ProviderError::Malformed { pointer, message } => Checked::rejected(
            RejectReason::MalformedResponse,
            pointer,
            message,
            None,
            attempt,
        ),
    }
}

/// Structured style: `text` is the envelope JSON.
fn structured(policy: &Policy, text: &[u8], stop: Stop, attempt: u32) -> Checked {
    let limits = Limits::envelope().with_max_bytes(policy.envelope_max_bytes());
    let value = match decode_tape(text, &limits) {
        Ok(v) => v,
        Err(r) => return model_json_rejection(&r, "", Some(stop), attempt),
    };
    let envelope = match envelope::parse(value.root(), policy.reply_max_bytes()) {
        Ok(e) => e,
        Err(e) => return Checked::rejected(e.reason, e.pointer, e.message, Some(stop), attempt),
    };
    match envelope {
        Envelope::Answer { reply } => Checked {
            reply: Some(reply.to_owned()),
            ..Checked::new(CheckOutcome::Answer, Some(stop), attempt)
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
) -> Checked {
    if let Err(e) = envelope::check_reply(&text, policy.reply_max_bytes()) {
        return Checked::rejected(e.reason, e.pointer, e.message, Some(stop), attempt);
    }
    match calls {
        [] if text.trim().is_empty() => abstain(policy, stop, attempt),
        [] => Checked {
            reply: Some(text.into_owned()),
            ..Checked::new(CheckOutcome::Answer, Some(stop), attempt)
        },
        [call] => {
            let arguments = match &call.arguments {
                RawArguments::Value(v) => Args::Decoded(*v),
                RawArguments::Implied(v) => Args::Implied(v),
                RawArguments::Text(t) => Args::Text(t.as_bytes()),
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
            Checked::rejected(
                RejectReason::MultipleActions,
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

fn abstain(policy: &Policy, stop: Stop, attempt: u32) -> Checked {
    Checked {
        reply: Some(policy.abstain_message().to_owned()),
        ..Checked::new(CheckOutcome::Abstain, Some(stop), attempt)
    }
}

/// A decoder rejection of JSON the model wrote; only `invalid_json` on the
/// first attempt may be repaired.
fn model_json_rejection(r: &Rejection, prefix: &str, stop: Option<Stop>, attempt: u32) -> Checked {
    let mut d = Checked::rejected(
        RejectReason::from(r.code()),
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
    Text(&'a [u8]),
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
) -> Checked {
    let tool = proposal.tool;
    let reject = |reason: RejectReason, pointer: String, message: String, stop: Stop| {
        let mut d = Checked::rejected(reason, pointer, message, Some(stop), attempt);
        d.tool = Some(tool.into());
        d
    };
    let Some(contract) = policy.tool(tool) else {
        return reject(
            RejectReason::UnknownTool,
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
                RejectReason::TooLarge,
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
        // The fast path accepts and rejects exactly what the reference
        // decoder does (its rejections are the reference's), and is faster.
        Args::Text(text) => match decode_tape(text, &limits) {
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
            RejectReason::InvalidArguments,
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
            RejectReason::UnknownKey,
            format!("{at}/{}", schema::escape(k)),
            format!("`{k}` is not an argument of {tool}"),
            stop,
        );
    }
    if let Err(v) = contract.schema().validate(&arguments) {
        return reject(
            RejectReason::InvalidArguments,
            format!("{at}{}", v.instance_pointer),
            format!("{} (keyword `{}`)", v.message, v.keyword),
            stop,
        );
    }
    let canonical = match canonical_json(&arguments) {
        Ok(c) => c,
        Err(FingerprintError::NumberOutOfRange(p)) => {
            return reject(
                RejectReason::NumberOutOfRange,
                format!("{at}{p}"),
                "integer beyond ±(2^53-1)".to_owned(),
                stop,
            );
        }
        Err(e @ FingerprintError::NotCanonicalisable(_)) => {
            return reject(
                RejectReason::InvalidArguments,
                at.to_owned(),
                e.to_string(),
                stop,
            );
        }
    };
    let fingerprint = fingerprint_canonical(&canonical);
    let mut d = Checked::new(CheckOutcome::Action, Some(stop), attempt);
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
