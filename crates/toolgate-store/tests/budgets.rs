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
    AuditEntry, BudgetReservation, ClaimRequest, ClaimStore, Completion, JsonText,
    MemoryClaimStore, RawClaim, ReconcileOutcome, Reconciled, UnixMillis,
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
            let r = store
                .record_reconciliation(&lease.key, &not_applied(), far_future())
                .await
                .unwrap();
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

async fn budgets_hold<S: ClaimStore + 'static>(store: Arc<S>) {
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
                assert!(used + 1000 > LIMIT, "refused with room left: used {used}");
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
    let done = store
        .complete(
            &won[0].key,
            &won[0].holder,
            &detail,
            conformance::T0,
            &entry,
        )
        .await
        .unwrap();
    assert_eq!(done, Completion::Recorded);
    // The retried completion (same holder, same result) releases nothing more.
    let again = store
        .complete(
            &won[0].key,
            &won[0].holder,
            &detail,
            conformance::T0,
            &entry,
        )
        .await
        .unwrap();
    assert_eq!(again, Completion::Recorded);
    assert!(fits(&*store, &ns, 101, &budget, 1000).await);
    assert!(!fits(&*store, &ns, 102, &budget, 1001).await);

    // A completion that applied keeps its reservation.
    let applied = JsonText::result(r#"{"applied":true}"#.to_owned()).unwrap();
    let _ = store
        .complete(
            &won[1].key,
            &won[1].holder,
            &applied,
            conformance::T0,
            &entry,
        )
        .await
        .unwrap();
    assert!(!fits(&*store, &ns, 103, &budget, 1001).await);

    // Reconciled as not applied: given back once; a second reconciliation
    // changes nothing and gives nothing back.
    let r = store
        .record_reconciliation(&won[2].key, &not_applied(), far_future())
        .await
        .unwrap();
    assert!(matches!(r, Reconciled::Recorded));
    let r = store
        .record_reconciliation(&won[2].key, &not_applied(), far_future())
        .await
        .unwrap();
    assert!(matches!(r, Reconciled::NotStuck(_)));
    // Held now: won[1], won[3], won[4] (3000).
    assert!(fits(&*store, &ns, 104, &budget, 2000).await);
    assert!(!fits(&*store, &ns, 105, &budget, 2001).await);

    // Reconciled as applied keeps it.
    let applied_receipt = ReconcileOutcome::Applied {
        receipt: JsonText::result(r#"{"applied":true}"#.to_owned()).unwrap(),
    };
    let r = store
        .record_reconciliation(&won[3].key, &applied_receipt, far_future())
        .await
        .unwrap();
    assert!(matches!(r, Reconciled::Recorded));
    assert!(!fits(&*store, &ns, 106, &budget, 2001).await);
    assert!(fits(&*store, &ns, 107, &budget, 2000).await);
    // What reservations hold now, per budget (the /metrics gauge): won[1],
    // won[3] and won[4]; the probes gave theirs back.
    let held = store.budget_reserved().await.unwrap();
    assert!(held.contains(&(budget.clone(), 3000)), "{held:?}");
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
    let Some(url) = support::database_url("TOOLGATE_TEST_POSTGRES_URL", "PostgreSQL") else {
        return;
    };
    let store = AnyClaimStore::connect(&url).await.unwrap();
    budgets_hold(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn budgets_on_mysql() {
    let Some(url) = support::database_url("TOOLGATE_TEST_MYSQL_URL", "MySQL/MariaDB") else {
        return;
    };
    let store = AnyClaimStore::connect(&url).await.unwrap();
    budgets_hold(Arc::new(store)).await;
}
