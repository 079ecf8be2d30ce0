//! [`decode_borrowed`]: the strict decoder's rules, building a [`Document`]
//! tape instead of a `serde_json::Value`.
//!
//! The parser here accepts exactly the documents [`super::decode`] accepts
//! (same grammar, nesting limit, integer range, float rules and
//! duplicate-key rule, keys compared after unescaping) and builds the same
//! values. What it leaves out is the diagnosis: it keeps no JSON pointer and
//! writes no message. When it meets anything it does not accept it stops,
//! and [`super::decode`] runs on the same bytes to give the rejection (code,
//! pointer, message). So there is one source of rejections, and the tape
//! parser stays small enough to be fast. Property tests hold the two
//! decoders to the same answers on generated and mutated documents.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashSet;

use super::json::{Document, Node, tape_with_capacity, text_buffer};
use super::scan::{escape_char, integer_digits, string_stop};
use super::{Limits, Rejection, decode};

/// Decodes `input` like [`decode`], into a [`Document`] whose strings
/// borrow from `input` where they had no escapes. Accepts and rejects
/// exactly what [`decode`] does, with the same rejections;
/// [`crate::decode::Json::to_value`] on its root gives the value [`decode`]
/// returns.
///
/// ```
/// use toolgate::decode::{decode, decode_borrowed, Limits};
///
/// let text = br#"{"tool":"apply_goodwill_credit","arguments":{"amount_minor":1500}}"#;
/// let doc = decode_borrowed(text, &Limits::envelope()).unwrap();
/// let root = doc.root();
/// assert_eq!(root.get("tool").and_then(|t| t.as_str()), Some("apply_goodwill_credit"));
/// assert_eq!(root.to_value(), decode(text, &Limits::envelope()).unwrap());
///
/// let twice = br#"{"a":1,"\u0061":2}"#;
/// assert_eq!(decode_borrowed(twice, &Limits::envelope()).unwrap_err(),
///            decode(twice, &Limits::envelope()).unwrap_err());
/// ```
pub fn decode_borrowed<'a>(input: &'a [u8], limits: &Limits) -> Result<Document<'a>, Rejection> {
    // The checks before parsing are the strict decoder's; anything they
    // refuse is left to it to report.
    if input.len() <= limits.max_bytes()
        && !input.starts_with(&[0xEF, 0xBB, 0xBF])
        && let Ok(text) = std::str::from_utf8(input)
        && let Some(doc) = parse(text, limits)
    {
        return Ok(doc);
    }
    // Rejected (or, should the two parsers ever disagree the other way,
    // accepted): the strict decoder's answer is the one that counts.
    decode(input, limits).map(|value| Document::from_value(&value))
}

/// An open container. Kept small: one is pushed and popped per container.
struct Open {
    /// Its node.
    at: usize,
    /// Items or members so far.
    len: usize,
    /// Where its members' keys start on the key stack.
    keys_from: usize,
    object: bool,
    /// Whether its keys moved to a set (the last of `Parser::sets`).
    set: bool,
}

thread_local! {
    /// The container and key stacks of the last parse on this thread, kept
    /// for the next one: a parse then allocates neither.
    static SPARE_STACKS: Cell<Stacks> = const {
        Cell::new(Stacks {
            open: Vec::new(),
            keys: Vec::new(),
        })
    };
}

/// A parser's container stack and key stack.
#[derive(Default)]
struct Stacks {
    open: Vec<Open>,
    keys: Vec<(u32, usize)>,
}

/// Stacks with room for more entries than this are freed, not kept.
const SPARE_STACK_MAX: usize = 1024;

/// Up to this many members, a new key's signature is compared with each
/// earlier one's; beyond it, a hash set keeps duplicate detection linear.
const LINEAR_KEY_SCAN: usize = 32;

