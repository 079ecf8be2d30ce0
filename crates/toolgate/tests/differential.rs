//! The differential check (`toolgate::decode::differential`): the fast path
//! against the reference decoder, over the JSONTestSuite corpus under
//! several limits, over generated documents with byte-level mutations, and
//! (ignored by default, run by hand; docs/fuzzing.md) over millions of
//! mutated inputs. The `decode_differential` fuzz target calls the same
//! function.

use std::collections::BTreeMap;
use std::path::PathBuf;

mod support;

use proptest::prelude::*;
use serde_json::Value;
use support::json;
use toolgate::decode::{Agreement, Limits, differential};

/// Every JSONTestSuite parsing case. Panics if the suite is missing: a
/// differential test that finds nothing proves nothing.
fn corpus() -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/suites/JSONTestSuite/test_parsing");
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("JSONTestSuite not found at {}: {e}", dir.display()));
    let mut cases = BTreeMap::new();
    for entry in entries {
        let path = entry.expect("readable directory entry").path();
        if path.extension().is_some_and(|e| e == "json") {
            cases.insert(path.clone(), std::fs::read(&path).expect("readable case"));
        }
    }
    assert!(
        cases.len() > 300,
        "expected the full suite, found {}",
        cases.len()
    );
    cases.into_values().collect()
}

/// Limits that exercise the byte and nesting checks as well as the grammar.
fn limit_set() -> Vec<Limits> {
    let mut all = vec![Limits::provider_body(), Limits::envelope()];
    for nesting in [0, 1, 2, 3, 64] {
        all.push(
            Limits::provider_body()
                .with_max_nesting(nesting)
                .expect("below the ceiling"),
        );
    }
    for bytes in [0, 1, 8, 64] {
        all.push(Limits::provider_body().with_max_bytes(bytes));
    }
    all
}

fn agree(input: &[u8], limits: &Limits) -> Agreement {
    differential(input, limits).unwrap_or_else(|m| panic!("{m}"))
}

#[test]
fn the_jsontestsuite_corpus_gets_one_answer_from_both_decoders() {
    let corpus = corpus();
    let (mut accepted, mut rejected) = (0, 0);
    for limits in limit_set() {
        for case in &corpus {
            match agree(case, &limits) {
                Agreement::Accepted => accepted += 1,
                Agreement::Rejected(_) => rejected += 1,
            }
        }
    }
    // Both answers occur, so the comparison ran on each side.
    assert!(
        accepted > 500 && rejected > 1000,
        "{accepted} accepted, {rejected} rejected"
    );
}

#[test]
fn every_truncation_of_every_corpus_case_gets_one_answer() {
    let limits = Limits::provider_body();
    for case in corpus().iter().filter(|c| c.len() <= 256) {
        for end in 0..case.len() {
            agree(&case[..end], &limits);
        }
    }
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => json::plain(),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => (prop::num::f64::NORMAL | prop::num::f64::SUBNORMAL | prop::num::f64::ZERO)
            .prop_map(Value::from),
        1 => any::<String>().prop_map(Value::String),
        1 => "[\\x00-\\x1f\"\\\\/a\u{e9}\u{1F600}]{0,6}".prop_map(Value::String),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    json::tree(leaf(), "[a-c]{0,2}|\\PC{0,3}", (6, 64, 8))
}

/// One edit: the bytes JSON's grammar turns on, plus any byte.
fn edit() -> impl Strategy<Value = (usize, u8, u8)> {
    let byte = prop_oneof![
        prop::sample::select(b"{}[]\":,\\-+.eE0123456789tfnu \t\r\n/".to_vec()),
        any::<u8>(),
    ];
    // (where, what, how: 0 replace, 1 insert, 2 delete, 3 duplicate a span)
    (any::<usize>(), byte, 0u8..4)
}

fn mutate(text: &mut Vec<u8>, (at, byte, how): (usize, u8, u8)) {
    let len = text.len();
    let i = if len == 0 { 0 } else { at % len };
    match how {
        0 if len > 0 => text[i] = byte,
        2 if len > 0 => {
            text.remove(i);
        }
        3 if len > 0 => {
            let end = (i + 1 + usize::from(byte) % 16).min(len);
            let span = text[i..end].to_vec();
            text.splice(i..i, span);
        }
        _ => text.insert(i.min(len), byte),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn generated_documents_get_one_answer(v in value(), pretty in any::<bool>()) {
        let text = if pretty {
            serde_json::to_vec_pretty(&v)
        } else {
            serde_json::to_vec(&v)
        }
        .expect("serialisable");
        for limits in limit_set() {
            agree(&text, &limits);
        }
    }

    #[test]
    fn mutated_documents_get_one_answer(
        v in value(),
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        let mut text = serde_json::to_vec(&v).expect("serialisable");
        for e in edits {
            mutate(&mut text, e);
            agree(&text, &Limits::provider_body());
        }
    }
}

/// A few million mutated inputs, for a run by hand (the figure is in
/// docs/fuzzing.md): `TOOLGATE_DIFFERENTIAL_INPUTS=3000000 cargo test -p
/// toolgate --release --test differential -- --ignored`. Seeds are the
/// corpus; each input is its seed after 0–3 random edits, with a
/// deterministic generator so that a failure reproduces.
#[test]
#[ignore = "millions of inputs; run by hand (docs/fuzzing.md)"]
fn millions_of_mutated_inputs_get_one_answer() {
    let inputs: u64 = std::env::var("TOOLGATE_DIFFERENTIAL_INPUTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3_000_000);
    let seeds = corpus();
    let limits = limit_set();
    const GRAMMAR: &[u8] = b"{}[]\":,\\-+.eE0123456789tfnu \t\r\n/";
    // xorshift64*: cheap, and the same sequence on every run.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let (mut accepted, mut rejected) = (0u64, 0u64);
    let mut text = Vec::new();
    for n in 0..inputs {
        let r = next();
        text.clear();
        text.extend_from_slice(&seeds[(r as usize) % seeds.len()]);
        for _ in 0..(r >> 32) % 4 {
            let e = next();
            let byte = if e & 1 == 0 {
                GRAMMAR[(e >> 8) as usize % GRAMMAR.len()]
            } else {
                (e >> 8) as u8
            };
            mutate(&mut text, ((e >> 16) as usize, byte, ((e >> 4) % 4) as u8));
        }
        // Three in four under the body limits, the rest under each other set.
        let l = if n % 4 == 0 {
            &limits[(n / 4 % limits.len() as u64) as usize]
        } else {
            &limits[0]
        };
        match differential(&text, l) {
            Ok(Agreement::Accepted) => accepted += 1,
            Ok(Agreement::Rejected(_)) => rejected += 1,
            Err(m) => panic!("input {n}: {m}"),
        }
    }
    eprintln!(
        "differential: {inputs} inputs, {accepted} accepted, {rejected} rejected, 0 mismatches"
    );
    assert_eq!(accepted + rejected, inputs);
    assert!(accepted > 0 && rejected > 0);
}
