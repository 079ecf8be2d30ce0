//! The storage normaliser on arbitrary column text: it never panics, always
//! yields an object, and what it yields survives encode → decode unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolgate::decode::normalize::{Action, decode_stored, encode};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let decoded = decode_stored(Some(text));
    if decoded.action.is_rejection() {
        assert!(decoded.object.is_empty());
    }
    let stored = encode(&Value::Object(decoded.object.clone()));
    assert!(matches!(stored.action, Action::Kept | Action::RejectedTooLarge));
    if stored.action == Action::Kept {
        assert_eq!(decode_stored(Some(&stored.text)).object, decoded.object);
    }
    // The same text offered to encode as a string input.
    let encoded = encode(&Value::String(text.to_owned()));
    #[expect(
        clippy::disallowed_methods,
        reason = "serde_json is the fuzz target's independent oracle"
    )]
    let back: Value = serde_json::from_str(&encoded.text).expect("encode emits JSON");
    assert!(back.is_object());
});
