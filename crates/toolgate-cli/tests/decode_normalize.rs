//! The `decode` and `normalize` command interfaces, which other tooling
//! depends on byte for byte.

use serde_json::{Value, json};

mod support;
use support::{Run, toolgate};

#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
fn rejection(run: &Run) -> Value {
    assert_eq!(run.code, 1, "stdout={} stderr={}", run.stdout, run.stderr);
    assert_eq!(run.stdout.lines().count(), 1, "one line: {:?}", run.stdout);
    let v: Value = serde_json::from_str(&run.stdout).expect("JSON line");
    let keys: Vec<&str> = v
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["rejected", "pointer", "message"]);
    v
}

#[test]
fn decode_accepts_and_prints_compact() {
    let run = toolgate(
        &["decode"],
        b" { \"b\" : [1, 1.5e3, \"x\"] , \"a\": null }\n",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "{\"b\":[1,1500.0,\"x\"],\"a\":null}\n");
}

#[test]
fn decode_rejections_are_one_json_line_with_exit_1() {
    let cases: [(&[u8], &str, &str); 7] = [
        (
            br#"{"amount_minor":1500,"amount_minor":99999}"#,
            "duplicate_key",
            "/amount_minor",
        ),
        (br#"{"a":{"b":1,"\u0062":2}}"#, "duplicate_key", "/a/b"),
        (
            br#"{"n":[9007199254740992]}"#,
            "number_out_of_range",
            "/n/0",
        ),
        (b"[1e400]", "number_out_of_range", "/0"),
        (b"\xEF\xBB\xBF{}", "invalid_json", ""),
        (b"{} {}", "invalid_json", ""),
        (b"[NaN]", "invalid_json", "/0"),
    ];
    for (input, code, pointer) in cases {
        let v = rejection(&toolgate(&["decode"], input));
        assert_eq!(v["rejected"], code, "{v}");
        assert_eq!(v["pointer"], pointer, "{v}");
        assert!(!v["message"].as_str().expect("message").is_empty());
    }
}

#[test]
fn decode_limits_are_flags() {
    let v = rejection(&toolgate(&["decode", "--max-bytes", "4"], b"[1,2,3]"));
    assert_eq!(v["rejected"], "too_large");
    let run = toolgate(&["decode", "--max-nesting", "2"], b"[[1]]");
    assert_eq!(run.code, 0);
    let v = rejection(&toolgate(&["decode", "--max-nesting", "2"], b"[[[1]]]"));
    assert_eq!(
        (v["rejected"].as_str(), v["pointer"].as_str()),
        (Some("too_deep"), Some("/0/0"))
    );
    let v = rejection(&toolgate(&["decode"], "[".repeat(100_000).as_bytes()));
    assert_eq!(v["rejected"], "too_deep");
    let run = toolgate(
        &["decode", "--max-integer", "18446744073709551615"],
        b"18446744073709551615",
    );
    assert_eq!(run.stdout, "18446744073709551615\n");
}

#[test]
fn decode_reads_no_more_than_the_limit() {
    // 64 MiB of input against a 1 KiB limit: rejected without reading it all.
    let big = vec![b' '; 64 << 20];
    let v = rejection(&toolgate(&["decode", "--max-bytes", "1024"], &big));
    assert_eq!(v["rejected"], "too_large");
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(toolgate(&["decode", "--max-nesting", "1001"], b"1").code, 2);
    assert_eq!(toolgate(&["decode", "--max-bytes", "lots"], b"1").code, 2);
    assert_eq!(toolgate(&["normalize", "sideways"], b"1").code, 2);
    assert_eq!(toolgate(&["frobnicate"], b"").code, 2);
}

#[test]
fn help_documents_the_defaults() {
    let run = toolgate(&["decode", "--help"], b"");
    assert_eq!(run.code, 0);
    for needle in [
        "[default: 1048576]",
        "[default: 64]",
        "[default: 9007199254740991]",
        "duplicate_key",
    ] {
        assert!(
            run.stdout.contains(needle),
            "--help lacks {needle}:\n{}",
            run.stdout
        );
    }
}

#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
fn explain(direction: &str, stdin: &[u8]) -> (Value, String) {
    let run = toolgate(&["normalize", direction, "--explain"], stdin);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v: Value = serde_json::from_str(&run.stdout).expect("JSON");
    (
        v["output"].clone(),
        v["action"].as_str().expect("action").to_owned(),
    )
}

/// Each case's stdin is explained with its output and action.
fn assert_explained<'a>(
    direction: &str,
    cases: impl IntoIterator<Item = (&'a [u8], Value, &'a str)>,
) {
    for (stdin, output, action) in cases {
        assert_eq!(
            explain(direction, stdin),
            (output, action.to_owned()),
            "{}",
            String::from_utf8_lossy(stdin)
        );
    }
}

#[test]
fn normalize_encode() {
    let cases: [(&[u8], Value, &str); 10] = [
        (b"{\"k\":\"v\"}", json!({"k":"v"}), "kept"),
        (b"{\"0\":1,\"1\":2}", json!({"0":1,"1":2}), "kept"),
        (b"null", json!({}), "empty"),
        (b"", json!({}), "empty"),
        (br#""{\"k\":1}""#, json!({"k":1}), "decoded_string"),
        (
            br#""\"{\\\"k\\\":1}\"""#,
            json!({"k":1}),
            "unwrapped_double_encoding",
        ),
        (b"[1,2]", json!({}), "rejected_list"),
        (b"42", json!({}), "rejected_scalar"),
        (b"{oops", json!({}), "rejected_invalid_json"),
        (br#"{"a":1,"a":2}"#, json!({}), "rejected_duplicate_key"),
    ];
    assert_explained("encode", cases);
    let plain = toolgate(&["normalize", "encode"], b"[1]");
    assert_eq!((plain.code, plain.stdout.as_str()), (0, "{}\n"));
}

#[test]
fn normalize_decode() {
    let cases: [(&[u8], Value, &str); 8] = [
        (b"", json!({}), "empty"),
        (b"{\"k\":\"v\"}", json!({"k":"v"}), "kept"),
        (
            br#""{\"k\":\"v\"}""#,
            json!({"k":"v"}),
            "unwrapped_double_encoding",
        ),
        (br#""\"{}\"""#, json!({}), "rejected_scalar"),
        (b"[{}]", json!({}), "rejected_list"),
        (b"true", json!({}), "rejected_scalar"),
        (b"\xFF\xFE", json!({}), "rejected_invalid_json"),
        (
            br#"{"a":{"x":1,"x":2}}"#,
            json!({}),
            "rejected_duplicate_key",
        ),
    ];
    assert_explained("decode", cases);
    let plain = toolgate(&["normalize", "decode"], br#""{\"k\":\"v\"}""#);
    assert_eq!((plain.code, plain.stdout.as_str()), (0, "{\"k\":\"v\"}\n"));
}
