//! Fault test: a worker process SIGKILLed after claiming and
//! before completing. The claim stays `in_flight`; after the lease the
//! decision is `needs_reconciliation`, never a second execution; `toolgate
//! claims reconcile` asks the downstream tables and closes the claim.
//!
//! SQLite always runs. PostgreSQL and MariaDB run when
//! `TOOLGATE_TEST_POSTGRES_URL` / `TOOLGATE_TEST_MYSQL_URL` are set; unset,
//! they print a skip message, unless `TOOLGATE_REQUIRE_DATABASES=1`, which
//! makes a missing database a failure.

#[path = "support/databases.rs"]
mod support;

#[path = "support/race_worker.rs"]
mod race_worker;

use serde_json::{Map, Value};
use toolgate::claim::{ClaimStatus, ClaimStore, OperationKey, UnixMillis};
use toolgate::contract::Policy;
use toolgate::pipeline::{Outcome, Reason};
use toolgate_store::AnyClaimStore;
use toolgate_support_desk::{POLICY, SupportDesk};

use race_worker::{claim_then_sigkill, credit, reconcile};

#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
async fn killed_worker_leaves_a_claim_to_reconcile(url: &str) {
    let key: OperationKey = claim_then_sigkill(url, &[]).parse().expect("key");
    let store = AnyClaimStore::connect(url).await.expect("connect");
    let desk = SupportDesk::on_store(&store).await.expect("desk");

    // The claim stays in flight.
    let row = store.fetch(&key).await.expect("fetch").expect("claim row");
    assert_eq!(row.status, ClaimStatus::InFlight);
    let scope: Map<String, Value> = match serde_json::from_str(row.proposal.scope()) {
        Ok(Value::Object(m)) => m,
        other => panic!("scope {other:?}"),
    };
    let ticket = scope["ticket_id"].as_str().expect("ticket").to_owned();
    assert_eq!(desk.credit_count(&ticket).await.expect("count"), 0);
    assert_eq!(desk.ticket_version(&ticket).await.expect("v"), Some(1));

    // The same proposal after the lease: needs_reconciliation, no execution.
    let policy = Policy::load(POLICY).expect("policy");
    let after_lease = UnixMillis(row.lease_expires_at.0 + 1);
    let retry = |now: UnixMillis| credit(&policy, &desk, &store, &scope, 101, now);
    let d = retry(after_lease).await;
    assert_eq!(d.outcome(), Outcome::NeedsReconciliation, "{d:?}");
    assert_eq!(d.reason(), Some(Reason::LeaseExpired));
    assert_eq!(d.key(), Some(key));
    assert_eq!(desk.credit_count(&ticket).await.expect("count"), 0);
    assert_eq!(desk.ticket_version(&ticket).await.expect("v"), Some(1));

    // Reconcile: the credits table has no row for the key, so the claim is
    // closed as not applied; nothing is executed.
    let out = reconcile(url, &key, after_lease, &["--actor", "fault-test"]);
    assert!(out.status.success(), "{out:?}");
    let line: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(line["reconciled"], "not_applied");
    assert_eq!(line["result"]["applied"], false);

    // Reconciling again: not stuck any more (exit 1), nothing written.
    let again = reconcile(url, &key, after_lease, &[]);
    assert_eq!(again.status.code(), Some(1), "{again:?}");

    // "Not applied" is final for that attempt and not a dead end: the retry
    // runs the same operation again as attempt 2 (authorised, read and
    // claimed again) and writes once.
    let d = retry(UnixMillis(after_lease.0 + 10)).await;
    assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
    assert_eq!(d.key(), Some(key));
    assert_eq!(desk.credit_count(&ticket).await.expect("count"), 1);
    assert_eq!(
        store
            .fetch(&key)
            .await
            .expect("fetch")
            .expect("row")
            .attempt,
        2
    );
    // A retry of that replays it: still one credit.
    let d = retry(UnixMillis(after_lease.0 + 20)).await;
    assert_eq!(d.outcome(), Outcome::Replayed, "{d:?}");
    assert_eq!(desk.credit_count(&ticket).await.expect("count"), 1);
    let trail = store.audit_trail(&key, 10).await.expect("audit");
    let outcomes: Vec<(&str, Option<u32>)> =
        trail.iter().map(|e| (e.outcome(), e.attempt())).collect();
    assert!(
        outcomes.contains(&("needs_reconciliation", Some(1))),
        "{outcomes:?}"
    );
    assert!(
        outcomes.contains(&("reconciled_not_applied", Some(1))),
        "{outcomes:?}"
    );
    assert!(outcomes.contains(&("executed", Some(2))), "{outcomes:?}");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn sqlite_killed_worker_needs_reconciliation() {
    let path = std::env::temp_dir().join(format!("toolgate-fault-{}.db", support::random_hex()));
    let url = format!("sqlite://{}", path.display());
    runtime().block_on(killed_worker_leaves_a_claim_to_reconcile(&url));
    let _ = std::fs::remove_file(&path);
}

support::on_network_databases!(|url: &str| runtime().block_on(killed_worker_leaves_a_claim_to_reconcile(url)) =>
    postgres_killed_worker_needs_reconciliation,
    mysql_killed_worker_needs_reconciliation
);
