//! Provider adapters (DESIGN §5): one raw response body in, one normalised
//! [`Turn`] out.
//!
//! Each adapter knows one provider's response shape and nothing else. It
//! strictly decodes the body, classifies the stop, and collects the text
//! parts and tool calls. It does **not** decode a tool call's arguments when
//! they arrive as JSON text (OpenAI's `arguments` string, an Anthropic stream's
//! `input_json_delta`s): whether they may be parsed at all depends on the stop
//! class, and a truncated turn is never parsed (DESIGN §1, invariant 2). The
//! contract layer does that decoding, after the stop has been classified.
//!
//! Unknown or missing stop values are classified [`StopClass::Unknown`], which
//! the contract layer turns into a rejection: a stop toolgate does not
//! understand never becomes an action.

mod anthropic;
mod gemini;
mod openai_chat;
mod openai_responses;
pub mod sse;

use std::fmt;

use serde_json::{Map, Value};

use crate::decode::{Limits, Rejection, decode};

/// The response formats toolgate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// Anthropic Messages API.
    Anthropic,
    /// OpenAI Chat Completions API.
    OpenAiChat,
    /// OpenAI Responses API.
    OpenAiResponses,
    /// Google Gemini `generateContent`.
    Gemini,
    /// The body is the envelope JSON itself (structured-output style, or an
    /// application that extracted the model's text already).
    Envelope,
}

impl Provider {
    /// Every provider, in documentation order.
    pub const ALL: [Self; 5] = [
        Self::Anthropic,
        Self::OpenAiChat,
        Self::OpenAiResponses,
        Self::Gemini,
        Self::Envelope,
    ];

    /// The stable name used on the command line and in fixtures.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Anthropic => "anthropic",
            Self::OpenAiChat => "openai-chat",
            Self::OpenAiResponses => "openai-responses",
            Self::Gemini => "gemini",
            Self::Envelope => "envelope",
        }
    }

    /// Parses a stable name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// Whether toolgate assembles this provider's Server-Sent Events stream.
    /// Gemini streams are a series of complete JSON responses and the
    /// envelope has no stream form, so neither is accepted with `--stream`.
    pub const fn supports_stream(self) -> bool {
        matches!(
            self,
            Self::Anthropic | Self::OpenAiChat | Self::OpenAiResponses
        )
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the provider said the turn ended, in toolgate's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopClass {
    /// A natural end of the turn (`end_turn`, `stop`, `STOP`, `completed`).
    Complete,
    /// The turn ended to call tools (`tool_use`, `tool_calls`).
    ToolUse,
    /// Output limit reached, or the stream was cut: nothing is parsed.
    Truncated,
    /// The provider reported a refusal: terminal, not a parse failure.
    Refused,
    /// The provider's content filter stopped the output.
    ContentFiltered,
    /// A stop value toolgate does not know, or none at all: fail closed.
    Unknown,
}

impl StopClass {
    /// Every class, for documentation checks.
    pub const ALL: [Self; 6] = [
        Self::Complete,
        Self::ToolUse,
        Self::Truncated,
        Self::Refused,
        Self::ContentFiltered,
        Self::Unknown,
    ];

    /// The stable snake_case code.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::ToolUse => "tool_use",
            Self::Truncated => "truncated",
            Self::Refused => "refused",
            Self::ContentFiltered => "content_filtered",
            Self::Unknown => "unknown",
        }
    }
}

/// The classified stop, with what the provider said about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    /// toolgate's classification.
    pub class: StopClass,
    /// The provider's own value (`max_tokens`, `length`, `SAFETY`, …), or a
    /// description such as `stream_cut` when toolgate inferred the class.
    pub raw: Option<String>,
    /// Refusal or filter category, where the provider gives one.
    pub category: Option<String>,
    /// Refusal text or explanation, where the provider gives one.
    pub explanation: Option<String>,
}

impl Stop {
    pub(crate) fn new(class: StopClass, raw: Option<String>) -> Self {
        Self {
            class,
            raw,
            category: None,
            explanation: None,
        }
    }

    /// A stop for an envelope body, which has no provider stop of its own.
    pub fn envelope() -> Self {
        Self::new(StopClass::Complete, None)
    }
}

