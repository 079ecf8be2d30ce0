//! Tool-input normalisation for storage round trips (docs/design.md §4).
//!
//! Applications store a tool call's input in a text column and read it back
//! for retries, audits and replays. Both directions always yield an object,
//! and every call reports what it did, so nothing is dropped silently.
//!
//! ```
//! use serde_json::json;
//! use toolgate::decode::normalize::{decode_stored, encode, Action};
//!
//! let stored = encode(&json!({"0": "a", "1": {}}));
//! assert_eq!(stored.action, Action::Kept);
//! let back = decode_stored(Some(&stored.text));
//! assert_eq!(serde_json::Value::Object(back.object), json!({"0": "a", "1": {}}));
//!
//! // A list is rejected, not stored, and the caller is told.
//! assert_eq!(encode(&json!([1, 2])).action, Action::RejectedList);
//! ```

use std::fmt;

use serde_json::{Map, Value};

use super::{DecodeCode, Limits, Rejection, decode_strict};

/// What a normalisation call did. The string forms are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The input was an object and is kept as it is.
    Kept,
    /// Missing, empty, whitespace or `null`: stored or read as `{}`.
    Empty,
    /// `encode` was given a string of JSON text holding an object.
    DecodedString,
    /// A string holding JSON text of a string holding an object, unwrapped
    /// exactly once.
    UnwrappedDoubleEncoding,
    /// A list, replaced by `{}`.
    RejectedList,
    /// A number, a boolean, or a string that is not object JSON (including a
    /// third level of encoding), replaced by `{}`.
    RejectedScalar,
    /// Text that is not JSON, replaced by `{}`.
    RejectedInvalidJson,
    /// JSON with a repeated key, replaced by `{}`.
    RejectedDuplicateKey,
    /// An integer outside the interoperable range, replaced by `{}`.
    RejectedNumberOutOfRange,
    /// Deeper than the nesting limit, replaced by `{}`.
    RejectedTooDeep,
    /// Larger than the byte limit, replaced by `{}`.
    RejectedTooLarge,
}

impl Action {
    /// Every action, for documentation checks.
    pub const ALL: [Self; 11] = [
        Self::Kept,
        Self::Empty,
        Self::DecodedString,
        Self::UnwrappedDoubleEncoding,
        Self::RejectedList,
        Self::RejectedScalar,
        Self::RejectedInvalidJson,
        Self::RejectedDuplicateKey,
        Self::RejectedNumberOutOfRange,
        Self::RejectedTooDeep,
        Self::RejectedTooLarge,
    ];

    /// The stable snake_case code.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Kept => "kept",
            Self::Empty => "empty",
            Self::DecodedString => "decoded_string",
            Self::UnwrappedDoubleEncoding => "unwrapped_double_encoding",
            Self::RejectedList => "rejected_list",
            Self::RejectedScalar => "rejected_scalar",
            Self::RejectedInvalidJson => "rejected_invalid_json",
            Self::RejectedDuplicateKey => "rejected_duplicate_key",
            Self::RejectedNumberOutOfRange => "rejected_number_out_of_range",
            Self::RejectedTooDeep => "rejected_too_deep",
            Self::RejectedTooLarge => "rejected_too_large",
        }
    }

    /// Whether the input was replaced by `{}` rather than kept in substance.
    pub const fn is_rejection(self) -> bool {
        !matches!(
            self,
            Self::Kept | Self::Empty | Self::DecodedString | Self::UnwrappedDoubleEncoding
        )
    }

    /// The action for input the strict decoder rejected.
    pub fn from_rejection(r: &Rejection) -> Self {
        match r.code() {
            DecodeCode::TooLarge => Self::RejectedTooLarge,
            DecodeCode::TooDeep => Self::RejectedTooDeep,
            DecodeCode::DuplicateKey => Self::RejectedDuplicateKey,
            DecodeCode::NumberOutOfRange => Self::RejectedNumberOutOfRange,
            DecodeCode::InvalidJson => Self::RejectedInvalidJson,
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of [`decode_stored`]: always an object.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The tool input.
    pub object: Map<String, Value>,
    /// What was done to get it.
    pub action: Action,
}

/// The result of [`encode`]: always the JSON text of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// Object-shaped JSON text, ready for a column.
    pub text: String,
    /// What was done to get it.
    pub action: Action,
}

