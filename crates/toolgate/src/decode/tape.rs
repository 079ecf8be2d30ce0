//! The fast path: [`decode_tape`] applies the reference decoder's rules
//! ([`super::decode_strict`], `strict.rs`) and builds a [`Document`] tape that
//! borrows from the input instead of a `serde_json::Value`.
//!
//! The parser here accepts exactly the documents the reference accepts
//! (same grammar, nesting limit, integer range, float rules and
//! duplicate-key rule, keys compared after unescaping) and builds the same
//! values. What it leaves out is the diagnosis: it keeps no JSON pointer and
//! writes no message. When it meets anything it does not accept it stops,
//! and the reference runs on the same bytes to give the rejection (code,
//! pointer, message). So there is one source of rejections, and the fast
//! path stays small enough to be fast. Where the two could differ, the
//! reference is right: property tests and the differential check
//! ([`super::differential`], also a fuzz target) hold the fast path to its
//! answers.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashSet;

use super::json::{Document, Node, tape_with_capacity, text_buffer};
use super::scan::{escape_char, integer_digits, string_stop};
use super::{Limits, Rejection, decode_strict};

/// Decodes `input` like [`decode_strict`], into a [`Document`] whose strings
/// borrow from `input` where they had no escapes. Accepts and rejects
/// exactly what [`decode_strict`] does, with the same rejections;
/// [`crate::decode::Json::to_value`] on its root gives the value [`decode_strict`]
/// returns.
///
/// ```
/// use toolgate::decode::{decode_strict, decode_tape, Limits};
///
/// let text = br#"{"tool":"refund_order","arguments":{"amount_minor":1500}}"#;
/// let doc = decode_tape(text, &Limits::envelope()).unwrap();
/// let root = doc.root();
/// assert_eq!(root.get("tool").and_then(|t| t.as_str()), Some("refund_order"));
/// assert_eq!(root.to_value(), decode_strict(text, &Limits::envelope()).unwrap());
///
/// let twice = br#"{"a":1,"\u0061":2}"#;
/// assert_eq!(decode_tape(twice, &Limits::envelope()).unwrap_err(),
///            decode_strict(twice, &Limits::envelope()).unwrap_err());
/// ```
pub fn decode_tape<'a>(input: &'a [u8], limits: &Limits) -> Result<Document<'a>, Rejection> {
    if let Some(doc) = fast_path(input, limits) {
        return Ok(doc);
    }
    // Rejected (or, should the two parsers ever disagree the other way,
    // accepted): the reference decoder's answer is the one that counts.
    decode_strict(input, limits).map(|value| Document::from_value(&value))
}

/// The fast path alone, without the reference's fallback: `Some` for a
/// document it accepts, `None` for anything else. The differential check
/// compares this with the reference, since through [`decode_tape`] a
/// document the fast path wrongly refused would be repaired by the fallback
/// and never seen.
pub(super) fn fast_path<'a>(input: &'a [u8], limits: &Limits) -> Option<Document<'a>> {
    // The checks before parsing are the reference decoder's; anything they
    // refuse is left to it to report.
    if input.len() <= limits.max_bytes()
        && !input.starts_with(&[0xEF, 0xBB, 0xBF])
        && let Ok(text) = std::str::from_utf8(input)
    {
        return parse(text, limits);
    }
    None
}

/// The container a value belongs to: an array, an object, or the top
/// level. The innermost one lives in a local of the parse loop (so counting
/// its members touches no memory); the ones around it wait on a stack.
#[derive(Clone, Copy)]
struct Open {
    /// Its node.
    at: usize,
    /// Items or members so far.
    len: usize,
    /// A 64-bit filter of its members' keys so far (see `key_bits`).
    keys: u64,
    kind: Kind,
    /// Whether its keys moved to a set (the last of `Parser::sets`).
    set: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Top,
    Array,
    Object,
}

impl Open {
    const TOP: Open = Open {
        at: 0,
        len: 0,
        keys: 0,
        kind: Kind::Top,
        set: false,
    };
}

thread_local! {
    /// The container stack of the last parse on this thread, kept for the
    /// next one: a parse then allocates none.
    static SPARE_STACK: Cell<Vec<Open>> = const { Cell::new(Vec::new()) };
}

