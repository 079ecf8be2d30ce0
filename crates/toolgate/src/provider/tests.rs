//! Where each adapter reports a malformed shape, and which field it reports
//! first when several are wrong: the order of checks is behaviour (the
//! pointer and message reach the decision), so it is pinned here.

use super::{Provider, ProviderError, StopClass, decode_body};
use crate::decode::Limits;

fn turn_error(provider: Provider, body: &str) -> (String, String) {
    let body = decode_body(provider, body.as_bytes(), false, &Limits::provider_body())
        .unwrap_or_else(|e| panic!("{body}: {e}"));
    match body.turn() {
        Err(ProviderError::Malformed { pointer, message }) => (pointer, message),
        other => panic!("{other:?}"),
    }
}

fn check(provider: Provider, cases: &[(&str, &str, &str)]) {
    for (body, pointer, message) in cases {
        assert_eq!(
            turn_error(provider, body),
            ((*pointer).to_owned(), (*message).to_owned()),
            "{provider} {body}"
        );
    }
}

#[test]
fn anthropic_reports_the_first_malformed_field() {
    check(
        Provider::Anthropic,
        &[
            ("[]", "", "expected an object"),
            (
                r#"{"type":"completion","content":[]}"#,
                "/type",
                r#"expected "message", got "completion""#,
            ),
            (
                r#"{"stop_reason":2,"type":1}"#,
                "/type",
                "expected a string",
            ),
            (
                r#"{"content":3,"stop_reason":2}"#,
                "/stop_reason",
                "expected a string",
            ),
            (r#"{"stop_reason":"end_turn"}"#, "/content", "missing"),
            (r#"{"content":{}}"#, "/content", "expected an array"),
            (
                r#"{"content":[{"input":{},"id":"x","type":"tool_use"}]}"#,
                "/content/0/name",
                "missing string",
            ),
            (
                r#"{"content":[{"type":"tool_use","name":"t","id":3}]}"#,
                "/content/0/id",
                "expected a string",
            ),
            (
                r#"{"content":[{"type":"tool_use","name":"t"}]}"#,
                "/content/0/input",
                "missing",
            ),
            (
                r#"{"content":[{"type":"text","text":null}]}"#,
                "/content/0/text",
                "missing string",
            ),
            (
                r#"{"content":[{"type":"image"}]}"#,
                "/content/0/type",
                r#"content block type "image" is not supported"#,
            ),
        ],
    );
}

#[test]
fn openai_chat_reports_the_first_malformed_field() {
    let calls = "/choices/0/message/tool_calls/0";
    check(
        Provider::OpenAiChat,
        &[
            (
                r#"{"choices":[]}"#,
                "/choices",
                "expected exactly one choice, got 0",
            ),
            (
                r#"{"choices":[{"finish_reason":1}]}"#,
                "/choices/0/finish_reason",
                "expected a string",
            ),
            (
                r#"{"choices":[{"finish_reason":"stop"}]}"#,
                "/choices/0/message",
                "missing",
            ),
            (
                r#"{"choices":[{"message":{"content":2,"refusal":1}}]}"#,
                "/choices/0/message/refusal",
                "expected a string",
            ),
            (
                r#"{"choices":[{"message":{"content":2}}]}"#,
                "/choices/0/message/content",
                "expected a string",
            ),
            (
                r#"{"choices":[{"message":{"tool_calls":[{"id":1,"type":"custom"}]}}]}"#,
                &format!("{calls}/type"),
                r#"tool call type "custom" is not supported"#,
            ),
            (
                r#"{"choices":[{"message":{"tool_calls":[{"id":1}]}}]}"#,
                &format!("{calls}/function"),
                "missing",
            ),
            (
                r#"{"choices":[{"message":{"tool_calls":[{"id":1,"function":{"arguments":"{}"}}]}}]}"#,
                &format!("{calls}/function/name"),
                "missing string",
            ),
            (
                r#"{"choices":[{"message":{"tool_calls":[{"id":1,"function":{"name":"t"}}]}}]}"#,
                &format!("{calls}/id"),
                "expected a string",
            ),
            (
                r#"{"choices":[{"message":{"tool_calls":[{"function":{"name":"t"}}]}}]}"#,
                &format!("{calls}/function/arguments"),
                "missing string",
            ),
        ],
    );
}

#[test]
fn openai_responses_reports_the_first_malformed_field() {
    check(
        Provider::OpenAiResponses,
        &[
            (r#"{"output":3,"status":1}"#, "/status", "expected a string"),
            (r#"{"status":"completed"}"#, "/output", "missing"),
            (
                r#"{"output":[{"type":"message"}]}"#,
                "/output/0/content",
                "missing",
            ),
            (
                r#"{"output":[{"type":"message","content":[{"type":"output_text"}]}]}"#,
                "/output/0/content/0/text",
                "missing string",
            ),
            (
                r#"{"output":[{"type":"message","content":[{"type":"refusal","text":"x"}]}]}"#,
                "/output/0/content/0/refusal",
                "missing string",
            ),
            (
                r#"{"output":[{"arguments":"{}","call_id":1,"type":"function_call"}]}"#,
                "/output/0/name",
                "missing string",
            ),
            (
                r#"{"output":[{"type":"function_call","name":"t","call_id":1}]}"#,
                "/output/0/call_id",
                "expected a string",
            ),
            // `id` is checked even when `call_id` is there.
            (
                r#"{"output":[{"type":"function_call","name":"t","call_id":"c","id":1}]}"#,
                "/output/0/id",
                "expected a string",
            ),
            (
                r#"{"output":[{"type":"function_call","name":"t"}]}"#,
                "/output/0/arguments",
                "missing string",
            ),
            (
                r#"{"output":[{"type":"web_search_call"}]}"#,
                "/output/0/type",
                r#"output item type "web_search_call" is not supported"#,
            ),
        ],
    );
}

#[test]
fn gemini_reports_the_first_malformed_field() {
    let parts = "/candidates/0/content/parts";
    check(
        Provider::Gemini,
        &[
            (
                r#"{"promptFeedback":{"blockReason":1}}"#,
                "/promptFeedback/blockReason",
                "expected a string",
            ),
            (
                r#"{"promptFeedback":{"blockReasonMessage":2,"blockReason":"SAFETY"}}"#,
                "/promptFeedback/blockReasonMessage",
                "expected a string",
            ),
            (r#"{"promptFeedback":{}}"#, "/candidates", "missing"),
            (
                r#"{"candidates":[]}"#,
                "/candidates",
                "expected exactly one candidate, got 0",
            ),
            (
                r#"{"candidates":[{"content":3,"finishReason":1}]}"#,
                "/candidates/0/finishReason",
                "expected a string",
            ),
            (
                r#"{"candidates":[{"content":3}]}"#,
                "/candidates/0/content",
                "expected an object",
            ),
            (
                r#"{"candidates":[{"content":{"parts":[{"inlineData":{}}]}}]}"#,
                &format!("{parts}/0"),
                "part kind is not supported",
            ),
            (
                r#"{"candidates":[{"content":{"parts":[{"functionCall":{},"text":1}]}}]}"#,
                &format!("{parts}/0/text"),
                "expected a string",
            ),
            (
                r#"{"candidates":[{"content":{"parts":[{"functionCall":{"id":2}}]}}]}"#,
                &format!("{parts}/0/functionCall/name"),
                "missing string",
            ),
            (
                r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"t","id":2}}]}}]}"#,
                &format!("{parts}/0/functionCall/id"),
                "expected a string",
            ),
            (
                r#"{"candidates":[{"finishReason":"OTHER","finishMessage":3}]}"#,
                "/candidates/0/finishMessage",
                "expected a string",
            ),
        ],
    );
}

