//! JSONTestSuite (docs/design.md §3), from the copy in
//! `fixtures/suites/JSONTestSuite` (provenance in `fixtures/suites/README.md`).
//!
//! `y_` cases are accepted except the two duplicate-key cases, which are
//! rejected as `duplicate_key` by design; `n_` cases are rejected; `i_` cases
//! follow the table in `docs/json-conformance.md`, which this test parses so
//! that the documentation and the behaviour cannot drift apart.

use std::collections::BTreeMap;
use std::path::PathBuf;

use toolgate::decode::{Limits, decode_strict, decode_tape};

fn suite_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/suites/JSONTestSuite/test_parsing")
}

/// Every case file, by name. Panics (fails) if the suite is missing: a
/// conformance test that silently finds nothing would prove nothing.
fn cases() -> BTreeMap<String, Vec<u8>> {
    let dir = suite_dir();
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("JSONTestSuite not found at {}: {e}", dir.display()));
    let mut cases = BTreeMap::new();
    for entry in entries {
        let path = entry.expect("readable directory entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("UTF-8 file name")
            .to_owned();
        if name.ends_with(".json") {
            cases.insert(name, std::fs::read(&path).expect("readable case"));
        }
    }
    assert!(
        cases.len() > 300,
        "expected the full suite, found {} cases",
        cases.len()
    );
    cases
}

/// The outcome as the docs table spells it: `accepted` or the code.
fn outcome(input: &[u8]) -> String {
    match decode_strict(input, &Limits::provider_body()) {
        Ok(_) => "accepted".to_owned(),
        Err(r) => r.code().as_str().to_owned(),
    }
}

#[test]
fn y_cases_are_accepted_except_duplicate_keys() {
    let mut checked = 0;
    for (name, bytes) in cases().iter().filter(|(n, _)| n.starts_with("y_")) {
        let expected = if name.starts_with("y_object_duplicated_key") {
            "duplicate_key"
        } else {
            "accepted"
        };
        assert_eq!(outcome(bytes), expected, "{name}");
        checked += 1;
    }
    assert!(checked >= 95, "only {checked} y_ cases");
}

#[test]
fn n_cases_are_rejected() {
    let mut checked = 0;
    for (name, bytes) in cases().iter().filter(|(n, _)| n.starts_with("n_")) {
        assert_ne!(outcome(bytes), "accepted", "{name} must be rejected");
        checked += 1;
    }
    assert!(checked >= 180, "only {checked} n_ cases");
}

#[test]
fn i_cases_follow_the_documented_table() {
    let doc_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/json-conformance.md");
    let doc = std::fs::read_to_string(&doc_path).expect("docs/json-conformance.md");
    let mut table = BTreeMap::new();
    for line in doc.lines().filter(|l| l.starts_with("| `i_")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`').to_owned();
        let stand = cells[2].replace('`', "");
        let stand = stand
            .strip_prefix("rejected: ")
            .unwrap_or(&stand)
            .to_owned();
        assert!(
            table.insert(name.clone(), stand).is_none(),
            "{name} listed twice"
        );
    }
    let cases = cases();
    let i_cases: Vec<_> = cases.iter().filter(|(n, _)| n.starts_with("i_")).collect();
    assert_eq!(
        table.len(),
        i_cases.len(),
        "the table must list every i_ case exactly once"
    );
    for (name, bytes) in i_cases {
        let stand = table
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing from the table"));
        assert_eq!(&outcome(bytes), stand, "{name}");
    }
}

#[test]
fn no_case_panics_under_any_nesting_limit() {
    for n in [0, 1, 2, 10, Limits::NESTING_CEILING] {
        let limits = Limits::provider_body()
            .with_max_nesting(n)
            .expect("within ceiling");
        for bytes in cases().values() {
            let _ = decode_strict(bytes, &limits);
        }
    }
}

/// The tape decoder the provider adapters read gives the strict decoder's
/// answer on every case: the same value, or the same rejection.
#[test]
fn the_borrowed_decoder_agrees_on_every_case() {
    for n in [1, 2, Limits::DEFAULT_MAX_NESTING, Limits::NESTING_CEILING] {
        let limits = Limits::provider_body()
            .with_max_nesting(n)
            .expect("within ceiling");
        for (name, bytes) in cases() {
            let borrowed = decode_tape(&bytes, &limits).map(|doc| doc.root().to_value());
            assert_eq!(
                borrowed,
                decode_strict(&bytes, &limits),
                "{name} (nesting {n})"
            );
        }
    }
}
