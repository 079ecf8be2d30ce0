//! [`Document`]: a strictly decoded JSON document that borrows from its
//! input, and [`Json`], a view of one value in it.
//!
//! Made by [`super::decode_tape`]. The document is a *tape*: one vector
//! of nodes in input order, where a container's node records how many
//! items or members it has and where its last descendant ends, an object
//! member is its key's node followed by its value's nodes, and a string
//! without escapes is a slice of the input (unescaped strings are copied
//! into one side buffer). Decoding needs the tape and, if a string had
//! escapes, that buffer, both taken from a per-thread spare that a dropped
//! document gives back (so a steady stream of bodies allocates neither);
//! nothing per value.
//!
//! Object keys are unique (the decoder rejected repeats) and keep their
//! input order, so [`Json::to_value`] gives exactly the `serde_json::Value`
//! that [`super::decode_strict`] returns for the same bytes.
//!
//! Why it exists: the provider adapters read a few fields of a body that
//! can be large (providers echo metadata, tool lists, usage). Building a
//! `Value` for all of it, with a hash map and an owned `String` per key,
//! cost more than the whole rest of the check. They read a [`Document`]
//! instead and convert only the tool arguments.

use std::cell::Cell;
use std::fmt;

use serde_json::{Map, Number, Value};

/// One node of the tape. Every variant is plain data (no nested enum), so
/// the parser writes a node with a few scalar stores.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Node {
    Null,
    False,
    True,
    /// An integer literal without a minus sign.
    PosInt(u64),
    /// An integer literal with a minus sign (`-0` included).
    NegInt(i64),
    /// A number with a fraction or an exponent; finite.
    Float(f64),
    /// A string without escapes: the input's bytes `start..end`.
    Str {
        start: usize,
        end: usize,
    },
    /// A string with escapes, unescaped into the side buffer at
    /// `start..end`.
    Escaped {
        start: usize,
        end: usize,
    },
    /// `len` items follow, up to (not including) the node at `end`.
    Array {
        len: usize,
        end: usize,
    },
    /// `len` members (key node, then value nodes) follow, up to `end`.
    Object {
        len: usize,
        end: usize,
    },
}

/// How many spare tapes (and side buffers) a thread keeps: two, because a
/// check holds two documents at once, the provider body and the tool
/// arguments decoded from a string inside it.
const SPARES: usize = 2;

thread_local! {
    /// Tapes of documents dropped on this thread, kept for the next ones:
    /// decoding a body then allocates no tape of its own.
    static SPARE_TAPES: Cell<[Vec<Node>; SPARES]> = const { Cell::new([Vec::new(), Vec::new()]) };
}

/// Tapes with room for more nodes than this (96 KiB) are freed, not kept.
const SPARE_TAPE_MAX_NODES: usize = 4096;

thread_local! {
    /// Side buffers of unescaped strings of documents dropped on this
    /// thread, kept for the next documents that need one.
    static SPARE_TEXTS: Cell<[String; SPARES]> = const { Cell::new([String::new(), String::new()]) };
}

/// Side buffers larger than this are freed, not kept.
const SPARE_TEXT_MAX_BYTES: usize = 64 * 1024;

/// One spare out of a thread's pool (empty-handed if there is none: a
/// buffer of capacity 0 has not allocated).
fn take_spare<T: Default>(pool: &'static std::thread::LocalKey<Cell<[T; SPARES]>>) -> T {
    pool.try_with(|cell| {
        let mut spares = cell.take();
        let spare = std::mem::take(&mut spares[0]);
        spares.swap(0, 1);
        cell.set(spares);
        spare
    })
    .unwrap_or_default()
}

/// Gives `spare` back to a thread's pool, which keeps the newest
/// [`SPARES`] (an older one beyond that is freed). During thread teardown
/// the pool is already gone; the buffer is then simply freed.
fn give_spare<T: Default>(pool: &'static std::thread::LocalKey<Cell<[T; SPARES]>>, spare: T) {
    let _ = pool.try_with(|cell| {
        let mut spares = cell.take();
        // Slot 0 is taken first, so a free slot is filled from the front.
        spares.swap(0, 1);
        spares[0] = spare;
        cell.set(spares);
    });
}

