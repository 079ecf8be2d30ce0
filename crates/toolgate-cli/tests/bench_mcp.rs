//! `toolgate bench mcp` with a few calls: the figures' shape (writes, the
//! write's floor, reads), every gated call executed, and the shop's own count of refunds agreeing. Times are
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
    assert_eq!(lines.len(), 10, "{stdout}");
    assert!(
        lines[0].starts_with("toolgate bench mcp, 20") && lines[0].contains("6 calls per path"),
        "{}",
        lines[0]
    );
    let timed = [
        (1, "write direct:"),
        (2, "write gated:"),
        (3, "write floor:"),
        (6, "read direct:"),
        (7, "read gated:"),
    ];
    for (i, label) in timed {
        assert!(lines[i].starts_with(label), "{}", lines[i]);
        for key in ["p50_ms", "p99_ms", "mean_ms"] {
            assert!(figure(lines[i], key) > 0.0, "{}", lines[i]);
        }
    }
    for (i, label) in [(4, "write added:"), (8, "read added:")] {
        assert!(lines[i].starts_with(label), "{}", lines[i]);
        for key in ["p50_ms", "p99_ms", "ratio_p50", "ratio_p99"] {
            assert!(figure(lines[i], key).is_finite(), "{}", lines[i]);
        }
    }
    assert!(lines[5].starts_with("write over floor:"), "{}", lines[5]);
    for key in ["p50_ms", "p99_ms"] {
        assert!(figure(lines[5], key).is_finite(), "{}", lines[5]);
    }
    // Every gated call executed, and the shop ran each call of both paths
    // once: 7 per path, the warm-up call included.
    assert!(
        lines[9].starts_with("calls=6 gated_outcomes=executed:6 shop="),
        "{}",
        lines[9]
    );
    assert!(
        lines[9].ends_with(r#"shop={"refund_order_calls": 14, "refunds": 14}"#),
        "{}",
        lines[9]
    );
}
