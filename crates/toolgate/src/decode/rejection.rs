use std::fmt;

/// Why the strict decoder rejected a document. The string forms are stable
/// across releases (docs/design.md §3) and are what every interface prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecodeCode {
    /// The input is longer than the byte limit; nothing was parsed.
    TooLarge,
    /// More nested containers than the nesting limit allows.
    TooDeep,
    /// An object repeats a key (escaped spellings included).
    DuplicateKey,
    /// An integer outside the allowed magnitude, or a float that is not
    /// finite or underflows to zero.
    NumberOutOfRange,
    /// Not JSON: syntax, encoding, a byte-order mark, trailing bytes.
    InvalidJson,
}

impl DecodeCode {
    /// Every code, for documentation checks.
    pub const ALL: [Self; 5] = [
        Self::TooLarge,
        Self::TooDeep,
        Self::DuplicateKey,
        Self::NumberOutOfRange,
        Self::InvalidJson,
    ];

    /// The stable snake_case code.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::TooLarge => "too_large",
            Self::TooDeep => "too_deep",
            Self::DuplicateKey => "duplicate_key",
            Self::NumberOutOfRange => "number_out_of_range",
            Self::InvalidJson => "invalid_json",
        }
    }
}

impl fmt::Display for DecodeCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rejected document: a value, never a panic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    code: DecodeCode,
    pointer: String,
    message: String,
}

impl Rejection {
    pub(crate) fn new(code: DecodeCode, pointer: String, message: String) -> Self {
        Self {
            code,
            pointer,
            message,
        }
    }

    /// The stable code.
    pub fn code(&self) -> DecodeCode {
        self.code
    }

    /// RFC 6901 JSON pointer to the offending value, or `""` when the
    /// rejection concerns the whole document (or the document root).
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// A human-readable explanation, including the byte offset where known.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "{}: {}", self.code, self.message)
        } else {
            write!(f, "{} at {}: {}", self.code, self.pointer, self.message)
        }
    }
}

impl std::error::Error for Rejection {}
