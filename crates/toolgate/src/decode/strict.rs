//! The reference decoder: [`decode_strict`], the strict JSON decoder whose
//! answers (values and rejections) are the definition of what toolgate
//! accepts. The fast path (`tape.rs`, [`super::decode_tape`]) must give the
//! same answers and takes its rejections from here; this one is written to
//! be read, not to be fast.
//!
//! Why not `serde_json::from_slice`: it keeps the last of two duplicate keys,
//! rounds integers beyond `u64` into floats without telling anyone, and its
//! depth limit is fixed at 128. This parser is written for the opposite
//! trade-off and still produces a plain [`serde_json::Value`], so every later
//! stage (schemas, canonicalisation) works on the ordinary type:
//!
//! - the whole input is checked against the byte limit, then validated as
//!   UTF-8 in one pass, before any parsing;
//! - it is iterative, with an explicit stack bounded by the nesting limit, so
//!   100,000 opening brackets are an ordinary rejection and never a stack
//!   overflow;
//! - integers are kept as `u64`/`i64` and floats as `f64`, so `1500`,
//!   `1500.0` and `1.5e3` stay distinguishable (`Value::is_u64` etc.);
//! - object keys are compared after unescaping, so `"a"` and `"\u0061"`
//!   are the same key.
//!
//! Memory: the result is a `serde_json::Value` tree, linear in the input.
//! Each scalar costs one 32-byte `Value` plus its heap bytes; the worst case
//! (`[0,0,0,…]`, two input bytes per `Value`, plus vector slack) is
//! documented and measured by `toolgate bench decode`.

use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

use super::scan::{integer_digits, string_stop};
use super::{DecodeCode, Limits, Rejection};

/// Decodes `input` as one JSON document under `limits`.
///
/// ```
/// use toolgate::decode::{decode_strict, DecodeCode, Limits};
///
/// let v = decode_strict(br#"{"amount_minor":1500}"#, &Limits::envelope()).unwrap();
/// assert!(v["amount_minor"].is_u64());
///
/// let r = decode_strict(br#"{"a":1,"\u0061":2}"#, &Limits::envelope()).unwrap_err();
/// assert_eq!(r.code(), DecodeCode::DuplicateKey);
/// assert_eq!(r.pointer(), "/a");
/// ```
pub fn decode_strict(input: &[u8], limits: &Limits) -> Result<Value, Rejection> {
    if input.len() > limits.max_bytes() {
        return Err(Rejection::new(
            DecodeCode::TooLarge,
            String::new(),
            format!(
                "document is {} bytes; the limit is {}",
                input.len(),
                limits.max_bytes()
            ),
        ));
    }
    if input.starts_with(&[0xEF, 0xBB, 0xBF]) {
        return Err(invalid("a byte-order mark is not allowed", 0));
    }
    let text = match std::str::from_utf8(input) {
        Ok(text) => text,
        Err(e) => {
            return Err(invalid("invalid UTF-8", e.valid_up_to()));
        }
    };
    Parser {
        text,
        bytes: input,
        pos: 0,
        limits,
        stack: Vec::new(),
    }
    .document()
}

fn invalid(what: &str, offset: usize) -> Rejection {
    Rejection::new(
        DecodeCode::InvalidJson,
        String::new(),
        format!("{what} at byte {offset}"),
    )
}

/// An open container. The value being parsed belongs to the top frame.
enum Frame {
    Array(Vec<Value>),
    Object {
        map: Map<String, Value>,
        key: String,
    },
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    limits: &'a Limits,
    stack: Vec<Frame>,
}

