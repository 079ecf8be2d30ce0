//! Budgets reserved in the claim's transaction (docs/design.md §15), on
//! SQLite, PostgreSQL and MySQL/MariaDB (and the memory reference): a race
//! never passes the limit, a replay never reserves twice, and a not-applied
//! end gives the reservation back exactly once. PostgreSQL and MySQL run when
//! their URL variables are set, and must in CI (`TOOLGATE_REQUIRE_DATABASES=1`).
//! Each run uses budget names of its own, so runs never share a counter.

mod support;

use std::sync::Arc;

use toolgate::claim::conformance::{self, Namespace};
use toolgate::claim::{
    AuditEntry, BudgetReservation, ClaimRequest, ClaimStore, CompleteRequest, Completion, JsonText,
    Lease, MemoryClaimStore, RawClaim, ReconcileOutcome, ReconcileRequest, Reconciled, UnixMillis,
};
use toolgate::review::{
    ApprovalTerms, NewItem, Requested, ReviewStore, ReviewerAct, Verdict, Voted,
};
use toolgate_store::AnyClaimStore;

const LIMIT: i64 = 5000;

fn reservation(budget: &str, amount: i64) -> BudgetReservation {
    BudgetReservation {
        budget: budget.to_owned(),
        scope: "c".repeat(64),
        window_start: UnixMillis(1_800_000_000_000),
        amount,
        limit: LIMIT,
    }
}

fn request(ns: &Namespace, n: u32, budget: &str, amount: i64) -> ClaimRequest {
    let key = ns.key(201, n);
    conformance::request(ns, key, 1, 1500, conformance::T0)
        .with_budgets(vec![reservation(budget, amount)])
}

/// Whether one more claim of `amount` fits now (a probe that then gives its
/// reservation back by reconciling as not applied).
async fn fits<S: ClaimStore>(store: &S, ns: &Namespace, n: u32, budget: &str, amount: i64) -> bool {
    match store.claim(request(ns, n, budget, amount)).await.unwrap() {
        RawClaim::Acquired(lease) => {
            let r = reconcile(store, &lease, &not_applied()).await;
            assert!(matches!(r, Reconciled::Recorded));
            true
        }
        RawClaim::OverBudget { .. } => false,
        other => panic!("probe: {other:?}"),
    }
}

