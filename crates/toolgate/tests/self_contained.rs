//! The repository stands alone: a fresh clone, with nothing beside it, has
//! every file its tests, docs and comments refer to.
//!
//! Two checks over every tracked text file (`git ls-files`, or a walk of the
//! tree when git is not available, as in an unpacked source archive):
//!
//! - no reference leaves the repository: no path into the `shared` folder
//!   that once sat beside the checkout, no absolute path of the machine
//!   the repository was written on, no citation of the contract as the
//!   outside `DESIGN` document (it is `docs/design.md`), and no relative
//!   path whose `../` steps climb above the repository root (the markers
//!   are listed in `outside_markers`);
//! - every relative link in a markdown file points at a file that exists,
//!   and every `#fragment` into a markdown file at one of its headings.
//!
//! The data of the third-party suites under `fixtures/suites/` is not
//! scanned: its strings are test inputs, not references this repository
//! makes (their README is scanned like any other document).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// Markers that always name something outside the repository. Spelled in
/// parts so that this file does not match them itself.
fn outside_markers() -> Vec<(String, &'static str)> {
    vec![
        (
            ["..", "shared"].join("/"),
            "a path outside the repository (the contract is docs/design.md, the suites are in fixtures/suites)",
        ),
        (
            format!("/{}/", "work"),
            "an absolute path on the machine the file was written on",
        ),
        (
            ["DESIGN", "md"].join("."),
            "the contract outside the repository: cite docs/design.md",
        ),
        (
            ["DESIGN", "§"].join(" "),
            "the contract outside the repository: cite docs/design.md §N",
        ),
        (
            ["DESIGN", "invariant"].join(" "),
            "the contract outside the repository: cite docs/design.md invariant N",
        ),
    ]
}

/// Tracked files, as paths relative to the root with `/` separators.
fn tracked_files(root: &Path) -> Vec<String> {
    let listed = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|out| out.status.success());
    match listed {
        Some(out) => String::from_utf8(out.stdout)
            .expect("UTF-8 file names")
            .split('\0')
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect(),
        None => {
            let mut files = Vec::new();
            walk(root, "", &mut files);
            files.sort();
            files
        }
    }
}

/// The fallback when git is missing or this is not a checkout: every file
/// except build output, git's own directory and what `.gitignore` keeps out.
fn walk(dir: &Path, rel: &str, files: &mut Vec<String>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let entry = entry.expect("directory entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let kind = entry.file_type().expect("file type");
        if kind.is_dir() {
            let skipped = name == ".git"
                || name.starts_with("target")
                || path == "fuzz/corpus"
                || path == "fuzz/artifacts";
            if !skipped {
                walk(&entry.path(), &path, files);
            }
        } else if kind.is_file() && !name.ends_with(".db") && !name.contains(".db-") {
            files.push(path);
        }
    }
}

fn is_suite_data(path: &str) -> bool {
    path.starts_with("fixtures/suites/") && path != "fixtures/suites/README.md"
}

/// The directory `path` is in, relative to the root ("" for the root).
fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// `rel` joined onto `base` with `.` and `..` resolved, or `None` when the
/// `..` steps climb above the root.
fn resolve(base: &str, rel: &str) -> Option<String> {
    let mut parts: Vec<&str> = base.split('/').filter(|p| !p.is_empty()).collect();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            other => parts.push(other),
        }
    }
    Some(parts.join("/"))
}

/// The directories a relative path in `file` may be meant from: the file's
/// own directory (markdown links, `include_str!`), the crate's directory for
/// Rust sources (`env!("CARGO_MANIFEST_DIR")`), and the root (commands
/// written to be run from a checkout).
fn bases(file: &str, manifests: &BTreeSet<String>) -> Vec<String> {
    let mut bases = vec![parent(file).to_owned()];
    if file.ends_with(".rs") {
        let mut dir = parent(file);
        loop {
            let manifest = if dir.is_empty() {
                "Cargo.toml".to_owned()
            } else {
                format!("{dir}/Cargo.toml")
            };
            if manifests.contains(&manifest) {
                bases.push(dir.to_owned());
                break;
            }
            if dir.is_empty() {
                break;
            }
            dir = parent(dir);
        }
    }
    bases.push(String::new());
    bases.dedup();
    bases
}

const DELIMITERS: &[char] = &[
    '"', '\'', '`', '(', ')', '[', ']', '{', '}', '<', '>', ',', ';', '|', '=', '*', '!',
];

