//! The library crates carry no example application's code (docs/design.md
//! invariant 13): the support desk lives in `examples/support-desk`, and a
//! deployment of another tool must not inherit its tables, its executor,
//! its Cedar entities or its vocabulary.
//!
//! The check reads every file under the library crates' `src/` and
//! `migrations/` (not `tests/` or `benches/`, where an example may serve as
//! a fixture) and fails on any word-ish use of the desk's names, in code,
//! comments and doc examples alike: a doc example that speaks of the desk
//! teaches a reader that the library is the desk. Generic examples speak
//! of a resource, an order, an amount.

use std::path::{Path, PathBuf};

/// The library crates, relative to the workspace's `crates/` directory:
/// every crate but the binary (`toolgate-cli`, which runs the example for
/// `demo`, `serve --demo` and `eval`).
const LIBRARY_CRATES: [&str; 8] = [
    "toolgate",
    "toolgate-store",
    "toolgate-cedar",
    "toolgate-service",
    "toolgate-http",
    "toolgate-mcp",
    "toolgate-eval",
    "toolgate-deploy",
];

/// The directories of each crate that ship in the library.
const SHIPPED_DIRS: [&str; 2] = ["src", "migrations"];

/// The example's names, lower case. `support desk` is matched with or
/// without a separator (`SupportDesk`, `support_desk`, `support-desk`).
const WORDS: [&str; 3] = ["ticket", "credit", "supportdesk"];

/// The first example name in `line`, if any. A match must start a word (no
/// ASCII letter before it), and may go on (`tickets`, `credit_id`): an
/// identifier such as `apply_goodwill_credit` names a credit, while
/// `incredible` does not.
fn example_name(line: &str) -> Option<&'static str> {
    let lower = line.to_ascii_lowercase();
    // `support desk`, `support_desk`, `support-desk` read as one word.
    let squeezed = lower
        .replace("support desk", "supportdesk")
        .replace("support_desk", "supportdesk")
        .replace("support-desk", "supportdesk");
    WORDS.into_iter().find(|word| {
        squeezed.match_indices(word).any(|(at, _)| {
            !squeezed[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphabetic())
        })
    })
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// Every `file:line: word: text` hit under `crates_dir`.
fn hits(crates_dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for krate in LIBRARY_CRATES {
        for dir in SHIPPED_DIRS {
            let mut files = Vec::new();
            files_under(&crates_dir.join(krate).join(dir), &mut files);
            for file in files {
                // Binary files have no words to check.
                let Ok(text) = std::fs::read_to_string(&file) else {
                    continue;
                };
                for (n, line) in text.lines().enumerate() {
                    if let Some(word) = example_name(line) {
                        let shown = file.strip_prefix(crates_dir).unwrap_or(&file);
                        found.push(format!(
                            "crates/{}:{}: `{word}`: {}",
                            shown.display(),
                            n + 1,
                            line.trim()
                        ));
                    }
                }
            }
        }
    }
    found
}

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/")
        .to_path_buf()
}

#[test]
fn library_crates_name_no_example_application() {
    let dir = crates_dir();
    // The walk saw the crates: an empty walk must not pass for a clean one.
    for krate in LIBRARY_CRATES {
        assert!(
            dir.join(krate).join("src").is_dir(),
            "crates/{krate}/src is missing"
        );
    }
    let found = hits(&dir);
    assert!(
        found.is_empty(),
        "the library crates name the support-desk example; move the code to \
         examples/support-desk, or reword the comment generically (a resource, an order, \
         an amount):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_match_is_word_ish_and_case_insensitive() {
    for line in [
        "UPDATE tickets SET version = 1",
        "/// the Ticket's assignee",
        "fn apply_goodwill_credit()",
        "\"credit:issue\"",
        "CREDITS",
        "pub struct SupportDesk;",
        "mod support_desk;",
        "examples/support-desk/policy.toml",
        "the support desk's executor",
    ] {
        assert!(example_name(line).is_some(), "{line}");
    }
    for line in [
        "an incredible order",
        "refund_order(order_id, amount_minor)",
        "Tickle the resource",
        "support for a desk",
    ] {
        assert_eq!(example_name(line), None, "{line}");
    }
}
