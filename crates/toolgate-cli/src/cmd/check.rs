//! `toolgate check`: the stateless stages on one provider response
//! (docs/design.md §5–§6).

use std::process::ExitCode;

use toolgate::contract::{CheckOptions, EnvelopeMode, MAX_ATTEMPTS, check};
use toolgate::provider::Provider;

use crate::io::{io_failure, print_line, read_stdin_bounded};

/// Check one raw provider response body (stdin) against a policy.
///
/// stdout: one JSON decision with a fixed set of keys, for example
///   {"outcome":"action","reason":null,"tool":"apply_goodwill_credit",
///    "arguments":{...},"fingerprint":"<sha-256 hex>","reply":"...",
///    "stop":{"class":"tool_use","raw":"tool_use",...},"repairable":false,...}
///
/// outcome: action (passed every stateless stage; not yet permission to
/// act), answer, abstain, rejected, refused, truncated, content_filtered.
/// reason (for rejected): too_large, too_deep, duplicate_key,
/// number_out_of_range, invalid_json, unknown_key, invalid_arguments,
/// unknown_tool, multiple_actions, invalid_envelope, unexpected_tool_call,
/// unknown_stop, malformed_response.
///
/// Exit 0 for every decision (a rejection is a successful decision).
/// Exit 2 for usage, I/O and policy-load errors (printed on stderr with the
/// schema keyword and its path).
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The policy file (TOML).
    #[arg(long, value_name = "FILE")]
    policy: std::path::PathBuf,
    /// The response format of stdin.
    #[arg(long, value_parser = ["anthropic", "openai-chat", "openai-responses", "gemini", "envelope"])]
    provider: String,
    /// stdin is a Server-Sent Events stream (anthropic, openai-chat,
    /// openai-responses); it is assembled before classification.
    #[arg(long)]
    stream: bool,
    /// Which model attempt this body answers: 1 for the original, 2 for the
    /// one bounded repair after invalid_json.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_ATTEMPTS)))]
    attempt: u32,
    /// How a provider turn maps onto the envelope: native tool calls, or a
    /// structured-output turn whose text is the envelope JSON.
    #[arg(long, value_parser = ["native", "structured"], default_value = "native")]
    envelope: String,
}

pub fn run(args: Args) -> ExitCode {
    let Some(provider) = Provider::from_name(&args.provider) else {
        eprintln!("toolgate check: unknown provider {}", args.provider);
        return ExitCode::from(2);
    };
    if args.stream && !provider.supports_stream() {
        eprintln!("toolgate check: --stream is not available for {provider}");
        return ExitCode::from(2);
    }
    let policy = match crate::cmd::policy::load(&args.policy) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let body = match read_stdin_bounded(policy.body_max_bytes()) {
        Ok(b) => b,
        Err(e) => return io_failure("reading stdin", &e),
    };
    let opts = CheckOptions {
        stream: args.stream,
        attempt: args.attempt,
        mode: if args.envelope == "structured" {
            EnvelopeMode::Structured
        } else {
            EnvelopeMode::Native
        },
    };
    let decision = check(&policy, provider, &body, &opts);
    match print_line(&decision.to_json().to_string()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => io_failure("writing stdout", &e),
    }
}