#[test]
fn fields_read_only_on_a_rare_path_still_count() {
    let turn = |provider, body: &str| {
        let body = decode_body(provider, body.as_bytes(), false, &Limits::provider_body()).unwrap();
        let turn = body.turn().unwrap();
        (
            turn.stop.class,
            turn.stop.raw,
            turn.stop.category,
            turn.stop.explanation,
        )
    };
    assert_eq!(
        turn(
            Provider::OpenAiResponses,
            r#"{"error":{"message":"boom"},"output":[],"status":"failed"}"#
        ),
        (
            StopClass::Unknown,
            Some("failed".into()),
            None,
            Some("boom".into())
        )
    );
    assert_eq!(
        turn(
            Provider::Anthropic,
            r#"{"stop_details":{"explanation":"no","category":"cyber"},"content":[],"stop_reason":"refusal"}"#
        ),
        (
            StopClass::Refused,
            Some("refusal".into()),
            Some("cyber".into()),
            Some("no".into())
        )
    );
    assert_eq!(
        turn(
            Provider::Gemini,
            r#"{"candidates":[{"content":{"parts":[{"thought":true,"text":1},{"thoughtSignature":"s"}]},"finishReason":"OTHER","finishMessage":"odd"}]}"#
        ),
        (
            StopClass::Unknown,
            Some("OTHER".into()),
            None,
            Some("odd".into())
        )
    );
}

#[test]
fn serde_spells_every_stop_class_as_its_code() {
    crate::assert_serde_spells_codes(StopClass::ALL, StopClass::as_str);
}