impl<'a> Parser<'a> {
    fn document(mut self) -> Result<Value, Rejection> {
        self.skip_ws();
        let mut value;
        'value: loop {
            // Parse one value start. Containers with content push a frame and
            // loop back here for their first member.
            value = match self.peek() {
                Some(b'[') => {
                    if self.open_container(b']')? {
                        Value::Array(Vec::new())
                    } else {
                        self.stack.push(Frame::Array(Vec::new()));
                        continue 'value;
                    }
                }
                Some(b'{') => {
                    if self.open_container(b'}')? {
                        Value::Object(Map::new())
                    } else {
                        let key = self.key()?;
                        self.stack.push(Frame::Object {
                            map: Map::new(),
                            key,
                        });
                        continue 'value;
                    }
                }
                Some(b'"') => Value::String(self.string()?),
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b't') => self.literal("true", Value::Bool(true))?,
                Some(b'f') => self.literal("false", Value::Bool(false))?,
                Some(b'n') => self.literal("null", Value::Null)?,
                Some(_) => return Err(self.unexpected("a value")),
                None => {
                    return Err(invalid(
                        "unexpected end of input, expected a value",
                        self.pos,
                    ));
                }
            };
            // Attach the finished value to its parent; close every container
            // that ends here.
            loop {
                let Some(frame) = self.stack.last_mut() else {
                    break 'value;
                };
                match frame {
                    Frame::Array(items) => {
                        items.push(value);
                        self.skip_ws();
                        match self.next_byte() {
                            Some(b',') => {
                                self.skip_ws();
                                continue 'value;
                            }
                            Some(b']') => {
                                let Some(Frame::Array(items)) = self.stack.pop() else {
                                    unreachable!("top frame was just matched as an array")
                                };
                                value = Value::Array(items);
                            }
                            _ => return Err(self.unexpected_prev("',' or ']'")),
                        }
                    }
                    Frame::Object { map, key } => {
                        match map.entry(std::mem::take(key)) {
                            Entry::Vacant(slot) => {
                                slot.insert(value);
                            }
                            Entry::Occupied(slot) => {
                                let key = slot.key().clone();
                                return Err(self.duplicate(&key));
                            }
                        }
                        self.skip_ws();
                        match self.next_byte() {
                            Some(b',') => {
                                self.skip_ws();
                                let next = self.key()?;
                                if let Some(Frame::Object { key, .. }) = self.stack.last_mut() {
                                    *key = next;
                                }
                                continue 'value;
                            }
                            Some(b'}') => {
                                let Some(Frame::Object { map, .. }) = self.stack.pop() else {
                                    unreachable!("top frame was just matched as an object")
                                };
                                value = Value::Object(map);
                            }
                            _ => return Err(self.unexpected_prev("',' or '}'")),
                        }
                    }
                }
            }
        }
        self.skip_ws();
        if self.pos != self.bytes.len() {
            return Err(invalid("trailing bytes after the document", self.pos));
        }
        Ok(value)
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn next_byte(&mut self) -> Option<u8> {
        let b = self.peek();
        self.pos += 1;
        b
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.pos += 1;
        }
    }

    /// Consumes `[` or `{`, enforcing the nesting limit first, and the
    /// whitespace after it. Whether the container is empty: then its
    /// `close` is consumed too.
    fn open_container(&mut self, close: u8) -> Result<bool, Rejection> {
        let depth = self.stack.len() + 1;
        if depth > self.limits.max_nesting() {
            return Err(Rejection::new(
                DecodeCode::TooDeep,
                self.pointer(),
                format!(
                    "container at byte {} is nested {depth} deep; the limit is {}",
                    self.pos,
                    self.limits.max_nesting()
                ),
            ));
        }
        self.pos += 1;
        self.skip_ws();
        let empty = self.peek() == Some(close);
        if empty {
            self.pos += 1;
        }
        Ok(empty)
    }

    /// Reads `"key"` and the `:` after it.
    fn key(&mut self) -> Result<String, Rejection> {
        if self.peek() != Some(b'"') {
            return Err(self.unexpected("an object key"));
        }
        let key = self.string()?;
        self.skip_ws();
        if self.next_byte() != Some(b':') {
            return Err(self.unexpected_prev("':'"));
        }
        self.skip_ws();
        Ok(key)
    }

    fn literal(&mut self, word: &'static str, value: Value) -> Result<Value, Rejection> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.unexpected("a value"))
        }
    }

    /// Parses a string starting at the opening quote.
    fn string(&mut self) -> Result<String, Rejection> {
        let start = self.pos + 1;
        // Fast path: no escapes. The input is valid UTF-8 and the stop bytes
        // are ASCII, so the slice always falls on char boundaries.
        let i = string_stop(self.bytes, start);
        if self.bytes.get(i) == Some(&b'"') {
            self.pos = i + 1;
            return Ok(self.text[start..i].to_owned());
        }
        let mut out = String::with_capacity(i - start + 16);
        out.push_str(&self.text[start..i]);
        self.pos = i;
        loop {
            let run = self.pos;
            self.pos = string_stop(self.bytes, self.pos);
            out.push_str(&self.text[run..self.pos]);
            match self.next_byte() {
                Some(b'"') => return Ok(out),
                Some(b'\\') => self.escape(&mut out)?,
                Some(_) => {
                    return Err(invalid(
                        "unescaped control character in a string",
                        self.pos - 1,
                    ));
                }
                None => return Err(invalid("unterminated string", self.pos - 1)),
            }
        }
    }

    /// Decodes one escape; the backslash is already consumed.
    fn escape(&mut self, out: &mut String) -> Result<(), Rejection> {
        let at = self.pos - 1;
        let c = match self.next_byte() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                let hi = self.hex4()?;
                match hi {
                    0xD800..=0xDBFF => {
                        if !self.bytes[self.pos..].starts_with(b"\\u") {
                            return Err(invalid("lone leading surrogate escape", at));
                        }
                        self.pos += 2;
                        let lo = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&lo) {
                            return Err(invalid("lone leading surrogate escape", at));
                        }
                        let code = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                        char::from_u32(code).ok_or_else(|| invalid("invalid surrogate pair", at))?
                    }
                    0xDC00..=0xDFFF => {
                        return Err(invalid("lone trailing surrogate escape", at));
                    }
                    _ => char::from_u32(hi).ok_or_else(|| invalid("invalid escape", at))?,
                }
            }
            _ => return Err(invalid("invalid escape", at)),
        };
        out.push(c);
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, Rejection> {
        let Some(digits) = self.bytes.get(self.pos..self.pos + 4) else {
            return Err(invalid("truncated \\u escape", self.pos));
        };
        let mut v = 0u32;
        for &d in digits {
            let n = match d {
                b'0'..=b'9' => d - b'0',
                b'a'..=b'f' => d - b'a' + 10,
                b'A'..=b'F' => d - b'A' + 10,
                _ => return Err(invalid("invalid \\u escape", self.pos)),
            };
            v = (v << 4) | u32::from(n);
        }
        self.pos += 4;
        Ok(v)
    }

    /// Parses a number, keeping its lexical kind: a literal without fraction
    /// or exponent is an integer and stays one, or is rejected.
    fn number(&mut self) -> Result<Value, Rejection> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let mut magnitude: u64 = 0;
        let mut overflow = false;
        let mut nonzero_digit = false;
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                nonzero_digit = true;
                (self.pos, magnitude, overflow) = integer_digits(self.bytes, self.pos);
            }
            _ => return Err(self.unexpected("a digit")),
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            integer = false;
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.unexpected("a digit after '.'"));
            }
            while let Some(d @ b'0'..=b'9') = self.peek() {
                nonzero_digit |= d != b'0';
                self.pos += 1;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            integer = false;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.unexpected("a digit in the exponent"));
            }
            while let Some(b'0'..=b'9') = self.peek() {
                self.pos += 1;
            }
        }
        let lexeme = &self.text[start..self.pos];
        if integer {
            let limit = self.limits.max_integer();
            if !overflow && magnitude <= limit {
                if !negative {
                    return Ok(Value::Number(Number::from(magnitude)));
                }
                if let Some(n) = 0i64.checked_sub_unsigned(magnitude) {
                    return Ok(Value::Number(Number::from(n)));
                }
            }
            return Err(self.out_of_range(format!(
                "integer {lexeme} is outside ±{limit}; it is not rounded to a float"
            )));
        }
        // `str::parse::<f64>` is correctly rounded; the grammar above is
        // stricter than what it accepts, so only finite-ness is left to check.
        match lexeme.parse::<f64>() {
            Ok(f) if f.is_finite() && (f != 0.0 || !nonzero_digit) => match Number::from_f64(f) {
                Some(n) => Ok(Value::Number(n)),
                None => Err(self.out_of_range(format!("number {lexeme} is not finite"))),
            },
            Ok(f) if f.is_finite() => Err(self.out_of_range(format!(
                "number {lexeme} underflows to zero; it is not silently rounded"
            ))),
            _ => Err(self.out_of_range(format!("number {lexeme} is not a finite double"))),
        }
    }

    fn out_of_range(&self, message: String) -> Rejection {
        Rejection::new(DecodeCode::NumberOutOfRange, self.pointer(), message)
    }

    fn duplicate(&self, key: &str) -> Rejection {
        // The top frame is the object holding the repeat; its pending key
        // was taken, so build the path to it and append the repeated key.
        let mut pointer = pointer_of(&self.stack[..self.stack.len() - 1]);
        push_segment(&mut pointer, key);
        Rejection::new(
            DecodeCode::DuplicateKey,
            pointer,
            format!(
                "key {key:?} appears twice in one object (before byte {})",
                self.pos
            ),
        )
    }

    fn unexpected(&self, expected: &str) -> Rejection {
        self.unexpected_at(self.pos, expected)
    }

    /// Like [`Self::unexpected`], for a byte already consumed.
    fn unexpected_prev(&self, expected: &str) -> Rejection {
        self.unexpected_at(self.pos - 1, expected)
    }

    fn unexpected_at(&self, at: usize, expected: &str) -> Rejection {
        let found = match self.text.get(at..).and_then(|rest| rest.chars().next()) {
            Some(c) => format!("{c:?}"),
            None => "end of input".to_owned(),
        };
        Rejection::new(
            DecodeCode::InvalidJson,
            self.pointer(),
            format!("expected {expected}, found {found} at byte {at}"),
        )
    }

    /// The JSON pointer of the value currently being parsed.
    fn pointer(&self) -> String {
        pointer_of(&self.stack)
    }
}

