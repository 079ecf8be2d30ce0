//! `toolgate bench mcp` with a few calls: the figures' shape, every gated
//! call executed, and the shop's own count of refunds agreeing. Times are
//! printed, never asserted.
//!
//! Needs examples/mcp/install.sh. Without it the test skips with a message,
//! unless CI or TOOLGATE_REQUIRE_MCP_EXAMPLE=1 says it must run.

use std::process::Command;

#[path = "support/mcp_example.rs"]
mod mcp_example;

use mcp_example::{example_dir, python};

/// The number after `key=` on `line`.
fn figure(line: &str, key: &str) -> f64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
        .parse()
        .unwrap_or_else(|e| panic!("{key}= in {line:?}: {e}"))
}

#[test]
fn bench_mcp_gates_every_call_and_prints_both_paths() {
    if python().is_none() {
        return;
    }
    let example = example_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["bench", "mcp", "--calls", "6", "--warmup", "1", "--example"])
        .arg(&example)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    assert!(
        lines[0].starts_with("toolgate bench mcp, 20") && lines[0].contains("6 calls per path"),
        "{}",
        lines[0]
    );
    for (line, label) in lines[1..3].iter().zip(["direct:", "gated:"]) {
        assert!(line.starts_with(label), "{line}");
        for key in ["p50_ms", "p99_ms", "mean_ms"] {
            assert!(figure(line, key) > 0.0, "{line}");
        }
    }
    assert!(lines[3].starts_with("added:"), "{}", lines[3]);
    for key in ["p50_ms", "p99_ms", "ratio_p50", "ratio_p99"] {
        assert!(figure(lines[3], key).is_finite(), "{}", lines[3]);
    }
    // Every gated call executed, and the shop ran each call of both paths
    // once: 7 per path, the warm-up call included.
    assert!(
        lines[4].starts_with("calls=6 gated_outcomes=executed:6 shop="),
        "{}",
        lines[4]
    );
    assert!(
        lines[4].ends_with(r#"shop={"refund_order_calls": 14, "refunds": 14}"#),
        "{}",
        lines[4]
    );
}
