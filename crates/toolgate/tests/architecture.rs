//! Architecture invariants that only Cargo's graph can show: the core links
//! no async runtime, database driver or HTTP stack, nor (without its
//! `openapi` feature) the OpenAPI schema generator (ARCHITECTURE.md).

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

#[test]
fn core_links_no_runtime_database_or_http_stack() {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "toolgate",
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
    let names: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        names.contains(&"serde_json"),
        "cargo tree output looks wrong:\n{tree}"
    );
    for name in &names {
        assert!(
            !FORBIDDEN.contains(name),
            "the core crate depends on {name}:\n{tree}"
        );
    }
}
