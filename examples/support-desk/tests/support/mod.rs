//! Shared by the example's test targets: database URLs from the
//! environment and fresh names per run.

#![allow(dead_code, reason = "each test target uses a different subset")]

use std::io::Write;

/// Set to `1` (CI does) to turn a missing database into a failure instead
/// of a skip.
pub const REQUIRE: &str = "TOOLGATE_REQUIRE_DATABASES";

/// The database URL in `var`, or `None` (after saying so) when it is unset
/// and databases are not required.
pub fn database_url(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                !std::env::var(REQUIRE).is_ok_and(|v| v == "1"),
                "{REQUIRE}=1 but {var} is not set: the {what} tests cannot run"
            );
            // Straight to stderr, past the test harness's output capture,
            // so the skip is visible in a normal `cargo test` run.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {var} is not set, so this {what} test did not run"
            );
            None
        }
    }
}

/// 16 random bytes, to name this run's rows.
pub fn random16() -> [u8; 16] {
    *toolgate_store::fresh_holder()
        .expect("random number generator")
        .as_bytes()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