struct Parser<'a> {
    input: &'a str,
    bytes: &'a [u8],
    pos: usize,
    max_nesting: usize,
    max_integer: u64,
    nodes: Vec<Node>,
    unescaped: String,
    stack: Vec<Open>,
    /// The keys of the open objects' members, innermost object last: a
    /// signature of the key and the index of its node.
    keys: Vec<(u32, usize)>,
    /// The key sets of the open objects that have many members, innermost
    /// last.
    sets: Vec<HashSet<Cow<'a, [u8]>>>,
}

/// Parses `input` (already checked against the byte limit, free of a
/// byte-order mark and valid UTF-8) into a tape, or `None` if the strict
/// decoder would reject it.
fn parse<'a>(input: &'a str, limits: &Limits) -> Option<Document<'a>> {
    let Stacks {
        open: mut stack,
        mut keys,
    } = SPARE_STACKS.try_with(Cell::take).unwrap_or_default();
    stack.clear();
    keys.clear();
    let mut p = Parser {
        input,
        bytes: input.as_bytes(),
        pos: 0,
        max_nesting: limits.max_nesting(),
        max_integer: limits.max_integer(),
        // About one node per eight bytes of compact JSON; the tape grows if
        // a document is denser.
        nodes: tape_with_capacity(input.len() / 8 + 1),
        unescaped: String::new(),
        stack,
        keys,
        sets: Vec::new(),
    };
    let parsed = p.document();
    let Parser {
        nodes,
        unescaped,
        stack,
        keys,
        ..
    } = p;
    if stack.capacity() <= SPARE_STACK_MAX && keys.capacity() <= SPARE_STACK_MAX {
        // During thread teardown the spare is already gone; they are then
        // simply freed.
        let _ = SPARE_STACKS.try_with(|spare| spare.set(Stacks { open: stack, keys }));
    }
    parsed?;
    Some(Document::from_tape(input, nodes, unescaped))
}

/// A cheap summary of a key: equal keys have equal signatures, so only
/// keys with the same signature need comparing.
#[inline]
fn signature(b: &[u8]) -> u32 {
    match b {
        [] => 0,
        [first, .., last] | [first @ last] => {
            (b.len() as u32) << 24
                ^ u32::from(*first) << 16
                ^ u32::from(*last) << 8
                ^ u32::from(b[b.len() / 2])
        }
    }
}