/// Limits for stored tool inputs: the raw-body byte limit, the default
/// nesting and the interoperable integer range.
fn limits() -> Limits {
    Limits::provider_body()
}

/// Interprets one decoded value as a tool input. `unwraps_left` is how many
/// more times a string may be decoded as JSON text.
fn objectify(value: Value, via_string: bool, unwraps_left: u8) -> (Map<String, Value>, Action) {
    match value {
        Value::Object(map) if via_string => (map, Action::DecodedString),
        Value::Object(map) => (map, Action::Kept),
        Value::Null => (Map::new(), Action::Empty),
        Value::Array(_) => (Map::new(), Action::RejectedList),
        Value::Bool(_) | Value::Number(_) => (Map::new(), Action::RejectedScalar),
        Value::String(text) => {
            if unwraps_left == 0 {
                return (Map::new(), Action::RejectedScalar);
            }
            if text.trim().is_empty() {
                return (Map::new(), Action::Empty);
            }
            match decode_strict(text.as_bytes(), &limits()) {
                Err(r) => (Map::new(), Action::from_rejection(&r)),
                Ok(inner) => {
                    let (map, action) = objectify(inner, true, unwraps_left - 1);
                    // A string inside a string: the unwrap happened once more
                    // than a plain decoded string.
                    match action {
                        Action::DecodedString if via_string => {
                            (map, Action::UnwrappedDoubleEncoding)
                        }
                        a => (map, a),
                    }
                }
            }
        }
    }
}

/// Encodes a tool input for storage. Always returns object JSON text.
///
/// - `null` → `{}` (`empty`); an object → its JSON (`kept`);
/// - a string of JSON text holding an object → that object
///   (`decoded_string`), one holding a JSON string that holds an object →
///   that object (`unwrapped_double_encoding`); never deeper;
/// - lists, scalars and invalid JSON → `{}` with the matching rejection.
///
/// An object whose contents the decoder would not read back (an integer
/// outside ±(2^53−1), more nesting than the default limit, more bytes than
/// the raw-body limit) is rejected here rather than stored, so that
/// `decode_stored(encode(x)) == x` holds for every object that is stored.
pub fn encode(input: &Value) -> Encoded {
    let (object, action) = match input {
        Value::Object(map) => (map.clone(), Action::Kept),
        Value::String(_) => objectify(input.clone(), false, 2),
        other => objectify(other.clone(), false, 0),
    };
    let text = Value::Object(object).to_string();
    if !action.is_rejection() && action != Action::Empty {
        // Check what will be read back. Cheaper ways exist; none is as
        // obviously equivalent to `decode_stored`.
        if let Err(r) = decode_strict(text.as_bytes(), &limits()) {
            return Encoded {
                text: "{}".to_owned(),
                action: Action::from_rejection(&r),
            };
        }
    }
    Encoded { text, action }
}