/// An empty side buffer for unescaped strings, reusing one of this
/// thread's spares when there is one.
pub(crate) fn text_buffer() -> String {
    let mut text = take_spare(&SPARE_TEXTS);
    text.clear();
    text
}

/// An empty tape with room for at least `nodes` nodes, reusing one of this
/// thread's spare tapes when there is one.
pub(crate) fn tape_with_capacity(nodes: usize) -> Vec<Node> {
    let mut tape = take_spare(&SPARE_TAPES);
    tape.clear();
    tape.reserve(nodes);
    tape
}

/// A strictly decoded JSON document; [`Document::root`] is its value.
pub struct Document<'a> {
    /// The input, which unescaped strings are slices of.
    input: &'a str,
    nodes: Vec<Node>,
    /// Strings that had escapes, unescaped, back to back.
    unescaped: String,
}

impl<'a> Document<'a> {
    /// A document from a tape the decoder built.
    pub(crate) fn from_tape(input: &'a str, nodes: Vec<Node>, unescaped: String) -> Self {
        Self {
            input,
            nodes,
            unescaped,
        }
    }

    /// A document holding `value` (all its strings owned).
    pub fn from_value(value: &Value) -> Document<'static> {
        fn push(value: &Value, nodes: &mut Vec<Node>, text: &mut String) {
            let at = nodes.len();
            match value {
                Value::Null => nodes.push(Node::Null),
                Value::Bool(false) => nodes.push(Node::False),
                Value::Bool(true) => nodes.push(Node::True),
                Value::Number(n) => nodes.push(match (n.as_u64(), n.as_i64(), n.as_f64()) {
                    (Some(u), _, _) => Node::PosInt(u),
                    (None, Some(i), _) => Node::NegInt(i),
                    (None, None, f) => Node::Float(f.unwrap_or_default()),
                }),
                Value::String(s) => push_str(s, nodes, text),
                Value::Array(items) => {
                    nodes.push(Node::Array { len: 0, end: 0 });
                    for item in items {
                        push(item, nodes, text);
                    }
                    nodes[at] = Node::Array {
                        len: items.len(),
                        end: nodes.len(),
                    };
                }
                Value::Object(map) => {
                    nodes.push(Node::Object { len: 0, end: 0 });
                    for (k, v) in map {
                        push_str(k, nodes, text);
                        push(v, nodes, text);
                    }
                    nodes[at] = Node::Object {
                        len: map.len(),
                        end: nodes.len(),
                    };
                }
            }
        }
        fn push_str(s: &str, nodes: &mut Vec<Node>, text: &mut String) {
            let start = text.len();
            text.push_str(s);
            nodes.push(Node::Escaped {
                start,
                end: text.len(),
            });
        }
        let mut nodes = Vec::new();
        let mut text = String::new();
        push(value, &mut nodes, &mut text);
        Document::from_tape("", nodes, text)
    }

    /// The document's value.
    pub fn root(&self) -> Json<'_> {
        Json { doc: self, at: 0 }
    }

    /// The same document, owning all its strings (for a document decoded
    /// from a buffer that does not outlive it).
    pub fn into_owned(mut self) -> Document<'static> {
        let mut unescaped = std::mem::take(&mut self.unescaped);
        let input = self.input;
        let nodes = std::mem::take(&mut self.nodes)
            .into_iter()
            .map(|node| match node {
                Node::Str { start, end } => {
                    let from = unescaped.len();
                    unescaped.push_str(input.get(start..end).unwrap_or_default());
                    Node::Escaped {
                        start: from,
                        end: unescaped.len(),
                    }
                }
                other => other,
            })
            .collect();
        Document {
            input: "",
            nodes,
            unescaped,
        }
    }

    /// The text of the string node at `at`, if it is one.
    #[inline]
    fn str_at(&self, at: usize) -> Option<&str> {
        match self.nodes.get(at)? {
            Node::Str { start, end } => self.input.get(*start..*end),
            Node::Escaped { start, end } => self.unescaped.get(*start..*end),
            _ => None,
        }
    }

    /// The bytes of the key (string) node at `at`.
    #[inline]
    fn key_bytes(&self, at: usize) -> Option<&[u8]> {
        match self.nodes.get(at)? {
            Node::Str { start, end } => self.input.as_bytes().get(*start..*end),
            Node::Escaped { start, end } => self.unescaped.as_bytes().get(*start..*end),
            _ => None,
        }
    }

    /// Whether the string node at `at` is `key`.
    #[inline]
    fn key_is(&self, at: usize, key: &[u8]) -> bool {
        self.key_bytes(at).is_some_and(|k| same_key(k, key))
    }

    /// The index just past the value whose node is at `at`.
    #[inline]
    fn after(&self, at: usize) -> usize {
        match self.nodes.get(at) {
            Some(Node::Array { end, .. } | Node::Object { end, .. }) => *end,
            _ => at + 1,
        }
    }
}

