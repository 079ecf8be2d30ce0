//! The contract layer: policy loading and the schema audit, strict
//! integers, the must-fail instance for every keyword the shipped policy
//! uses, the fingerprint, provider export and explain, and the stable codes.

use serde_json::{Value, json};
use toolgate::contract::explain::explain;
use toolgate::contract::export::export;
use toolgate::contract::{
    ArgumentScopes, CheckOptions, CheckOutcome, Policy, PolicyError, RejectReason, check,
    check_call,
};
use toolgate::decode::{DecodeCode, Limits, decode_strict};
use toolgate::op::{FingerprintError, canonical_json, fingerprint};
use toolgate::provider::{Provider, StopClass};

const POLICY: &str = include_str!("../../../examples/support-desk/policy.toml");

fn policy() -> Policy {
    Policy::load(POLICY).expect("the example policy loads")
}

/// A policy with one tool whose schema is `schema`.
fn policy_with(schema: &str) -> Result<Policy, PolicyError> {
    Policy::load(&format!(
        "version = 1\nabstain_message = \"x\"\n[[tools]]\nname = \"t\"\ncapability = \"c\"\noperation_key = [\"customer_id\"]\nschema = '''{schema}'''\n"
    ))
}

fn load_error(schema: &str) -> PolicyError {
    policy_with(schema).expect_err("the audit refuses this schema")
}

fn envelope_args(args: &str) -> Vec<u8> {
    format!(r#"{{"outcome":"action","reply":"ok","proposed_action":{{"tool":"apply_goodwill_credit","arguments":{args}}}}}"#)
        .into_bytes()
}

/// `check` with the default options.
fn check_plain(policy: &Policy, provider: Provider, body: &[u8]) -> toolgate::contract::Checked {
    check(policy, provider, body, &CheckOptions::default())
}

fn check_args(args: &str) -> toolgate::contract::Checked {
    check_plain(&policy(), Provider::Envelope, &envelope_args(args))
}

// ---- the audit

#[test]
fn a_typo_in_a_keyword_is_a_load_error_naming_keyword_and_path() {
    let e = load_error(
        r#"{"type":"object","additionalProperties":false,
            "properties":{"amount_minor":{"type":"integer","minimun":1}}}"#,
    );
    assert_eq!(e.keyword.as_deref(), Some("minimun"));
    assert_eq!(
        e.pointer.as_deref(),
        Some("/properties/amount_minor/minimun")
    );
    let text = e.to_string();
    assert!(
        text.contains("minimun") && text.contains("/properties/amount_minor/minimun"),
        "{text}"
    );
    assert!(text.contains("did you mean `minimum`"), "{text}");
}

#[test]
fn refs_that_leave_the_schema_are_load_errors() {
    for r in [
        "https://example.com/schemas/amount.json",
        "file:///etc/passwd",
        "amount.json#/x",
        "https://json-schema.org/draft/2020-12/schema",
    ] {
        let e = load_error(&format!(
            r#"{{"type":"object","additionalProperties":false,"properties":{{"a":{{"$ref":"{r}"}}}}}}"#
        ));
        assert_eq!(e.keyword.as_deref(), Some("$ref"), "{r}");
        assert_eq!(e.pointer.as_deref(), Some("/properties/a/$ref"), "{r}");
    }
    // A local reference is fine, and asserted.
    let p = policy_with(
        r##"{"type":"object","additionalProperties":false,
            "$defs":{"amount":{"type":"integer","maximum":10}},
            "properties":{"a":{"$ref":"#/$defs/amount"}}}"##,
    )
    .expect("local refs load");
    let schema = p.tools()[0].schema();
    assert!(schema.is_valid(&json!({"a": 10})));
    assert!(!schema.is_valid(&json!({"a": 11})));
    assert!(
        !schema.is_valid(&json!({"a": 10.0})),
        "strict integers through $ref"
    );
}

#[test]
fn keywords_the_validator_would_ignore_are_load_errors() {
    for (keyword, schema) in [
        (
            "definitions",
            r#"{"type":"object","additionalProperties":false,"definitions":{}}"#,
        ),
        (
            "dependencies",
            r#"{"type":"object","additionalProperties":false,"dependencies":{}}"#,
        ),
        (
            "contentEncoding",
            r#"{"type":"object","additionalProperties":false,"properties":{"a":{"type":"string","contentEncoding":"base64"}}}"#,
        ),
        (
            "x-internal",
            r#"{"type":"object","additionalProperties":false,"x-internal":true}"#,
        ),
        (
            "x-toolgate-lexical-integer",
            r#"{"type":"object","additionalProperties":false,"x-toolgate-lexical-integer":false}"#,
        ),
        (
            "format",
            r#"{"type":"object","additionalProperties":false,"properties":{"a":{"type":"string","format":"not-a-format"}}}"#,
        ),
        (
            "$schema",
            r#"{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","additionalProperties":false}"#,
        ),
    ] {
        let e = load_error(schema);
        assert_eq!(e.keyword.as_deref(), Some(keyword), "{e}");
    }
}

