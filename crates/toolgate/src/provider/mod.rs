//! Provider adapters (docs/design.md §5): one raw response body in, one normalised
//! [`Turn`] out.
//!
//! Two steps: [`decode_body`] strictly decodes the whole body (or each event of
//! a stream) into a [`Body`], a tape that borrows from the input; then
//! [`Body::turn`] reads it as a turn. Each adapter knows one provider's
//! response shape and nothing else: it classifies the stop and collects the
//! text parts and tool calls, borrowing them from the body. Only the tool
//! arguments are ever turned into a `serde_json::Value`, by the contract
//! stage. JSON pointers for malformed shapes are built only on error.
//!
//! An adapter does **not** decode a tool call's arguments when they arrive
//! as JSON text (OpenAI's `arguments` string, an Anthropic stream's
//! `input_json_delta`s): whether they may be parsed at all depends on the
//! stop class, and a truncated turn is never parsed (docs/design.md §1, invariant
//! 2). The contract layer does that decoding, after the stop has been
//! classified.
//!
//! Unknown or missing stop values are classified [`StopClass::Unknown`], which
//! the contract layer turns into a rejection: a stop toolgate does not
//! understand never becomes an action.

mod anthropic;
mod gemini;
mod openai_chat;
mod openai_responses;
pub mod sse;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::fmt;

use crate::decode::{Array, Document, Json, Limits, Object, Rejection, decode_tape};
use sse::Event;

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

/// How the provider said the turn ended, in toolgate's terms. Serde spells
/// each class as its [`StopClass::as_str`] code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::ToSchema),
    schema(
        as = StopClassCode,
        description = "How the provider's turn ended (`docs/error-codes.md`, \"Stop classes\")."
    )
)]
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

/// The classified stop, with what the provider said about it. Where
/// toolgate inferred the class, `raw` is a description such as
/// `stream_cut`; the usual raw values are shared statics, so a turn copies
/// none of them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::ToSchema),
    schema(as = StopView, description = "The provider's stop.")
)]
pub struct Stop {
    /// toolgate's classification.
    pub class: StopClass,
    /// The provider's own value (`max_tokens`, `length`, `SAFETY`, …).
    pub raw: Option<Cow<'static, str>>,
    /// Refusal or filter category, where the provider gives one.
    pub category: Option<String>,
    /// Refusal text or explanation, where the provider gives one.
    pub explanation: Option<String>,
}

impl Stop {
    pub(crate) fn new(class: StopClass, raw: Option<Cow<'static, str>>) -> Self {
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

/// A provider's stop value as kept in [`Stop::raw`]: one of the values the
/// adapters classify is a shared static (no allocation on every turn);
/// anything else is copied.
pub(crate) fn raw_stop(value: &str) -> Cow<'static, str> {
    // The normal ends first: they are what almost every turn carries.
    const KNOWN: [&str; 13] = [
        "tool_use",
        "end_turn",
        "tool_calls",
        "stop",
        "STOP",
        "completed",
        "stop_sequence",
        "max_tokens",
        "length",
        "MAX_TOKENS",
        "refusal",
        "content_filter",
        "SAFETY",
    ];
    match KNOWN.iter().find(|k| **k == value) {
        Some(k) => Cow::Borrowed(k),
        None => Cow::Owned(value.to_owned()),
    }
}

/// A tool call's arguments as the provider delivered them.
#[derive(Debug, Clone, PartialEq)]
pub enum RawArguments<'t> {
    /// Already a JSON value inside the (strictly decoded) body: Anthropic's
    /// `input`, Gemini's `args`.
    Value(Json<'t>),
    /// Not in the body at all; the value the provider's format implies
    /// (`{}` for a Gemini `functionCall` without `args`, `null` for an
    /// Anthropic stream's `tool_use` block that never carried `input`).
    Implied(serde_json::Value),
    /// JSON text still to be decoded: OpenAI's `arguments` string, or an
    /// Anthropic stream's concatenated `input_json_delta`s.
    Text(Cow<'t, str>),
}

/// One tool call proposed by the model, not yet checked against a contract.
#[derive(Debug, Clone, PartialEq)]
pub struct RawToolCall<'t> {
    /// The tool name the model chose.
    pub name: Cow<'t, str>,
    /// The provider's call id, where it gives one.
    pub id: Option<Cow<'t, str>>,
    /// The arguments, undecoded when they arrived as text.
    pub arguments: RawArguments<'t>,
}

/// One normalised model turn, borrowing from the decoded [`Body`] it was
/// read from.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn<'t> {
    /// The text parts, concatenated in order (reasoning/thinking parts are
    /// not text and are left out).
    pub text: Cow<'t, str>,
    /// Tool calls in the order the provider listed them.
    pub tool_calls: Vec<RawToolCall<'t>>,
    /// How the turn ended.
    pub stop: Stop,
}

