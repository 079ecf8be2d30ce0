//! The fingerprint's fast path (serde_json's compact output for ASCII keys
//! and no floats) must be byte-identical to the `serde_jcs` canonicaliser on
//! every value, and key order and whitespace must never change a
//! fingerprint.

mod support;

use proptest::prelude::*;
use serde_json::Value;
use support::json::{self, MAX_SAFE};
use toolgate::decode::{Limits, decode_strict};
use toolgate::op::{canonical_json, canonical_json_jcs, fingerprint};

fn key() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        // ASCII keys, control characters and escapes included: the fast path.
        "[\\x00-\\x7f]{0,8}",
        Just("amount_minor".to_owned()),
        Just("reason_code".to_owned()),
        // Non-ASCII keys: the serde_jcs path (UTF-16 order differs).
        Just("\u{e000}".to_owned()),
        Just("\u{1F600}".to_owned()),
        any::<String>(),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => json::plain(),
        1 => (0..=MAX_SAFE).prop_map(|n| Value::from(n as u64)),
        1 => (prop::num::f64::NORMAL | prop::num::f64::ZERO | prop::num::f64::NEGATIVE)
            .prop_map(Value::from),
        1 => any::<String>().prop_map(Value::String),
        1 => "[\\x00-\\x1f\"\\\\/\\x7f]{0,6}".prop_map(Value::String),
    ]
}

/// Mostly [`leaf`], sometimes an integer beyond ±(2^53−1): both paths must
/// refuse it alike (the fast path hands it to the checked one).
fn leaf_or_out_of_range() -> impl Strategy<Value = Value> {
    prop_oneof![
        40 => leaf(),
        1 => (MAX_SAFE + 1..=i64::MAX).prop_map(Value::from),
        1 => (i64::MIN..=-MAX_SAFE - 1).prop_map(Value::from),
        1 => (i64::MAX as u64 + 1..=u64::MAX).prop_map(Value::from),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    nest(leaf())
}

/// Values that may hold an integer out of range somewhere.
fn value_or_out_of_range() -> impl Strategy<Value = Value> {
    nest(leaf_or_out_of_range())
}

fn nest(leaves: impl Strategy<Value = Value> + 'static) -> impl Strategy<Value = Value> {
    json::tree(leaves, key(), (4, 48, 6))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn fast_path_equals_serde_jcs(v in value_or_out_of_range()) {
        prop_assert_eq!(canonical_json(&v), canonical_json_jcs(&v));
    }

    #[test]
    fn whitespace_and_key_order_do_not_change_the_fingerprint(v in value()) {
        // Re-read the value from pretty-printed text (which also reverses
        // nothing but whitespace) and from its canonical text.
        let pretty = serde_json::to_string_pretty(&v).expect("serialise");
        let limits = Limits::provider_body().with_max_nesting(100).expect("limits");
        let reread = decode_strict(pretty.as_bytes(), &limits).expect("own output decodes");
        prop_assert_eq!(fingerprint(&v), fingerprint(&reread));
    }
}
