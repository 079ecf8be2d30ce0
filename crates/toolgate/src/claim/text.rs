//! Text a person reads back: labels in the audit log and the reviewer
//! queue, and the identifiers a caller may name (an actor).
//!
//! Two rules live here so that every front door applies the same ones:
//!
//! - [`audit_label`] turns any text, however a model chose it (a tool name
//!   with a newline, a NUL, 300 KB of it), into a label an audit entry
//!   accepts. A label is never a reason to skip the audit row.
//! - [`is_hidden`] names the characters a reader cannot see or that
//!   reorder what they see (controls, bidi controls, zero-width and other
//!   format characters, line and paragraph separators, spaces other than
//!   U+0020): an identifier with one could show as another one.

use super::record::MAX_LABEL_BYTES;

/// Whether `c` is invisible, or changes how the text around it reads:
/// a control character (C0, DEL, C1), a format character (Unicode category
/// Cf: bidi embeddings, overrides and isolates such as U+202E, the
/// zero-width space, joiners and the byte-order mark, soft hyphen, tag
/// characters), a line or paragraph separator (U+2028, U+2029), a
/// variation selector, or a space other than U+0020 (no-break, en, em,
/// ideographic, …).
pub fn is_hidden(c: char) -> bool {
    if c.is_control() {
        return true;
    }
    if c.is_whitespace() && c != ' ' {
        return true;
    }
    matches!(
        c as u32,
        0x00AD
            | 0x034F
            | 0x0600..=0x0605
            | 0x061C
            | 0x06DD
            | 0x070F
            | 0x0890..=0x0891
            | 0x08E2
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x2028..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
    )
}

/// `text` as a label an audit entry or a review item keeps: every
/// [`is_hidden`] character and every backslash written as an escape
/// (`\u{202e}`, `\\`), so the label reads as what was sent and no two
/// different texts read alike; cut at [`MAX_LABEL_BYTES`] on a character
/// boundary, ending in `…` when cut; `""` (two quote marks) for an empty
/// text. The result always passes the audit entry's label check.
pub fn audit_label(text: &str) -> String {
    if text.is_empty() {
        return "\"\"".to_owned();
    }
    const ELLIPSIS: &str = "…";
    let budget = MAX_LABEL_BYTES - ELLIPSIS.len();
    let mut out = String::with_capacity(text.len().min(MAX_LABEL_BYTES + 16));
    // Where the escaped text may be cut: the end of the last piece that
    // still leaves room for the ellipsis.
    let mut cut_at = 0;
    for c in text.chars() {
        if c == '\\' {
            out.push_str("\\\\");
        } else if is_hidden(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
        if out.len() <= budget {
            cut_at = out.len();
        }
        if out.len() > MAX_LABEL_BYTES {
            out.truncate(cut_at);
            out.push_str(ELLIPSIS);
            return out;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_characters_are_escaped_and_long_labels_cut() {
        assert_eq!(audit_label("refund_order"), "refund_order");
        assert_eq!(audit_label("a\nb\0c"), "a\\u{a}b\\u{0}c");
        assert_eq!(audit_label("x\u{202e}y"), "x\\u{202e}y");
        assert_eq!(audit_label("z\u{200b}w"), "z\\u{200b}w");
        assert_eq!(audit_label("p\u{2028}q"), "p\\u{2028}q");
        assert_eq!(audit_label("a\\u{a}"), "a\\\\u{a}");
        assert_eq!(audit_label(""), "\"\"");
        let long = audit_label(&"é".repeat(400));
        assert!(long.len() <= MAX_LABEL_BYTES, "{}", long.len());
        assert!(long.ends_with('…'));
        // A label made of escapes is cut on an escape's boundary.
        let nuls = audit_label(&"\0".repeat(300));
        assert!(nuls.len() <= MAX_LABEL_BYTES);
        assert!(nuls.trim_end_matches('…').ends_with("\\u{0}"), "{nuls}");
        // Exactly the limit is kept whole.
        let full = "t".repeat(MAX_LABEL_BYTES);
        assert_eq!(audit_label(&full).len(), MAX_LABEL_BYTES);
    }

    #[test]
    fn look_alike_spaces_and_format_characters_are_hidden() {
        for c in [
            '\u{0}',
            '\u{7f}',
            '\u{85}',
            '\u{a0}',
            '\u{ad}',
            '\u{200b}',
            '\u{200d}',
            '\u{202e}',
            '\u{2028}',
            '\u{2029}',
            '\u{2066}',
            '\u{3000}',
            '\u{feff}',
            '\u{e0041}',
        ] {
            assert!(is_hidden(c), "U+{:04X}", c as u32);
        }
        for c in ['a', ' ', 'é', 'а', '-', '@', '漢'] {
            assert!(!is_hidden(c), "U+{:04X}", c as u32);
        }
    }
}
