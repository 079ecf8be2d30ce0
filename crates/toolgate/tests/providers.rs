//! Data-driven provider fixtures: `fixtures/providers/<provider>/<case>.json`
//! (or `.sse` for a stream) is a raw response body, and
//! `<case>.expected.json` holds the options and the expected decision.
//!
//! Each expected decision lists the keys it pins (always `outcome` and
//! `reason`); those must equal the keys of `Decision::to_json()`. `stop` is
//! compared as a subset too. A coverage test checks that every provider has
//! a fixture for every outcome it can produce.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;
use toolgate::contract::{CheckOptions, EnvelopeMode, Policy, check};
use toolgate::decode::{Limits, decode_strict};
use toolgate::provider::Provider;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/providers");
const POLICY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/support-desk/policy.toml"
);

struct Fixture {
    provider: Provider,
    case: String,
    body: Vec<u8>,
    expected: Value,
}

fn fixtures() -> Vec<Fixture> {
    let mut out = Vec::new();
    for provider in Provider::ALL {
        let dir = Path::new(FIXTURES).join(provider.as_str());
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("entry").path())
            .filter(|p| p.to_string_lossy().ends_with(".expected.json"))
            .collect();
        entries.sort();
        for exp in entries {
            let name = exp.file_name().and_then(|n| n.to_str()).expect("name");
            let case = name.trim_end_matches(".expected.json").to_owned();
            let expected = decode_strict(
                &std::fs::read(&exp).expect("read expected"),
                &Limits::provider_body(),
            )
            .unwrap_or_else(|r| panic!("{}: {r}", exp.display()));
            let stream = expected["stream"].as_bool().expect("stream flag");
            let body_path = dir.join(format!("{case}.{}", if stream { "sse" } else { "json" }));
            let body = std::fs::read(&body_path)
                .unwrap_or_else(|e| panic!("{}: {e}", body_path.display()));
            out.push(Fixture {
                provider,
                case,
                body,
                expected,
            });
        }
    }
    out
}

fn options(expected: &Value) -> CheckOptions {
    CheckOptions {
        stream: expected["stream"].as_bool().expect("stream"),
        attempt: u32::try_from(expected["attempt"].as_u64().expect("attempt")).expect("u32"),
        mode: match expected["envelope"].as_str().expect("envelope") {
            "native" => EnvelopeMode::Native,
            "structured" => EnvelopeMode::Structured,
            other => panic!("unknown envelope mode {other}"),
        },
    }
}

/// Every key of `expected` equals the same key of `actual`; objects under
/// `stop` are compared the same way, recursively.
pub fn assert_subset(expected: &Value, actual: &Value, at: &str) {
    let (Value::Object(e), Value::Object(a)) = (expected, actual) else {
        assert_eq!(expected, actual, "{at}");
        return;
    };
    for (k, v) in e {
        let got = a
            .get(k)
            .unwrap_or_else(|| panic!("{at}: decision has no key {k}"));
        if k == "stop" && v.is_object() {
            assert_subset(v, got, &format!("{at}/stop"));
        } else {
            assert_eq!(v, got, "{at}: key {k}\nfull decision: {actual}");
        }
    }
}

#[test]
fn every_fixture_gives_its_expected_decision() {
    let policy = Policy::load(&std::fs::read_to_string(POLICY).expect("policy")).expect("loads");
    let all = fixtures();
    assert!(all.len() > 90, "only {} fixtures", all.len());
    for f in &all {
        let id = format!("{}/{}", f.provider, f.case);
        let want = &f.expected["decision"];
        assert!(
            want.get("outcome").is_some() && want.get("reason").is_some(),
            "{id}: an expected decision pins at least outcome and reason"
        );
        if want["outcome"] == "action" {
            for key in ["tool", "arguments", "fingerprint", "reply"] {
                assert!(want.get(key).is_some(), "{id}: an action pins {key}");
            }
        }
        let got = check(&policy, f.provider, &f.body, &options(&f.expected)).to_json();
        assert_subset(want, &got, &id);
    }
}

/// The outcomes (and rejection reasons) each provider's fixtures must show.
/// Where a provider cannot produce one, it is listed as not applicable with
/// the reason, so a missing fixture is never silent.
#[test]
fn fixtures_cover_every_outcome_for_every_provider() {
    let required = [
        "action",
        "answer",
        "abstain",
        "refused",
        "truncated",
        "content_filtered",
        "rejected:multiple_actions",
        "rejected:invalid_arguments",
        "rejected:unknown_key",
        "rejected:duplicate_key",
        "rejected:unknown_tool",
    ];
    let not_applicable: BTreeMap<(&str, &str), &str> = [
        (
            ("anthropic", "content_filtered"),
            "Anthropic has no filter stop; refusals cover it",
        ),
        (
            ("gemini", "refused"),
            "Gemini has no refusal signal; its blocks are filters",
        ),
        (
            ("envelope", "refused"),
            "an envelope body carries no provider stop",
        ),
        (
            ("envelope", "truncated"),
            "an envelope body carries no provider stop; a cut envelope is invalid_json",
        ),
        (
            ("envelope", "content_filtered"),
            "an envelope body carries no provider stop",
        ),
        (
            ("envelope", "rejected:multiple_actions"),
            "the envelope holds one proposed_action; a list is invalid_envelope",
        ),
    ]
    .into_iter()
    .collect();
    let mut seen: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut cases: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let all = fixtures();
    for f in &all {
        let d = &f.expected["decision"];
        let outcome = d["outcome"].as_str().expect("outcome");
        let key = match d["reason"].as_str() {
            Some(r) => format!("{outcome}:{r}"),
            None => outcome.to_owned(),
        };
        seen.entry(f.provider.as_str()).or_default().insert(key);
        cases
            .entry(f.provider.as_str())
            .or_default()
            .insert(f.case.clone());
    }
    for provider in Provider::ALL {
        let p = provider.as_str();
        let got = seen.get(p).cloned().unwrap_or_default();
        for r in required {
            let na = not_applicable.contains_key(&(p, r));
            assert_eq!(
                got.contains(r),
                !na,
                "{p}: outcome {r} (not applicable: {na})"
            );
        }
        // The specific proposals the contract names, in every provider shape.
        for case in [
            "approved-by",
            "duplicate-key",
            "float-amount",
            "string-amount",
            "unknown-tool",
            "invalid-arguments",
        ] {
            assert!(cases[p].contains(case), "{p}: no fixture {case}");
        }
    }
}