impl Turn<'_> {
    /// A turn with nothing in it but its stop.
    fn stopped(stop: Stop) -> Self {
        Self {
            text: Cow::Borrowed(""),
            tool_calls: Vec::new(),
            stop,
        }
    }
}

/// Appends a text part, borrowing it while it is the only one.
fn push_text<'t>(text: &mut Cow<'t, str>, part: &'t str) {
    if text.is_empty() {
        *text = Cow::Borrowed(part);
    } else {
        text.to_mut().push_str(part);
    }
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

/// One provider response body, strictly decoded (every byte of it: a
/// duplicate key or an out-of-range integer anywhere rejects it), and not
/// yet read as a turn. The [`Turn`] borrows from it.
#[derive(Debug)]
pub struct Body<'a> {
    provider: Provider,
    content: Content<'a>,
}

#[derive(Debug)]
enum Content<'a> {
    Whole(Document<'a>),
    Stream(Vec<Event<'a>>),
}

/// Strictly decodes one provider response body.
///
/// `stream` selects Server-Sent Events assembly. `limits` bound the body
/// (and each stream event); the default is [`Limits::provider_body`].
/// [`Provider::Envelope`] has no turn form: the contract layer reads its
/// body directly, so it is reported as malformed here.
pub fn decode_body<'a>(
    provider: Provider,
    body: &'a [u8],
    stream: bool,
    limits: &Limits,
) -> Result<Body<'a>, ProviderError> {
    let content = match (provider, stream) {
        (Provider::Anthropic | Provider::OpenAiChat | Provider::OpenAiResponses, true) => {
            Content::Stream(sse::events(body, limits)?)
        }
        (Provider::Anthropic | Provider::OpenAiChat | Provider::OpenAiResponses, false)
        | (Provider::Gemini, false) => Content::Whole(decode_tape(body, limits)?),
        (Provider::Gemini | Provider::Envelope, true) | (Provider::Envelope, false) => {
            return Err(malformed(
                At::ROOT,
                format!("provider {provider} has no {} form", mode(stream)),
            ));
        }
    };
    Ok(Body { provider, content })
}

impl<'a> Body<'a> {
    /// Reads the body as one turn in its provider's shape.
    pub fn turn(&self) -> Result<Turn<'_>, ProviderError> {
        match (&self.content, self.provider) {
            (Content::Whole(body), Provider::Anthropic) => anthropic::parse(body.root()),
            (Content::Whole(body), Provider::OpenAiChat) => openai_chat::parse(body.root()),
            (Content::Whole(body), Provider::OpenAiResponses) => {
                openai_responses::parse(body.root())
            }
            (Content::Whole(body), Provider::Gemini) => gemini::parse(body.root()),
            (Content::Stream(events), Provider::Anthropic) => anthropic::parse_stream(events),
            (Content::Stream(events), Provider::OpenAiChat) => openai_chat::parse_stream(events),
            (Content::Stream(events), Provider::OpenAiResponses) => {
                openai_responses::parse_stream(events)
            }
            (_, provider) => unreachable!("`decode_body` makes no {provider} body"),
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

/// Where an adapter is in the body, as a chain of segments on the stack.
/// The JSON pointer text is built only when something is malformed, so a
/// well-formed body is read without formatting a single pointer.
#[derive(Clone, Copy)]
pub(crate) struct At<'p> {
    parent: Option<&'p At<'p>>,
    segment: Segment<'p>,
}

#[derive(Clone, Copy)]
enum Segment<'p> {
    /// The body's root: the empty pointer.
    Root,
    /// An object member (adapters name only plain keys).
    Key(&'p str),
    /// An array item.
    Index(usize),
}

impl<'p> At<'p> {
    /// The body's root.
    pub(crate) const ROOT: At<'static> = At {
        parent: None,
        segment: Segment::Root,
    };