#[test]
fn argument_objects_must_be_closed() {
    let e = load_error(r#"{"type":"object","properties":{"a":{"type":"string"}}}"#);
    assert_eq!(e.keyword.as_deref(), Some("additionalProperties"));
    let e = load_error(
        r#"{"type":"object","additionalProperties":false,
            "properties":{"a":{"type":"object","properties":{"b":{"type":"string"}}}}}"#,
    );
    assert_eq!(e.keyword.as_deref(), Some("additionalProperties"));
    assert_eq!(e.pointer.as_deref(), Some("/properties/a"));
    let e = load_error(r#"{"type":"array"}"#);
    assert_eq!(e.keyword.as_deref(), Some("type"));
}

#[test]
fn policy_file_errors_are_load_errors() {
    // A scope field the model could also supply.
    let e = Policy::load(&POLICY.replace(
        r#"operation_key = ["customer_id", "ticket_id", "version_seen"]"#,
        r#"operation_key = ["customer_id", "amount_minor"]"#,
    ))
    .expect_err("collision");
    assert!(e.to_string().contains("amount_minor"), "{e}");
    // Unknown TOML keys.
    let e = Policy::load(&POLICY.replace("needs_approval = false", "needs_aproval = false"))
        .expect_err("typo");
    assert!(e.to_string().contains("needs_aproval"), "{e}");
    // A duplicated keyword in the schema JSON is caught by the strict decoder.
    let e = load_error(r#"{"type":"object","type":"array","additionalProperties":false}"#);
    assert!(e.to_string().contains("duplicate_key"), "{e}");
    // Two tools with one name.
    let twice = format!(
        "{POLICY}\n{}",
        &POLICY[POLICY.find("[[tools]]").expect("tools")..]
    );
    assert!(Policy::load(&twice).is_err());
}

// ---- the shipped policy: a must-fail instance for every keyword it uses

#[test]
fn every_keyword_of_the_shipped_policy_has_a_must_fail_instance() {
    let policy = policy();
    let tool = policy.tool("apply_goodwill_credit").expect("tool");
    // keyword -> (arguments that must fail, the reason, the failing keyword)
    let must_fail: &[(&str, &str, RejectReason, Option<&str>)] = &[
        (
            "type",
            r#"{"amount_minor":"1500","reason_code":"late_delivery"}"#,
            RejectReason::InvalidArguments,
            Some("type"),
        ),
        (
            "minimum",
            r#"{"amount_minor":0,"reason_code":"late_delivery"}"#,
            RejectReason::InvalidArguments,
            Some("minimum"),
        ),
        (
            "maximum",
            r#"{"amount_minor":2001,"reason_code":"late_delivery"}"#,
            RejectReason::InvalidArguments,
            Some("maximum"),
        ),
        (
            "enum",
            r#"{"amount_minor":1500,"reason_code":"goodwill"}"#,
            RejectReason::InvalidArguments,
            Some("enum"),
        ),
        (
            "required",
            r#"{"reason_code":"late_delivery"}"#,
            RejectReason::InvalidArguments,
            Some("required"),
        ),
        // Unknown keys get their own reason before the schema runs; the
        // schema would refuse them too (checked below).
        (
            "additionalProperties",
            r#"{"amount_minor":1500,"reason_code":"late_delivery","note":"x"}"#,
            RejectReason::UnknownKey,
            None,
        ),
        (
            "properties",
            r#"{"amount_minor":true,"reason_code":"late_delivery"}"#,
            RejectReason::InvalidArguments,
            Some("type"),
        ),
    ];
    // Keywords that assert nothing by design.
    let annotations = ["$schema", "description"];
    for keyword in tool.schema().keywords_used() {
        let covered =
            must_fail.iter().any(|(k, ..)| k == keyword) || annotations.contains(&keyword.as_str());
        assert!(
            covered,
            "keyword `{keyword}` of the shipped policy has no must-fail instance"
        );
    }
    for (keyword, args, reason, failing) in must_fail {
        let d = check_args(args);
        assert_eq!(d.outcome(), CheckOutcome::Rejected, "{keyword}: {args}");
        assert_eq!(
            d.reason,
            Some(*reason),
            "{keyword}: {args}: {:?}",
            d.message
        );
        // The schema alone also refuses the instance, on the keyword named.
        let value = decode_strict(args.as_bytes(), &Limits::envelope()).expect("json");
        let v = tool.schema().validate(&value).expect_err("schema refuses");
        if let Some(k) = failing {
            assert_eq!(v.keyword, *k, "{keyword}: {v}");
        }
    }
    // And the well-formed instance passes.
    assert_eq!(
        check_args(r#"{"amount_minor":1500,"reason_code":"late_delivery"}"#).outcome(),
        CheckOutcome::Action
    );
}

#[test]
fn integers_are_lexical() {
    for (args, pointer) in [
        (
            r#"{"amount_minor":1500.0,"reason_code":"late_delivery"}"#,
            "/amount_minor",
        ),
        (
            r#"{"amount_minor":1.5e3,"reason_code":"late_delivery"}"#,
            "/amount_minor",
        ),
        (
            r#"{"amount_minor":15E2,"reason_code":"late_delivery"}"#,
            "/amount_minor",
        ),
        (
            r#"{"amount_minor":"1500","reason_code":"late_delivery"}"#,
            "/amount_minor",
        ),
        (
            r#"{"amount_minor":true,"reason_code":"late_delivery"}"#,
            "/amount_minor",
        ),
        (
            r#"{"amount_minor":null,"reason_code":"late_delivery"}"#,
            "/amount_minor",
        ),
    ] {
        let d = check_args(args);
        assert_eq!(d.reason, Some(RejectReason::InvalidArguments), "{args}");
        assert_eq!(
            d.pointer.as_deref(),
            Some(format!("/proposed_action/arguments{pointer}").as_str())
        );
    }
    assert_eq!(
        check_args(r#"{"amount_minor":2000,"reason_code":"wrong_item"}"#).outcome(),
        CheckOutcome::Action
    );
}

#[test]
fn integers_beyond_the_interoperable_range_never_reach_the_canonicaliser() {
    // Through the gate: the decoder rejects them by default.
    for n in [
        "9007199254740992",
        "-9007199254740992",
        "18446744073709551616",
    ] {
        let d = check_args(&format!(
            r#"{{"amount_minor":{n},"reason_code":"late_delivery"}}"#
        ));
        assert_eq!(d.reason, Some(RejectReason::NumberOutOfRange), "{n}");
    }
    // Directly: a value built some other way is refused by the fingerprint.
    let big = json!({"amount_minor": 9_007_199_254_740_993_u64});
    assert_eq!(
        fingerprint(&big),
        Err(FingerprintError::NumberOutOfRange(
            "/amount_minor".to_owned()
        ))
    );
    // 2^53-1 itself is fine, and distinct from its neighbour.
    let a = fingerprint(&json!({"n": 9_007_199_254_740_991_u64})).expect("in range");
    let b = fingerprint(&json!({"n": 9_007_199_254_740_990_u64})).expect("in range");
    assert_ne!(a, b);
}

// ---- fingerprint

#[test]
fn fingerprint_is_sha256_of_rfc8785_canonical_json() {
    let args = json!({"reason_code": "late_delivery", "amount_minor": 1500});
    assert_eq!(
        canonical_json(&args).expect("canonical"),
        r#"{"amount_minor":1500,"reason_code":"late_delivery"}"#
    );
    // `printf '%s' '{"amount_minor":1500,"reason_code":"late_delivery"}' | sha256sum`
    assert_eq!(
        fingerprint(&args).expect("fp").to_hex(),
        "214a1931063b0755fe131fa13e8a6ca8b6e479cd0ed2434f4e5ebf7a81f29057"
    );
    // Key order and whitespace do not matter; nested keys are sorted too.
    let spaced = decode_strict(
        b" { \"b\" : { \"y\" : 1 , \"x\" : [ 2 , { \"q\" : 1 , \"p\" : 0 } ] } , \"a\" : \"\\u00e9\" } ",
        &Limits::envelope(),
    )
    .expect("json");
    let compact = json!({"a": "é", "b": {"x": [2, {"p": 0, "q": 1}], "y": 1}});
    assert_eq!(fingerprint(&spaced), fingerprint(&compact));
    // 1500 and "1500" differ.
    assert_ne!(
        fingerprint(&json!({"amount_minor": 1500})),
        fingerprint(&json!({"amount_minor": "1500"}))
    );
}

#[test]
fn the_same_proposal_in_every_provider_shape_has_one_fingerprint() {
    let policy = policy();
    let expected = "214a1931063b0755fe131fa13e8a6ca8b6e479cd0ed2434f4e5ebf7a81f29057";
    for (provider, file) in [
        (Provider::Envelope, "envelope/action.json"),
        (Provider::Envelope, "envelope/action-reordered.json"),
        (Provider::Anthropic, "anthropic/action.json"),
        (Provider::OpenAiChat, "openai-chat/action.json"),
        (Provider::OpenAiResponses, "openai-responses/action.json"),
        (Provider::Gemini, "gemini/action.json"),
    ] {
        let body = std::fs::read(format!(
            "{}/../../fixtures/providers/{file}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect(file);
        let d = check_plain(&policy, provider, &body);
        let a = d
            .action()
            .unwrap_or_else(|| panic!("{file}: {:?}", d.message));
        assert_eq!(a.fingerprint().to_hex(), expected, "{file}");
        assert_eq!(
            a.canonical_arguments(),
            r#"{"amount_minor":1500,"reason_code":"late_delivery"}"#
        );
        assert_eq!(a.capability(), "credit:issue");
    }
}

// ---- envelope and turn rules

#[test]
fn the_reply_limit_counts_utf8_bytes() {
    let policy = policy();
    assert_eq!(policy.reply_max_bytes(), 2000);
    let body = |reply: &str| {
        json!({"outcome": "answer", "reply": reply})
            .to_string()
            .into_bytes()
    };
    // 500 four-byte characters = 2000 bytes: at the limit.
    let d = check_plain(&policy, Provider::Envelope, &body(&"😀".repeat(500)));
    assert_eq!(d.outcome(), CheckOutcome::Answer);
    // 501 characters would pass a character limit of 2000 easily.
    let d = check_plain(&policy, Provider::Envelope, &body(&"😀".repeat(501)));
    assert_eq!(d.reason, Some(RejectReason::TooLarge));
    assert_eq!(d.pointer.as_deref(), Some("/reply"));
}

#[test]
fn an_empty_native_turn_is_an_abstention_with_the_policy_message() {
    let policy = policy();
    let body = br#"{"type":"message","role":"assistant","content":[{"type":"text","text":"  \n"}],"stop_reason":"end_turn"}"#;
    let d = check_plain(&policy, Provider::Anthropic, body);
    assert_eq!(d.outcome(), CheckOutcome::Abstain);
    assert_eq!(d.reply.as_deref(), Some(policy.abstain_message()));
    assert!(d.action().is_none());
}

#[test]
fn only_invalid_json_on_the_first_attempt_is_repairable() {
    let policy = policy();
    let broken = br#"{"outcome":"answer","reply":"#;
    for (attempt, repairable) in [(1, true), (2, false)] {
        let opts = CheckOptions {
            attempt,
            ..CheckOptions::default()
        };
        let d = check(&policy, Provider::Envelope, broken, &opts);
        assert_eq!(d.reason, Some(RejectReason::InvalidJson));
        assert_eq!(d.repairable, repairable, "attempt {attempt}");
        assert_eq!(d.to_json()["attempt"], attempt);
    }
    // Truncation and refusal are never repairable, whatever the attempt.
    let truncated = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"{\"","refusal":null},"finish_reason":"length"}]}"#;
    let d = check_plain(&policy, Provider::OpenAiChat, truncated);
    assert_eq!(
        (d.outcome(), d.repairable),
        (CheckOutcome::Truncated, false)
    );
    let refused = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"No."},"finish_reason":"stop"}]}"#;
    let d = check_plain(&policy, Provider::OpenAiChat, refused);
    assert_eq!((d.outcome(), d.repairable), (CheckOutcome::Refused, false));
    // A broken provider body is not the model's JSON: no re-ask repairs it.
    let d = check_plain(&policy, Provider::OpenAiChat, b"{\"choices\":");
    assert_eq!(
        (d.reason, d.repairable),
        (Some(RejectReason::InvalidJson), false)
    );
}