/// Words of a line that look like relative paths with `..` steps.
fn dotted_paths(line: &str) -> Vec<&str> {
    line.split(|c: char| c.is_whitespace() || DELIMITERS.contains(&c))
        .filter(|t| !t.contains("://"))
        .map(|t| {
            // Sentence punctuation after a path is not part of it; a
            // trailing ".." is.
            // A link's `#anchor` is not part of the path it names.
            let t = t.split('#').next().unwrap_or(t);
            let t = t.trim_end_matches([',', ':', '?']);
            match t.strip_suffix('.') {
                Some(s) if !s.ends_with('.') => s,
                _ => t,
            }
        })
        .filter(|t| t.contains("../") || t.ends_with("/..") || *t == "..")
        // `concat!(env!("CARGO_MANIFEST_DIR"), "/../..")`: relative to the
        // directory it is appended to.
        .map(|t| {
            t.strip_prefix('/')
                .filter(|s| s.starts_with(".."))
                .unwrap_or(t)
        })
        .filter(|t| !t.starts_with('/'))
        .collect()
}

/// Problems with the references in one file's text, as `(line, message)`.
fn check_text(
    root: &Path,
    file: &str,
    text: &str,
    manifests: &BTreeSet<String>,
) -> Vec<(usize, String)> {
    let markers = outside_markers();
    let bases = bases(file, manifests);
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for (marker, why) in &markers {
            if line.contains(marker.as_str()) {
                found.push((i + 1, format!("`{marker}`: {why}")));
            }
        }
        for path in dotted_paths(line) {
            let resolved: Vec<Option<String>> = bases.iter().map(|b| resolve(b, path)).collect();
            let exists = resolved.iter().flatten().any(|r| root.join(r).exists());
            if !exists && resolved.iter().any(Option::is_none) {
                found.push((i + 1, format!("`{path}` climbs above the repository root")));
            }
        }
    }
    found
}

/// GitHub's anchor for a heading: the text as rendered (link targets,
/// backticks and emphasis dropped), lower case, spaces to hyphens, other
/// punctuation removed.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find("](") {
        let close = rest[open..].find(')').map_or(rest.len(), |c| open + c + 1);
        text.push_str(&rest[..open]);
        rest = &rest[close..];
    }
    text.push_str(rest);
    text.chars()
        .flat_map(char::to_lowercase)
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown document's headings, numbered as GitHub
/// numbers repeats (`name`, `name-1`, …).
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading.trim());
        let mut anchor = base.clone();
        let mut n = 0;
        while !anchors.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
    }
    anchors
}

/// The targets of a markdown line's links, outside code spans:
/// `[text](target)` and reference definitions `[id]: target`.
fn link_targets(line: &str) -> Vec<&str> {
    let mut targets = Vec::new();
    if let Some(rest) = line.trim_start().strip_prefix('[')
        && let Some((_, target)) = rest.split_once("]: ")
    {
        targets.push(target.split_whitespace().next().unwrap_or(""));
    }
    // Odd-numbered pieces between backticks are code spans.
    for (n, piece) in line.split('`').enumerate() {
        if n % 2 == 1 {
            continue;
        }
        let mut rest = piece;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("");
            targets.push(target.trim_start_matches('<').trim_end_matches('>'));
            rest = &after[end..];
        }
    }
    targets
}

/// Problems with one markdown file's relative links, as `(line, message)`.
fn check_links(root: &Path, file: &str, text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for target in link_targets(line) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target, None),
            };
            let resolved = if path.is_empty() {
                Some(file.to_owned())
            } else {
                resolve(parent(file), path)
            };
            let Some(resolved) = resolved else {
                found.push((
                    i + 1,
                    format!("link `{target}` climbs above the repository root"),
                ));
                continue;
            };
            let on_disk = root.join(&resolved);
            if !on_disk.exists() {
                found.push((i + 1, format!("link `{target}`: {resolved} does not exist")));
                continue;
            }
            if let Some(fragment) = fragment
                && resolved.ends_with(".md")
            {
                let doc = std::fs::read_to_string(&on_disk).expect("readable markdown");
                if !anchors(&doc).contains(fragment) {
                    found.push((
                        i + 1,
                        format!("link `{target}`: {resolved} has no heading #{fragment}"),
                    ));
                }
            }
        }
    }
    found
}

/// Every problem in the repository, one `file:line: message` each.
fn problems(root: &Path) -> Vec<String> {
    let files = tracked_files(root);
    assert!(
        files.iter().any(|f| f == "Cargo.toml") && files.iter().any(|f| f == "README.md"),
        "the file list does not look like this repository: {files:?}"
    );
    let manifests: BTreeSet<String> = files
        .iter()
        .filter(|f| f.ends_with("Cargo.toml"))
        .cloned()
        .collect();
    let mut problems = Vec::new();
    for file in &files {
        if is_suite_data(file) {
            continue;
        }
        let bytes = match std::fs::read(root.join(file)) {
            Ok(bytes) => bytes,
            // Deleted in the working tree but still in the index.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!("{file}: {e}"),
        };
        if bytes.contains(&0) {
            continue;
        }
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        let mut found = check_text(root, file, &text, &manifests);
        if file.ends_with(".md") {
            found.extend(check_links(root, file, &text));
        }
        found.sort();
        problems.extend(
            found
                .into_iter()
                .map(|(line, m)| format!("{file}:{line}: {m}")),
        );
    }
    problems
}

