//! The differential check: the fast path ([`decode_tape`]'s parser, alone)
//! against the reference decoder ([`decode_strict`]) on one input.
//!
//! Shared by `tests/differential.rs` (the JSONTestSuite corpus, generated
//! and mutated documents) and the `decode_differential` fuzz target, so
//! both hold the two decoders to one definition of agreement
//! (docs/fuzzing.md).

use std::fmt;

use super::tape::fast_path;
use super::{DecodeCode, Limits, decode_strict, decode_tape};

/// What both decoders said about an input they agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agreement {
    /// Both accepted it, with the same value.
    Accepted,
    /// Both refused it; the reference's rejection has this code, and the
    /// public [`decode_tape`] returned that same rejection.
    Rejected(DecodeCode),
}

/// The two decoders gave different answers: a bug in one of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    detail: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

impl std::error::Error for Mismatch {}

/// Decodes `input` under `limits` with the reference decoder, with the fast
/// path alone and with the public [`decode_tape`], and checks that they
/// agree: the same accept or reject; for an accepted document the same
/// value and the same compact length; for a rejected one the same
/// rejection (code, pointer and message) from [`decode_tape`].
///
/// ```
/// use toolgate::decode::{Agreement, DecodeCode, Limits, differential};
///
/// let limits = Limits::envelope();
/// assert_eq!(differential(br#"{"a":[1,2.5]}"#, &limits), Ok(Agreement::Accepted));
/// assert_eq!(
///     differential(br#"{"a":1,"a":2}"#, &limits),
///     Ok(Agreement::Rejected(DecodeCode::DuplicateKey))
/// );
/// ```
pub fn differential(input: &[u8], limits: &Limits) -> Result<Agreement, Mismatch> {
    let mismatch = |what: String| Mismatch {
        detail: format!("{what}; input {:?}", String::from_utf8_lossy(input)),
    };
    let reference = decode_strict(input, limits);
    let fast = fast_path(input, limits);
    match (&reference, &fast) {
        (Ok(value), Some(doc)) => {
            let got = doc.root().to_value();
            if &got != value {
                return Err(mismatch(format!(
                    "values differ: reference {value}, fast path {got}"
                )));
            }
            let compact = serde_json::to_string(value).map_or(usize::MAX, |t| t.len());
            if doc.root().compact_len() != compact {
                return Err(mismatch(format!(
                    "compact length differs: reference {compact}, fast path {}",
                    doc.root().compact_len()
                )));
            }
            Ok(Agreement::Accepted)
        }
        (Ok(value), None) => Err(mismatch(format!(
            "the reference accepts ({value}), the fast path refuses"
        ))),
        (Err(r), Some(doc)) => Err(mismatch(format!(
            "the reference rejects ({} at {:?}: {}), the fast path accepts ({})",
            r.code(),
            r.pointer(),
            r.message(),
            doc.root().to_value()
        ))),
        (Err(r), None) => match decode_tape(input, limits) {
            Err(t) if &t == r => Ok(Agreement::Rejected(r.code())),
            other => Err(mismatch(format!(
                "decode_tape answers {:?}, the reference {r:?}",
                other.map(|d| d.root().to_value())
            ))),
        },
    }
}