    /// The member `key` of the value here.
    pub(crate) fn key(&'p self, key: &'p str) -> At<'p> {
        At {
            parent: Some(self),
            segment: Segment::Key(key),
        }
    }

    /// The item `index` of the array here.
    pub(crate) fn index(&'p self, index: usize) -> At<'p> {
        At {
            parent: Some(self),
            segment: Segment::Index(index),
        }
    }

    /// The JSON pointer text.
    pub(crate) fn pointer(&self) -> String {
        let mut segments = Vec::new();
        let mut at = Some(self);
        while let Some(a) = at {
            segments.push(a.segment);
            at = a.parent;
        }
        let mut out = String::new();
        for segment in segments.into_iter().rev() {
            match segment {
                Segment::Root => {}
                Segment::Key(k) => {
                    out.push('/');
                    out.push_str(k);
                }
                Segment::Index(i) => {
                    out.push('/');
                    out.push_str(&i.to_string());
                }
            }
        }
        out
    }
}

// Small accessors shared by the adapters. Each returns a `Malformed` error
// naming the pointer, so adapters read as a list of field look-ups.

#[cold]
#[inline(never)]
pub(crate) fn malformed(at: At<'_>, message: impl Into<String>) -> ProviderError {
    ProviderError::Malformed {
        pointer: at.pointer(),
        message: message.into(),
    }
}

#[inline(always)]
pub(crate) fn object<'t>(v: Json<'t>, at: At<'_>) -> Result<Object<'t>, ProviderError> {
    v.as_object()
        .ok_or_else(|| malformed(at, "expected an object"))
}

#[inline(always)]
pub(crate) fn array<'t>(v: Json<'t>, at: At<'_>) -> Result<Array<'t>, ProviderError> {
    v.as_array()
        .ok_or_else(|| malformed(at, "expected an array"))
}

/// One field of an object, as [`fields`] found it: its key (for the
/// pointer of an error) and its value, if the object has the key.
#[derive(Clone, Copy)]
pub(crate) struct Field<'t, 'k> {
    key: &'k str,
    value: Option<Json<'t>>,
}

/// The members `keys` of `obj`, found in one pass over its members.
///
/// An adapter reads a few fields of objects that often carry many more
/// (ids, usage, metadata). One [`Object::get`] per field walks the members
/// once per field; this walks them once in all, and stops as soon as every
/// key has been seen. Object keys are unique (the decoder rejects a repeated
/// key), so a slot is filled at most once and no later member can change
/// it. The fields are checked afterwards, in the order the adapter chooses,
/// so errors come out in the same order as with one look-up per field.
#[inline(always)]
pub(crate) fn fields<'t, 'k, const N: usize>(
    obj: Object<'t>,
    keys: [&'k str; N],
) -> [Field<'t, 'k>; N] {
    let values = obj.get_each(keys);
    // A loop, not `keys.map(..)`: `map` is not inlined, and its call and
    // copies cost more than the pass.
    let mut found = [Field {
        key: "",
        value: None,
    }; N];
    for ((field, key), value) in found.iter_mut().zip(keys).zip(values) {
        *field = Field { key, value };
    }
    found
}

impl<'t> Field<'t, '_> {
    /// The value, if present (of any type).
    #[inline(always)]
    pub(crate) fn get(self) -> Option<Json<'t>> {
        self.value
    }

    /// The value, which must be present; `at` is the object's place.
    #[inline(always)]
    pub(crate) fn required(self, at: At<'_>) -> Result<Json<'t>, ProviderError> {
        self.value
            .ok_or_else(|| malformed(at.key(self.key), "missing"))
    }

    /// A string that may be absent or null; present with another type is
    /// malformed.
    #[inline(always)]
    pub(crate) fn opt_str(self, at: At<'_>) -> Result<Option<&'t str>, ProviderError> {
        match self.value {
            None => Ok(None),
            Some(v) if v.is_null() => Ok(None),
            Some(v) => match v.as_str() {
                Some(s) => Ok(Some(s)),
                None => Err(malformed(at.key(self.key), "expected a string")),
            },
        }
    }

    /// A string that must be present.
    #[inline(always)]
    pub(crate) fn req_str(self, at: At<'_>) -> Result<&'t str, ProviderError> {
        self.opt_str(at)?
            .ok_or_else(|| malformed(at.key(self.key), "missing string"))
    }
}

/// A member that must be present.
#[inline(always)]
pub(crate) fn member<'t>(
    obj: Object<'t>,
    key: &str,
    at: At<'_>,
) -> Result<Json<'t>, ProviderError> {
    field(obj, key).required(at)
}

/// One field, looked up alone: for an object read for a single field, or
/// for a field read only on a rare path.
#[inline(always)]
pub(crate) fn field<'t, 'k>(obj: Object<'t>, key: &'k str) -> Field<'t, 'k> {
    Field {
        key,
        value: obj.get(key),
    }
}
