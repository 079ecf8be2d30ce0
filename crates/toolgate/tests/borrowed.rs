//! `decode_tape` (the tape parser the provider adapters read) against
//! `decode_strict` (the reference decoder): on every input both accept or both
//! reject; an accepted document gives the same value, and a rejected one the
//! same rejection (code, pointer and message). Generated values, their
//! compact and pretty texts, byte-level mutations of those texts, number and
//! nesting edge cases, objects with many members, and the raw provider
//! fixtures with mutations.

use std::path::Path;

mod support;

use proptest::prelude::*;
use serde_json::Value;
use support::json;
use toolgate::decode::{Document, Limits, decode_strict, decode_tape};

/// Both decoders agree on `input` under `limits`.
fn agree(input: &[u8], limits: &Limits) -> Result<(), TestCaseError> {
    let strict = decode_strict(input, limits);
    let borrowed = decode_tape(input, limits).map(|doc| doc.root().to_value());
    prop_assert_eq!(
        &borrowed,
        &strict,
        "input {:?}",
        String::from_utf8_lossy(input)
    );
    if let Ok(value) = &strict
        && let Ok(doc) = decode_tape(input, limits)
    {
        // The size the contract stage measures on a document is the
        // length of serde_json's compact text of the value.
        let compact = serde_json::to_string(value).expect("serialisable");
        prop_assert_eq!(doc.root().compact_len(), compact.len(), "{}", compact);
        // A document that owns its strings reads the same.
        prop_assert_eq!(&doc.into_owned().root().to_value(), value);
        prop_assert_eq!(&Document::from_value(value).root().to_value(), value);
    }
    Ok(())
}

const KEYS: &[&str] = &["", "a", "b", "type", "text", "a/b", "~1", "é", "\u{1F600}"];

fn key() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        (KEYS.len() as u32) => json::one_of(KEYS),
        1 => "[a-c]{1,3}",
        1 => "[\\x00-\\x7f]{0,6}",
        1 => any::<String>(),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => json::plain(),
        1 => (prop::num::f64::NORMAL | prop::num::f64::SUBNORMAL | prop::num::f64::ZERO)
            .prop_map(Value::from),
        1 => any::<String>().prop_map(Value::String),
        1 => "[\\x00-\\x1f\"\\\\/a]{0,6}".prop_map(Value::String),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    json::tree(leaf(), key(), (5, 64, 8))
}

/// Bytes that make a valid document invalid, or valid in another way.
const SPLICES: &[&str] = &[
    "\"",
    "\\",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "0",
    "-",
    "e",
    ".",
    " ",
    "\n",
    "\t",
    "a",
    "\u{1}",
    "\\u0061",
    "\\ud800",
    "\\udc00",
    "\\ud83d\\ude00",
    "\\x",
    "99999999999999999999",
    "9007199254740991",
    "9007199254740992",
    "-9007199254740992",
    "1.5e3",
    "1e400",
    "1e-400",
    "-0",
    "0e-400",
    "true",
    "fals",
    "null",
    "\"k\":1,",
    "\"a\":",
    "{}",
    "[]",
    "\u{feff}",
];

/// Applies up to four edits chosen by `edits` to `text`.
fn mutate(text: &str, edits: &[(u8, usize, usize)]) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    for &(kind, at, which) in edits {
        let at = if bytes.is_empty() {
            0
        } else {
            at % (bytes.len() + 1)
        };
        match kind % 5 {
            0 => bytes.truncate(at),
            1 => {
                if at < bytes.len() {
                    bytes.remove(at);
                }
            }
            2 => {
                let splice = SPLICES[which % SPLICES.len()].as_bytes();
                bytes.splice(at..at, splice.iter().copied());
            }
            3 => {
                // Repeat a stretch: often a member, so often a duplicate key.
                let end = (at + 1 + which % 24).min(bytes.len());
                let stretch = bytes[at.min(end)..end].to_vec();
                bytes.splice(end..end, stretch);
            }
            _ => {
                if at < bytes.len() {
                    bytes[at] = SPLICES[which % SPLICES.len()].as_bytes()[0];
                }
            }
        }
    }
    bytes
}

