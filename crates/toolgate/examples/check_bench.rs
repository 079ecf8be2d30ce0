//! `check` per provider shape, from the core crate alone (no CLI build).
//!
//! The same five bodies as `toolgate bench check` (`shapes()` in
//! `crates/toolgate-cli/src/cmd/bench/check.rs`); prints ns/op and ops/s
//! per shape, the median of short batches.
//!
//! ```text
//! cargo run --release -p toolgate --example check_bench -- [seconds] [policy.toml] [shape]
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate::contract::{CheckOptions, Outcome, Policy, check};
use toolgate::provider::Provider;

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let path = args
        .next()
        .unwrap_or_else(|| "examples/support-desk/policy.toml".to_owned());
    let only = args.next();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("check_bench: {path}: {e} (run from the workspace root)");
            std::process::exit(2);
        }
    };
    let policy = match Policy::load(&text) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("check_bench: {path}: {e}");
            std::process::exit(2);
        }
    };
    let opts = CheckOptions::default();
    for (name, provider, body) in shapes() {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let d = check(&policy, provider, &body, &opts);
        if d.outcome != Outcome::Action {
            eprintln!("check_bench: {name} gives {} ({:?})", d.outcome, d.message);
            std::process::exit(2);
        }
        let ns = measure(Duration::from_secs_f64(seconds), || {
            black_box(check(&policy, provider, black_box(&body), &opts));
        });
        println!(
            "{name:<17} bytes={:<4} ns_per_op={ns:>7.1} ops_per_s={:>9.0}",
            body.len(),
            1e9 / ns
        );
    }
}

/// Median nanoseconds per call over batches of about 5 ms.
fn measure(budget: Duration, mut f: impl FnMut()) -> f64 {
    let mut batch = 1u64;
    while time(&mut f, batch) < Duration::from_millis(5) && batch < 1 << 30 {
        batch *= 2;
    }
    let start = Instant::now();
    let mut samples = Vec::new();
    while start.elapsed() < budget || samples.len() < 5 {
        samples.push(time(&mut f, batch).as_secs_f64() * 1e9 / batch as f64);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn time(f: &mut impl FnMut(), batch: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..batch {
        f();
    }
    start.elapsed()
}

/// The bodies of `toolgate bench check` (keep in step with its `shapes()`).
fn shapes() -> Vec<(&'static str, Provider, Vec<u8>)> {
    let seed = json!({
        "outcome": "action",
        "reply": "I'm sorry your order arrived late. I've applied a goodwill credit of \
                  15.00 to your account; it will show on your next invoice within two \
                  working days. If it does not, reply to this message and quote your \
                  ticket number. Is there anything else I can help with today?",
        "proposed_action": {
            "tool": "apply_goodwill_credit",
            "arguments": {"amount_minor": 1500, "reason_code": "late_delivery"}
        }
    });
    let envelope = seed.to_string().into_bytes();
    let reply = seed["reply"].as_str().unwrap_or_default().to_owned();
    let args = seed["proposed_action"]["arguments"].clone();
    let args_text = args.to_string();
    let anthropic = json!({
        "id": "msg_01Bench", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "text", "text": reply},
            {"type": "tool_use", "id": "toolu_01Bench", "name": "apply_goodwill_credit", "input": args}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 512, "output_tokens": 96}
    });
    let openai_chat = json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1_764_460_800,
        "model": "gpt-4o-2024-08-06",
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant", "content": reply, "refusal": null,
                "tool_calls": [{"id": "call_bench", "type": "function",
                    "function": {"name": "apply_goodwill_credit", "arguments": args_text}}]
            },
            "logprobs": null, "finish_reason": "tool_calls"
        }],
        "usage": {"prompt_tokens": 512, "completion_tokens": 96, "total_tokens": 608}
    });
    let openai_responses = json!({
        "id": "resp_bench", "object": "response", "created_at": 1_764_460_800,
        "status": "completed", "incomplete_details": null, "model": "gpt-4.1",
        "output": [
            {"type": "message", "id": "msg_bench", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": reply, "annotations": []}]},
            {"type": "function_call", "id": "fc_bench", "call_id": "call_bench",
             "name": "apply_goodwill_credit", "arguments": args_text, "status": "completed"}
        ],
        "parallel_tool_calls": false,
        "usage": {"input_tokens": 512, "output_tokens": 96, "total_tokens": 608}
    });
    let gemini = json!({
        "candidates": [{
            "content": {"role": "model", "parts": [
                {"text": reply},
                {"functionCall": {"name": "apply_goodwill_credit", "args": args}}
            ]},
            "finishReason": "STOP", "index": 0
        }],
        "usageMetadata": {"promptTokenCount": 512, "candidatesTokenCount": 96, "totalTokenCount": 608},
        "modelVersion": "gemini-2.5-flash"
    });
    let value = |v: Value| v.to_string().into_bytes();
    vec![
        ("envelope", Provider::Envelope, envelope),
        ("anthropic", Provider::Anthropic, value(anthropic)),
        ("openai-chat", Provider::OpenAiChat, value(openai_chat)),
        (
            "openai-responses",
            Provider::OpenAiResponses,
            value(openai_responses),
        ),
        ("gemini", Provider::Gemini, value(gemini)),
    ]
}