impl<'a> Parser<'a> {
    fn document(&mut self) -> Option<()> {
        self.skip_ws();
        'value: loop {
            match self.peek()? {
                b'{' => {
                    self.open(true)?;
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        self.close();
                    } else {
                        self.key()?;
                        continue 'value;
                    }
                }
                b'[' => {
                    self.open(false)?;
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                        self.close();
                    } else {
                        continue 'value;
                    }
                }
                b'"' => self.string()?,
                b'-' | b'0'..=b'9' => self.number()?,
                b't' => self.literal(b"true", Node::True)?,
                b'f' => self.literal(b"false", Node::False)?,
                b'n' => self.literal(b"null", Node::Null)?,
                _ => return None,
            }
            // A value is complete: count it in its container, and close
            // every container that ends here.
            loop {
                let Some(top) = self.stack.last_mut() else {
                    break 'value;
                };
                top.len += 1;
                let object = top.object;
                self.skip_ws();
                match (self.next_byte()?, object) {
                    (b',', false) => {
                        self.skip_ws();
                        continue 'value;
                    }
                    (b',', true) => {
                        self.skip_ws();
                        self.key()?;
                        continue 'value;
                    }
                    (b']', false) | (b'}', true) => self.close(),
                    _ => return None,
                }
            }
        }
        self.skip_ws();
        (self.pos == self.bytes.len()).then_some(())
    }

    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    #[inline(always)]
    fn next_byte(&mut self) -> Option<u8> {
        let b = self.peek();
        self.pos += 1;
        b
    }

    #[inline(always)]
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.pos += 1;
        }
    }

    /// Consumes `{` or `[` (and the whitespace after it) and opens its node.
    #[inline(always)]
    fn open(&mut self, object: bool) -> Option<()> {
        if self.stack.len() >= self.max_nesting {
            return None;
        }
        self.pos += 1;
        let at = self.nodes.len();
        self.nodes.push(if object {
            Node::Object { len: 0, end: 0 }
        } else {
            Node::Array { len: 0, end: 0 }
        });
        self.stack.push(Open {
            at,
            len: 0,
            keys_from: self.keys.len(),
            object,
            set: false,
        });
        self.skip_ws();
        Some(())
    }

    /// Closes the innermost container, which ends at the current node.
    #[inline(always)]
    fn close(&mut self) {
        let Some(open) = self.stack.pop() else {
            return;
        };
        let end = self.nodes.len();
        self.nodes[open.at] = if open.object {
            self.keys.truncate(open.keys_from);
            if open.set {
                self.sets.pop();
            }
            Node::Object { len: open.len, end }
        } else {
            Node::Array { len: open.len, end }
        };
    }

    /// Reads `"key"` and the `:` (and whitespace) after it; the key's node
    /// goes on the tape and, unless an earlier member of the same object
    /// has the same key (then the document is refused), its signature on
    /// the key stack. (Refusing a repeat here rather than after its value
    /// changes no answer: any refusal hands the input to the strict
    /// decoder, which finds the first fault itself.)
    #[inline(always)]
    fn key(&mut self) -> Option<()> {
        if self.peek() != Some(b'"') {
            return None;
        }
        let at = self.nodes.len();
        let start = self.pos + 1;
        let stop = string_stop(self.bytes, start);
        let sig = if self.bytes.get(stop) == Some(&b'"') {
            self.pos = stop + 1;
            self.nodes.push(Node::Str { start, end: stop });
            signature(self.bytes.get(start..stop)?)
        } else {
            self.escaped_string(start, stop)?;
            signature(self.bytes_of(&self.nodes[at]))
        };
        self.insert(sig, at)?;
        self.skip_ws();
        if self.next_byte()? != b':' {
            return None;
        }
        self.skip_ws();
        Some(())
    }

    /// The bytes of a string node.
    #[inline(always)]
    fn bytes_of(&self, node: &Node) -> &[u8] {
        match *node {
            Node::Str { start, end } => self.bytes.get(start..end).unwrap_or_default(),
            Node::Escaped { start, end } => self
                .unescaped
                .as_bytes()
                .get(start..end)
                .unwrap_or_default(),
            _ => &[],
        }
    }

    /// Records the key whose node is at `at` in the innermost object, or
    /// refuses it if an earlier member of that object has it.
    #[inline(always)]
    fn insert(&mut self, sig: u32, at: usize) -> Option<()> {
        let open = self.stack.last()?;
        let earlier = self.keys.get(open.keys_from..)?;
        if open.set || earlier.len() >= LINEAR_KEY_SCAN {
            return self.insert_into_set(at);
        }
        if earlier.iter().any(|&(s, _)| s == sig) {
            let key = self.bytes_of(&self.nodes[at]);
            for &(s, k) in earlier {
                if s == sig && self.bytes_of(&self.nodes[k]) == key {
                    return None;
                }
            }
        }
        self.keys.push((sig, at));
        Some(())
    }

    /// Duplicate detection for an object with many members: its keys move
    /// from the key stack into a set, and each later key goes straight to
    /// the set.
    #[inline(never)]
    fn insert_into_set(&mut self, at: usize) -> Option<()> {
        let open = self.stack.last_mut()?;
        if !open.set {
            open.set = true;
            let keys_from = open.keys_from;
            let mut set = HashSet::with_capacity(4 * LINEAR_KEY_SCAN);
            for &(_, k) in self.keys.get(keys_from..)? {
                set.insert(self.owned_key(k));
            }
            self.keys.truncate(keys_from);
            self.sets.push(set);
        }
        let key = self.owned_key(at);
        self.sets.last_mut()?.insert(key).then_some(())
    }

    /// The key whose node is at `at`, borrowed from the input when it had
    /// no escapes.
    fn owned_key(&self, at: usize) -> Cow<'a, [u8]> {
        match self.nodes[at] {
            Node::Str { start, end } => {
                Cow::Borrowed(self.input.as_bytes().get(start..end).unwrap_or_default())
            }
            ref node => Cow::Owned(self.bytes_of(node).to_vec()),
        }
    }

    #[inline(always)]
    fn literal(&mut self, word: &[u8], node: Node) -> Option<()> {
        if self.bytes.get(self.pos..)?.starts_with(word) {
            self.pos += word.len();
            self.nodes.push(node);
            Some(())
        } else {
            None
        }
    }

    /// Reads a string at its opening quote and appends its node.
    #[inline(always)]
    fn string(&mut self) -> Option<()> {
        let start = self.pos + 1;
        let stop = string_stop(self.bytes, start);
        if self.bytes.get(stop) == Some(&b'"') {
            self.pos = stop + 1;
            self.nodes.push(Node::Str { start, end: stop });
            return Some(());
        }
        self.escaped_string(start, stop)
    }

    /// A string whose plain run `start..stop` ended at something other than
    /// its closing quote: unescaped into the side buffer.
    #[inline(never)]
    fn escaped_string(&mut self, start: usize, stop: usize) -> Option<()> {
        if self.unescaped.capacity() == 0 {
            self.unescaped = text_buffer();
        }
        let from = self.unescaped.len();
        self.unescaped.reserve(2 * (stop - start) + 64);
        self.unescaped.push_str(self.input.get(start..stop)?);
        self.pos = stop;
        loop {
            let run = self.pos;
            self.pos = string_stop(self.bytes, self.pos);
            self.unescaped.push_str(self.input.get(run..self.pos)?);
            match self.next_byte()? {
                b'"' => {
                    let end = self.unescaped.len();
                    self.nodes.push(Node::Escaped { start: from, end });
                    return Some(());
                }
                b'\\' => {
                    let (c, next) = escape_char(self.bytes, self.pos)?;
                    self.unescaped.push(c);
                    self.pos = next;
                }
                _ => return None,
            }
        }
    }

    /// Reads a number and appends its node, keeping its lexical kind,
    /// under the same rules as the strict decoder.
    #[inline(always)]
    fn number(&mut self) -> Option<()> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let mut magnitude: u64 = 0;
        let mut overflow = false;
        let mut nonzero_digit = false;
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => {
                nonzero_digit = true;
                (self.pos, magnitude, overflow) = integer_digits(self.bytes, self.pos);
            }
            _ => return None,
        }
        if !matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            if overflow || magnitude > self.max_integer {
                return None;
            }
            let node = if negative {
                Node::NegInt(0i64.checked_sub_unsigned(magnitude)?)
            } else {
                Node::PosInt(magnitude)
            };
            self.nodes.push(node);
            return Some(());
        }
        self.float(start, nonzero_digit)
    }

    /// The fraction and exponent of a float whose integer part was read.
    #[inline(never)]
    fn float(&mut self, start: usize, mut nonzero_digit: bool) -> Option<()> {
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return None;
            }
            while let Some(d @ b'0'..=b'9') = self.peek() {
                nonzero_digit |= d != b'0';
                self.pos += 1;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return None;
            }
            while let Some(b'0'..=b'9') = self.peek() {
                self.pos += 1;
            }
        }
        let f = self.input.get(start..self.pos)?.parse::<f64>().ok()?;
        if f.is_finite() && (f != 0.0 || !nonzero_digit) {
            self.nodes.push(Node::Float(f));
            Some(())
        } else {
            None
        }
    }
}