#[test]
fn bodies_over_the_limit_are_too_large_before_parsing() {
    let policy = policy();
    let body = vec![b' '; policy.body_max_bytes() + 1];
    for (provider, stream) in [
        (Provider::Anthropic, false),
        (Provider::Anthropic, true),
        (Provider::Gemini, false),
    ] {
        let opts = CheckOptions {
            stream,
            ..CheckOptions::default()
        };
        let d = check(&policy, provider, &body, &opts);
        assert_eq!(
            d.reason,
            Some(RejectReason::TooLarge),
            "{provider} stream={stream}"
        );
    }
}

#[test]
fn hostile_bodies_are_rejections_not_panics() {
    let policy = policy();
    let bodies: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"null".to_vec(),
        b"[]".to_vec(),
        b"{\"choices\":[]}".to_vec(),
        b"{\"content\":\"x\"}".to_vec(),
        b"{\"candidates\":[{},{}]}".to_vec(),
        b"{\"output\":[{\"type\":\"function_call\"}],\"status\":\"completed\"}".to_vec(),
        "[".repeat(100_000).into_bytes(),
        b"data: {\"type\":\"content_block_delta\",\"index\":7}\n\n".to_vec(),
        b"event: x\r\ndata: [DONE]\r\n\r\n".to_vec(),
        vec![0xff, 0xfe, 0x00],
    ];
    for body in &bodies {
        for provider in Provider::ALL {
            for stream in [false, true] {
                let opts = CheckOptions {
                    stream,
                    ..CheckOptions::default()
                };
                let d = check(&policy, provider, body, &opts);
                assert_ne!(d.outcome(), CheckOutcome::Action);
                assert_ne!(
                    d.outcome(),
                    CheckOutcome::Answer,
                    "{provider}: {:?}",
                    String::from_utf8_lossy(body)
                );
            }
        }
    }
}

