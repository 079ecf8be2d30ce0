//! The credit and its claim's completion in one transaction
//! (`toolgate_store::StoreWrite`), on SQLite, PostgreSQL and
//! MariaDB, through the real pipeline: both commit, or neither does.
//!
//! Each case runs the desk's own executor behind a wrapper that changes
//! the world just before the write: the claim's lease ends, the ticket is
//! edited, or the caller's receipt cap is lowered. Then the test reads the
//! credits, the claim and the audit log back.

mod support;

use serde_json::json;
use toolgate::claim::{
    ClaimRecord, ClaimStatus, ClaimStore, OperationKey, ReconcileOutcome, ReconcileRequest,
    Reconciled, Resolution,
};
use toolgate::pipeline::{
    AppliedCompletion, Completed, Decision, ExecError, ExecOutcome, ExecPermit, Executor, Outcome,
    Reason, StateVersion,
};
use toolgate_store::AnyClaimStore;
use toolgate_support_desk::{SeedTicket, SupportDesk};

const AGENT: &str = "wc-agent";

/// What happens between the claim and the desk's write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Before {
    Nothing,
    /// The claim's lease ends (as if the write had started too late).
    LeaseEnds,
    /// A person edits the ticket: the credit's precondition fails.
    TicketEdited,
    /// The caller accepts receipts of at most 10 bytes.
    SmallReceiptCap,
    /// No fold: the desk's `execute` alone, its own transaction, as for
    /// an executor that does not complete in its write's transaction.
    Unfolded,
    /// No fold, and a person edits the ticket first.
    UnfoldedTicketEdited,
}

/// The desk's executor, after `before`.
struct Wrapped<'a> {
    desk: &'a SupportDesk,
    store: &'a AnyClaimStore,
    ticket: &'a str,
    before: Before,
}

impl Executor for Wrapped<'_> {
    async fn execute(&self, permit: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        self.desk.execute(permit).await
    }

    async fn execute_and_complete(
        &self,
        permit: ExecPermit<'_>,
        completion: &AppliedCompletion,
    ) -> Result<Completed, ExecError> {
        let mut completion = completion.clone();
        match self.before {
            Before::Nothing => {}
            Before::LeaseEnds => end_lease(self.store, permit.key()).await,
            Before::TicketEdited => support::edit(self.store, self.ticket).await,
            Before::SmallReceiptCap => completion = completion.with_receipt_cap(10),
            Before::Unfolded => return self.execute(permit).await.map(Completed::Outcome),
            Before::UnfoldedTicketEdited => {
                support::edit(self.store, self.ticket).await;
                return self.execute(permit).await.map(Completed::Outcome);
            }
        }
        self.desk.execute_and_complete(permit, &completion).await
    }

    async fn reconcile(&self, claim: &ClaimRecord) -> Result<ReconcileOutcome, ExecError> {
        self.desk.reconcile(claim).await
    }
}

/// The claim's lease ends now (its holder keeps it).
async fn end_lease(store: &AnyClaimStore, key: &OperationKey) {
    let changed = support::exec(
        store,
        "UPDATE toolgate_claims SET lease_expires_at = 0 WHERE operation_key = ?",
        "UPDATE toolgate_claims SET lease_expires_at = 0 WHERE operation_key = $1",
        support::Arg::Bytes(key.as_bytes().to_vec()),
    )
    .await;
    assert_eq!(changed, 1);
}

/// A credit on a fresh ticket (version 1, a customer of its own), with
/// `before` happening just before the write; the decision and the ticket.
async fn credit(d: &support::Desk, before: Before) -> (Decision, String) {
    let run = support::hex(&support::random16());
    let t = SeedTicket {
        id: format!("wc-{run}"),
        customer_id: format!("c-wc-{run}"),
        assignee: AGENT.into(),
        version: 1,
    };
    d.desk.seed(std::slice::from_ref(&t)).await.unwrap();
    let executor = Wrapped {
        desk: &d.desk,
        store: &d.store,
        ticket: &t.id,
        before,
    };
    let proposal = support::Proposal {
        agent: AGENT,
        customer: &t.customer_id,
        ticket: &t.id,
        seen: 1,
        amount: 500,
        reason: "late_delivery",
        reply: "Done.",
    };
    let decision = d.decide(&d.store, &executor, &proposal).await;
    (decision, t.id)
}

/// The claim and the audit outcomes recorded for `decision`'s key.
async fn recorded(d: &support::Desk, decision: &Decision) -> (ClaimRecord, Vec<String>) {
    let key = decision.key().expect("an operation key");
    let claim = d.store.fetch(&key).await.unwrap().expect("the claim");
    let trail = d.store.audit_trail(&key, 10).await.unwrap();
    let outcomes = trail.iter().map(|e| e.outcome().to_owned()).collect();
    (claim, outcomes)
}

async fn both_commit(d: &support::Desk) {
    let (decision, ticket) = credit(d, Before::Nothing).await;
    assert_eq!(decision.outcome(), Outcome::Executed, "{decision:?}");
    assert_eq!(d.desk.credit_count(&ticket).await.unwrap(), 1);
    assert_eq!(d.desk.ticket_version(&ticket).await.unwrap(), Some(2));
    let (claim, audit) = recorded(d, &decision).await;
    let completion = claim.completion.expect("completed");
    assert_eq!(completion.resolution, Resolution::Executed);
    // The recorded result is the receipt the decision shows.
    let result: serde_json::Value = completion.result.value().unwrap();
    assert_eq!(Some(&result), decision.result());
    assert_eq!(result["applied"], json!(true));
    assert_eq!(audit, ["executed"]);
}