/// Stacks with room for more entries than this are freed, not kept.
const SPARE_STACK_MAX: usize = 1024;

/// Up to this many members, an object's keys are checked for repeats with
/// its key filter; beyond it (the filter is then mostly ones), a hash set
/// keeps duplicate detection linear.
const LINEAR_KEY_SCAN: usize = 32;

struct Parser<'a> {
    input: &'a str,
    bytes: &'a [u8],
    max_nesting: usize,
    max_integer: u64,
    nodes: Vec<Node>,
    unescaped: String,
    /// The containers around the innermost open one, outermost first.
    stack: Vec<Open>,
    /// The key sets of the open objects that have many members, innermost
    /// last.
    sets: Vec<HashSet<Cow<'a, [u8]>>>,
}

/// Parses `input` (already checked against the byte limit, free of a
/// byte-order mark and valid UTF-8) into a tape, or `None` if the strict
/// decoder would reject it.
fn parse<'a>(input: &'a str, limits: &Limits) -> Option<Document<'a>> {
    let mut stack = SPARE_STACK.try_with(Cell::take).unwrap_or_default();
    stack.clear();
    let mut p = Parser {
        input,
        bytes: input.as_bytes(),
        max_nesting: limits.max_nesting(),
        max_integer: limits.max_integer(),
        // About one node per eight bytes of compact JSON; the tape grows if
        // a document is denser.
        nodes: tape_with_capacity(input.len() / 8 + 1),
        unescaped: String::new(),
        stack,
        sets: Vec::new(),
    };
    let parsed = p.document();
    let Parser {
        nodes,
        unescaped,
        stack,
        ..
    } = p;
    if stack.capacity() <= SPARE_STACK_MAX {
        // During thread teardown the spare is already gone; the stack is
        // then simply freed.
        let _ = SPARE_STACK.try_with(|spare| spare.set(stack));
    }
    parsed?;
    Some(Document::from_tape(input, nodes, unescaped))
}

/// The byte at `i`, or 0 past the end. A NUL is refused wherever the parser
/// looks at a single byte (outside strings JSON has no place for it, inside
/// one it is a raw control character), so it doubles as "end of input" and
/// spares an `Option` on every look.
#[inline(always)]
fn byte_at(bytes: &[u8], i: usize) -> u8 {
    bytes.get(i).copied().unwrap_or(0)
}

/// The index of the first non-whitespace byte at or after `i`. Compact
/// JSON has none, so one comparison first.
#[inline(always)]
fn skip_ws(bytes: &[u8], i: usize) -> usize {
    if byte_at(bytes, i) > b' ' {
        return i;
    }
    skip_ws_run(bytes, i)
}

#[inline(never)]
fn skip_ws_run(bytes: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = bytes.get(i) {
        i += 1;
    }
    i
}

/// A key's bits in its object's 64-bit key filter, from a cheap summary of
/// the key (its length, first, middle and last bytes). Equal keys have the
/// same bits, so a key whose bits are not all set in the filter is new, and
/// only the rare key whose bits are set needs comparing with the others.
/// (Two bits a key rather than one: an object of a dozen members then sends
/// about one key in thirty, not one in twelve, to that comparison.)
#[inline(always)]
fn key_bits(b: &[u8]) -> u64 {
    let byte = |i: usize| b.get(i).map_or(0, |&c| u64::from(c));
    let n = b.len();
    let summary = (n as u64) << 24 ^ byte(0) << 16 ^ byte(n / 2) << 8 ^ byte(n.wrapping_sub(1));
    // Two six-bit fields of a multiplicative hash pick the bits.
    let hash = summary.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    1 << (hash >> 58) | 1 << (hash >> 52 & 63)
}