fn pointer_of(frames: &[Frame]) -> String {
    let mut pointer = String::new();
    for frame in frames {
        match frame {
            Frame::Array(items) => {
                pointer.push('/');
                pointer.push_str(&items.len().to_string());
            }
            Frame::Object { key, .. } => push_segment(&mut pointer, key),
        }
    }
    pointer
}

/// Appends one RFC 6901 reference token, escaping `~` and `/`.
pub(crate) fn push_segment(pointer: &mut String, token: &str) {
    pointer.push('/');
    for c in token.chars() {
        match c {
            '~' => pointer.push_str("~0"),
            '/' => pointer.push_str("~1"),
            c => pointer.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim() -> Limits {
        Limits::provider_body()
    }

    fn code(input: &str) -> Option<&'static str> {
        decode_strict(input.as_bytes(), &lim())
            .err()
            .map(|r| r.code().as_str())
    }

    #[test]
    fn nesting_limit_means_n_accepted_n_plus_one_rejected() {
        for n in [0usize, 1, 2, 5, 64] {
            let l = lim().with_max_nesting(n).unwrap();
            let ok = format!("{}{}", "[".repeat(n), "]".repeat(n));
            let deep = format!("{}{}", "[".repeat(n + 1), "]".repeat(n + 1));
            if n == 0 {
                assert!(decode_strict(b"1", &l).is_ok());
            } else {
                assert!(decode_strict(ok.as_bytes(), &l).is_ok(), "{n} should pass");
            }
            let r = decode_strict(deep.as_bytes(), &l).unwrap_err();
            assert_eq!(r.code(), DecodeCode::TooDeep, "{n}");
            assert_eq!(r.pointer(), "/0".repeat(n));
        }
        // Objects count the same as arrays.
        let l = lim().with_max_nesting(2).unwrap();
        assert!(decode_strict(br#"{"a":{"b":1}}"#, &l).is_ok());
        let r = decode_strict(br#"{"a":{"b":{}}}"#, &l).unwrap_err();
        assert_eq!((r.code(), r.pointer()), (DecodeCode::TooDeep, "/a/b"));
    }

    #[test]
    fn ceiling_is_enforced() {
        assert!(lim().with_max_nesting(Limits::NESTING_CEILING).is_ok());
        assert!(lim().with_max_nesting(Limits::NESTING_CEILING + 1).is_err());
    }

    #[test]
    fn hundred_thousand_brackets_is_an_ordinary_rejection() {
        let deep = "[".repeat(100_000);
        assert_eq!(code(&deep), Some("too_deep"));
        let l = lim().with_max_nesting(Limits::NESTING_CEILING).unwrap();
        let r = decode_strict(deep.as_bytes(), &l).unwrap_err();
        assert_eq!(r.code(), DecodeCode::TooDeep);
    }

    #[test]
    fn byte_limit_comes_before_parsing() {
        let l = lim().with_max_bytes(4);
        // Invalid JSON, but too large is what is reported: nothing was parsed.
        let r = decode_strict(b"{{{{{", &l).unwrap_err();
        assert_eq!(r.code(), DecodeCode::TooLarge);
        assert!(decode_strict(b"1234", &l).is_ok());
    }

    #[test]
    fn duplicate_keys_with_pointer_and_escapes() {
        let r =
            decode_strict(br#"{"amount_minor":1500,"amount_minor":99999}"#, &lim()).unwrap_err();
        assert_eq!(
            (r.code(), r.pointer()),
            (DecodeCode::DuplicateKey, "/amount_minor")
        );
        let r = decode_strict(br#"{"a":1,"\u0061":2}"#, &lim()).unwrap_err();
        assert_eq!((r.code(), r.pointer()), (DecodeCode::DuplicateKey, "/a"));
        let r = decode_strict(br#"{"x":[0,{"a/b":1,"a\/b":2}]}"#, &lim()).unwrap_err();
        assert_eq!(
            (r.code(), r.pointer()),
            (DecodeCode::DuplicateKey, "/x/1/a~1b")
        );
        // Same key in sibling objects is fine.
        assert!(decode_strict(br#"[{"a":1},{"a":1}]"#, &lim()).is_ok());
    }

    #[test]
    fn numbers_keep_their_lexical_kind() {
        let v = decode_strict(b"[1500, 1500.0, 1.5e3, -7, 0, -0]", &lim()).unwrap();
        assert!(v[0].is_u64());
        assert!(v[1].is_f64());
        assert!(v[2].is_f64());
        assert_eq!(v[3].as_i64(), Some(-7));
        assert!(v[4].is_u64());
        assert!(v[5].is_i64() || v[5].is_u64());
    }

    #[test]
    fn integer_range_is_interoperable_unless_widened() {
        let max = "9007199254740991";
        let over = "9007199254740992";
        assert!(decode_strict(max.as_bytes(), &lim()).is_ok());
        assert!(decode_strict(format!("-{max}").as_bytes(), &lim()).is_ok());
        assert_eq!(code(over), Some("number_out_of_range"));
        assert_eq!(code(&format!("-{over}")), Some("number_out_of_range"));
        let r = decode_strict(format!("{{\"n\":[{over}]}}").as_bytes(), &lim()).unwrap_err();
        assert_eq!(r.pointer(), "/n/0");
        let wide = lim().with_max_integer(u64::MAX);
        assert_eq!(
            decode_strict(b"18446744073709551615", &wide)
                .unwrap()
                .as_u64(),
            Some(u64::MAX)
        );
        assert_eq!(
            decode_strict(b"-9223372036854775808", &wide)
                .unwrap()
                .as_i64(),
            Some(i64::MIN)
        );
        assert!(decode_strict(b"-9223372036854775809", &wide).is_err());
        assert!(decode_strict(b"18446744073709551616", &wide).is_err());
        assert_eq!(code("1e400"), Some("number_out_of_range"));
        assert_eq!(code("-1e400"), Some("number_out_of_range"));
        assert_eq!(code("1e-400"), Some("number_out_of_range"));
        assert!(decode_strict(b"0e-400", &lim()).is_ok());
        assert!(decode_strict(b"1e308", &lim()).is_ok());
    }

    #[test]
    fn invalid_inputs() {
        for bad in [
            "NaN",
            "Infinity",
            "-Infinity",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "+1",
            "\"\\ud800\"",
            "\"\\udc00\"",
            "\"\\ud800\\u0041\"",
            "[1] x",
            "\"a\u{1}\"",
            "",
            "   ",
            "tru",
            "[\"\\x\"]",
        ] {
            assert_eq!(code(bad), Some("invalid_json"), "{bad:?}");
        }
        assert_eq!(
            decode_strict(b"\xEF\xBB\xBF{}", &lim()).unwrap_err().code(),
            DecodeCode::InvalidJson
        );
        assert_eq!(
            decode_strict(b"[\"\xFF\"]", &lim()).unwrap_err().code(),
            DecodeCode::InvalidJson
        );
    }

    #[test]
    fn strings_unescape() {
        let v = decode_strict(
            br#"["\ud83d\ude00\n\u00e9\/", "plain", "caf\u00e9"]"#,
            &lim(),
        )
        .unwrap();
        assert_eq!(v[0], "\u{1F600}\n\u{e9}/");
        assert_eq!(v[2], "caf\u{e9}");
    }
}
