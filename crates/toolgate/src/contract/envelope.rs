//! The envelope (DESIGN §6): the one shape every model turn is reduced to.
//!
//! ```json
//! {"outcome":"action","reply":"…","proposed_action":{"tool":"…","arguments":{…}}}
//! ```
//!
//! The key set is closed at every level. `null` counts as absent for the
//! optional members, because strict structured-output modes make every
//! property required and express "absent" as `null`.

use serde_json::{Map, Value};

use super::Reason;

/// What the model said it is doing.
#[derive(Debug, Clone, PartialEq)]
pub enum Envelope {
    /// A reply, no action.
    Answer {
        /// The reply text.
        reply: String,
    },
    /// No reply, no action.
    Abstain,
    /// A reply plus exactly one proposed action.
    Action {
        /// The reply text (may be empty).
        reply: String,
        /// The tool the model chose.
        tool: String,
        /// The arguments, not yet checked against the tool's contract.
        arguments: Value,
    },
}

/// An envelope that broke a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeError {
    /// `unknown_key`, `invalid_envelope` or `too_large`.
    pub reason: Reason,
    /// JSON pointer into the envelope.
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

fn fail(reason: Reason, pointer: &str, message: impl Into<String>) -> EnvelopeError {
    EnvelopeError {
        reason,
        pointer: pointer.to_owned(),
        message: message.into(),
    }
}

fn closed(map: &Map<String, Value>, allowed: &[&str], at: &str) -> Result<(), EnvelopeError> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(fail(
            Reason::UnknownKey,
            &format!("{at}/{}", super::schema::escape(k)),
            format!(
                "`{k}` is not an envelope key (allowed: {})",
                allowed.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// `null` counts as absent.
fn present(v: Option<Value>) -> Option<Value> {
    v.filter(|v| !v.is_null())
}

/// Reads a decoded envelope; `reply_max_bytes` bounds the reply in UTF-8 bytes.
///
/// Takes the value by ownership so that the reply and the arguments are
/// moved out rather than copied: this runs once per model turn.
pub fn parse(value: Value, reply_max_bytes: usize) -> Result<Envelope, EnvelopeError> {
    let Value::Object(mut map) = value else {
        return Err(fail(
            Reason::InvalidEnvelope,
            "",
            "the envelope must be an object",
        ));
    };
    // Unknown keys first: `approved_by` is reported as what it is even when
    // the rest of the envelope is also wrong.
    closed(&map, &["outcome", "reply", "proposed_action"], "")?;
    if let Some(Value::Object(action)) = map.get("proposed_action") {
        closed(action, &["tool", "arguments"], "/proposed_action")?;
    }
    let reply = match present(map.remove("reply")) {
        None => None,
        Some(Value::String(s)) => {
            check_reply(&s, reply_max_bytes)?;
            Some(s)
        }
        Some(_) => {
            return Err(fail(
                Reason::InvalidEnvelope,
                "/reply",
                "the reply must be a string",
            ));
        }
    };
    let action = present(map.remove("proposed_action"));
    match map.get("outcome").and_then(Value::as_str) {
        Some("answer") => {
            if action.is_some() {
                return Err(fail(
                    Reason::InvalidEnvelope,
                    "/proposed_action",
                    "an answer carries no action",
                ));
            }
            match reply {
                Some(reply) if !reply.trim().is_empty() => Ok(Envelope::Answer { reply }),
                _ => Err(fail(
                    Reason::InvalidEnvelope,
                    "/reply",
                    "an answer needs a non-empty reply",
                )),
            }
        }
        Some("abstain") => {
            if action.is_some() {
                return Err(fail(
                    Reason::InvalidEnvelope,
                    "/proposed_action",
                    "an abstention carries no action",
                ));
            }
            if reply.is_some() {
                return Err(fail(
                    Reason::InvalidEnvelope,
                    "/reply",
                    "an abstention carries no reply; the application's fixed message is used",
                ));
            }
            Ok(Envelope::Abstain)
        }
        Some("action") => {
            let Some(reply) = reply else {
                return Err(fail(
                    Reason::InvalidEnvelope,
                    "/reply",
                    "an action needs a reply",
                ));
            };
            let Some(Value::Object(mut action)) = action else {
                return Err(fail(
                    Reason::InvalidEnvelope,
                    "/proposed_action",
                    "an action needs one proposed_action object {tool, arguments}",
                ));
            };
            let Some(Value::String(tool)) = action.remove("tool") else {
                return Err(fail(
                    Reason::InvalidEnvelope,
                    "/proposed_action/tool",
                    "the tool must be a string",
                ));
            };
            let Some(arguments) = action.remove("arguments") else {
                return Err(fail(
                    Reason::InvalidEnvelope,
                    "/proposed_action/arguments",
                    "missing arguments",
                ));
            };
            Ok(Envelope::Action {
                reply,
                tool,
                arguments,
            })
        }
        Some(other) => Err(fail(
            Reason::InvalidEnvelope,
            "/outcome",
            format!("outcome {other:?} is not answer, abstain or action"),
        )),
        None => Err(fail(
            Reason::InvalidEnvelope,
            "/outcome",
            "missing outcome (answer, abstain or action)",
        )),
    }
}

/// The reply limit is in UTF-8 bytes: a limit in characters would let four
/// times as many bytes through in some scripts.
pub(crate) fn check_reply(reply: &str, max: usize) -> Result<(), EnvelopeError> {
    if reply.len() > max {
        return Err(fail(
            Reason::TooLarge,
            "/reply",
            format!(
                "the reply is {} UTF-8 bytes; the limit is {max}",
                reply.len()
            ),
        ));
    }
    Ok(())
}
