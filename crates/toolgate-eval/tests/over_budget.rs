//! The eval counts over-budget decisions: cases whose decision
//! carries reason `budget_exceeded`, whether the budget sends them to a
//! person or rejects them, in the JSON report and the text summary.

use toolgate::pipeline::Outcome;
use toolgate_eval::metrics::{CaseResult, Observed, Report};
use toolgate_eval::render;

fn result(id: &str, got: Outcome, reason: Option<&str>) -> CaseResult {
    CaseResult {
        id: id.to_owned(),
        provider: "anthropic".to_owned(),
        labels: toolgate_eval::case::Labels {
            justified: true,
            warrants_answer: true,
            reply_supported: true,
            expected: got,
        },
        observed: Observed {
            outcome: got,
            reason: reason.map(str::to_owned),
            message: None,
            reply: None,
        },
    }
}

#[test]
fn over_budget_decisions_are_counted() {
    let results = vec![
        result("first", Outcome::Executed, None),
        result(
            "third-over-cap",
            Outcome::PendingApproval,
            Some("budget_exceeded"),
        ),
        result(
            "rejected-over-cap",
            Outcome::Rejected,
            Some("budget_exceeded"),
        ),
        result(
            "needs-a-person",
            Outcome::PendingApproval,
            Some("approval_required"),
        ),
    ];
    let r = Report::new("toolgate", "t", results, None);
    assert_eq!(r.over_budget(), 2);
    assert_eq!(r.to_json()["over_budget_decisions"], 2);
    assert!(
        render::human(&r).contains("over budget (budget_exceeded): 2"),
        "{}",
        render::human(&r)
    );
    let none = Report::new(
        "toolgate",
        "t",
        vec![result("a", Outcome::Executed, None)],
        None,
    );
    assert_eq!(none.to_json()["over_budget_decisions"], 0);
}
