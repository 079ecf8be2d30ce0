//! Documentation checks that run under `cargo test`: every stable code the
//! library can produce has a row in `docs/error-codes.md`.

use toolgate::decode::DecodeCode;
use toolgate::decode::normalize::Action;

fn error_codes_doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/error-codes.md");
    std::fs::read_to_string(path).expect("docs/error-codes.md")
}

fn assert_documented(doc: &str, code: &str) {
    let row = format!("| `{code}` |");
    assert!(
        doc.contains(&row),
        "docs/error-codes.md has no row for `{code}`"
    );
}

#[test]
fn decode_codes_are_documented() {
    let doc = error_codes_doc();
    for code in DecodeCode::ALL {
        assert_documented(&doc, code.as_str());
    }
}

#[test]
fn normalize_actions_are_documented() {
    let doc = error_codes_doc();
    for action in Action::ALL {
        assert_documented(&doc, action.as_str());
    }
}

#[test]
fn pipeline_outcomes_and_reasons_are_documented() {
    let doc = error_codes_doc();
    for outcome in toolgate::pipeline::Outcome::ALL {
        assert_documented(&doc, outcome.as_str());
    }
    for reason in toolgate::pipeline::Reason::OWN {
        assert_documented(&doc, reason.as_str());
    }
    for code in toolgate::pipeline::RECONCILE_AUDIT_OUTCOMES {
        assert_documented(&doc, code);
    }
    for kind in toolgate::claim::ExecutorKind::ALL {
        assert_documented(&doc, kind.as_str());
    }
}

/// The rows of the "outcome and reason pairs" table: (outcome, reason or
/// `None` for `—`).
fn documented_pairs(doc: &str) -> Vec<(String, Option<String>)> {
    let start = doc
        .find("## Decisions: outcome and reason pairs")
        .expect("docs/error-codes.md has a \"Decisions: outcome and reason pairs\" section");
    let rest = &doc[start + 2..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let outcome = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let reason = match *cells.get(2)? {
                "—" => None,
                r => Some(r.strip_prefix('`')?.strip_suffix('`')?.to_owned()),
            };
            Some((outcome.to_owned(), reason))
        })
        .collect()
}

/// Every (outcome, reason) pair a decision can have, from the types, has a
/// row, and every row is a pair a decision can have.
#[test]
fn every_outcome_reason_pair_is_documented() {
    let doc = error_codes_doc();
    let mut documented = documented_pairs(&doc);
    for (outcome, reason) in toolgate::pipeline::decision_pairs() {
        let pair = (
            outcome.as_str().to_owned(),
            reason.map(|r| r.as_str().to_owned()),
        );
        let at = documented
            .iter()
            .position(|d| *d == pair)
            .unwrap_or_else(|| panic!("docs/error-codes.md has no pair row for {pair:?}"));
        documented.remove(at);
    }
    assert!(
        documented.is_empty(),
        "documented pairs no decision has: {documented:?}"
    );
}

#[test]
fn the_pairs_check_fails_when_a_row_is_missing() {
    let doc = error_codes_doc();
    let row = "| `needs_reconciliation` | `lease_expired` |";
    assert!(doc.contains(row));
    let cut: String = doc
        .lines()
        .filter(|l| !l.starts_with(row))
        .collect::<Vec<_>>()
        .join("\n");
    let pairs = documented_pairs(&cut);
    assert!(!pairs.contains(&(
        "needs_reconciliation".to_owned(),
        Some("lease_expired".to_owned())
    )));
    assert!(pairs.contains(&(
        "needs_reconciliation".to_owned(),
        Some("lease_lost".to_owned())
    )));
}

/// A refused request's audit outcome and every refusal code have a row in
/// the section that says what they mean there (several of them are problem
/// codes too, documented in another table).
#[test]
fn refused_requests_are_documented_in_their_own_section() {
    let doc = error_codes_doc();
    let start = doc
        .find("## Refused requests")
        .expect("docs/error-codes.md has a \"Refused requests\" section");
    let rest = &doc[start + 2..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    assert_documented(section, toolgate::pipeline::REFUSED_REQUEST);
    for r in toolgate::pipeline::Refusal::ALL {
        assert_documented(section, r.as_str());
    }
}
