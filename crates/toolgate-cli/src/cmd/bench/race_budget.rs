//! `toolgate bench race --budget`: N workers propose credits on distinct
//! tickets of ONE customer at once, against a daily budget on that customer
//! (docs/policy.md, "Budgets"). The budget is reserved in each claim's
//! transaction, so however the proposals interleave, the credits written
//! never sum past the limit. Prints one line:
//!   limit=<L> reserved=<sum reserved by won claims> executed_total=<sum of
//!     the credit rows written> over_limit_decisions=<budget_exceeded>
//!     elapsed_s=<s>
//! Exit 1 if the credits written pass the limit, if demand exceeded the
//! limit and the amounts divide it but the credits do not reach it exactly,
//! or if any proposal failed.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Barrier;
use toolgate::contract::Policy;
use toolgate::pipeline::{Gate, Outcome, Reason};
use toolgate_cedar::CedarAuthorizer;
use toolgate_support_desk::SeedTicket;
use toolgate_support_desk::cedar::{self as desk_cedar, DeskEntities};

// The proposing agent, who must be the tickets' assignee to pass Cedar.
use super::race::{AGENT, Hold, Worker, desk_for_run, propose_credit};

/// The daily limit per customer, in minor units.
const LIMIT: i64 = 10_000;
/// Every proposal's amount: divides the limit exactly.
const AMOUNT: i64 = 1_000;
/// Every agent words the credit the same way: only the ticket differs.
const REPLY: &str = "I have applied a goodwill credit for the late delivery.";

/// The support-desk policy with its daily budget per customer
/// (`daily_credit_per_customer`) raised to [`LIMIT`]; a second budget beside
/// it would leave the desk's lower cap deciding (the fault test builds the
/// same one).
pub fn policy() -> Result<Policy, String> {
    let desk = "limit = 4000\n";
    if toolgate_support_desk::POLICY.matches(desk).count() != 1 {
        return Err(format!(
            "the support desk's policy no longer has one budget with `{}`",
            desk.trim_end()
        ));
    }
    let text = toolgate_support_desk::POLICY.replacen(desk, &format!("limit = {LIMIT}\n"), 1);
    Policy::load(&text).map_err(|e| e.to_string())
}

pub async fn race(
    db: &str,
    workers: u32,
    tickets: u32,
    hold_after_claim: bool,
) -> Result<ExitCode, String> {
    let policy = Arc::new(policy()?);
    let (setup, desk, run_id) = desk_for_run(db).await?;
    // One customer per run, so runs never share a counter.
    let customer = format!("budget-{run_id}");
    let seeded: Vec<SeedTicket> = (0..tickets)
        .map(|i| SeedTicket {
            id: format!("budget-{run_id}-{i}"),
            customer_id: customer.clone(),
            assignee: AGENT.to_owned(),
            version: 1,
        })
        .collect();
    desk.seed(&seeded).await.map_err(|e| e.to_string())?;
    if hold_after_claim {
        // Fault-test hook: one claim, its budget reserved, then block so a
        // test can SIGKILL the process between the claim and any release.
        let authz = CedarAuthorizer::new(
            desk_cedar::POLICIES,
            &desk_cedar::mapping(),
            DeskEntities(desk.clone()),
        )
        .map_err(|e| e.to_string())?;
        let hold = Hold(format!(" customer {customer}"));
        let gate = Gate {
            policy: &policy,
            authorizer: &authz,
            state: &desk,
            claims: &setup,
            executor: &hold,
        };
        let d = propose_credit(&gate, &policy, &seeded[0], AMOUNT, REPLY, false).await;
        return Err(format!("the hold executor returned: {d:?}"));
    }
    let seeded = Arc::new(seeded);
    let start = Arc::new(Barrier::new(workers as usize));
    let mut handles = Vec::new();
    let started = Instant::now();
    for w in 0..workers {
        let Worker {
            store,
            desk: wdesk,
            authz,
        } = Worker::connect(db).await?;
        let (policy, seeded, start) =
            (Arc::clone(&policy), Arc::clone(&seeded), Arc::clone(&start));
        handles.push(tokio::spawn(async move {
            start.wait().await;
            // (reserved by won claims, budget_exceeded decisions, errors)
            let mut tally = (0i64, 0u32, 0u32);
            // Worker w takes tickets w, w + N, w + 2N, …: distinct tickets.
            for t in seeded.iter().skip(w as usize).step_by(workers as usize) {
                let gate = Gate {
                    policy: &policy,
                    authorizer: &authz,
                    state: &wdesk,
                    claims: &store,
                    executor: &wdesk,
                };
                match propose_credit(&gate, &policy, t, AMOUNT, REPLY, false).await {
                    Ok(d) if d.outcome() == Outcome::Executed => tally.0 += AMOUNT,
                    Ok(d) if d.reason() == Some(Reason::BudgetExceeded) => tally.1 += 1,
                    Ok(d) => {
                        eprintln!("ticket {}: unexpected {}", t.id, d.to_json());
                        tally.2 += 1;
                    }
                    Err(e) => {
                        eprintln!("ticket {}: {e}", t.id);
                        tally.2 += 1;
                    }
                }
            }
            tally
        }));
    }
    let (mut reserved, mut over, mut errors) = (0i64, 0u32, 0u32);
    for h in handles {
        let t = h.await.map_err(|e| format!("a worker failed: {e}"))?;
        reserved += t.0;
        over += t.1;
        errors += t.2;
    }
    let elapsed = started.elapsed().as_secs_f64();
    // What was written, read from the desk's own tables.
    let mut executed_total = 0i64;
    for t in seeded.iter() {
        executed_total += desk.credit_count(&t.id).await.map_err(|e| e.to_string())? * AMOUNT;
    }
    println!(
        "limit={LIMIT} reserved={reserved} executed_total={executed_total} over_limit_decisions={over} elapsed_s={elapsed:.3}"
    );
    let demand = i64::from(tickets) * AMOUNT;
    let exact = demand < LIMIT || LIMIT % AMOUNT != 0 || executed_total == LIMIT;
    Ok(
        if executed_total <= LIMIT && exact && errors == 0 && reserved == executed_total {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}
