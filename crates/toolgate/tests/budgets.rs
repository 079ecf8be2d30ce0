//! Budgets in the policy (docs/design.md §15, docs/policy.md "Budgets"):
//! what loads, what is refused and where, and what `policy explain` says.

use toolgate::contract::budget::{Over, Per, Window};
use toolgate::contract::{Policy, explain::explain};

fn policy(budgets: &str) -> String {
    format!(
        r#"
version = 1
abstain_message = "no"

[[tools]]
name = "credit"
capability = "credit:issue"
operation_key = ["customer_id", "ticket_id", "version_seen"]
schema = '''
{{ "type": "object", "additionalProperties": false,
   "required": ["amount_minor", "note"],
   "properties": {{
     "amount_minor": {{ "type": "integer", "minimum": 1, "maximum": 2000 }},
     "optional_minor": {{ "type": "integer", "minimum": 1, "maximum": 2000 }},
     "unbounded_minor": {{ "type": "integer", "minimum": 1 }},
     "note": {{ "type": "string", "maxLength": 10 }}
   }} }}
'''
{budgets}
"#
    )
}

const DAILY: &str = r#"
[[tools.budgets]]
name = "daily_credit_per_customer"
amount = "/amount_minor"
per = ["customer_id"]
window = "day"
limit = 5000
over = "pending_approval"
"#;

fn refused(budgets: &str) -> String {
    Policy::load(&policy(budgets))
        .expect_err("the policy must be refused")
        .to_string()
}

#[test]
fn a_budget_loads_as_written() {
    let p = Policy::load(&policy(
        &(DAILY.to_owned()
            + r#"
[[tools.budgets]]
name = "monthly_per_actor"
amount = "/amount_minor"
per = ["actor", "customer_id"]
window = "month"
limit = 100000
over = "rejected"
"#),
    ))
    .unwrap();
    let b = p.tool("credit").unwrap().budgets();
    assert_eq!(b.len(), 2);
    assert_eq!(b[0].name(), "daily_credit_per_customer");
    assert_eq!(b[0].amount_pointer(), "/amount_minor");
    assert_eq!(b[0].per(), &[Per::Scope("customer_id".to_owned())]);
    assert_eq!(b[0].window(), Window::Day);
    assert_eq!(b[0].limit(), 5000);
    assert_eq!(b[0].over(), Over::PendingApproval);
    assert_eq!((b[0].amount_minimum(), b[0].amount_maximum()), (1, 2000));
    assert_eq!(
        b[1].per(),
        &[Per::Actor, Per::Scope("customer_id".to_owned())]
    );
    assert_eq!(b[1].window(), Window::Month);
    assert_eq!(b[1].over(), Over::Rejected);
    assert_eq!(
        b[0].amount_of(&serde_json::json!({"amount_minor": 1500, "note": "x"})),
        Some(1500)
    );
}

#[test]
fn loading_refuses_bad_budgets_with_their_location() {
    let with = |field: &str, value: &str| {
        DAILY
            .lines()
            .map(|l| {
                if l.starts_with(&format!("{field} = ")) {
                    format!("{field} = {value}")
                } else {
                    l.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let cases = [
        (
            with("amount", "\"/note\""),
            "budgets[0] daily_credit_per_customer: amount",
            "not an integer property",
        ),
        (
            with("amount", "\"/missing\""),
            ": amount",
            "names no property",
        ),
        (
            with("amount", "\"/unbounded_minor\""),
            ": amount",
            "no integer \"maximum\"",
        ),
        (
            with("amount", "\"/optional_minor\""),
            ": amount",
            "must be required",
        ),
        (
            with("amount", "\"amount_minor\""),
            ": amount",
            "not a pointer",
        ),
        (
            with("per", "[\"order_id\"]"),
            ": per",
            "`order_id` is neither \"actor\" nor a scope field",
        ),
        (with("per", "[]"), ": per", "at least one"),
        (with("limit", "0"), ": limit", "positive"),
        (with("limit", "-5"), ": limit", "positive"),
        (
            with("window", "\"week\""),
            ": window",
            "unknown window \"week\"",
        ),
        (with("over", "\"allowed\""), ": over", "unknown outcome"),
        (
            DAILY.to_owned() + DAILY,
            "budgets[1] daily_credit_per_customer: name",
            "declared twice",
        ),
    ];
    for (budgets, location, message) in cases {
        let e = refused(&budgets);
        assert!(e.starts_with("tools[0] credit: "), "{e}");
        assert!(e.contains(location), "{e} lacks {location}");
        assert!(e.contains(message), "{e} lacks {message}");
    }
    // An unknown key in the table is a TOML error with its line.
    let e = refused(&(DAILY.to_owned() + "hard = true\n"));
    assert!(e.contains("unknown field `hard`"), "{e}");
}

#[test]
fn a_budget_name_names_one_budget_in_the_policy() {
    let one = policy(DAILY);
    let two = one.clone()
        + &one[one.find("[[tools]]").unwrap()..].replace("name = \"credit\"", "name = \"credit2\"");
    let e = Policy::load(&two).unwrap_err().to_string();
    assert!(
        e.contains("budget `daily_credit_per_customer` is declared by two tools"),
        "{e}"
    );
}

#[test]
fn the_digest_covers_budgets() {
    let without = Policy::load(&policy("")).unwrap();
    let with = Policy::load(&policy(DAILY)).unwrap();
    let higher = Policy::load(&policy(&DAILY.replace("5000", "6000"))).unwrap();
    let d = |p: &Policy| p.tool("credit").unwrap().digest().to_owned();
    assert_ne!(d(&without), d(&with));
    assert_ne!(d(&with), d(&higher));
}

#[test]
fn explain_states_the_worst_case_per_budget() {
    let p = Policy::load(&policy(DAILY)).unwrap();
    let e = &explain(&p)[0];
    let line = e
        .bounds
        .iter()
        .find(|b| b.starts_with("budget daily_credit_per_customer"))
        .expect("a line for the budget");
    assert_eq!(
        line,
        "budget daily_credit_per_customer: at most 5000 in amount_minor per customer_id per UTC day ([start, end) by the claim's attempt time), reached in 3 calls of up to 2000 (at most 5000 calls fit); over it: pending_approval"
    );
    let none = Policy::load(&policy("")).unwrap();
    assert!(
        explain(&none)[0]
            .bounds
            .iter()
            .any(|b| b.starts_with("budgets: none"))
    );
}
