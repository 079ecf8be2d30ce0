//! Test-only features never reach a normal build: `testkit` would let any
//! crate build a `ClaimRequest` without passing the pipeline's stages, and
//! `fault-injection` installs hooks inside the claim transaction. Both are
//! enabled only by dev-dependencies, and Cargo's graph is what shows it.

use std::process::Command;

#[test]
fn test_only_features_stay_out_of_normal_builds() {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--workspace",
            "-e",
            "normal,build",
            "-f",
            "{p} [{f}]",
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
    let ours: Vec<&str> = tree
        .lines()
        .filter(|l| l.starts_with("toolgate v") || l.starts_with("toolgate-store v"))
        .collect();
    assert!(
        ours.iter().any(|l| l.starts_with("toolgate v"))
            && ours.iter().any(|l| l.starts_with("toolgate-store v")),
        "cargo tree output looks wrong:\n{tree}"
    );
    for line in ours {
        let features = line
            .rsplit_once('[')
            .and_then(|(_, f)| f.split_once(']'))
            .map(|(f, _)| f)
            .unwrap_or_else(|| panic!("no feature list in {line:?}"));
        for banned in ["testkit", "fault-injection"] {
            assert!(
                !features.split(',').any(|f| f == banned),
                "{banned} is enabled in a normal build: {line}"
            );
        }
    }
}
