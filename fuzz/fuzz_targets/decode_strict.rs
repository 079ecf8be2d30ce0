//! The strict decoder on arbitrary bytes, with serde_json as an oracle:
//! whatever the strict decoder accepts, serde_json must accept with the same
//! value (the strict decoder only ever accepts a subset), and re-decoding
//! the serialised result must give the same value again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolgate::decode::{Limits, decode_strict};

fuzz_target!(|data: &[u8]| {
    // The first byte picks a nesting limit so the limit logic is fuzzed too.
    let (nesting, input) = match data.split_first() {
        Some((n, rest)) => (usize::from(*n % 70), rest),
        None => (64, data),
    };
    let limits = Limits::provider_body()
        .with_max_nesting(nesting)
        .expect("below the ceiling");
    let Ok(value) = decode_strict(input, &limits) else {
        return;
    };
    #[expect(
        clippy::disallowed_methods,
        reason = "serde_json is the fuzz target's independent oracle"
    )]
    let oracle: Value = serde_json::from_slice(input).expect("serde_json accepts what strict accepts");
    assert!(same(&value, &oracle), "strict {value} vs serde_json {oracle}");
    let again = decode_strict(value.to_string().as_bytes(), &Limits::provider_body()).expect("re-decode");
    assert_eq!(again, value);
});

/// Structural equality; floats within a few ULP, because serde_json's default
/// float parser is not always correctly rounded while `str::parse` is.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => x == y || ((x - y) / x).abs() < 1e-15,
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}
