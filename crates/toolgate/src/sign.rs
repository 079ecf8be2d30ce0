//! The signature toolgate puts on every request it sends to an
//! application (the webhook executor's POST, the status URL's GET, the HTTP
//! state source's GET, the reviewer notification): one scheme, one home.
//!
//! ```text
//! Toolgate-Signature: t=<unix seconds>,v2=<hex HMAC-SHA256(secret, S)>
//! S = "<t>\n<METHOD>\n<target>\n" followed by the raw body bytes
//! ```
//!
//! `target` is the request target as sent on the request line: the path and,
//! when there is a query, `?` and the query, percent-encoded as sent. A
//! signature over the body alone would let a captured GET (which has none)
//! be replayed against any path or query within the receiver's window; over
//! method, target and body, it is valid for exactly the request it was made
//! for. The timestamp is inside the signed text so that a receiver can
//! refuse an old request (five minutes is a usual tolerance).
//!
//! Pure computation: the caller passes the time, as everywhere in the core.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The header's name.
pub const HEADER: &str = "Toolgate-Signature";

/// HMAC-SHA256 of `message` under `key`.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut mac = new_mac(key);
    mac.update(message);
    mac.finalize().into_bytes().into()
}

fn new_mac(key: &[u8]) -> Hmac<Sha256> {
    // INVARIANT: HMAC takes a key of any length (RFC 2104 hashes a long
    // one), so `new_from_slice` cannot fail here.
    Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length")
}

/// The text a v2 signature covers: `"<t>\n<METHOD>\n<target>\n<body>"`.
pub fn signed_text(unix_seconds: u64, method: &str, target: &str, body: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(body.len() + target.len() + method.len() + 24);
    s.extend_from_slice(unix_seconds.to_string().as_bytes());
    s.push(b'\n');
    s.extend_from_slice(method.to_ascii_uppercase().as_bytes());
    s.push(b'\n');
    s.extend_from_slice(target.as_bytes());
    s.push(b'\n');
    s.extend_from_slice(body);
    s
}

/// The `Toolgate-Signature` value for one request: `method` (any case; it
/// is signed upper case), `target` (path and query as sent), `body` (empty
/// for a GET), at `unix_seconds`.
pub fn header_value(
    secret: &[u8],
    unix_seconds: u64,
    method: &str,
    target: &str,
    body: &[u8],
) -> String {
    let text = signed_text(unix_seconds, method, target, body);
    format!(
        "t={unix_seconds},v2={}",
        hex::encode(hmac_sha256(secret, &text))
    )
}

/// Why a signature was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The header is not `t=<digits>,v2=<64 hex digits>`.
    Malformed,
    /// `t` is further than the tolerance from the receiver's clock.
    Stale,
    /// The HMAC does not match.
    Mismatch,
}

/// Verifies a `Toolgate-Signature` value the way a receiver must: the
/// timestamp within `tolerance_secs` of `now_unix_seconds`, and the HMAC
/// compared in constant time. Receivers in other languages do the same
/// (docs/deploy.md); this one serves Rust receivers and the tests.
pub fn verify(
    secret: &[u8],
    header: &str,
    now_unix_seconds: u64,
    tolerance_secs: u64,
    method: &str,
    target: &str,
    body: &[u8],
) -> Result<(), Refusal> {
    let (t, mac) = parse(header).ok_or(Refusal::Malformed)?;
    if now_unix_seconds.abs_diff(t) > tolerance_secs {
        return Err(Refusal::Stale);
    }
    let mut expected = new_mac(secret);
    expected.update(&signed_text(t, method, target, body));
    // `verify_slice` compares in constant time.
    expected.verify_slice(&mac).map_err(|_| Refusal::Mismatch)
}

fn parse(header: &str) -> Option<(u64, Vec<u8>)> {
    let mut t = None;
    let mut v2 = None;
    for part in header.split(',') {
        match part.trim().split_once('=')? {
            ("t", v) if v.bytes().all(|b| b.is_ascii_digit()) && !v.is_empty() => {
                t = Some(v.parse().ok()?);
            }
            ("v2", v) if v.len() == 64 => v2 = Some(hex::decode(v).ok()?),
            _ => {}
        }
    }
    Some((t?, v2?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> Vec<u8> {
        hex::decode(s).unwrap()
    }

    /// RFC 4231's HMAC-SHA-256 test cases 1–4, 6 and 7 (case 5 checks a
    /// truncated output, which this never produces).
    #[test]
    fn rfc_4231_vectors() {
        let cases: [(Vec<u8>, Vec<u8>, &str); 6] = [
            (
                vec![0x0b; 20],
                b"Hi There".to_vec(),
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            ),
            (
                b"Jefe".to_vec(),
                b"what do ya want for nothing?".to_vec(),
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                vec![0xaa; 20],
                vec![0xdd; 50],
                "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
            ),
            (
                h("0102030405060708090a0b0c0d0e0f10111213141516171819"),
                vec![0xcd; 50],
                "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
            ),
            (
                vec![0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec(),
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
            (
                vec![0xaa; 131],
                b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.".to_vec(),
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
            ),
        ];
        for (key, data, want) in cases {
            assert_eq!(hex::encode(hmac_sha256(&key, &data)), want);
        }
    }

    #[test]
    fn v2_signs_time_method_target_and_body() {
        let v = header_value(
            b"k",
            1_700_000_000,
            "get",
            "/status?idempotency_key=ab.2",
            b"",
        );
        let want = hex::encode(hmac_sha256(
            b"k",
            b"1700000000\nGET\n/status?idempotency_key=ab.2\n",
        ));
        assert_eq!(v, format!("t=1700000000,v2={want}"));
    }

    #[test]
    fn verify_accepts_its_own_and_refuses_any_change() {
        let header = header_value(b"secret", 1_000, "POST", "/refund", b"{}");
        assert_eq!(
            verify(b"secret", &header, 1_100, 300, "POST", "/refund", b"{}"),
            Ok(())
        );
        use Refusal::{Mismatch, Stale};
        let cases = [
            ("other", 1_000, "POST", "/refund", "{}", Mismatch),
            ("secret", 1_000, "GET", "/refund", "{}", Mismatch),
            ("secret", 1_000, "POST", "/refund?x", "{}", Mismatch),
            ("secret", 1_000, "POST", "/refund", "{ }", Mismatch),
            ("secret", 1_301, "POST", "/refund", "{}", Stale),
            ("secret", 699, "POST", "/refund", "{}", Stale),
        ];
        for (secret, now, method, target, body, want) in cases {
            let (secret, body) = (secret.as_bytes(), body.as_bytes());
            assert_eq!(
                verify(secret, &header, now, 300, method, target, body),
                Err(want)
            );
        }
        for bad in ["", "t=1000", "v2=00", "t=x,v2=00", "t=1000,v1=abcd"] {
            assert_eq!(
                verify(b"secret", bad, 1_000, 300, "POST", "/refund", b"{}"),
                Err(Refusal::Malformed),
                "{bad:?}"
            );
        }
    }
}