impl<'a> Parser<'a> {
    /// The parse loop. The position is a local that every step takes and
    /// returns, so it stays in a register rather than in `self`.
    fn document(&mut self) -> Option<()> {
        let bytes = self.bytes;
        let mut cur = Open::TOP;
        let mut pos = skip_ws(bytes, 0);
        'value: loop {
            // `pos` is at the first byte of a value.
            pos = match byte_at(bytes, pos) {
                b'"' => self.string(pos + 1)?,
                b'{' => {
                    self.open(&mut cur, Kind::Object)?;
                    pos = skip_ws(bytes, pos + 1);
                    if byte_at(bytes, pos) != b'}' {
                        pos = self.key(&mut cur, pos)?;
                        continue 'value;
                    }
                    self.close(&mut cur);
                    pos + 1
                }
                b'[' => {
                    self.open(&mut cur, Kind::Array)?;
                    pos = skip_ws(bytes, pos + 1);
                    if byte_at(bytes, pos) != b']' {
                        continue 'value;
                    }
                    self.close(&mut cur);
                    pos + 1
                }
                b'-' | b'0'..=b'9' => self.number(pos)?,
                b't' => self.literal(pos, b"true", Node::True)?,
                b'f' => self.literal(pos, b"false", Node::False)?,
                b'n' => self.literal(pos, b"null", Node::Null)?,
                _ => return None,
            };
            // A value is complete: count it in its container, and close
            // every container that ends here.
            loop {
                cur.len += 1;
                pos = skip_ws(bytes, pos);
                match (byte_at(bytes, pos), cur.kind) {
                    (_, Kind::Top) => break 'value,
                    (b',', Kind::Array) => {
                        pos = skip_ws(bytes, pos + 1);
                        continue 'value;
                    }
                    (b',', Kind::Object) => {
                        pos = self.key(&mut cur, skip_ws(bytes, pos + 1))?;
                        continue 'value;
                    }
                    (b']', Kind::Array) | (b'}', Kind::Object) => {
                        pos += 1;
                        self.close(&mut cur);
                    }
                    _ => return None,
                }
            }
        }
        (pos == bytes.len()).then_some(())
    }

    /// Opens a container of `kind` (its opening byte is read by the caller)
    /// inside `cur`, which it becomes.
    #[inline(always)]
    fn open(&mut self, cur: &mut Open, kind: Kind) -> Option<()> {
        // The stack holds `cur`'s parents and the top level, as many as
        // `cur`'s nesting: the new container's is one more.
        if self.stack.len() >= self.max_nesting {
            return None;
        }
        self.stack.push(*cur);
        *cur = Open {
            at: self.nodes.len(),
            len: 0,
            keys: 0,
            kind,
            set: false,
        };
        // A placeholder: `close` writes the node.
        self.nodes.push(Node::Null);
        Some(())
    }

    /// Closes the container `cur`, which ends at the current node; its
    /// parent becomes `cur`.
    #[inline(always)]
    fn close(&mut self, cur: &mut Open) {
        let end = self.nodes.len();
        let node = if cur.kind == Kind::Object {
            if cur.set {
                self.sets.pop();
            }
            Node::Object { len: cur.len, end }
        } else {
            Node::Array { len: cur.len, end }
        };
        if let Some(slot) = self.nodes.get_mut(cur.at) {
            *slot = node;
        }
        *cur = self.stack.pop().unwrap_or(Open::TOP);
    }

    /// Reads `"key"` at `pos` and the `:` (and whitespace) after it,
    /// returning the position of the member's value; the key's node goes
    /// on the tape, unless an earlier member of the same object has the
    /// same key (then the document is refused). (Refusing a repeat here
    /// rather than after its value changes no answer: any refusal hands the
    /// input to the strict decoder, which finds the first fault itself.)
    #[inline(always)]
    fn key(&mut self, cur: &mut Open, pos: usize) -> Option<usize> {
        let bytes = self.bytes;
        if byte_at(bytes, pos) != b'"' {
            return None;
        }
        let at = self.nodes.len();
        let start = pos + 1;
        let stop = string_stop(bytes, start);
        let (bits, pos) = if byte_at(bytes, stop) == b'"' {
            self.nodes.push(Node::Str { start, end: stop });
            (key_bits(bytes.get(start..stop)?), stop + 1)
        } else {
            let pos = self.escaped_string(start, stop)?;
            (key_bits(self.key_bytes(at)), pos)
        };
        self.insert(cur, bits, at)?;
        let pos = skip_ws(bytes, pos);
        if byte_at(bytes, pos) != b':' {
            return None;
        }
        Some(skip_ws(bytes, pos + 1))
    }

    /// The bytes of the string node at `at`.
    #[inline(always)]
    fn key_bytes(&self, at: usize) -> &[u8] {
        match self.nodes.get(at) {
            Some(&Node::Str { start, end }) => self.bytes.get(start..end).unwrap_or_default(),
            Some(&Node::Escaped { start, end }) => self
                .unescaped
                .as_bytes()
                .get(start..end)
                .unwrap_or_default(),
            _ => &[],
        }
    }

    /// The node just past the complete value whose node is at `at`.
    #[inline]
    fn after(&self, at: usize) -> usize {
        match self.nodes.get(at) {
            Some(&(Node::Array { end, .. } | Node::Object { end, .. })) => end,
            _ => at + 1,
        }
    }

    /// The key nodes of the members of `object` read so far.
    fn member_keys(&self, object: &Open) -> impl Iterator<Item = usize> + use<'_, 'a> {
        let mut at = object.at + 1;
        (0..object.len).map(move |_| {
            let key = at;
            at = self.after(key + 1);
            key
        })
    }

    /// Records the key whose node is at `at` (and whose filter bits are
    /// `bits`) in the object `cur`, or refuses it if an earlier member has
    /// it. (`cur.len` members were read, all with different keys.)
    #[inline(always)]
    fn insert(&mut self, cur: &mut Open, bits: u64, at: usize) -> Option<()> {
        // `cur` goes to the out-of-line calls by value: were its address
        // taken, it would live in memory rather than in registers.
        if cur.set || cur.len >= LINEAR_KEY_SCAN {
            let inserted = self.insert_into_set(*cur, at);
            cur.set = true;
            return inserted;
        }
        if cur.keys & bits == bits && self.repeated(*cur, at) {
            return None;
        }
        cur.keys |= bits;
        Some(())
    }

    /// Whether an earlier member of `object` has the key at `at` (for a key
    /// whose filter bits were set, which is rare: the earlier keys are on the
    /// tape).
    #[inline(never)]
    fn repeated(&self, object: Open, at: usize) -> bool {
        let key = self.key_bytes(at);
        self.member_keys(&object).any(|k| self.key_bytes(k) == key)
    }

    /// Duplicate detection for an object with many members: its keys move
    /// into a set (unless `object.set` says they did), and each later key
    /// goes straight to the set.
    #[inline(never)]
    fn insert_into_set(&mut self, object: Open, at: usize) -> Option<()> {
        if !object.set {
            let mut set = HashSet::with_capacity(4 * LINEAR_KEY_SCAN);
            for k in self.member_keys(&object) {
                set.insert(self.owned_key(k));
            }
            self.sets.push(set);
        }
        let key = self.owned_key(at);
        self.sets.last_mut()?.insert(key).then_some(())
    }

    /// The key whose node is at `at`, borrowed from the input when it had
    /// no escapes.
    fn owned_key(&self, at: usize) -> Cow<'a, [u8]> {
        match self.nodes.get(at) {
            Some(&Node::Str { start, end }) => {
                Cow::Borrowed(self.bytes.get(start..end).unwrap_or_default())
            }
            _ => Cow::Owned(self.key_bytes(at).to_vec()),
        }
    }

    #[inline(always)]
    fn literal(&mut self, pos: usize, word: &[u8], node: Node) -> Option<usize> {
        let end = pos + word.len();
        if self.bytes.get(pos..end)? != word {
            return None;
        }
        self.nodes.push(node);
        Some(end)
    }

    /// Reads a string whose opening quote is just before `start` and
    /// appends its node; the position after its closing quote.
    #[inline(always)]
    fn string(&mut self, start: usize) -> Option<usize> {
        let stop = string_stop(self.bytes, start);
        if byte_at(self.bytes, stop) == b'"' {
            self.nodes.push(Node::Str { start, end: stop });
            return Some(stop + 1);
        }
        self.escaped_string(start, stop)
    }

    /// A string whose plain run `start..stop` ended at something other than
    /// its closing quote: unescaped into the side buffer.
    #[inline(never)]
    fn escaped_string(&mut self, start: usize, mut stop: usize) -> Option<usize> {
        if self.unescaped.capacity() == 0 {
            self.unescaped = text_buffer();
        }
        let (bytes, text) = (self.bytes, &mut self.unescaped);
        let from = text.len();
        let mut run = start;
        loop {
            text.push_str(self.input.get(run..stop)?);
            if byte_at(bytes, stop) != b'\\' {
                break;
            }
            let (c, next) = escape_char(bytes, stop + 1)?;
            text.push(c);
            run = next;
            stop = string_stop(bytes, next);
        }
        if byte_at(bytes, stop) != b'"' {
            return None;
        }
        let end = text.len();
        self.nodes.push(Node::Escaped { start: from, end });
        Some(stop + 1)
    }

    /// Reads a number at `start` and appends its node, keeping its lexical
    /// kind, under the same rules as the strict decoder.
    #[inline(always)]
    fn number(&mut self, start: usize) -> Option<usize> {
        let bytes = self.bytes;
        let negative = byte_at(bytes, start) == b'-';
        let mut pos = start + usize::from(negative);
        let mut magnitude: u64 = 0;
        let mut overflow = false;
        let mut nonzero_digit = false;
        match byte_at(bytes, pos) {
            b'0' => pos += 1,
            b'1'..=b'9' => {
                nonzero_digit = true;
                (pos, magnitude, overflow) = integer_digits(bytes, pos);
            }
            _ => return None,
        }
        if matches!(byte_at(bytes, pos), b'.' | b'e' | b'E') {
            return self.float(start, pos, nonzero_digit);
        }
        if overflow || magnitude > self.max_integer {
            return None;
        }
        self.nodes.push(if negative {
            Node::NegInt(0i64.checked_sub_unsigned(magnitude)?)
        } else {
            Node::PosInt(magnitude)
        });
        Some(pos)
    }

    /// The fraction and exponent (at `pos`) of a float that starts at
    /// `start` and whose integer part was read.
    #[inline(never)]
    fn float(&mut self, start: usize, mut pos: usize, mut nonzero_digit: bool) -> Option<usize> {
        let bytes = self.bytes;
        if byte_at(bytes, pos) == b'.' {
            pos += 1;
            if !byte_at(bytes, pos).is_ascii_digit() {
                return None;
            }
            while let d @ b'0'..=b'9' = byte_at(bytes, pos) {
                nonzero_digit |= d != b'0';
                pos += 1;
            }
        }
        if let b'e' | b'E' = byte_at(bytes, pos) {
            pos += 1;
            if let b'+' | b'-' = byte_at(bytes, pos) {
                pos += 1;
            }
            if !byte_at(bytes, pos).is_ascii_digit() {
                return None;
            }
            while byte_at(bytes, pos).is_ascii_digit() {
                pos += 1;
            }
        }
        let f = self.input.get(start..pos)?.parse::<f64>().ok()?;
        if f.is_finite() && (f != 0.0 || !nonzero_digit) {
            self.nodes.push(Node::Float(f));
            Some(pos)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Limits, decode_strict, decode_tape};

    /// Objects whose keys fill the key filter, so that new keys often find
    /// their bits set (and are compared on the tape), with and without a
    /// repeat, the repeat plain or escaped, before and after the switch to
    /// a set.
    #[test]
    fn repeats_are_found_whatever_the_key_filter_says() {
        let limits = Limits::provider_body();
        for members in [2, 8, 20, 31, 32, 33, 40] {
            let keys: Vec<String> = (0..members).map(|i| format!("k{i:02}")).collect();
            let unique = keys
                .iter()
                .map(|k| format!("\"{k}\":{{\"{k}\":0}}"))
                .collect::<Vec<_>>()
                .join(",");
            for text in [
                format!("{{{unique}}}"),
                format!("{{{unique},\"k00\":1}}"),
                format!("{{{unique},\"\\u006b00\":1}}"),
                format!("{{{unique},\"k{:02}\":1}}", members - 1),
                format!("[{{{unique}}},{{{unique}}}]"),
            ] {
                let strict = decode_strict(text.as_bytes(), &limits);
                let tape = decode_tape(text.as_bytes(), &limits);
                match (&strict, &tape) {
                    (Ok(value), Ok(doc)) => assert_eq!(doc.root().to_value(), *value, "{text}"),
                    (Err(a), Err(b)) => assert_eq!(a, b, "{text}"),
                    _ => panic!("{text}: {strict:?} but {tape:?}"),
                }
                assert_eq!(strict.is_ok(), !text.ends_with(":1}"), "{text}");
            }
        }
    }
}