fn not_applied() -> ReconcileOutcome {
    ReconcileOutcome::NotApplied {
        detail: JsonText::result(r#"{"applied":false}"#.to_owned()).unwrap(),
    }
}

fn far_future() -> UnixMillis {
    UnixMillis(4_000_000_000_000)
}

/// The completion of `lease`'s claim with `result`, at `T0`.
async fn complete<S: ClaimStore>(
    store: &S,
    lease: &Lease,
    result: &JsonText,
    entry: &AuditEntry,
) -> Completion {
    let done = CompleteRequest {
        key: lease.key,
        holder: lease.holder,
        result: result.clone(),
        now: conformance::T0,
        audit: entry.clone(),
    };
    store.complete(done).await.unwrap()
}

/// An operator's reconciliation of `lease`'s claim, long after its lease.
async fn reconcile<S: ClaimStore>(
    store: &S,
    lease: &Lease,
    outcome: &ReconcileOutcome,
) -> Reconciled {
    store
        .record_reconciliation(ReconcileRequest {
            key: &lease.key,
            outcome,
            now: far_future(),
        })
        .await
        .unwrap()
}

async fn budgets_hold<S: ClaimStore + ReviewStore + 'static>(store: Arc<S>) {
    let ns = Namespace::new(support::random16());
    let budget = format!("b{}", &support::hex(&support::random16())[..16]);

    // 12 concurrent claims of 1000 on distinct keys against 5000: five win.
    let mut tasks = Vec::new();
    for n in 0..12 {
        let store = Arc::clone(&store);
        let req = request(&ns, n, &budget, 1000);
        tasks.push(tokio::spawn(async move { store.claim(req).await }));
    }
    let (mut won, mut over) = (Vec::new(), 0);
    for t in tasks {
        match t.await.unwrap().unwrap() {
            RawClaim::Acquired(lease) => won.push(lease),
            RawClaim::OverBudget {
                budget: b,
                limit,
                used,
            } => {
                assert_eq!((b.as_str(), limit), (budget.as_str(), LIMIT));
                // Refusals wait for the winners' locks, so each sees all
                // five committed: its own add is never counted.
                assert_eq!(used, LIMIT, "a refusal reports the sum it was refused at");
                over += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((won.len(), over), (5, 7), "exactly the limit is reserved");
    // A refused claim left no row: the same key claims again once there is room.
    assert!(!fits(&*store, &ns, 100, &budget, 1).await);

    // A replay (same key and fingerprint, another holder) reserves nothing.
    let replay = conformance::request(&ns, won[0].key, 1, 1500, conformance::T0)
        .with_budgets(vec![reservation(&budget, 1000)]);
    assert!(matches!(
        store.claim(replay).await.unwrap(),
        RawClaim::InFlight(_)
    ));

    // A completion that says nothing was written gives 1000 back, once.
    let detail =
        JsonText::result(r#"{"applied":false,"reason":"precondition_failed"}"#.to_owned()).unwrap();
    let entry = AuditEntry::new(
        conformance::T0,
        "agent:1".into(),
        Some("credit".into()),
        "state_changed".into(),
        Some("precondition_failed".into()),
        Some(won[0].key),
        None,
    )
    .unwrap();
    let done = complete(&*store, &won[0], &detail, &entry).await;
    assert_eq!(done, Completion::Recorded);
    // The retried completion (same holder, same result) releases nothing more.
    let again = complete(&*store, &won[0], &detail, &entry).await;
    assert_eq!(again, Completion::Recorded);
    assert!(fits(&*store, &ns, 101, &budget, 1000).await);
    assert!(!fits(&*store, &ns, 102, &budget, 1001).await);

    // A completion that applied keeps its reservation.
    let applied = JsonText::result(r#"{"applied":true}"#.to_owned()).unwrap();
    let _ = complete(&*store, &won[1], &applied, &entry).await;
    assert!(!fits(&*store, &ns, 103, &budget, 1001).await);

    // Reconciled as not applied: given back once; a second reconciliation
    // changes nothing and gives nothing back.
    let r = reconcile(&*store, &won[2], &not_applied()).await;
    assert!(matches!(r, Reconciled::Recorded));
    let r = reconcile(&*store, &won[2], &not_applied()).await;
    assert!(matches!(r, Reconciled::NotStuck(_)));
    // Held now: won[1], won[3], won[4] (3000).
    assert!(fits(&*store, &ns, 104, &budget, 2000).await);
    assert!(!fits(&*store, &ns, 105, &budget, 2001).await);

    // Reconciled as applied keeps it.
    let applied_receipt = ReconcileOutcome::Applied {
        receipt: JsonText::result(r#"{"applied":true}"#.to_owned()).unwrap(),
    };
    let r = reconcile(&*store, &won[3], &applied_receipt).await;
    assert!(matches!(r, Reconciled::Recorded));
    assert!(!fits(&*store, &ns, 106, &budget, 2001).await);
    assert!(fits(&*store, &ns, 107, &budget, 2000).await);
    // What reservations hold now, per budget (the /metrics gauge): won[1],
    // won[3] and won[4]; the probes gave theirs back.
    let held = store.budget_reserved().await.unwrap();
    assert!(held.contains(&(budget.clone(), 3000)), "{held:?}");

    // won[2], reconciled as not applied, runs again as attempt 2: it
    // reserves again (its released row does not stand in the way), and
    // gives back again when that attempt is not applied either.
    let again = conformance::request(&ns, won[2].key, 1, 1500, conformance::T0)
        .with_budgets(vec![reservation(&budget, 1000)]);
    match store.claim(again).await.unwrap() {
        RawClaim::Acquired(lease) => assert_eq!(lease.attempt, 2),
        other => panic!("attempt 2: {other:?}"),
    }
    let held = store.budget_reserved().await.unwrap();
    assert!(held.contains(&(budget.clone(), 4000)), "{held:?}");
    assert!(!fits(&*store, &ns, 108, &budget, 1001).await);
    assert!(fits(&*store, &ns, 109, &budget, 1000).await);
    let r = reconcile(&*store, &won[2], &not_applied()).await;
    assert!(matches!(r, Reconciled::Recorded));
    let held = store.budget_reserved().await.unwrap();
    assert!(held.contains(&(budget.clone(), 3000)), "{held:?}");

    approved_beyond_the_limit(&*store).await;
}

/// A claim with an approval passes the limit, and its reservation is held
/// (and given back) like any other; without one the same claim is refused
/// at the sum the approved one left.
async fn approved_beyond_the_limit<S: ClaimStore + ReviewStore>(store: &S) {
    let ns = Namespace::new(support::random16());
    let budget = format!("b{}", &support::hex(&support::random16())[..16]);
    let first = store.claim(request(&ns, 0, &budget, LIMIT)).await.unwrap();
    assert!(acquired(first).is_some(), "exactly the limit fits");
    let over = request(&ns, 1, &budget, 1000);
    match store.claim(over.clone()).await.unwrap() {
        RawClaim::OverBudget { used, .. } => assert_eq!(used, LIMIT),
        other => panic!("without an approval: {other:?}"),
    }

    let ask = NewItem {
        at: conformance::T0,
        kind: toolgate::pipeline::Outcome::PendingApproval,
        reason: Some(toolgate::pipeline::Reason::BudgetExceeded),
        tool: Some(over.proposal().tool().to_owned()),
        proposer: "agent:1".into(),
        proposer_via: None,
        key: Some(*over.key()),
        fingerprint: Some(*over.fingerprint()),
        version_seen: Some(over.proposal().version_seen().to_owned()),
        scope: None,
        decision: toolgate::review::ItemDecision::of(
            &toolgate::pipeline::Decision::PendingApproval {
                operation: toolgate::pipeline::Operation {
                    tool: over.proposal().tool().to_owned(),
                    key: *over.key(),
                    fingerprint: *over.fingerprint(),
                    version_seen: toolgate::pipeline::StateVersion::from(1),
                },
                reason: toolgate::pipeline::Reason::BudgetExceeded,
                message: "over the budget".into(),
                budget: None,
            },
            None,
        ),
        approval: Some(ApprovalTerms {
            policy_digest: "policy-1".into(),
            approvers: 1,
            expires_at: far_future(),
        }),
        once_per_window: false,
    };
    let ask_for = |ask: NewItem| async move {
        store
            .request_approval(
                ask,
                conformance::T0,
                &toolgate::review::QueueLimits::default(),
            )
            .await
            .unwrap()
    };
    let Requested::Pending { item, .. } = ask_for(ask.clone()).await else {
        panic!("a new approval item");
    };
    let voted = store
        .vote(ReviewerAct::new(
            item,
            "lead:1",
            Verdict::Approve,
            conformance::T0,
        ))
        .await
        .unwrap();
    assert!(matches!(voted, Voted::Recorded(_)), "{voted:?}");
    let Requested::Granted(grant) = ask_for(ask).await else {
        panic!("the approval is granted");
    };
    let Some(approved) = acquired(store.claim(over.with_grant(grant)).await.unwrap()) else {
        panic!("an approved claim passes the limit");
    };
    let held = store.budget_reserved().await.unwrap();
    assert!(held.contains(&(budget.clone(), LIMIT + 1000)), "{held:?}");
    match store.claim(request(&ns, 2, &budget, 1)).await.unwrap() {
        RawClaim::OverBudget { used, .. } => assert_eq!(used, LIMIT + 1000),
        other => panic!("past the limit: {other:?}"),
    }

    // Given back when it ends not applied: the limit's worth stays held.
    let r = reconcile(store, &approved, &not_applied()).await;
    assert!(matches!(r, Reconciled::Recorded));
    let held = store.budget_reserved().await.unwrap();
    assert!(held.contains(&(budget.clone(), LIMIT)), "{held:?}");
    assert!(!fits(store, &ns, 3, &budget, 1).await);
}

fn acquired(raw: RawClaim) -> Option<toolgate::claim::Lease> {
    match raw {
        RawClaim::Acquired(lease) => Some(lease),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn budgets_on_memory() {
    budgets_hold(Arc::new(MemoryClaimStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn budgets_on_sqlite() {
    let dir = std::env::temp_dir().join(format!(
        "toolgate-budgets-{}",
        support::hex(&support::random16())
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("claims.db").display());
    let store = AnyClaimStore::connect(&url).await.unwrap();
    budgets_hold(Arc::new(store)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn budgets_on_postgres() {
    budgets_on_server("TOOLGATE_TEST_POSTGRES_URL", "PostgreSQL").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn budgets_on_mysql() {
    budgets_on_server("TOOLGATE_TEST_MYSQL_URL", "MySQL/MariaDB").await;
}

/// The budget checks on the server `var` names, when it is set.
async fn budgets_on_server(var: &str, server: &str) {
    if let Some(url) = support::database_url(var, server) {
        let store = AnyClaimStore::connect(&url).await.unwrap();
        budgets_hold(Arc::new(store)).await;
    }
}
