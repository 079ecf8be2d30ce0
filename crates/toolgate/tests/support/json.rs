//! The JSON value strategies the property tests share.

use proptest::prelude::*;
use serde_json::{Map, Value};

/// The largest integer magnitude a JSON reader holds exactly (2^53 − 1).
pub const MAX_SAFE: i64 = (1 << 53) - 1;

/// Null, booleans and safe integers, equally likely. Beside other leaves it
/// takes weight 3, one for each of its arms, so each stays as likely as a
/// leaf of weight 1.
pub fn plain() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-MAX_SAFE..=MAX_SAFE).prop_map(Value::from),
    ]
}

/// One of `keys`, drawn alike. Beside other arms it takes weight
/// `keys.len()`, so each key stays as likely as an arm of weight 1.
pub fn one_of(keys: &'static [&'static str]) -> impl Strategy<Value = String> + Clone {
    prop::sample::select(keys).prop_map(str::to_owned)
}

/// Arrays and objects over `leaf`: `depth` levels, about `size` nodes, up
/// to `width` members each. An object's members are drawn as pairs, so a
/// key drawn twice keeps its last value.
pub fn tree<L, K>(
    leaf: L,
    key: K,
    (depth, size, width): (u32, u32, u32),
) -> impl Strategy<Value = Value>
where
    L: Strategy<Value = Value> + 'static,
    K: Strategy<Value = String> + Clone + 'static,
{
    let members = 0..width as usize;
    leaf.prop_recursive(depth, size, width, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), members.clone()).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), members.clone())
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}
