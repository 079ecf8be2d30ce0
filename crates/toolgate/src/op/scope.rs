//! Typed scope fields (docs/design.md §13): every scope value is
//! canonicalised by its field's declared type before the operation key is
//! built, so one resource can never be named two ways.
//!
//! `42` and `"42"` for an `integer` field are one value, the JSON integer
//! `42`; `"042"`, `4.2`, `true` and `null` are refused. `7` and `"7"` for a
//! `version` field are one version, the text `"7"`. What the key hashes, what
//! the proposal record stores, and what the authoriser, the state source and
//! the executor see is the canonical value.

use std::fmt;

use serde_json::{Map, Value};

use crate::decode::Limits;

/// The scope field that names the version the model read, where a wire, a
/// column or a policy file spells it; every other place reads it typed
/// (`toolgate::pipeline::Scope`).
pub const VERSION_SEEN: &str = "version_seen";

/// Longest `string` scope value, in UTF-8 bytes.
pub const MAX_SCOPE_STRING_BYTES: usize = 256;
/// Longest `version` scope value, in UTF-8 bytes.
pub const MAX_SCOPE_VERSION_BYTES: usize = 128;

/// The type of one scope field, declared in the policy's `scope_types`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScopeType {
    /// A JSON string of 1 to 256 bytes without control characters.
    String,
    /// A JSON integer within ±(2^53−1), or a string spelling one without
    /// leading zeros; canonically the JSON integer.
    Integer,
    /// A resource version: a string of 1 to 128 bytes or a non-negative
    /// integer; canonically the decimal text.
    Version,
}

impl ScopeType {
    /// Every type, for documentation checks.
    pub const ALL: [Self; 3] = [Self::String, Self::Integer, Self::Version];

    /// The name used in the policy file.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Integer => "integer",
            Self::Version => "version",
        }
    }

    /// The type called `name` in the policy file.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// The type a field has when the policy does not declare one:
    /// `version_seen` is a `version`, every other field a `string`.
    pub fn default_for(field: &str) -> Self {
        if field == VERSION_SEEN {
            Self::Version
        } else {
            Self::String
        }
    }

    /// The canonical form of `value`, or why it is not one of this type.
    pub fn canonicalise(self, value: &Value) -> Result<Value, &'static str> {
        match self {
            Self::String => match value {
                Value::String(s) if plain_text(s, MAX_SCOPE_STRING_BYTES) => Ok(value.clone()),
                Value::String(_) => Err("a string of 1 to 256 bytes without control characters"),
                _ => Err("a JSON string"),
            },
            Self::Integer => {
                const WANT: &str = "an integer within ±(2^53-1), as a JSON integer or its decimal text without leading zeros";
                let n = match value {
                    Value::Number(n) => n.as_i64(),
                    Value::String(s) => integer_text(s),
                    _ => None,
                };
                match n {
                    Some(n) if n.unsigned_abs() <= Limits::INTEROPERABLE_INTEGER => {
                        Ok(Value::from(n))
                    }
                    _ => Err(WANT),
                }
            }
            Self::Version => {
                const WANT: &str = "a version: a non-negative integer (a JSON integer, or its decimal text without a sign or leading zeros), or a string of 1 to 128 bytes without control or invisible characters and without surrounding whitespace";
                match value {
                    Value::String(s) if version_text(s) => Ok(value.clone()),
                    Value::Number(n) => match n.as_u64() {
                        Some(u) if u <= Limits::INTEROPERABLE_INTEGER => {
                            Ok(Value::String(u.to_string()))
                        }
                        _ => Err(WANT),
                    },
                    _ => Err(WANT),
                }
            }
        }
    }
}

impl fmt::Display for ScopeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A scope value that is not of its field's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeError {
    /// The field.
    pub field: String,
    /// Its declared (or default) type.
    pub expected: ScopeType,
    /// What the type accepts.
    pub message: &'static str,
}

impl fmt::Display for ScopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "scope field `{}` is typed `{}`: expected {}",
            self.field, self.expected, self.message
        )
    }
}

impl std::error::Error for ScopeError {}

/// Canonicalises the fields of `scope` to which `type_of` gives a type;
/// a field it gives none (`None`: not one the tool's key names) is kept as
/// it is, since it can change neither the key nor the tool's resource.
/// Fields are checked in the map's order and the first bad one is the error.
pub fn canonical_scope(
    scope: &Map<String, Value>,
    type_of: impl Fn(&str) -> Option<ScopeType>,
) -> Result<Map<String, Value>, ScopeError> {
    let mut out = Map::new();
    for (field, value) in scope {
        let Some(expected) = type_of(field) else {
            out.insert(field.clone(), value.clone());
            continue;
        };
        let canonical = expected.canonicalise(value).map_err(|message| ScopeError {
            field: field.clone(),
            expected,
            message,
        })?;
        out.insert(field.clone(), canonical);
    }
    Ok(out)
}

