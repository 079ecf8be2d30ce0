//! Budgets in the pipeline (docs/design.md §15): what a proposal reserves,
//! computed from its validated arguments, its server-fixed scope and its
//! actor, and what going over a limit becomes.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::codes::Reason;
use super::decision::{BudgetReport, Decision, Operation, Rejection};
use super::stage::Bound;
use crate::claim::{BudgetReservation, CorruptRecord, UnixMillis};
use crate::contract::ToolContract;
use crate::contract::budget::{Over, Per};

/// The reservations `bound` makes if its claim wins, one per budget of its
/// tool, in the window holding `now` (the decision's time, UTC).
pub(crate) fn reservations(
    contract: &ToolContract,
    bound: &Bound,
    now: UnixMillis,
) -> Result<Vec<BudgetReservation>, CorruptRecord> {
    let authorized = bound.authorized();
    let arguments = authorized.validated().arguments();
    contract
        .budgets()
        .iter()
        .map(|b| {
            let amount = b.amount_of(arguments).ok_or_else(|| {
                CorruptRecord::new(
                    "arguments",
                    format!(
                        "budget {}: the validated arguments have no integer at {}",
                        b.name(),
                        b.amount_pointer()
                    ),
                )
            })?;
            // The values the sum is kept per, named, so two budgets' or two
            // fields' values never collide; only their digest is stored.
            let values: Vec<Value> = b
                .per()
                .iter()
                .map(|p| match p {
                    Per::Scope(f) => json!([f, authorized.scope().get(f)]),
                    Per::Actor => json!(["actor", authorized.principal().id()]),
                })
                .collect();
            let hash = Sha256::digest(Value::Array(values).to_string().as_bytes());
            Ok(BudgetReservation {
                budget: b.name().to_owned(),
                scope: hash.iter().map(|x| format!("{x:02x}")).collect(),
                window_start: UnixMillis(b.window().start_ms(now.0)),
                amount,
                limit: b.limit(),
            })
        })
        .collect()
}

/// What a refused reservation becomes: the budget's `over` (rejected, or a
/// person decides), with the reason `budget_exceeded` and the report.
pub(crate) fn over(
    contract: &ToolContract,
    operation: Operation,
    message: String,
    budget: &str,
    limit: i64,
    used: i64,
    amount: i64,
) -> Decision {
    let report = BudgetReport {
        name: budget.to_owned(),
        limit,
        used,
        remaining: (limit - used).max(0),
        amount,
    };
    let over = contract
        .budgets()
        .iter()
        .find(|b| b.name() == budget)
        .map(|b| b.over());
    match over {
        Some(Over::Rejected) => Decision::Rejected(Rejection::OverBudget {
            operation,
            message,
            budget: report,
        }),
        // A budget the store named but the policy no longer has: a person
        // decides, which is the cautious of the two.
        Some(Over::PendingApproval) | None => Decision::PendingApproval {
            operation,
            reason: Reason::BudgetExceeded,
            message,
            budget: Some(report),
        },
    }
}