/// Decodes a stored column. Always returns an object.
///
/// `None` (a missing column), empty text and `null` → `{}` (`empty`); an
/// object → `kept`; a double-encoded string (`"{\"k\":\"v\"}"`) is unwrapped
/// exactly once (`unwrapped_double_encoding`); anything else → `{}` with the
/// matching rejection.
pub fn decode_stored(stored: Option<&str>) -> Decoded {
    let Some(text) = stored else {
        return Decoded {
            object: Map::new(),
            action: Action::Empty,
        };
    };
    if text.trim().is_empty() {
        return Decoded {
            object: Map::new(),
            action: Action::Empty,
        };
    }
    let (object, action) = match decode_strict(text.as_bytes(), &limits()) {
        Err(r) => (Map::new(), Action::from_rejection(&r)),
        Ok(Value::String(inner)) => {
            // The column held a JSON string: one level of double encoding.
            match objectify(Value::String(inner), false, 1) {
                (map, Action::DecodedString) => (map, Action::UnwrappedDoubleEncoding),
                other => other,
            }
        }
        Ok(value) => objectify(value, false, 0),
    };
    Decoded { object, action }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn enc(v: Value) -> (String, &'static str) {
        let e = encode(&v);
        (e.text, e.action.as_str())
    }

    fn dec(s: Option<&str>) -> (Value, &'static str) {
        let d = decode_stored(s);
        (Value::Object(d.object), d.action.as_str())
    }

    #[test]
    fn encode_cases() {
        assert_eq!(enc(Value::Null), ("{}".into(), "empty"));
        assert_eq!(enc(json!({})), ("{}".into(), "kept"));
        assert_eq!(
            enc(json!({"0":1,"1":2})),
            (r#"{"0":1,"1":2}"#.into(), "kept")
        );
        assert_eq!(enc(json!("")), ("{}".into(), "empty"));
        assert_eq!(enc(json!("  ")), ("{}".into(), "empty"));
        assert_eq!(enc(json!("null")), ("{}".into(), "empty"));
        assert_eq!(
            enc(json!(r#"{"k":"v"}"#)),
            (r#"{"k":"v"}"#.into(), "decoded_string")
        );
        assert_eq!(
            enc(json!(r#""{\"k\":\"v\"}""#)),
            (r#"{"k":"v"}"#.into(), "unwrapped_double_encoding")
        );
        // A third level is not unwrapped.
        assert_eq!(enc(json!(r#""\"{}\"""#)).1, "rejected_scalar");
        assert_eq!(enc(json!([1])), ("{}".into(), "rejected_list"));
        assert_eq!(enc(json!("[1]")), ("{}".into(), "rejected_list"));
        assert_eq!(enc(json!(3)), ("{}".into(), "rejected_scalar"));
        assert_eq!(enc(json!(true)), ("{}".into(), "rejected_scalar"));
        assert_eq!(enc(json!("3")), ("{}".into(), "rejected_scalar"));
        assert_eq!(enc(json!("{nope")), ("{}".into(), "rejected_invalid_json"));
        assert_eq!(
            enc(json!(r#"{"a":1,"a":2}"#)),
            ("{}".into(), "rejected_duplicate_key")
        );
        assert_eq!(
            enc(json!({"n": u64::MAX})),
            ("{}".into(), "rejected_number_out_of_range")
        );
    }

    #[test]
    fn decode_cases() {
        assert_eq!(dec(None), (json!({}), "empty"));
        assert_eq!(dec(Some("")), (json!({}), "empty"));
        assert_eq!(dec(Some("null")), (json!({}), "empty"));
        assert_eq!(dec(Some(r#"{"k":"v"}"#)), (json!({"k":"v"}), "kept"));
        assert_eq!(
            dec(Some(r#""{\"k\":\"v\"}""#)),
            (json!({"k":"v"}), "unwrapped_double_encoding")
        );
        // Exactly once: a triple-encoded column is not unwrapped twice.
        assert_eq!(dec(Some(r#""\"{}\"""#)).1, "rejected_scalar");
        assert_eq!(dec(Some("[]")), (json!({}), "rejected_list"));
        assert_eq!(dec(Some("\"[]\"")), (json!({}), "rejected_list"));
        assert_eq!(dec(Some("7")), (json!({}), "rejected_scalar"));
        assert_eq!(dec(Some("\"x\"")), (json!({}), "rejected_invalid_json"));
        assert_eq!(dec(Some("{")), (json!({}), "rejected_invalid_json"));
        assert_eq!(
            dec(Some(r#"{"a":1,"a":2}"#)),
            (json!({}), "rejected_duplicate_key")
        );
        assert_eq!(
            dec(Some(r#"{"0":"a","1":"b"}"#)),
            (json!({"0":"a","1":"b"}), "kept")
        );
    }
}