#[test]
fn stop_classes_fail_closed() {
    let policy = policy();
    for reason in ["pause_turn", "something_new"] {
        let body = format!(
            r#"{{"type":"message","content":[{{"type":"text","text":"hi"}}],"stop_reason":"{reason}"}}"#
        );
        let d = check_plain(&policy, Provider::Anthropic, body.as_bytes());
        assert_eq!(d.reason, Some(RejectReason::UnknownStop), "{reason}");
        assert_eq!(d.stop.map(|s| s.class), Some(StopClass::Unknown));
    }
    let missing = br#"{"type":"message","content":[{"type":"text","text":"hi"}]}"#;
    let d = check_plain(&policy, Provider::Anthropic, missing);
    assert_eq!(d.reason, Some(RejectReason::UnknownStop));
}

// ---- export and explain

#[test]
fn export_turns_on_strict_mode_and_off_parallel_calls_and_warns_about_unsupported_keywords() {
    let policy = policy();
    let (anthropic, warnings) = export(&policy, Provider::Anthropic);
    assert_eq!(anthropic["tools"][0]["strict"], true);
    assert_eq!(anthropic["tool_choice"]["disable_parallel_tool_use"], true);
    assert_eq!(
        anthropic["tools"][0]["input_schema"]["properties"]["amount_minor"]["maximum"],
        2000
    );
    let kws: Vec<&str> = warnings
        .iter()
        .filter_map(|w| w.keyword.as_deref())
        .collect();
    assert!(
        kws.contains(&"minimum") && kws.contains(&"maximum"),
        "{warnings:?}"
    );
    assert!(!kws.contains(&"$schema"), "{warnings:?}");

    let (chat, warnings) = export(&policy, Provider::OpenAiChat);
    assert_eq!(chat["tools"][0]["function"]["strict"], true);
    assert_eq!(chat["parallel_tool_calls"], false);
    assert!(warnings.is_empty(), "{warnings:?}");

    let (responses, _) = export(&policy, Provider::OpenAiResponses);
    assert_eq!(responses["tools"][0]["strict"], true);
    assert_eq!(responses["tools"][0]["name"], "apply_goodwill_credit");
    assert_eq!(responses["parallel_tool_calls"], false);

    let (gemini, warnings) = export(&policy, Provider::Gemini);
    assert_eq!(
        gemini["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"]["required"],
        json!(["amount_minor", "reason_code"])
    );
    assert!(
        warnings.iter().any(|w| w.keyword.is_none()),
        "gemini has no strict switch: {warnings:?}"
    );
    // No export carries the dialect marker; the schema is otherwise verbatim.
    for provider in [
        Provider::Anthropic,
        Provider::OpenAiChat,
        Provider::OpenAiResponses,
        Provider::Gemini,
    ] {
        assert!(
            !export(&policy, provider).0.to_string().contains("$schema"),
            "{provider}"
        );
    }
}

