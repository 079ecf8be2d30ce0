//! `toolgate check` and `toolgate policy export|explain` as scripts see them:
//! the built binary over every provider fixture, exit codes, one JSON line.

#![expect(
    clippy::disallowed_methods,
    reason = "the tests read JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]

use std::path::{Path, PathBuf};

use serde_json::Value;

mod support;
use support::{Run, toolgate};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn policy_path() -> String {
    format!("{ROOT}/examples/support-desk/policy.toml")
}

fn decision(run: &Run) -> Value {
    assert_eq!(run.code, 0, "stdout={} stderr={}", run.stdout, run.stderr);
    assert_eq!(run.stdout.lines().count(), 1, "one line: {:?}", run.stdout);
    serde_json::from_str(&run.stdout).expect("one JSON decision")
}

fn assert_subset(expected: &Value, actual: &Value, at: &str) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, v) in e {
                let got = a
                    .get(k)
                    .unwrap_or_else(|| panic!("{at}: no key {k} in {actual}"));
                if k == "stop" {
                    assert_subset(v, got, &format!("{at}/stop"));
                } else {
                    assert_eq!(v, got, "{at}: key {k} in {actual}");
                }
            }
        }
        _ => assert_eq!(expected, actual, "{at}"),
    }
}

/// `toolgate policy export --policy POLICY --provider PROVIDER`.
fn export(policy: &str, provider: &str) -> Run {
    toolgate(
        &[
            "policy",
            "export",
            "--policy",
            policy,
            "--provider",
            provider,
        ],
        b"",
    )
}

#[test]
fn check_gives_every_fixture_its_expected_decision_with_exit_0() {
    let policy = policy_path();
    let mut count = 0;
    for provider in [
        "anthropic",
        "openai-chat",
        "openai-responses",
        "gemini",
        "envelope",
    ] {
        let dir = Path::new(ROOT).join("fixtures/providers").join(provider);
        let mut expected: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("fixture directory")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.to_string_lossy().ends_with(".expected.json"))
            .collect();
        expected.sort();
        for exp in expected {
            let spec: Value =
                serde_json::from_slice(&std::fs::read(&exp).expect("read")).expect("expected JSON");
            let stream = spec["stream"].as_bool().expect("stream");
            let stem = exp
                .to_string_lossy()
                .trim_end_matches(".expected.json")
                .to_owned();
            let body = std::fs::read(format!("{stem}.{}", if stream { "sse" } else { "json" }))
                .expect("body");
            let attempt = spec["attempt"].to_string();
            let envelope = spec["envelope"].as_str().expect("envelope");
            let mut args = vec![
                "check",
                "--policy",
                &policy,
                "--provider",
                provider,
                "--attempt",
                &attempt,
                "--envelope",
                envelope,
            ];
            if stream {
                args.push("--stream");
            }
            let got = decision(&toolgate(&args, &body));
            assert_subset(&spec["decision"], &got, &stem);
            count += 1;
        }
    }
    assert!(count > 90, "only {count} fixtures");
}

#[test]
fn policy_load_errors_exit_2_naming_keyword_and_path() {
    let dir = std::env::temp_dir().join(format!("toolgate-check-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("policy.toml");
    let text = std::fs::read_to_string(policy_path())
        .expect("policy")
        .replace("\"minimum\": 1", "\"minimun\": 1");
    std::fs::write(&bad, text).expect("write");
    let bad = bad.to_string_lossy().into_owned();
    for args in [
        vec!["check", "--policy", &bad, "--provider", "envelope"],
        vec!["policy", "explain", "--policy", &bad],
        vec![
            "policy",
            "export",
            "--policy",
            &bad,
            "--provider",
            "openai-chat",
        ],
    ] {
        let run = toolgate(&args, b"{}");
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty());
        assert!(
            run.stderr.contains("`minimun`")
                && run.stderr.contains("/properties/amount_minor/minimun"),
            "{}",
            run.stderr
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_and_io_errors_exit_2() {
    let policy = policy_path();
    let cases: [(&str, &[&str]); 6] = [
        (&policy, &["--provider", "bedrock"]),
        (&policy, &[]),
        (&policy, &["--provider", "gemini", "--stream"]),
        (&policy, &["--provider", "envelope", "--attempt", "3"]),
        (&policy, &["--provider", "envelope", "--attempt", "0"]),
        ("/nonexistent/policy.toml", &["--provider", "envelope"]),
    ];
    for (policy, flags) in cases {
        let args = [&["check", "--policy", policy][..], flags].concat();
        let run = toolgate(&args, b"{}");
        assert_eq!(run.code, 2, "{args:?}: {}", run.stdout);
        assert!(run.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn a_rejection_is_a_successful_decision() {
    let policy = policy_path();
    let body = br#"{"outcome":"action","reply":"ok","proposed_action":{"tool":"apply_goodwill_credit","arguments":{"amount_minor":1500,"amount_minor":99999,"reason_code":"late_delivery"}}}"#;
    let d = decision(&toolgate(
        &["check", "--policy", &policy, "--provider", "envelope"],
        body,
    ));
    assert_eq!(d["outcome"], "rejected");
    assert_eq!(d["reason"], "duplicate_key");
    assert_eq!(d["pointer"], "/proposed_action/arguments/amount_minor");
    // Invalid UTF-8 and an empty body are decisions too.
    for body in [&b""[..], &[0xff, 0xfe][..]] {
        let d = decision(&toolgate(
            &["check", "--policy", &policy, "--provider", "anthropic"],
            body,
        ));
        assert_eq!(d["reason"], "invalid_json");
    }
}

#[test]
fn policy_export_prints_the_request_fragment_and_warns_on_stderr() {
    let policy = policy_path();
    let run = export(&policy, "anthropic");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(v["tools"][0]["name"], "apply_goodwill_credit");
    assert_eq!(v["tools"][0]["strict"], true);
    assert_eq!(v["tool_choice"]["disable_parallel_tool_use"], true);
    assert!(
        run.stderr.contains("warning:") && run.stderr.contains("`maximum`"),
        "{}",
        run.stderr
    );

    let run = export(&policy, "openai-chat");
    assert_eq!(run.code, 0);
    let v: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(v["parallel_tool_calls"], false);
    assert_eq!(v["tools"][0]["function"]["strict"], true);
    assert!(
        run.stderr.is_empty(),
        "no warnings for OpenAI: {}",
        run.stderr
    );

    let run = export(&policy, "envelope");
    assert_eq!(run.code, 2, "export is for provider request formats only");
}

#[test]
fn policy_explain_prints_the_worst_case_and_the_bounds() {
    let policy = policy_path();
    let run = toolgate(&["policy", "explain", "--policy", &policy], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    for needle in [
        "tool apply_goodwill_credit",
        r#""amount_minor":2000"#,
        "(passes the contract)",
        "credit:issue",
        "customer_id, ticket_id, version_seen",
        "once per state version",
        "unbounded arguments: none",
    ] {
        assert!(run.stdout.contains(needle), "{needle} in {}", run.stdout);
    }
}
