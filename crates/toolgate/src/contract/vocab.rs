//! The stateless stages' vocabulary: outcomes, rejection reasons and the
//! envelope modes, each with its stable snake_case code
//! (docs/error-codes.md lists every one).

use std::fmt;

use crate::decode::DecodeCode;

/// The outcome of the stateless stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CheckOutcome {
    /// A proposal that passed every stateless stage.
    Action,
    /// A reply, no action.
    Answer,
    /// The model declined; the policy's fixed message is the reply.
    Abstain,
    /// The proposal broke a rule; see the [`RejectReason`].
    Rejected,
    /// The provider reported a refusal.
    Refused,
    /// Output limit or a cut stream: nothing was parsed.
    Truncated,
    /// The provider's filter stopped the output.
    ContentFiltered,
}

impl CheckOutcome {
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

/// Why a proposal was rejected. Stable snake_case codes, which are its
/// serde form too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
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

impl RejectReason {
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
            // The decoder's own codes, spelled where the decoder names them.
            Self::TooLarge => DecodeCode::TooLarge.as_str(),
            Self::TooDeep => DecodeCode::TooDeep.as_str(),
            Self::DuplicateKey => DecodeCode::DuplicateKey.as_str(),
            Self::NumberOutOfRange => DecodeCode::NumberOutOfRange.as_str(),
            Self::InvalidJson => DecodeCode::InvalidJson.as_str(),
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

impl From<DecodeCode> for RejectReason {
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

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for CheckOutcome {
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

#[cfg(test)]
mod tests {
    use super::RejectReason;

    #[test]
    fn serde_spells_every_reject_reason_as_its_code() {
        crate::assert_serde_spells_codes(RejectReason::ALL, RejectReason::as_str);
    }
}