impl Drop for Document<'_> {
    fn drop(&mut self) {
        let tape = std::mem::take(&mut self.nodes);
        if tape.capacity() > 0 && tape.capacity() <= SPARE_TAPE_MAX_NODES {
            give_spare(&SPARE_TAPES, tape);
        }
        let text = std::mem::take(&mut self.unescaped);
        if text.capacity() > 0 && text.capacity() <= SPARE_TEXT_MAX_BYTES {
            give_spare(&SPARE_TEXTS, text);
        }
    }
}

impl fmt::Debug for Document<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.root().fmt(f)
    }
}

/// One value of a [`Document`]: a cheap, copyable view.
#[derive(Clone, Copy)]
pub struct Json<'t> {
    doc: &'t Document<'t>,
    at: usize,
}

impl<'t> Json<'t> {
    #[inline]
    fn node(&self) -> Option<&'t Node> {
        self.doc.nodes.get(self.at)
    }

    /// The member `key`, when this is an object that has it.
    #[inline]
    pub fn get(&self, key: &str) -> Option<Json<'t>> {
        self.as_object().and_then(|o| o.get(key))
    }

    /// The object, if this is one.
    #[inline]
    pub fn as_object(&self) -> Option<Object<'t>> {
        match self.node()? {
            Node::Object { len, end } => Some(Object {
                doc: self.doc,
                start: self.at + 1,
                len: *len,
                end: *end,
            }),
            _ => None,
        }
    }

    /// The array, if this is one.
    #[inline]
    pub fn as_array(&self) -> Option<Array<'t>> {
        match self.node()? {
            Node::Array { len, end } => Some(Array {
                doc: self.doc,
                start: self.at + 1,
                len: *len,
                end: *end,
            }),
            _ => None,
        }
    }

    /// The text, if this is a string.
    #[inline]
    pub fn as_str(&self) -> Option<&'t str> {
        self.doc.str_at(self.at)
    }

    /// The boolean, if this is one.
    #[inline]
    pub fn as_bool(&self) -> Option<bool> {
        match self.node()? {
            Node::True => Some(true),
            Node::False => Some(false),
            _ => None,
        }
    }

    /// The number as a `u64`, if it is an integer literal that fits.
    pub fn as_u64(&self) -> Option<u64> {
        match self.node()? {
            Node::PosInt(u) => Some(*u),
            Node::NegInt(i) => u64::try_from(*i).ok(),
            _ => None,
        }
    }

    /// Whether this is `null`.
    #[inline]
    pub fn is_null(&self) -> bool {
        matches!(self.node(), Some(Node::Null))
    }

    /// The length of the value's compact JSON text as `serde_json` writes
    /// it (no whitespace, members in input order), without writing it.
    pub fn compact_len(&self) -> usize {
        match self.node() {
            None | Some(Node::Null) => 4,
            Some(Node::True) => 4,
            Some(Node::False) => 5,
            Some(Node::PosInt(u)) => digits(*u),
            Some(Node::NegInt(i)) => usize::from(*i < 0) + digits(i.unsigned_abs()),
            Some(Node::Float(f)) => Number::from_f64(*f).map_or(4, |n| n.to_string().len()),
            // A string that had no escapes has none to add either: the
            // decoder refused raw control characters, quotes and
            // backslashes in it.
            Some(Node::Str { start, end }) => end - start + 2,
            Some(Node::Escaped { .. }) => quoted_len(self.as_str().unwrap_or_default()),
            Some(Node::Array { len, .. }) => {
                let items: usize = self
                    .as_array()
                    .iter()
                    .flat_map(Array::iter)
                    .map(|item| item.compact_len())
                    .sum();
                2 + items + len.saturating_sub(1)
            }
            Some(Node::Object { len, .. }) => {
                let mut members = 0;
                let mut at = self.at + 1;
                for _ in 0..*len {
                    let key = Json { doc: self.doc, at };
                    let value = Json {
                        doc: self.doc,
                        at: at + 1,
                    };
                    members += key.compact_len() + 1 + value.compact_len();
                    at = self.doc.after(at + 1);
                }
                2 + members + len.saturating_sub(1)
            }
        }
    }

    /// The value as a `serde_json::Value`: the one [`super::decode_strict`]
    /// returns for the same input.
    pub fn to_value(&self) -> Value {
        match self.node() {
            None | Some(Node::Null) => Value::Null,
            Some(Node::True) => Value::Bool(true),
            Some(Node::False) => Value::Bool(false),
            Some(Node::PosInt(u)) => Value::Number(Number::from(*u)),
            // As the strict decoder makes it: `-0` is the integer 0.
            Some(Node::NegInt(i)) => Value::Number(Number::from(*i)),
            // Finite by construction, so `from_f64` always gives a number.
            Some(Node::Float(f)) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Some(Node::Str { .. } | Node::Escaped { .. }) => {
                Value::String(self.as_str().unwrap_or_default().to_owned())
            }
            Some(Node::Array { .. }) => Value::Array(
                self.as_array()
                    .map(|a| a.iter().map(|item| item.to_value()).collect())
                    .unwrap_or_default(),
            ),
            Some(Node::Object { .. }) => {
                Value::Object(self.as_object().map(|o| o.to_map()).unwrap_or_default())
            }
        }
    }
}