fn limits() -> impl Strategy<Value = Limits> {
    (
        0usize..8,
        prop_oneof![Just(u64::MAX), Just(1000u64), Just(1u64 << 53)],
        0usize..4,
    )
        .prop_map(|(nesting, max_integer, bytes)| {
            let l = Limits::provider_body()
                .with_max_integer(max_integer)
                .with_max_bytes([1 << 20, 64, 16, 1][bytes]);
            if nesting == 7 {
                l
            } else {
                l.with_max_nesting(nesting).expect("under the ceiling")
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn serialised_values_decode_alike(v in value()) {
        for text in [v.to_string(), serde_json::to_string_pretty(&v).expect("serialisable")] {
            agree(text.as_bytes(), &Limits::provider_body())?;
        }
    }

    #[test]
    fn mutated_texts_decode_alike(
        v in value(),
        pretty in any::<bool>(),
        edits in prop::collection::vec((any::<u8>(), any::<usize>(), any::<usize>()), 1..4),
    ) {
        let text = if pretty {
            serde_json::to_string_pretty(&v).expect("serialisable")
        } else {
            v.to_string()
        };
        agree(&mutate(&text, &edits), &Limits::provider_body())?;
    }

    #[test]
    fn limits_apply_alike(v in value(), l in limits()) {
        agree(v.to_string().as_bytes(), &l)?;
    }

    #[test]
    fn numbers_decode_alike(
        minus in any::<bool>(),
        int in "(0|[1-9][0-9]{0,21})",
        frac in prop::option::of("[0-9]{0,3}"),
        exp in prop::option::of("[eE][+-]?[0-9]{0,4}"),
        l in limits(),
    ) {
        let text = format!(
            "[{}{int}{}{}]",
            if minus { "-" } else { "" },
            frac.map(|f| format!(".{f}")).unwrap_or_default(),
            exp.unwrap_or_default(),
        );
        agree(text.as_bytes(), &l)?;
    }

    #[test]
    fn escapes_decode_alike(
        parts in prop::collection::vec(
            prop_oneof![
                "\\\\u[0-9a-fA-F]{4}",
                "\\\\u[dD][89a-fA-F][0-9a-fA-F]{2}",
                "\\\\[\"\\\\/bfnrtux]",
                "[a-z\u{e9}\u{1F600}]",
            ],
            0..6,
        ),
        as_key in any::<bool>(),
    ) {
        let s = parts.concat();
        let text = if as_key { format!("{{\"{s}\":1}}") } else { format!("[\"{s}\"]") };
        agree(text.as_bytes(), &Limits::provider_body())?;
    }

    #[test]
    fn noise_decodes_alike(
        parts in prop::collection::vec(prop::sample::select(SPLICES), 0..48)
    ) {
        agree(parts.concat().as_bytes(), &Limits::provider_body())?;
    }

    #[test]
    fn arbitrary_bytes_decode_alike(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        agree(&bytes, &Limits::provider_body())?;
    }

    #[test]
    fn large_objects_find_every_repeat(
        n in 1usize..80,
        repeat in prop::option::of((any::<prop::sample::Index>(), any::<bool>())),
    ) {
        // Past a few dozen members the tape parser switches from comparing
        // signatures to a hash set: both must find a repeated key, written
        // plainly or escaped.
        let keys: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
        let mut members: Vec<String> = keys.iter().map(|k| format!("\"{k}\":0")).collect();
        if let Some((which, escaped)) = repeat {
            let k = &keys[which.index(n)];
            let spelled = if escaped {
                k.chars().map(|c| format!("\\u{:04x}", u32::from(c))).collect()
            } else {
                k.clone()
            };
            members.push(format!("\"{spelled}\":1"));
        }
        agree(format!("{{{}}}", members.join(",")).as_bytes(), &Limits::provider_body())?;
    }

    #[test]
    fn nested_objects_keep_their_own_keys(
        outer in 1usize..50,
        inner in 0usize..50,
        at in any::<prop::sample::Index>(),
        inner_repeat in prop::option::of(any::<prop::sample::Index>()),
        after in prop::option::of((any::<prop::sample::Index>(), any::<bool>())),
    ) {
        // An object (small or large) inside another (small or large): a
        // key repeated inside the inner one is a duplicate; after it
        // closes, the outer one's keys are checked against its own
        // members only, never the inner one's.
        let inner_keys: Vec<String> = (0..inner).map(|i| format!("k{i}")).collect();
        let mut inner_members: Vec<String> =
            inner_keys.iter().map(|k| format!("\"{k}\":0")).collect();
        if let Some(which) = inner_repeat
            && inner > 0
        {
            inner_members.push(format!("\"{}\":1", inner_keys[which.index(inner)]));
        }
        let mut members: Vec<String> = (0..outer).map(|i| format!("\"o{i}\":0")).collect();
        let at = at.index(outer);
        members[at] = format!("\"o{at}\":{{{}}}", inner_members.join(","));
        if let Some((which, from_inner)) = after {
            let k = if from_inner && inner > 0 {
                inner_keys[which.index(inner)].clone()
            } else {
                format!("o{}", which.index(outer))
            };
            members.push(format!("\"{k}\":1"));
        }
        agree(format!("{{{}}}", members.join(",")).as_bytes(), &Limits::provider_body())?;
    }
}

/// Integers at and around every magnitude limit, both signs, under each
/// limit.
#[test]
fn integer_limits_decode_alike() {
    let edges = [
        0,
        1,
        999,
        1000,
        1001,
        (1 << 53) - 1,
        1 << 53,
        (1 << 53) + 1,
        i64::MAX as u64,
        i64::MAX as u64 + 1,
        i64::MAX as u64 + 2,
        u64::MAX - 1,
        u64::MAX,
    ];
    for max in [1000, (1 << 53) - 1, i64::MAX as u64, u64::MAX] {
        let limits = Limits::provider_body().with_max_integer(max);
        for n in edges {
            for text in [
                format!("{n}"),
                format!("-{n}"),
                format!("[{n}0]"),
                format!("-{n}0"),
            ] {
                agree(text.as_bytes(), &limits).expect(&text);
            }
        }
    }
}

/// Every provider fixture, and a few hundred mutations of each.
#[test]
fn provider_fixtures_decode_alike() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/providers");
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut checked = 0;
    for provider in std::fs::read_dir(&dir).expect("fixtures") {
        for file in std::fs::read_dir(provider.expect("entry").path()).expect("provider dir") {
            let path = file.expect("entry").path();
            let name = path.to_string_lossy().into_owned();
            if name.ends_with(".expected.json") || !name.ends_with(".json") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("fixture");
            agree(text.as_bytes(), &Limits::provider_body()).expect(&name);
            for _ in 0..200 {
                let edits: Vec<(u8, usize, usize)> = (0..1 + next() % 3)
                    .map(|_| (next() as u8, next() as usize, next() as usize))
                    .collect();
                agree(&mutate(&text, &edits), &Limits::provider_body()).expect(&name);
                checked += 1;
            }
        }
    }
    assert!(checked > 10_000, "only {checked} mutations");
}
