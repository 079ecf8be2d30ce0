//! `check` per provider shape, from the core crate alone (no CLI build).
//!
//! The same five bodies as `toolgate bench check` (`fixtures/bench/`);
//! prints ns/op and ops/s per shape, the median of short batches.
//!
//! ```text
//! cargo run --release -p toolgate --example check_bench -- [seconds] [policy.toml] [shape]
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use toolgate::contract::{CheckOptions, CheckOutcome, Policy, check};
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
    for (name, provider, body) in SHAPES {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let d = check(&policy, provider, body, &opts);
        if d.outcome() != CheckOutcome::Action {
            eprintln!(
                "check_bench: {name} gives {} ({:?})",
                d.outcome(),
                d.message
            );
            std::process::exit(2);
        }
        let ns = measure(Duration::from_secs_f64(seconds), || {
            black_box(check(&policy, provider, black_box(body), &opts));
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

/// The bodies of `toolgate bench check`, as committed in `fixtures/bench/`.
const SHAPES: [(&str, Provider, &[u8]); 5] = [
    (
        "envelope",
        Provider::Envelope,
        include_bytes!("../../../fixtures/bench/envelope.json"),
    ),
    (
        "anthropic",
        Provider::Anthropic,
        include_bytes!("../../../fixtures/bench/anthropic.json"),
    ),
    (
        "openai-chat",
        Provider::OpenAiChat,
        include_bytes!("../../../fixtures/bench/openai-chat.json"),
    ),
    (
        "openai-responses",
        Provider::OpenAiResponses,
        include_bytes!("../../../fixtures/bench/openai-responses.json"),
    ),
    (
        "gemini",
        Provider::Gemini,
        include_bytes!("../../../fixtures/bench/gemini.json"),
    ),
];
