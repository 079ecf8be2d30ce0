//! The MCP example (examples/mcp) the gateway tests run: its folder, and
//! its Python once examples/mcp/install.sh has made it. toolgate-mcp's
//! test support includes this file too.

use std::path::{Path, PathBuf};

pub fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/mcp")
}

/// The example's Python, or `None` after printing a skip message. In CI
/// (`CI=true`) or with `TOOLGATE_REQUIRE_MCP_EXAMPLE=1` a missing one fails
/// the test instead.
pub fn python() -> Option<PathBuf> {
    installed(&[])
}

/// The same, when the files `also` names under the example's folder are
/// there too (another SDK).
pub fn installed(also: &[&str]) -> Option<PathBuf> {
    let p = example_dir().join(".venv/bin/python");
    if p.exists() && also.iter().all(|a| example_dir().join(a).exists()) {
        return Some(p);
    }
    let required = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
        || std::env::var("TOOLGATE_REQUIRE_MCP_EXAMPLE").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "the MCP example's SDKs are missing: run examples/mcp/install.sh"
    );
    eprintln!("skipping: the MCP example's SDKs are missing (run examples/mcp/install.sh)");
    None
}