#[test]
fn no_tracked_file_refers_outside_the_repository_and_links_resolve() {
    let problems = problems(&root());
    assert!(
        problems.is_empty(),
        "{} reference(s) that a fresh clone cannot follow:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

// ---- the checker catches what it is for (inputs built at run time, so
// that this file does not trip its own check)

fn manifests() -> BTreeSet<String> {
    tracked_files(&root())
        .into_iter()
        .filter(|f| f.ends_with("Cargo.toml"))
        .collect()
}

fn up(n: usize) -> String {
    "../".repeat(n)
}

#[test]
fn outside_markers_are_found_with_their_line() {
    let shared = format!("{}shared/testdata", up(1));
    let text = format!("fine\nread from `{shared}` in place\n");
    let found = check_text(&root(), "README.md", &text, &manifests());
    assert!(!found.is_empty(), "nothing found in {text:?}");
    assert!(found.iter().all(|(line, _)| *line == 2), "{found:?}");
    assert!(
        found.iter().any(|(_, m)| m.contains("outside")),
        "{found:?}"
    );
    let citation = format!("// see {} §8\n", "DESIGN");
    let found = check_text(
        &root(),
        "crates/toolgate/src/lib.rs",
        &citation,
        &manifests(),
    );
    assert_eq!(found.len(), 1, "{found:?}");
    let absolute = format!("cat /{}/elsewhere/file\n", "work");
    assert_eq!(
        check_text(&root(), ".ci/run", &absolute, &manifests()).len(),
        1
    );
}

#[test]
fn a_relative_path_above_the_root_is_found() {
    // From a test, relative to the crate: crates/toolgate/../../.. is above.
    let line = format!("    .join(\"{}elsewhere/testdata/suite\")\n", up(3));
    let found = check_text(&root(), "crates/toolgate/tests/x.rs", &line, &manifests());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].1.contains("climbs above"), "{found:?}");
    // A markdown link from docs/ two levels up leaves the repository.
    let link = format!("[suite]({}elsewhere/suite)\n", up(2));
    assert_eq!(
        check_text(&root(), "docs/x.md", &link, &manifests()).len(),
        1
    );
    assert_eq!(check_links(&root(), "docs/x.md", &link).len(), 1);
}

#[test]
fn paths_inside_the_repository_pass() {
    let lines = [
        // include_str! from a file's directory.
        format!(
            "const P: &str = include_str!(\"{}examples/support-desk/policy.toml\");",
            up(3)
        ),
        // Relative to CARGO_MANIFEST_DIR, with a format placeholder.
        format!("\"{{}}/{}fixtures/providers/{{file}}\",", up(2)),
        format!(
            "    \"/{}fixtures/suites/JSONTestSuite/test_parsing\"",
            up(2)
        ),
    ];
    for line in &lines {
        let found = check_text(
            &root(),
            "crates/toolgate-cli/src/desk.rs",
            line,
            &manifests(),
        );
        assert!(found.is_empty(), "{line}: {found:?}");
    }
    let link = "[the contract](design.md#8-operation-key-fingerprint-claims)";
    assert_eq!(check_links(&root(), "docs/x.md", link), vec![]);
}

#[test]
fn a_missing_link_target_or_heading_is_found() {
    let missing = "see [the map](ARCHITECTURE-old.md)\n";
    let found = check_links(&root(), "README.md", missing);
    assert_eq!(found.len(), 1);
    assert!(found[0].1.contains("does not exist"), "{found:?}");
    let heading = "see [design §8](docs/design.md#8-claims)\n";
    let found = check_links(&root(), "README.md", heading);
    assert_eq!(found.len(), 1);
    assert!(found[0].1.contains("no heading"), "{found:?}");
    // A link written inside a code span is text, not a link.
    assert_eq!(
        check_links(&root(), "README.md", "`[a](nowhere.md)`"),
        vec![]
    );
}

#[test]
fn anchors_follow_github() {
    let doc = "# Title\n## 3. Strict decoding (one decoder for all model JSON)\n\
               ## Outcomes ([design §2](design.md#2))\n## `toolgate bench check`\n## Title\n";
    let anchors = anchors(doc);
    for a in [
        "title",
        "title-1",
        "3-strict-decoding-one-decoder-for-all-model-json",
        "outcomes-design-2",
        "toolgate-bench-check",
    ] {
        assert!(anchors.contains(a), "{a} not in {anchors:?}");
    }
}

#[test]
fn the_walk_without_git_finds_the_sources_and_skips_build_output() {
    let root = root();
    let mut files = Vec::new();
    walk(&root, "", &mut files);
    for needed in [
        "Cargo.toml",
        "README.md",
        "docs/design.md",
        "crates/toolgate/tests/self_contained.rs",
    ] {
        assert!(
            files.iter().any(|f| f == needed),
            "the walk misses {needed}"
        );
    }
    assert!(
        !files
            .iter()
            .any(|f| f.starts_with("target") || f.starts_with(".git/")),
        "the walk lists build output or git's own files"
    );
}