/// A version string that is one spelling of one version: kept verbatim
/// when it is text, but a string that reads as a number must be the
/// integer's own decimal text, so `1`, `"1"`, `"01"`, `"+1"` and `" 1"`
/// never name three versions (`"01"`, `"+1"` and `" 1"` are refused).
/// Surrounding whitespace and invisible characters are refused, never
/// trimmed: nothing a caller sends is silently rewritten.
fn version_text(s: &str) -> bool {
    if !plain_text(s, MAX_SCOPE_VERSION_BYTES)
        || s.trim() != s
        || s.chars().any(crate::claim::is_hidden)
    {
        return false;
    }
    let unsigned = s
        .strip_prefix('+')
        .or_else(|| s.strip_prefix('-'))
        .unwrap_or(s);
    let numeric = !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit());
    if !numeric {
        return true;
    }
    // Digits only: the canonical decimal text of a non-negative integer.
    unsigned.len() == s.len() && (s == "0" || !s.starts_with('0'))
}

/// A scope value any request may carry, whatever tool it proposes (and if
/// it proposes none, or one the policy does not have): a string of 1 to
/// [`MAX_SCOPE_STRING_BYTES`] bytes without control characters, or an
/// integer. The tool's own `scope_types` are checked later; this bound
/// holds before the tool is known, so no request can store or show a
/// larger value (docs/http-api.md).
pub fn bounded_scope_value(value: &Value) -> Result<(), &'static str> {
    match value {
        Value::String(s) if plain_text(s, MAX_SCOPE_STRING_BYTES) => Ok(()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(()),
        _ => Err("a string of 1 to 256 bytes without control characters, or an integer"),
    }
}

fn plain_text(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && !s.chars().any(char::is_control)
}

/// `-?(0|[1-9][0-9]*)` as an i64 (`-0` is refused: it would be a second
/// spelling of `0`).
fn integer_text(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let canonical = !digits.is_empty()
        && digits.len() <= 16
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && s != "-0";
    if canonical { s.parse().ok() } else { None }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::ScopeType::{Integer, String as Str, Version};

    #[test]
    fn integers_have_one_spelling() {
        assert_eq!(Integer.canonicalise(&json!(42)), Ok(json!(42)));
        assert_eq!(Integer.canonicalise(&json!("42")), Ok(json!(42)));
        assert_eq!(Integer.canonicalise(&json!("-7")), Ok(json!(-7)));
        assert_eq!(Integer.canonicalise(&json!("0")), Ok(json!(0)));
        assert_eq!(
            Integer.canonicalise(&json!("9007199254740991")),
            Ok(json!(9_007_199_254_740_991_i64))
        );
        for bad in [
            json!("042"),
            json!("4.2"),
            json!(4.2),
            json!(42.0),
            json!(true),
            json!(null),
            json!("-0"),
            json!("+42"),
            json!(" 42"),
            json!(""),
            json!("-"),
            json!("9007199254740992"),
            json!(9_007_199_254_740_992_u64),
            json!([42]),
        ] {
            assert!(Integer.canonicalise(&bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn strings_are_strings() {
        assert_eq!(Str.canonicalise(&json!("T-1")), Ok(json!("T-1")));
        for bad in [
            json!(42),
            json!(""),
            json!("a\nb"),
            json!("x".repeat(257)),
            json!(null),
        ] {
            assert!(Str.canonicalise(&bad).is_err(), "{bad} was accepted");
        }
        assert!(Str.canonicalise(&json!("x".repeat(256))).is_ok());
    }

    #[test]
    fn versions_are_decimal_text() {
        assert_eq!(Version.canonicalise(&json!(7)), Ok(json!("7")));
        assert_eq!(Version.canonicalise(&json!("7")), Ok(json!("7")));
        assert_eq!(Version.canonicalise(&json!("0")), Ok(json!("0")));
        assert_eq!(Version.canonicalise(&json!("etag-3")), Ok(json!("etag-3")));
        assert_eq!(Version.canonicalise(&json!("v 2")), Ok(json!("v 2")));
        assert_eq!(Version.canonicalise(&json!("1.0")), Ok(json!("1.0")));
        for bad in [json!(-1), json!(1.5), json!(""), json!(true), json!(null)] {
            assert!(Version.canonicalise(&bad).is_err(), "{bad} was accepted");
        }
    }

    /// `1`, `"01"` and `" 1"` gave three operation keys on one order: a
    /// version that reads as a number has one spelling, and whitespace
    /// around a version is refused, never trimmed.
    #[test]
    fn a_version_has_one_spelling() {
        for bad in [
            json!("01"),
            json!("007"),
            json!("+1"),
            json!("-1"),
            json!("-0"),
            json!(" 1"),
            json!("1 "),
            json!("\t1"),
            json!("1\u{a0}"),
            json!("\u{200b}1"),
            json!("etag\u{202e}"),
            json!(" etag"),
        ] {
            assert!(Version.canonicalise(&bad).is_err(), "{bad} was accepted");
        }
        assert_eq!(
            Version.canonicalise(&json!(1)),
            Version.canonicalise(&json!("1"))
        );
    }

    #[test]
    fn every_request_scope_value_is_bounded() {
        use super::bounded_scope_value;
        assert!(bounded_scope_value(&json!("T-1")).is_ok());
        assert!(bounded_scope_value(&json!(-4)).is_ok());
        assert!(bounded_scope_value(&json!("x".repeat(256))).is_ok());
        for bad in [
            json!("x".repeat(257)),
            json!("x".repeat(690_000)),
            json!(""),
            json!("a\nb"),
            json!(1.5),
            json!(null),
            json!([1]),
            json!({"a": 1}),
        ] {
            assert!(bounded_scope_value(&bad).is_err(), "{bad} was accepted");
        }
    }
}
