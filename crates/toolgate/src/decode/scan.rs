//! Byte-level scanning shared by the strict decoder and its fast path.

/// Bytes that end the plain run of a string: the closing quote, an escape,
/// or a control character (which JSON forbids raw inside strings).
static STRING_STOP: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        table[i] = true;
        i += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// The index of the first byte at or after `i` that ends a string's plain
/// run (see `STRING_STOP`), or `bytes.len()`.
///
/// Most strings in provider bodies (keys, identifiers) are short, so the
/// first eight bytes are tested as one word, which also locates the stop.
/// Longer runs go sixteen bytes at a time: the test whether any of them
/// stops the run compiles to a few vector compares (the `fold` has no early
/// exit to get in the way), and only the chunk with a stop is searched with
/// `stops`. Inlined; the last few bytes of the input are left to
/// `string_stop_tail`.
#[inline(always)]
pub(crate) fn string_stop(bytes: &[u8], mut i: usize) -> usize {
    if let Some(chunk) = bytes.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        let hits = stops(chunk);
        if hits != 0 {
            return i + (hits.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(chunk) = bytes.get(i..).and_then(<[u8]>::first_chunk::<16>) {
        // `b ^ 2 < 0x21`: a quote or a control character (see `stops`).
        if chunk
            .iter()
            .fold(false, |hit, &b| hit | (b ^ 2 < 0x21) | (b == b'\\'))
        {
            let (low, high) = chunk.split_at(8);
            let low = stops(low.try_into().unwrap_or(&[0; 8]));
            let high = stops(high.try_into().unwrap_or(&[0; 8]));
            return i + if low != 0 {
                low.trailing_zeros() / 8
            } else {
                8 + high.trailing_zeros() / 8
            } as usize;
        }
        i += 16;
    }
    string_stop_tail(bytes, i)
}

/// `string_stop` within the last sixteen bytes.
#[inline(never)]
fn string_stop_tail(bytes: &[u8], mut i: usize) -> usize {
    while let Some(chunk) = bytes.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        let hits = stops(chunk);
        if hits != 0 {
            return i + (hits.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < bytes.len() && !STRING_STOP[bytes[i] as usize] {
        i += 1;
    }
    i
}

/// The stops among eight bytes: each test below sets the high bit of a byte
/// that matches. Bits can also be set spuriously, but only above a true
/// match (by a borrow), so the lowest set bit is exact.
///
/// Quotes and control characters are one test: flipping bit 1 turns a
/// quote (0x22) into 0x20, keeps control characters below 0x20 and every
/// other byte at 0x21 or above, so the stops among them are the bytes below
/// 0x21 after the flip.
#[inline(always)]
fn stops(chunk: &[u8; 8]) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const FLIP: u64 = u64::from_ne_bytes([0x02; 8]);
    const BELOW: u64 = u64::from_ne_bytes([0x21; 8]);
    const BACKSLASHES: u64 = u64::from_ne_bytes([b'\\'; 8]);
    let w = u64::from_le_bytes(*chunk);
    let flipped = w ^ FLIP;
    let backslash = w ^ BACKSLASHES;
    (flipped.wrapping_sub(BELOW) & !flipped | backslash.wrapping_sub(ONES) & !backslash) & HIGHS
}

/// Decodes the escape whose backslash is just before `pos`: the character
/// and the index after the escape, or `None` for an invalid escape, a
/// malformed `\u` or a lone surrogate.
#[inline]
pub(super) fn escape_char(bytes: &[u8], pos: usize) -> Option<(char, usize)> {
    let c = match *bytes.get(pos)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => return unicode_escape(bytes, pos + 1),
        _ => return None,
    };
    Some((c, pos + 1))
}

/// The rest of a `\u` escape, its four hex digits at `pos` (and a low
/// surrogate's escape after a high one's).
#[inline(never)]
fn unicode_escape(bytes: &[u8], pos: usize) -> Option<(char, usize)> {
    let hi = hex4(bytes, pos)?;
    match hi {
        0xD800..=0xDBFF => {
            if bytes.get(pos + 4..pos + 6) != Some(b"\\u") {
                return None;
            }
            let lo = hex4(bytes, pos + 6)?;
            if !(0xDC00..=0xDFFF).contains(&lo) {
                return None;
            }
            let c = char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))?;
            Some((c, pos + 10))
        }
        0xDC00..=0xDFFF => None,
        _ => Some((char::from_u32(hi)?, pos + 4)),
    }
}

fn hex4(bytes: &[u8], pos: usize) -> Option<u32> {
    let mut v = 0u32;
    for &d in bytes.get(pos..pos + 4)? {
        let n = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | u32::from(n);
    }
    Some(v)
}

/// The digits of an integer part that starts with `1`–`9` at `i`: the index
/// after the last digit, the value, and whether it overflowed `u64` (the
/// value is then meaningless). Both decoders read integers with this, so
/// their range checks see the same number.
#[inline]
pub(crate) fn integer_digits(bytes: &[u8], mut i: usize) -> (usize, u64, bool) {
    let mut magnitude: u64 = 0;
    let mut overflow = false;
    while let Some(&d @ b'0'..=b'9') = bytes.get(i) {
        match magnitude
            .checked_mul(10)
            .and_then(|m| m.checked_add(u64::from(d - b'0')))
        {
            Some(m) => magnitude = m,
            None => overflow = true,
        }
        i += 1;
    }
    (i, magnitude, overflow)
}

#[cfg(test)]
mod tests {
    use super::{STRING_STOP, string_stop};

    /// Every byte value at every offset of the word, vector and tail paths,
    /// with a plain or a high byte around it: the same stop as a byte-by-byte
    /// search.
    #[test]
    fn string_stop_agrees_with_the_table() {
        for len in 0..48 {
            for fill in [b'a', b'#', b'!', 0xC3] {
                for at in 0..len {
                    for b in 0..=255u8 {
                        let mut bytes = vec![fill; len];
                        bytes[at] = b;
                        for from in [0, 1, 7] {
                            let expected = (from..len)
                                .find(|&i| STRING_STOP[bytes[i] as usize])
                                .unwrap_or(len.max(from));
                            assert_eq!(string_stop(&bytes, from), expected, "{len} {at} {b}");
                        }
                    }
                }
            }
        }
    }
}