#[test]
fn explain_shows_the_worst_well_formed_request_and_its_bounds() {
    let e = &explain(&policy())[0];
    assert_eq!(e.tool, "apply_goodwill_credit");
    assert_eq!(e.worst["amount_minor"], 2000);
    assert!(e.worst_passes);
    assert!(e.unbounded.is_empty());
    let text = e.bounds.join("\n");
    for needle in [
        "2000",
        "credit:issue",
        "customer_id, ticket_id, version_seen",
        "once per state version",
    ] {
        assert!(text.contains(needle), "{needle} in {text}");
    }
    // An unbounded integer is reported as a finding.
    let p = policy_with(
        r#"{"type":"object","additionalProperties":false,"properties":{"n":{"type":"integer"}}}"#,
    )
    .expect("loads");
    assert_eq!(explain(&p)[0].unbounded, vec!["n".to_owned()]);
}

// ---- stable codes are documented

#[test]
fn outcome_reason_and_stop_codes_are_documented() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/error-codes.md"
    ))
    .expect("docs/error-codes.md");
    let codes = CheckOutcome::ALL
        .iter()
        .map(|o| o.as_str())
        .chain(RejectReason::ALL.iter().map(|r| r.as_str()))
        .chain(StopClass::ALL.iter().map(|s| s.as_str()));
    for code in codes {
        assert!(
            doc.contains(&format!("| `{code}` |")),
            "docs/error-codes.md has no row for `{code}`"
        );
    }
    // Decoder codes keep their meaning as reasons.
    for code in DecodeCode::ALL {
        assert_eq!(RejectReason::from(code).as_str(), code.as_str());
    }
}

