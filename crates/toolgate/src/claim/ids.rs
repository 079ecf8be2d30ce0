//! Identifiers of the claim protocol: 32-byte SHA-256 values for the
//! operation key and the fingerprint, and the per-attempt holder token.
//!
//! All three display as lowercase hex and parse from hex (either case).
//! Reading one back from storage goes through [`OperationKey::from_slice`]
//! and friends, so a value of the wrong length is a [`IdError`], never a
//! truncated or padded identifier.

use std::fmt;
use std::str::FromStr;

/// Why bytes or text are not a valid identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdError {
    /// The byte string has the wrong length.
    Length {
        /// Which identifier was being read.
        what: &'static str,
        /// The length it must have, in bytes.
        expected: usize,
        /// The length it had.
        found: usize,
    },
    /// The text is not hexadecimal.
    NotHex {
        /// Which identifier was being read.
        what: &'static str,
    },
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length {
                what,
                expected,
                found,
            } => write!(f, "{what} must be {expected} bytes, found {found}"),
            Self::NotHex { what } => write!(f, "{what} is not hexadecimal"),
        }
    }
}

impl std::error::Error for IdError {}

fn write_hex(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        let hi = DIGITS[usize::from(b >> 4)];
        let lo = DIGITS[usize::from(b & 0x0f)];
        write!(f, "{}{}", char::from(hi), char::from(lo))?;
    }
    Ok(())
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

fn parse_hex<const N: usize>(text: &str, what: &'static str) -> Result<[u8; N], IdError> {
    let raw = text.as_bytes();
    if raw.len() != N * 2 {
        // Report the length in bytes the text would decode to, rounded
        // down, so the message matches the binary form's.
        return Err(IdError::Length {
            what,
            expected: N,
            found: raw.len() / 2,
        });
    }
    let mut out = [0u8; N];
    for (slot, pair) in out.iter_mut().zip(raw.chunks_exact(2)) {
        match (nibble(pair[0]), nibble(pair[1])) {
            (Some(hi), Some(lo)) => *slot = (hi << 4) | lo,
            _ => return Err(IdError::NotHex { what }),
        }
    }
    Ok(out)
}

fn from_slice<const N: usize>(bytes: &[u8], what: &'static str) -> Result<[u8; N], IdError> {
    <[u8; N]>::try_from(bytes).map_err(|_| IdError::Length {
        what,
        expected: N,
        found: bytes.len(),
    })
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $len:expr, $what:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name([u8; $len]);

        impl $name {
            /// Length in bytes.
            pub const LEN: usize = $len;

            /// Wraps raw bytes.
            pub const fn from_bytes(bytes: [u8; $len]) -> Self {
                Self(bytes)
            }

            /// Reads the identifier from a stored byte string, rejecting any
            /// other length.
            pub fn from_slice(bytes: &[u8]) -> Result<Self, IdError> {
                from_slice(bytes, $what).map(Self)
            }

            /// The raw bytes.
            pub const fn as_bytes(&self) -> &[u8; $len] {
                &self.0
            }

            /// Lowercase hex.
            pub fn to_hex(&self) -> String {
                self.to_string()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write_hex(f, &self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "("))?;
                write_hex(f, &self.0)?;
                f.write_str(")")
            }
        }

        impl FromStr for $name {
            type Err = IdError;

            fn from_str(s: &str) -> Result<Self, IdError> {
                parse_hex(s, $what).map(Self)
            }
        }
    };
}

id_type!(
    /// Identity of one operation: SHA-256 over the canonical encoding of the
    /// server-fixed scope fields the tool names and the tool name (docs/design.md §8).
    /// It never contains the arguments, the actor or anything the model
    /// supplied, so one key admits one write however those vary.
    OperationKey,
    32,
    "operation key"
);

impl OperationKey {
    /// The idempotency key attempt `attempt` of this operation is sent
    /// downstream with, and fenced by (docs/design.md invariant 8): the
    /// key's hex for attempt 1, `<hex>.<n>` for attempt n >= 2. Per attempt,
    /// so that fencing one attempt never refuses the next.
    pub fn attempt_key(&self, attempt: u32) -> String {
        if attempt <= 1 {
            self.to_hex()
        } else {
            format!("{}.{attempt}", self.to_hex())
        }
    }
}

id_type!(
    /// SHA-256 over the canonical (RFC 8785) arguments of a proposal. Same
    /// key, different fingerprint is a `conflict`.
    Fingerprint,
    32,
    "fingerprint"
);

id_type!(
    /// A fresh, unpredictable token naming one claim attempt. A claim is won
    /// only by the attempt whose token is read back from the stored row
    /// (docs/design.md invariant 6), and only that token can complete it (invariant 7).
    ///
    /// The core has no random number generator, so the token is generated at
    /// the edge (128 bits from the operating system's generator) and passed
    /// in. Never derive it from anything predictable: a guessable token lets
    /// another worker complete a claim it does not own.
    HolderToken,
    16,
    "holder token"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_keys_are_the_key_then_the_key_and_the_attempt() {
        let key = OperationKey::from_bytes([0xab; 32]);
        assert_eq!(key.attempt_key(1), "ab".repeat(32));
        assert_eq!(key.attempt_key(2), format!("{}.2", "ab".repeat(32)));
        assert_eq!(key.attempt_key(17), format!("{}.17", "ab".repeat(32)));
    }

    #[test]
    fn hex_round_trip() {
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::try_from(i * 7 + 3).unwrap();
        }
        let key = OperationKey::from_bytes(bytes);
        let text = key.to_string();
        assert_eq!(text.len(), 64);
        assert_eq!(text, text.to_lowercase());
        assert_eq!(text.parse::<OperationKey>().unwrap(), key);
        assert_eq!(text.to_uppercase().parse::<OperationKey>().unwrap(), key);
    }

    #[test]
    fn wrong_length_and_non_hex_are_errors() {
        assert_eq!(
            OperationKey::from_slice(&[0u8; 31]),
            Err(IdError::Length {
                what: "operation key",
                expected: 32,
                found: 31
            })
        );
        assert!(Fingerprint::from_slice(&[0u8; 33]).is_err());
        assert!(HolderToken::from_slice(&[0u8; 16]).is_ok());
        assert!("ab".parse::<HolderToken>().is_err());
        let bad = "zz".repeat(16);
        assert_eq!(
            bad.parse::<HolderToken>(),
            Err(IdError::NotHex {
                what: "holder token"
            })
        );
        // Multi-byte UTF-8 of the right byte length must not panic.
        let odd = "é".repeat(16);
        assert!(odd.parse::<HolderToken>().is_err());
    }
}
