//! Fingerprint = SHA-256 over the RFC 8785 (JCS) canonical form of a tool
//! call's arguments.
//!
//! The canonical form sorts object keys recursively and fixes number and
//! string spelling, so the same arguments in any key order or whitespace
//! give one fingerprint, while `1500` and `"1500"` give two.
//!
//! Canonicalisers print numbers the way JavaScript does, i.e. as IEEE-754
//! doubles: `9007199254740993` would be printed as `9007199254740992` and two
//! different amounts would share a fingerprint. So integers outside
//! ±(2^53−1) are refused here, before the canonicaliser sees them. The strict
//! decoder already rejects them by default; this check holds even for values
//! built some other way.

use std::fmt;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::decode::Limits;
use crate::decode::scan::string_stop;

// One fingerprint type across the crate, with one public path
// (`claim::Fingerprint`): the contract stage computes it here, the claim
// store keeps it, the pipeline compares it.
use crate::claim::Fingerprint;

/// Why a value has no fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FingerprintError {
    /// An integer outside ±(2^53−1), at this JSON pointer.
    NumberOutOfRange(String),
    /// A float that is not finite (serde_json cannot hold one, but the
    /// canonicaliser's error is mapped here rather than unwrapped).
    NotCanonicalisable(String),
}

impl fmt::Display for FingerprintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NumberOutOfRange(p) => write!(
                f,
                "number_out_of_range at {p}: integers beyond ±(2^53-1) cannot be canonicalised without rounding"
            ),
            Self::NotCanonicalisable(m) => write!(f, "not canonicalisable: {m}"),
        }
    }
}

impl std::error::Error for FingerprintError {}

/// The RFC 8785 canonical JSON text of `value`.
///
/// The canonicaliser is the `serde_jcs` crate. For the common shape of tool
/// arguments (ASCII object keys, no floats) the compact JSON text with keys
/// in their order is already canonical, byte for byte, when that order is
/// sorted: for ASCII keys byte order is RFC 8785's UTF-16 order; integers in
/// ±(2^53−1) print the same in both; and both escape strings alike (`"`,
/// `\\`, and U+0000–U+001F with the short forms or lower-case `\u00xx`,
/// everything else as UTF-8). That text is written directly while checking
/// those conditions on the value itself; anything else (a float, a
/// non-ASCII key, keys out of order) goes to `serde_jcs`. The direct path is
/// many times faster; a test compares both paths on generated values.
pub fn canonical_json(value: &Value) -> Result<String, FingerprintError> {
    let mut out = String::with_capacity(64);
    if write_plain(value, &mut out) {
        return Ok(out);
    }
    // Not plain, or an integer out of range: `canonical_json_jcs` checks
    // the range first and names the offending number.
    canonical_json_jcs(value)
}

/// [`canonical_json`] always through `serde_jcs`, for comparison tests.
pub fn canonical_json_jcs(value: &Value) -> Result<String, FingerprintError> {
    check_range(value)?;
    serde_jcs::to_string(value).map_err(|e| FingerprintError::NotCanonicalisable(e.to_string()))
}

/// Appends the compact JSON text of `value` to `out` if the value is
/// plain: no floats, every integer within ±(2^53−1), and every object's
/// keys ASCII and strictly increasing in iteration order. Returns `false`
/// (leaving `out` partly written) otherwise.
fn write_plain(value: &Value, out: &mut String) -> bool {
    let max = Limits::INTEROPERABLE_INTEGER;
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => {
            if let Some(u) = n.as_u64()
                && u <= max
            {
                push_integer(out, false, u);
            } else if let Some(i) = n.as_i64()
                && i.unsigned_abs() <= max
            {
                push_integer(out, i < 0, i.unsigned_abs());
            } else {
                return false;
            }
        }
        Value::String(s) => push_quoted(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if !write_plain(item, out) {
                    return false;
                }
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            let mut prev: Option<&str> = None;
            for (i, (k, v)) in map.iter().enumerate() {
                if !k.is_ascii() || prev.is_some_and(|p| p >= k.as_str()) {
                    return false;
                }
                prev = Some(k);
                if i > 0 {
                    out.push(',');
                }
                push_quoted(out, k);
                out.push(':');
                if !write_plain(v, out) {
                    return false;
                }
            }
            out.push('}');
        }
    }
    true
}

/// Appends an integer in decimal.
fn push_integer(out: &mut String, negative: bool, mut magnitude: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (magnitude % 10) as u8;
        magnitude /= 10;
        if magnitude == 0 {
            break;
        }
    }
    if negative {
        out.push('-');
    }
    out.push_str(std::str::from_utf8(&digits[i..]).unwrap_or_default());
}

/// Appends `s` as a JSON string: `"` and `\\` escaped, U+0000–U+001F as
/// `\b \t \n \f \r` or lower-case `\u00xx`, everything else as is.
fn push_quoted(out: &mut String, s: &str) {
    out.push('"');
    if string_stop(s.as_bytes(), 0) == s.len() {
        out.push_str(s);
        out.push('"');
        return;
    }
    let mut run = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\x08' => "\\b",
            b'\x0c' => "\\f",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x00..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[run..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        } else {
            out.push_str(escape);
        }
        run = i + 1;
    }
    out.push_str(&s[run..]);
    out.push('"');
}

/// SHA-256 over the canonical JSON of `value`.
///
/// ```
/// use serde_json::json;
/// use toolgate::op::fingerprint;
///
/// let a = fingerprint(&json!({"amount_minor": 1500, "reason_code": "late_delivery"})).unwrap();
/// let b = fingerprint(&json!({"reason_code": "late_delivery", "amount_minor": 1500})).unwrap();
/// let c = fingerprint(&json!({"amount_minor": "1500", "reason_code": "late_delivery"})).unwrap();
/// assert_eq!(a, b);
/// assert_ne!(a, c);
/// ```
pub fn fingerprint(value: &Value) -> Result<Fingerprint, FingerprintError> {
    Ok(fingerprint_canonical(&canonical_json(value)?))
}

/// SHA-256 over canonical JSON text already produced by [`canonical_json`].
pub fn fingerprint_canonical(canonical: &str) -> Fingerprint {
    Fingerprint::from_bytes(Sha256::digest(canonical.as_bytes()).into())
}

/// Fails with the JSON pointer of the first integer outside ±(2^53−1).
/// The pointer is built only on failure, on the way back up, so the common
/// case allocates nothing.
fn check_range(value: &Value) -> Result<(), FingerprintError> {
    match out_of_range(value) {
        None => Ok(()),
        Some(mut path) => {
            path.reverse();
            Err(FingerprintError::NumberOutOfRange(path.concat()))
        }
    }
}

/// Reversed pointer segments (each `/token`) to the first bad number.
fn out_of_range(value: &Value) -> Option<Vec<String>> {
    let max = Limits::INTEROPERABLE_INTEGER;
    match value {
        Value::Number(n) => {
            let in_range = if let Some(u) = n.as_u64() {
                u <= max
            } else if let Some(i) = n.as_i64() {
                i.unsigned_abs() <= max
            } else {
                // A float: the canonicaliser prints it in its shortest
                // round-trip form, which is exact for the double it is.
                n.as_f64().is_some_and(f64::is_finite)
            };
            (!in_range).then(Vec::new)
        }
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            out_of_range(item).map(|mut p| {
                p.push(format!("/{i}"));
                p
            })
        }),
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            out_of_range(v).map(|mut p| {
                p.push(format!("/{}", k.replace('~', "~0").replace('/', "~1")));
                p
            })
        }),
        _ => None,
    }
}