#[test]
fn decisions_print_a_fixed_set_of_keys() {
    let d = check_args(r#"{"amount_minor":1500,"reason_code":"late_delivery"}"#).to_json();
    // Key order is serde_json's concern (preserve_order); the set is ours.
    let mut keys: Vec<&str> = d
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "arguments",
            "attempt",
            "call_id",
            "capability",
            "fingerprint",
            "message",
            "needs_approval",
            "outcome",
            "pointer",
            "reason",
            "repairable",
            "reply",
            "stop",
            "tool"
        ]
    );
    assert_eq!(
        d["arguments"],
        json!({"amount_minor": 1500, "reason_code": "late_delivery"})
    );
    let r = check_args(r#"{"amount_minor":1500,"reason_code":"late_delivery","approved_by":"x"}"#)
        .to_json();
    assert_eq!(r["outcome"], "rejected");
    assert_eq!(r["reason"], "unknown_key");
    assert_eq!(r["arguments"], Value::Null);
}

#[test]
fn stream_events_are_strictly_decoded_with_their_position() {
    let policy = policy();
    let body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\",\"content\":\"c\"}}]}\n\n\
data: [DONE]\n\n";
    let opts = CheckOptions {
        stream: true,
        ..CheckOptions::default()
    };
    let d = check(&policy, Provider::OpenAiChat, body, &opts);
    assert_eq!(d.reason, Some(RejectReason::DuplicateKey));
    assert_eq!(
        d.pointer.as_deref(),
        Some("/events/1/choices/0/delta/content")
    );
    assert!(!d.repairable);
}

#[test]
fn formats_are_asserted() {
    let p = policy_with(
        r#"{"type":"object","additionalProperties":false,
            "properties":{"due":{"type":"string","format":"date"},"mail":{"type":"string","format":"email"}}}"#,
    )
    .expect("loads");
    let schema = p.tools()[0].schema();
    assert!(schema.is_valid(&json!({"due": "2026-11-30", "mail": "a@example.com"})));
    let v = schema
        .validate(&json!({"due": "2026-13-45"}))
        .expect_err("not a date");
    assert_eq!(v.keyword, "format");
    assert!(!schema.is_valid(&json!({"mail": "not an address"})));
}

