//! Property tests for the strict decoder and the normaliser. They stand in
//! for the fuzz targets in CI (which need a nightly toolchain).

mod support;

use proptest::prelude::*;
use serde_json::{Map, Value};
use support::json;
use toolgate::decode::normalize::{self, Action};
use toolgate::decode::{DecodeCode, Limits, decode_strict};

/// Keys that have bitten storage layers before: array-looking keys, the
/// JSON-pointer separators, the empty key and non-ASCII.
fn key() -> impl Strategy<Value = String> {
    const KEYS: &[&str] = &["", "0", "1", "/", "a/b", "~1", "é", "日本", "\u{1F600}"];
    prop_oneof![
        (KEYS.len() as u32) => json::one_of(KEYS),
        1 => any::<String>(),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => json::plain(),
        // Finite floats only: serde_json cannot hold NaN or infinities.
        1 => (prop::num::f64::NORMAL
            | prop::num::f64::SUBNORMAL
            | prop::num::f64::ZERO
            | prop::num::f64::NEGATIVE)
            .prop_map(Value::from),
        1 => any::<String>().prop_map(Value::String),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Objects, with `{}` and nested empty objects drawn often.
fn object() -> impl Strategy<Value = Map<String, Value>> {
    let empty_nest = prop::collection::vec(key(), 0..4).prop_map(|keys| {
        let mut v = Value::Object(Map::new());
        for k in keys {
            let mut m = Map::new();
            m.insert(k, v);
            v = Value::Object(m);
        }
        v
    });
    prop::collection::btree_map(key(), prop_oneof![value(), empty_nest], 0..8)
        .prop_map(|m| m.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn strict_decode_agrees_with_serialisation(v in value()) {
        for text in [v.to_string(), serde_json::to_string_pretty(&v).expect("serialisable")] {
            prop_assert_eq!(decode_strict(text.as_bytes(), &Limits::provider_body()), Ok(v.clone()));
        }
    }

    #[test]
    fn round_trip_is_identity_for_every_object(x in object()) {
        let encoded = normalize::encode(&Value::Object(x.clone()));
        prop_assert_eq!(encoded.action, Action::Kept);
        let decoded = normalize::decode_stored(Some(&encoded.text));
        prop_assert_eq!(decoded.action, Action::Kept);
        prop_assert_eq!(decoded.object, x);
    }

    #[test]
    fn encode_always_yields_object_text(v in value()) {
        for input in [v.clone(), Value::String(v.to_string()), Value::String(Value::String(v.to_string()).to_string())] {
            let encoded = normalize::encode(&input);
            #[expect(clippy::disallowed_methods, reason = "serde_json is the independent oracle: what encode stores must be JSON to another reader too")]
            let back: Value = serde_json::from_str(&encoded.text).expect("encode emits JSON");
            prop_assert!(back.is_object(), "{:?} gave {}", input, encoded.text);
            // What encode stores, decode reads back unchanged.
            let decoded = normalize::decode_stored(Some(&encoded.text));
            prop_assert_eq!(Value::Object(decoded.object), back);
        }
    }

    #[test]
    fn decode_never_panics_and_always_yields_an_object(text in any::<String>(), v in value()) {
        for input in [text.clone(), v.to_string(), Value::String(v.to_string()).to_string()] {
            let decoded = normalize::decode_stored(Some(&input));
            // The type guarantees an object; check it serialises as one and
            // that a rejection is never reported with content.
            let text = Value::Object(decoded.object.clone()).to_string();
            prop_assert!(text.starts_with('{'), "not an object: {}", text);
            if decoded.action.is_rejection() {
                prop_assert!(decoded.object.is_empty());
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_strict(&bytes, &Limits::provider_body());
    }

    #[test]
    fn json_like_noise_never_panics(
        parts in prop::collection::vec(
            prop_oneof![
                Just("{"), Just("}"), Just("["), Just("]"), Just(","), Just(":"), Just("\""),
                Just("\\u"), Just("d800"), Just("1"), Just("-"), Just("e"), Just("."), Just("0"),
                Just("true"), Just("null"), Just(" "), Just("\"a\""), Just("\\"),
            ],
            0..64,
        )
    ) {
        let text: String = parts.concat();
        let _ = decode_strict(text.as_bytes(), &Limits::provider_body());
        let _ = normalize::decode_stored(Some(&text));
    }

    #[test]
    fn a_repeated_key_is_always_found(x in object(), k in key(), a in leaf(), b in leaf()) {
        // Splice a duplicate into an otherwise valid object, escaping the
        // repeat differently to prove spelling does not matter.
        let mut body = Value::Object(x.into_iter().filter(|(key, _)| *key != k).collect()).to_string();
        body.pop();
        let sep = if body.len() > 1 { "," } else { "" };
        // Every UTF-16 unit escaped: surrogate pairs for astral characters.
        let escaped: String = k.encode_utf16().map(|u| format!("\\u{u:04x}")).collect();
        let text = format!("{body}{sep}{}:{a},\"{escaped}\":{b}}}", Value::String(k.clone()));
        let r = decode_strict(text.as_bytes(), &Limits::provider_body()).expect_err("duplicate must reject");
        prop_assert_eq!(r.code(), DecodeCode::DuplicateKey);
        let mut pointer = String::from("/");
        pointer.push_str(&k.replace('~', "~0").replace('/', "~1"));
        prop_assert_eq!(r.pointer(), pointer);
    }
}
