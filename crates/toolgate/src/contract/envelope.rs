//! The envelope (docs/design.md §6): the one shape every model turn is reduced to.
//!
//! ```json
//! {"outcome":"action","reply":"…","proposed_action":{"tool":"…","arguments":{…}}}
//! ```
//!
//! The key set is closed at every level. `null` counts as absent for the
//! optional members, because strict structured-output modes make every
//! property required and express "absent" as `null`.

use super::RejectReason;
use crate::decode::{Json, Object};

/// What the model said it is doing, borrowing from the decoded envelope.
#[derive(Debug, Clone, PartialEq)]
pub enum Envelope<'t> {
    /// A reply, no action.
    Answer {
        /// The reply text.
        reply: &'t str,
    },
    /// No reply, no action.
    Abstain,
    /// A reply plus exactly one proposed action.
    Action {
        /// The reply text (may be empty).
        reply: &'t str,
        /// The tool the model chose.
        tool: &'t str,
        /// The arguments, not yet checked against the tool's contract.
        arguments: Json<'t>,
    },
}

/// An envelope that broke a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeError {
    /// `unknown_key`, `invalid_envelope` or `too_large`.
    pub reason: RejectReason,
    /// JSON pointer into the envelope.
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

fn fail(reason: RejectReason, pointer: &str, message: impl Into<String>) -> EnvelopeError {
    EnvelopeError {
        reason,
        pointer: pointer.to_owned(),
        message: message.into(),
    }
}

fn closed(map: Object<'_>, allowed: &[&str], at: &str) -> Result<(), EnvelopeError> {
    match map.keys().find(|k| !allowed.contains(k)) {
        Some(k) => Err(fail(
            RejectReason::UnknownKey,
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
fn present(v: Option<Json<'_>>) -> Option<Json<'_>> {
    v.filter(|v| !v.is_null())
}

/// Reads a decoded envelope; `reply_max_bytes` bounds the reply in UTF-8 bytes.
pub fn parse(value: Json<'_>, reply_max_bytes: usize) -> Result<Envelope<'_>, EnvelopeError> {
    let Some(map) = value.as_object() else {
        return Err(fail(
            RejectReason::InvalidEnvelope,
            "",
            "the envelope must be an object",
        ));
    };
    // Unknown keys first: `approved_by` is reported as what it is even when
    // the rest of the envelope is also wrong.
    closed(map, &["outcome", "reply", "proposed_action"], "")?;
    if let Some(action) = map.get("proposed_action").and_then(|a| a.as_object()) {
        closed(action, &["tool", "arguments"], "/proposed_action")?;
    }
    let reply = match present(map.get("reply")) {
        None => None,
        Some(v) if v.as_str().is_some() => {
            let s = v.as_str().unwrap_or_default();
            check_reply(s, reply_max_bytes)?;
            Some(s)
        }
        Some(_) => {
            return Err(fail(
                RejectReason::InvalidEnvelope,
                "/reply",
                "the reply must be a string",
            ));
        }
    };
    let action = present(map.get("proposed_action"));
    match map.get("outcome").and_then(|o| o.as_str()) {
        Some("answer") => {
            if action.is_some() {
                return Err(fail(
                    RejectReason::InvalidEnvelope,
                    "/proposed_action",
                    "an answer carries no action",
                ));
            }
            match reply {
                Some(reply) if !reply.trim().is_empty() => Ok(Envelope::Answer { reply }),
                _ => Err(fail(
                    RejectReason::InvalidEnvelope,
                    "/reply",
                    "an answer needs a non-empty reply",
                )),
            }
        }
        Some("abstain") => {
            if action.is_some() {
                return Err(fail(
                    RejectReason::InvalidEnvelope,
                    "/proposed_action",
                    "an abstention carries no action",
                ));
            }
            if reply.is_some() {
                return Err(fail(
                    RejectReason::InvalidEnvelope,
                    "/reply",
                    "an abstention carries no reply; the application's fixed message is used",
                ));
            }
            Ok(Envelope::Abstain)
        }
        Some("action") => {
            let Some(reply) = reply else {
                return Err(fail(
                    RejectReason::InvalidEnvelope,
                    "/reply",
                    "an action needs a reply",
                ));
            };
            let Some(action) = action.and_then(|a| a.as_object()) else {
                return Err(fail(
                    RejectReason::InvalidEnvelope,
                    "/proposed_action",
                    "an action needs one proposed_action object {tool, arguments}",
                ));
            };
            let Some(tool) = action.get("tool").and_then(|t| t.as_str()) else {
                return Err(fail(
                    RejectReason::InvalidEnvelope,
                    "/proposed_action/tool",
                    "the tool must be a string",
                ));
            };
            let Some(arguments) = action.get("arguments") else {
                return Err(fail(
                    RejectReason::InvalidEnvelope,
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
            RejectReason::InvalidEnvelope,
            "/outcome",
            format!("outcome {other:?} is not answer, abstain or action"),
        )),
        None => Err(fail(
            RejectReason::InvalidEnvelope,
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
            RejectReason::TooLarge,
            "/reply",
            format!(
                "the reply is {} UTF-8 bytes; the limit is {max}",
                reply.len()
            ),
        ));
    }
    Ok(())
}