#[test]
fn arguments_are_held_to_the_tools_byte_limit() {
    let policy = policy();
    let limit = policy
        .tool("apply_goodwill_credit")
        .expect("tool")
        .max_argument_bytes();
    let pad = " ".repeat(limit);
    // As a JSON string (OpenAI): the decoder's byte limit, before parsing.
    let args = format!(r#"{{"amount_minor":1500,{pad}"reason_code":"late_delivery"}}"#);
    let body = json!({"choices":[{"index":0,"message":{"role":"assistant","content":null,
        "tool_calls":[{"id":"c","type":"function","function":{"name":"apply_goodwill_credit","arguments":args}}]},
        "finish_reason":"tool_calls"}]});
    let d = check_plain(&policy, Provider::OpenAiChat, body.to_string().as_bytes());
    assert_eq!(d.reason, Some(RejectReason::TooLarge));
    // Inside the body (Gemini): measured as compact JSON.
    let long = "x".repeat(limit);
    let body = json!({"candidates":[{"content":{"parts":[{"functionCall":{"name":"apply_goodwill_credit",
        "args":{"amount_minor":1500,"reason_code":long}}}]},"finishReason":"STOP"}]});
    let d = check_plain(&policy, Provider::Gemini, body.to_string().as_bytes());
    assert_eq!(d.reason, Some(RejectReason::TooLarge));
    assert_eq!(d.tool.as_deref(), Some("apply_goodwill_credit"));
}

// ---- the contract stage for a front door with a tool name and arguments

/// `check_call` is the contract stage of `check` without the provider body:
/// the same action (tool, capability, arguments, canonical form and
/// fingerprint) for the same arguments, and the same rejections, with
/// pointers relative to the arguments object.
#[test]
fn check_call_gives_what_check_gives_for_the_same_arguments() {
    let policy = policy();
    let args = r#"{"reason_code": "late_delivery", "amount_minor": 1500}"#;
    let call = check_call(&policy, "apply_goodwill_credit", args.as_bytes());
    let body = check_args(args);
    assert_eq!(call.outcome(), CheckOutcome::Action);
    let (a, b) = (call.action().unwrap(), body.action().unwrap());
    assert_eq!(a.tool(), b.tool());
    assert_eq!(a.capability(), b.capability());
    assert_eq!(a.arguments(), b.arguments());
    assert_eq!(a.canonical_arguments(), b.canonical_arguments());
    assert_eq!(a.fingerprint(), b.fingerprint());
    assert_eq!(
        a.canonical_arguments(),
        r#"{"amount_minor":1500,"reason_code":"late_delivery"}"#
    );

    let cases: &[(&str, &str, RejectReason, &str)] = &[
        // (tool, arguments, reason, pointer)
        (
            "apply_goodwill_credit",
            r#"{"amount_minor": 1, "amount_minor": 1500, "reason_code": "late_delivery"}"#,
            RejectReason::DuplicateKey,
            "/amount_minor",
        ),
        (
            "apply_goodwill_credit",
            r#"{"amount_minor": 1500, "reason_code": "late_delivery", "approved_by": "me"}"#,
            RejectReason::UnknownKey,
            "/approved_by",
        ),
        (
            "apply_goodwill_credit",
            r#"{"amount_minor": 999999, "reason_code": "late_delivery"}"#,
            RejectReason::InvalidArguments,
            "/amount_minor",
        ),
        (
            "apply_goodwill_credit",
            r#"{"amount_minor": 1500.0, "reason_code": "late_delivery"}"#,
            RejectReason::InvalidArguments,
            "/amount_minor",
        ),
        (
            "apply_goodwill_credit",
            r#"{"amount_minor": 9007199254740993, "reason_code": "late_delivery"}"#,
            RejectReason::NumberOutOfRange,
            "/amount_minor",
        ),
        (
            "apply_goodwill_credit",
            r#"[1500]"#,
            RejectReason::InvalidArguments,
            "",
        ),
        (
            "apply_goodwill_credit",
            r#"{"amount_minor": "#,
            RejectReason::InvalidJson,
            "",
        ),
        ("drop_tables", r#"{}"#, RejectReason::UnknownTool, ""),
    ];
    for (tool, args, reason, pointer) in cases {
        let d = check_call(&policy, tool, args.as_bytes());
        assert_eq!(d.outcome(), CheckOutcome::Rejected, "{args}");
        assert_eq!(d.reason, Some(*reason), "{args}: {d:?}");
        if !pointer.is_empty() {
            assert_eq!(d.pointer.as_deref(), Some(*pointer), "{args}: {d:?}");
        }
        assert_eq!(d.tool.as_deref(), Some(*tool), "{args}");
        // The same arguments in an envelope are rejected for the same reason.
        if *tool == "apply_goodwill_credit" && *reason != RejectReason::InvalidJson {
            assert_eq!(check_args(args).reason, Some(*reason), "{args}");
        }
    }
    // The tool's byte limit holds for arguments that arrive alone.
    let long = format!(
        r#"{{"amount_minor": 1500, "reason_code": "late_delivery"{}}}"#,
        " ".repeat(1100)
    );
    let d = check_call(&policy, "apply_goodwill_credit", long.as_bytes());
    assert_eq!(d.reason, Some(RejectReason::TooLarge), "{d:?}");
}

// ---- scope fields a deployment takes from the arguments

const MAPPED: &str = r#"
version = 1
abstain_message = "x"
[[tools]]
name = "refund_order"
capability = "refund:issue"
operation_key = ["order_id", "agent", "version_seen"]
scope_types = { order_id = "integer" }
schema = '''{"type": "object", "additionalProperties": false,
  "properties": {"order_id": {"type": "integer"},
                 "amount_minor": {"type": "integer"}, "agent": {"type": "string"}}}'''
"#;

fn mapped(pairs: &[(&str, &str)]) -> Result<Policy, PolicyError> {
    let mut scopes = ArgumentScopes::new();
    for (field, pointer) in pairs {
        scopes.insert("refund_order", field, pointer);
    }
    Policy::load_with(
        &MAPPED.replace(r#", "agent": {"type": "string"}"#, ""),
        &scopes,
    )
}

#[test]
fn a_scope_field_may_be_an_argument_only_when_taken_from_that_argument() {
    // Without a mapping the rule is the sidecar's: scope fields are
    // server-fixed.
    let e = Policy::load(&MAPPED.replace(r#", "agent": {"type": "string"}"#, ""))
        .expect_err("order_id is an argument");
    assert!(
        e.to_string().contains("`order_id` is also an argument"),
        "{e}"
    );
    // Taken from the argument of its own name: the resource the model names
    // is the one authorised and sent.
    mapped(&[("order_id", "/order_id")]).expect("mapped from itself");
    // Taken from another argument: the upstream would act on `order_id`
    // while `amount_minor` was authorised.
    let e = mapped(&[("order_id", "/amount_minor")]).expect_err("mapped from elsewhere");
    assert!(
        e.to_string().contains("`order_id` is also an argument"),
        "{e}"
    );
    // A model-supplied field that no mapping names stays refused, even when
    // another field is mapped.
    let mut scopes = ArgumentScopes::new();
    scopes.insert("refund_order", "order_id", "/order_id");
    let e = Policy::load_with(MAPPED, &scopes).expect_err("agent is model-supplied");
    assert!(e.to_string().contains("`agent` is also an argument"), "{e}");
    // A mapping must name a field of the key and a declared argument.
    let e = mapped(&[("order_id", "/order_id"), ("tenant", "/order_id")]).expect_err("no field");
    assert!(
        e.to_string()
            .contains("not a field of this tool's operation_key"),
        "{e}"
    );
    let e = mapped(&[("order_id", "/order")]).expect_err("no argument");
    assert!(e.to_string().contains("not a declared argument"), "{e}");
    // A mapping for a tool the policy lacks is the front door's business.
    let mut scopes = ArgumentScopes::new();
    scopes.insert("refund_order", "order_id", "/order_id");
    scopes.insert("other_tool", "x", "/x");
    Policy::load_with(
        &MAPPED.replace(r#", "agent": {"type": "string"}"#, ""),
        &scopes,
    )
    .expect("other tools' mappings are ignored");
}

/// A scope field taken from an argument must hold that argument's value,
/// canonical: otherwise a front door whose caller supplies the scope (the
/// sidecar) could authorise one order while the arguments send another.
#[test]
fn a_scope_field_taken_from_an_argument_must_hold_its_value() {
    let policy = mapped(&[("order_id", "/order_id")]).unwrap();
    let tool = policy.tool("refund_order").unwrap();
    assert_eq!(
        tool.argument_scopes().collect::<Vec<_>>(),
        [("order_id", "/order_id")]
    );
    let scope = |v: Value| {
        tool.canonical_scope(json!({"order_id": v}).as_object().unwrap())
            .unwrap()
    };
    let args = json!({"order_id": 1001, "amount_minor": 500});
    tool.check_argument_scopes(&scope(json!(1001)), &args)
        .expect("the same order");
    let e = tool
        .check_argument_scopes(&scope(json!(1002)), &args)
        .expect_err("another order");
    assert!(
        e.contains("`order_id` must be the argument at /order_id"),
        "{e}"
    );
    tool.check_argument_scopes(&scope(json!(1001)), &json!({"amount_minor": 500}))
        .expect_err("the argument is absent");
    // A scope without the field is the pipeline's `missing_scope`.
    tool.check_argument_scopes(&serde_json::Map::new(), &args)
        .expect("left to the pipeline");
}
