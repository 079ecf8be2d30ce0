use std::fmt;

/// Bounds applied by the strict decoder, checked before or while parsing.
///
/// Each use has its own limits (docs/design.md §3): a raw provider body gets a
/// generous byte limit, an envelope or a tool call's arguments a tight one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    max_bytes: usize,
    max_nesting: usize,
    max_integer: u64,
}

/// A [`Limits`] value that cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitsError {
    /// `max_nesting` above [`Limits::NESTING_CEILING`].
    NestingAboveCeiling(usize),
}

impl fmt::Display for LimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NestingAboveCeiling(n) => write!(
                f,
                "max_nesting {n} is above the ceiling of {}",
                Limits::NESTING_CEILING
            ),
        }
    }
}

impl std::error::Error for LimitsError {}

impl Limits {
    /// Default byte limit for a raw provider body, streams included:
    /// providers echo metadata, and the Responses API echoes the tool list.
    pub const DEFAULT_MAX_BYTES: usize = 1 << 20;
    /// Default byte limit for an envelope or a tool call's arguments.
    pub const ENVELOPE_MAX_BYTES: usize = 8192;
    /// Default nesting limit: no provider body or tool input comes near it.
    pub const DEFAULT_MAX_NESTING: usize = 64;
    /// The deepest nesting any caller may ask for. Values are dropped and
    /// serialised recursively, so this keeps every later stage's stack use
    /// bounded no matter what the decoder accepted.
    pub const NESTING_CEILING: usize = 1000;
    /// 2^53−1, the interoperable integer range of RFC 8259 §6.
    pub const INTEROPERABLE_INTEGER: u64 = (1 << 53) - 1;

    /// Limits for a raw provider body.
    pub const fn provider_body() -> Self {
        Self {
            max_bytes: Self::DEFAULT_MAX_BYTES,
            max_nesting: Self::DEFAULT_MAX_NESTING,
            max_integer: Self::INTEROPERABLE_INTEGER,
        }
    }

    /// Limits for an envelope or a tool call's arguments.
    pub const fn envelope() -> Self {
        Self {
            max_bytes: Self::ENVELOPE_MAX_BYTES,
            ..Self::provider_body()
        }
    }

    /// Sets the byte limit. The input length is compared with it before
    /// anything is parsed.
    #[must_use]
    pub const fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Sets the nesting limit: `n` nested containers are accepted and `n + 1`
    /// are rejected as `too_deep`. A top-level scalar has nesting 0, `[]` has
    /// nesting 1 and `{"a":[]}` has nesting 2.
    pub const fn with_max_nesting(mut self, n: usize) -> Result<Self, LimitsError> {
        if n > Self::NESTING_CEILING {
            return Err(LimitsError::NestingAboveCeiling(n));
        }
        self.max_nesting = n;
        Ok(self)
    }

    /// Widens (or narrows) the accepted integer magnitude. Integers beyond it
    /// are `number_out_of_range`; they are never turned into floats. Negative
    /// integers are further bounded by `i64::MIN`.
    #[must_use]
    pub const fn with_max_integer(mut self, max_integer: u64) -> Self {
        self.max_integer = max_integer;
        self
    }

    /// The byte limit.
    pub const fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The nesting limit.
    pub const fn max_nesting(&self) -> usize {
        self.max_nesting
    }

    /// The largest accepted integer magnitude.
    pub const fn max_integer(&self) -> u64 {
        self.max_integer
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self::provider_body()
    }
}