/// A tool call's arguments as the provider delivered them.
#[derive(Debug, Clone, PartialEq)]
pub enum RawArguments {
    /// Already a JSON value inside the (strictly decoded) body: Anthropic's
    /// `input`, Gemini's `args`.
    Value(Value),
    /// JSON text still to be decoded: OpenAI's `arguments` string, or an
    /// Anthropic stream's concatenated `input_json_delta`s.
    Text(String),
}

/// One tool call proposed by the model, not yet checked against a contract.
#[derive(Debug, Clone, PartialEq)]
pub struct RawToolCall {
    /// The tool name the model chose.
    pub name: String,
    /// The provider's call id, where it gives one.
    pub id: Option<String>,
    /// The arguments, undecoded when they arrived as text.
    pub arguments: RawArguments,
}

/// One normalised model turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// The text parts, concatenated in order (reasoning/thinking parts are
    /// not text and are left out).
    pub text: String,
    /// Tool calls in the order the provider listed them.
    pub tool_calls: Vec<RawToolCall>,
    /// How the turn ended.
    pub stop: Stop,
}

/// Why a body could not be read as a turn at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderError {
    /// The body (or one stream event) failed strict decoding.
    Body(Rejection),
    /// The body is JSON but not this provider's response shape.
    Malformed {
        /// JSON pointer into the body (or `/events/<n>` for a stream).
        pointer: String,
        /// What was expected.
        message: String,
    },
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Body(r) => write!(f, "{r}"),
            Self::Malformed { pointer, message } => write!(f, "at {pointer}: {message}"),
        }
    }
}

impl std::error::Error for ProviderError {}

/// Reads one provider response body as a turn.
///
/// `stream` selects Server-Sent Events assembly. `limits` bound the body
/// (and each stream event); the default is [`Limits::provider_body`].
/// [`Provider::Envelope`] has no turn form: the contract layer reads its
/// body directly, so it is reported as malformed here.
pub fn parse(
    provider: Provider,
    body: &[u8],
    stream: bool,
    limits: &Limits,
) -> Result<Turn, ProviderError> {
    match (provider, stream) {
        (Provider::Anthropic, false) => anthropic::parse(&decode(body, limits)?),
        (Provider::Anthropic, true) => anthropic::parse_stream(&sse::events(body, limits)?),
        (Provider::OpenAiChat, false) => openai_chat::parse(&decode(body, limits)?),
        (Provider::OpenAiChat, true) => openai_chat::parse_stream(&sse::events(body, limits)?),
        (Provider::OpenAiResponses, false) => openai_responses::parse(&decode(body, limits)?),
        (Provider::OpenAiResponses, true) => {
            openai_responses::parse_stream(&sse::events(body, limits)?)
        }
        (Provider::Gemini, false) => gemini::parse(&decode(body, limits)?),
        (Provider::Gemini | Provider::Envelope, true) | (Provider::Envelope, false) => {
            Err(malformed(
                "",
                format!("provider {provider} has no {} form", mode(stream)),
            ))
        }
    }
}

fn mode(stream: bool) -> &'static str {
    if stream { "stream" } else { "turn" }
}

impl From<Rejection> for ProviderError {
    fn from(r: Rejection) -> Self {
        Self::Body(r)
    }
}

// Small accessors shared by the adapters. Each returns a `Malformed` error
// naming the pointer, so adapters read as a list of field look-ups.

pub(crate) fn malformed(pointer: &str, message: impl Into<String>) -> ProviderError {
    ProviderError::Malformed {
        pointer: pointer.to_owned(),
        message: message.into(),
    }
}

pub(crate) fn object<'a>(
    v: &'a Value,
    pointer: &str,
) -> Result<&'a Map<String, Value>, ProviderError> {
    v.as_object()
        .ok_or_else(|| malformed(pointer, "expected an object"))
}

pub(crate) fn array<'a>(v: &'a Value, pointer: &str) -> Result<&'a Vec<Value>, ProviderError> {
    v.as_array()
        .ok_or_else(|| malformed(pointer, "expected an array"))
}

/// A field that may be absent or null; present with another type is malformed.
pub(crate) fn opt_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    pointer: &str,
) -> Result<Option<&'a str>, ProviderError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(malformed(&format!("{pointer}/{key}"), "expected a string")),
    }
}

pub(crate) fn req_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    pointer: &str,
) -> Result<&'a str, ProviderError> {
    opt_str(obj, key, pointer)?
        .ok_or_else(|| malformed(&format!("{pointer}/{key}"), "missing string"))
}
