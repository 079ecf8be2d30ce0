//! Architecture invariants that only Cargo's graph can show: the core links
//! no async runtime, database driver or HTTP stack, nor (without its
//! `openapi` feature) the OpenAPI schema generator; the running service
//! links neither door's framework; and the two doors, HTTP and MCP, never
//! depend on each other (ARCHITECTURE.md).

use std::process::Command;

const FORBIDDEN: &[&str] = &[
    "tokio",
    "async-std",
    "smol",
    "sqlx",
    "sqlx-core",
    "axum",
    "hyper",
    "reqwest",
    "tower",
    "tower-http",
    "mio",
    // The OpenAPI schema generator: only with the `openapi` feature, which
    // a front door turns on; the core alone never links it.
    "utoipa",
];

/// The names of every package `package` links (normal and build
/// dependencies, transitively), from `cargo tree`.
fn linked(package: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            package,
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).expect("UTF-8");
    let names: Vec<String> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    assert!(
        names.iter().any(|n| n == "serde_json"),
        "cargo tree output looks wrong:\n{tree}"
    );
    names
}

#[test]
fn core_links_no_runtime_database_or_http_stack() {
    for name in linked("toolgate") {
        assert!(
            !FORBIDDEN.contains(&name.as_str()),
            "the core crate depends on {name}"
        );
    }
}

/// The running gate is shared by the doors; it knows neither's framework.
/// It links hyper and tower-http through reqwest, the client of its one
/// outgoing call (the review webhook); serving is the doors' business.
#[test]
fn the_service_links_neither_doors_framework() {
    const DOORS: &[&str] = &["axum", "rmcp", "toolgate-http", "toolgate-mcp"];
    for name in linked("toolgate-service") {
        assert!(
            !DOORS.contains(&name.as_str()),
            "toolgate-service depends on {name}"
        );
    }
}

/// The HTTP and MCP doors are peers over the service: neither depends on
/// the other, so neither can set what the other derives.
#[test]
fn the_doors_do_not_depend_on_each_other() {
    let mcp = linked("toolgate-mcp");
    assert!(mcp.iter().any(|n| n == "toolgate-service"));
    assert!(
        !mcp.iter().any(|n| n == "toolgate-http"),
        "toolgate-mcp depends on toolgate-http"
    );
    let http = linked("toolgate-http");
    assert!(http.iter().any(|n| n == "toolgate-service"));
    assert!(
        !http.iter().any(|n| n == "toolgate-mcp"),
        "toolgate-http depends on toolgate-mcp"
    );
}