/// Whether a key is `want`: lengths first, then the first byte, then the
/// rest, so that most keys of an object are passed over without comparing
/// their text.
#[inline(always)]
fn same_key(key: &[u8], want: &[u8]) -> bool {
    key.len() == want.len() && key.first() == want.first() && same_bytes(key, want)
}

/// Whether two byte strings of the same length are equal, compared inline
/// eight bytes at a time: keys are short, and a call to `memcmp` for each
/// one cost more than the comparison.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut a, mut b) = (a, b);
    while let (Some((x, rest_a)), Some((y, rest_b))) =
        (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    {
        if x != y {
            return false;
        }
        a = rest_a;
        b = rest_b;
    }
    a.iter().zip(b).all(|(x, y)| x == y)
}

/// The number of decimal digits of `u`.
fn digits(mut u: u64) -> usize {
    let mut d = 1;
    while u >= 10 {
        u /= 10;
        d += 1;
    }
    d
}

/// The length of `s` quoted and escaped as `serde_json` writes it: `"` and
/// `\` and the short control escapes take two bytes, other control
/// characters six (`\u00XX`), everything else is copied.
fn quoted_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\x08' | b'\x0c' | b'\n' | b'\r' | b'\t' => 2,
            0x00..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

impl fmt::Debug for Json<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.to_value().fmt(f)
    }
}

/// Two views are equal when their values are.
impl PartialEq for Json<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.to_value() == other.to_value()
    }
}

/// An object of a [`Document`]: members in input order, keys unique.
#[derive(Clone, Copy)]
pub struct Object<'t> {
    doc: &'t Document<'t>,
    /// The first member's key node.
    start: usize,
    len: usize,
    end: usize,
}