async fn a_lost_lease_undoes_the_credit(d: &support::Desk) {
    let (decision, ticket) = credit(d, Before::LeaseEnds).await;
    assert_eq!(
        decision.outcome(),
        Outcome::NeedsReconciliation,
        "{decision:?}"
    );
    assert_eq!(decision.reason(), Some(Reason::LeaseLost));
    // The credit rolled back with the completion that matched no row.
    assert_eq!(d.desk.credit_count(&ticket).await.unwrap(), 0);
    assert_eq!(d.desk.ticket_version(&ticket).await.unwrap(), Some(1));
    let (claim, audit) = recorded(d, &decision).await;
    assert_eq!(claim.status, ClaimStatus::InFlight);
    assert_eq!(audit, ["needs_reconciliation"]);
    // Reconciliation asks the desk's rows and finds nothing written.
    let answer = d
        .store
        .record_reconciliation(ReconcileRequest {
            key: &claim.key,
            outcome: &d.desk.reconcile(&claim).await.unwrap(),
            now: toolgate_store::now_millis(),
        })
        .await
        .unwrap();
    assert!(matches!(answer, Reconciled::Recorded), "{answer:?}");
    let closed = d.store.fetch(&claim.key).await.unwrap().unwrap();
    let resolution = closed.completion.map(|c| c.resolution);
    assert_eq!(resolution, Some(Resolution::ReconciledNotApplied));
}

async fn a_failed_precondition_writes_nothing(d: &support::Desk) {
    let (decision, ticket) = credit(d, Before::TicketEdited).await;
    assert_eq!(decision.outcome(), Outcome::StateChanged, "{decision:?}");
    assert_eq!(decision.reason(), Some(Reason::PreconditionFailed));
    assert_eq!(d.desk.credit_count(&ticket).await.unwrap(), 0);
    // The person's edit only.
    assert_eq!(d.desk.ticket_version(&ticket).await.unwrap(), Some(2));
    let (claim, audit) = recorded(d, &decision).await;
    let completion = claim.completion.expect("closed as not applied");
    let result: serde_json::Value = completion.result.value().unwrap();
    assert_eq!(result["applied"], json!(false));
    assert_eq!(result["current_version"], json!("2"));
    assert_eq!(audit, ["state_changed"]);
}

async fn a_receipt_over_the_cap_writes_nothing(d: &support::Desk) {
    let (decision, ticket) = credit(d, Before::SmallReceiptCap).await;
    assert_eq!(
        decision.outcome(),
        Outcome::NeedsReconciliation,
        "{decision:?}"
    );
    assert_eq!(decision.reason(), Some(Reason::ExecutorFailed));
    assert_eq!(d.desk.credit_count(&ticket).await.unwrap(), 0);
    let (claim, audit) = recorded(d, &decision).await;
    assert_eq!(claim.status, ClaimStatus::InFlight);
    assert_eq!(audit, ["needs_reconciliation"]);
}

/// The credit through `execute` alone commits in its own transaction and
/// the pipeline completes the claim after it; a failed precondition rolls
/// it back and writes nothing.
async fn without_the_fold_the_pipeline_completes(d: &support::Desk) {
    let (decision, ticket) = credit(d, Before::Unfolded).await;
    assert_eq!(decision.outcome(), Outcome::Executed, "{decision:?}");
    assert_eq!(d.desk.credit_count(&ticket).await.unwrap(), 1);
    assert_eq!(d.desk.ticket_version(&ticket).await.unwrap(), Some(2));
    let (claim, audit) = recorded(d, &decision).await;
    let completion = claim.completion.expect("completed");
    let result: serde_json::Value = completion.result.value().unwrap();
    assert_eq!(Some(&result), decision.result());
    assert_eq!(audit, ["executed"]);

    let (decision, ticket) = credit(d, Before::UnfoldedTicketEdited).await;
    assert_eq!(decision.outcome(), Outcome::StateChanged, "{decision:?}");
    assert_eq!(decision.current_version(), Some(&StateVersion::from(2)));
    assert_eq!(d.desk.credit_count(&ticket).await.unwrap(), 0);
    assert_eq!(d.desk.ticket_version(&ticket).await.unwrap(), Some(2));
    let (_, audit) = recorded(d, &decision).await;
    assert_eq!(audit, ["state_changed"]);
}

async fn all_on(url: &str) {
    let d = support::Desk::open(url).await;
    both_commit(&d).await;
    a_lost_lease_undoes_the_credit(&d).await;
    a_failed_precondition_writes_nothing(&d).await;
    a_receipt_over_the_cap_writes_nothing(&d).await;
    without_the_fold_the_pipeline_completes(&d).await;
}

#[tokio::test]
async fn write_and_complete_sqlite() {
    let dir = std::env::temp_dir().join(format!(
        "toolgate-wc-{}",
        support::hex(&support::random16())
    ));
    std::fs::create_dir_all(&dir).unwrap();
    all_on(&format!("sqlite://{}", dir.join("desk.db").display())).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn write_and_complete_postgres() {
    if let Some(url) = support::database_url("TOOLGATE_TEST_POSTGRES_URL", "PostgreSQL") {
        all_on(&url).await;
    }
}

#[tokio::test]
async fn write_and_complete_mysql() {
    if let Some(url) = support::database_url("TOOLGATE_TEST_MYSQL_URL", "MariaDB") {
        all_on(&url).await;
    }
}
