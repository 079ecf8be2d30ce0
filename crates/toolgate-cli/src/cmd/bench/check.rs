//! `toolgate bench check`: the stateless path (raw bytes → decision with
//! fingerprint) per provider shape, on one core.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;
use toolgate::contract::{CheckOptions, CheckOutcome, check};
use toolgate::provider::Provider;

use super::timing::compare;

/// The PHP reference (decode + amount check + key + fingerprint, PHP 8.2,
/// opcache off) on this machine class, in ops/s, as measured where PHP runs. It
/// cannot be run here, so it is the baseline every line is compared with.
const PHP_REFERENCE_OPS_PER_S: f64 = 437_000.0;

/// Stateless-path throughput per provider shape.
///
/// For the seed action envelope (amount_minor 1500, late_delivery) in each
/// provider's response shape, runs `check` (strict decode, stop
/// classification, envelope, contract, canonical JSON, SHA-256) on one
/// thread and prints one line per shape:
///   shape=<name> bytes=<n> ops_per_s=<n> vs_php_reference=<ratio>
///     serde_json_parse_ops_per_s=<n> cost_vs_parse=<ratio>
/// vs_php_reference is against the PHP reference figure of 437000 ops/s
/// (target: >= 3); plain serde_json parsing of the same bytes is measured
/// alongside in the same run, and cost_vs_parse is check time / parse time.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The policy file (TOML); it must declare apply_goodwill_credit.
    #[arg(long, value_name = "FILE")]
    policy: std::path::PathBuf,
    /// Seconds to spend measuring each shape.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
}

#[expect(
    clippy::disallowed_methods,
    reason = "serde_json is the baseline the benchmark compares the strict decoder with"
)]
pub fn run(args: Args) -> ExitCode {
    if !args.seconds.is_finite() || args.seconds <= 0.0 {
        eprintln!("toolgate bench check: --seconds must be positive");
        return ExitCode::from(2);
    }
    let policy = match crate::cmd::policy::load(&args.policy) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let budget = Duration::from_secs_f64(args.seconds);
    let opts = CheckOptions::default();
    for (name, provider, body) in SHAPES {
        // Only a body that really reaches `action` measures the full path.
        let d = check(&policy, provider, body, &opts);
        if d.outcome() != CheckOutcome::Action {
            eprintln!(
                "toolgate bench check: shape {name} gives {} ({:?}) under this policy, not action",
                d.outcome(),
                d.message
            );
            return ExitCode::from(2);
        }
        // Plain serde_json parsing of the same bytes runs alongside as the
        // in-run baseline: the least any gate must do with the body.
        let [s, p] = compare(
            budget,
            [
                &mut || {
                    black_box(check(&policy, provider, black_box(body), &opts));
                },
                &mut || {
                    black_box(serde_json::from_slice::<Value>(black_box(body)).ok());
                },
            ],
        );
        let ops = 1.0 / s;
        println!(
            "shape={name} bytes={} ops_per_s={:.0} vs_php_reference={:.2} serde_json_parse_ops_per_s={:.0} cost_vs_parse={:.2}",
            body.len(),
            ops,
            ops / PHP_REFERENCE_OPS_PER_S,
            1.0 / p,
            s / p
        );
    }
    ExitCode::SUCCESS
}

/// The seed envelope and the same proposal in each provider's shape, as
/// committed in `fixtures/bench/` (the core crate's `check_bench` example
/// reads the same files).
const SHAPES: [(&str, Provider, &[u8]); 5] = [
    (
        "envelope",
        Provider::Envelope,
        include_bytes!("../../../../../fixtures/bench/envelope.json"),
    ),
    (
        "anthropic",
        Provider::Anthropic,
        include_bytes!("../../../../../fixtures/bench/anthropic.json"),
    ),
    (
        "openai-chat",
        Provider::OpenAiChat,
        include_bytes!("../../../../../fixtures/bench/openai-chat.json"),
    ),
    (
        "openai-responses",
        Provider::OpenAiResponses,
        include_bytes!("../../../../../fixtures/bench/openai-responses.json"),
    ),
    (
        "gemini",
        Provider::Gemini,
        include_bytes!("../../../../../fixtures/bench/gemini.json"),
    ),
];