impl<'t> Object<'t> {
    /// The value of `key`. A linear search: objects in provider bodies are
    /// small, and a lookup is rarer than a member.
    #[inline]
    pub fn get(&self, key: &str) -> Option<Json<'t>> {
        let key = key.as_bytes();
        let mut at = self.start;
        for _ in 0..self.len {
            if self.doc.key_is(at, key) {
                return Some(Json {
                    doc: self.doc,
                    at: at + 1,
                });
            }
            at = self.doc.after(at + 1);
        }
        None
    }

    /// Whether the object has `key`.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The members in input order.
    #[inline]
    pub fn iter(&self) -> Members<'t> {
        Members {
            doc: self.doc,
            at: self.start,
            end: self.end,
            left: self.len,
        }
    }

    /// The keys in input order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &'t str> + use<'t> {
        self.iter().map(|(k, _)| k)
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the object has no members.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The object as a `serde_json` map, in the same order.
    pub fn to_map(&self) -> Map<String, Value> {
        let mut map = Map::with_capacity(self.len);
        for (k, v) in self.iter() {
            map.insert(k.to_owned(), v.to_value());
        }
        map
    }
}

/// The members of an [`Object`].
pub struct Members<'t> {
    doc: &'t Document<'t>,
    at: usize,
    end: usize,
    left: usize,
}

impl<'t> Iterator for Members<'t> {
    type Item = (&'t str, Json<'t>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 || self.at >= self.end {
            return None;
        }
        let key = self.doc.str_at(self.at)?;
        let value = Json {
            doc: self.doc,
            at: self.at + 1,
        };
        self.at = self.doc.after(self.at + 1);
        self.left -= 1;
        Some((key, value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Members<'_> {}

/// An array of a [`Document`].
#[derive(Clone, Copy)]
pub struct Array<'t> {
    doc: &'t Document<'t>,
    /// The first item's node.
    start: usize,
    len: usize,
    end: usize,
}

impl<'t> Array<'t> {
    /// The items in order.
    #[inline]
    pub fn iter(&self) -> Items<'t> {
        Items {
            doc: self.doc,
            at: self.start,
            end: self.end,
            left: self.len,
        }
    }

    /// The item at `index` (a walk: arrays are read in order).
    pub fn get(&self, index: usize) -> Option<Json<'t>> {
        self.iter().nth(index)
    }

    /// The number of items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The items of an [`Array`].
pub struct Items<'t> {
    doc: &'t Document<'t>,
    at: usize,
    end: usize,
    left: usize,
}

impl<'t> Iterator for Items<'t> {
    type Item = Json<'t>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 || self.at >= self.end {
            return None;
        }
        let item = Json {
            doc: self.doc,
            at: self.at,
        };
        self.at = self.doc.after(self.at);
        self.left -= 1;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Items<'_> {}

impl<'t> Object<'t> {
    /// The values of `keys` (`None` for a key it lacks), found in one pass
    /// over the members that stops once every key has been seen: for a
    /// reader of several fields, cheaper than one [`Object::get`] per key,
    /// each of which walks the members again. Keys are unique (the decoder
    /// rejects a repeated key, and a `serde_json` map has none), so each
    /// slot is filled at most once and no later member can overwrite it.
    ///
    /// Always inlined: with `keys` known at the call, the loop over them
    /// unrolls into a length test per key and no call to compare bytes.
    #[inline(always)]
    pub(crate) fn get_each<const N: usize>(&self, keys: [&str; N]) -> [Option<Json<'t>>; N] {
        let mut found = [None; N];
        let mut left = N;
        let mut at = self.start;
        for _ in 0..self.len {
            if let Some(key) = self.doc.key_bytes(at) {
                for (slot, want) in found.iter_mut().zip(keys) {
                    if same_key(key, want.as_bytes()) {
                        *slot = Some(Json {
                            doc: self.doc,
                            at: at + 1,
                        });
                        left -= 1;
                        break;
                    }
                }
                if left == 0 {
                    break;
                }
            }
            at = self.doc.after(at + 1);
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::same_bytes;

    #[test]
    fn same_bytes_finds_a_difference_anywhere() {
        for len in 0..24 {
            let a: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(same_bytes(&a, &a.clone()), "{len}");
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!same_bytes(&a, &b), "{len} {at}");
            }
            let mut longer = a.clone();
            longer.push(b'z');
            assert!(!same_bytes(&a, &longer), "{len}");
        }
    }
}
