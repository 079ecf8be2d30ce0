//! A process killed between a claim that reserved budget and any release
//! (the budget fault): `toolgate bench race --budget --hold-after-claim` claims one
//! credit with its 10.00 reserved and blocks before executing; the test
//! SIGKILLs it. After a restart (a new process and store) and
//! `toolgate claims reconcile`, which finds no credit and closes the claim as
//! not applied, the reservation is given back exactly once: a second
//! reconciliation changes nothing, and twelve new 10.00 credits for the
//! customer write exactly ten against the 100.00 daily budget (nine would be
//! a leak, eleven a double release).
//!
//! SQLite always runs; PostgreSQL and MariaDB run when their URLs are set,
//! and must in CI (`TOOLGATE_REQUIRE_DATABASES=1`).

#[path = "support/databases.rs"]
mod support;

#[path = "support/race_worker.rs"]
mod race_worker;

use serde_json::{Map, json};
use toolgate::claim::{ClaimStatus, ClaimStore, OperationKey, UnixMillis};
use toolgate::contract::Policy;
use toolgate::pipeline::{Outcome, Reason};
use toolgate_store::{AnyClaimStore, now_millis};
use toolgate_support_desk::{POLICY, SeedTicket, SupportDesk};

/// The policy `bench race --budget` runs: the desk's daily budget per
/// customer with its limit raised to 10000.
fn policy() -> Policy {
    assert_eq!(
        POLICY.matches("limit = 4000\n").count(),
        1,
        "the desk's budget"
    );
    Policy::load(&POLICY.replacen("limit = 4000\n", "limit = 10000\n", 1)).expect("policy")
}

/// Claims one credit with its 10.00 reserved and is killed: the claim's
/// key and its customer.
fn claim_then_sigkill(url: &str) -> (OperationKey, String) {
    let claimed = race_worker::claim_then_sigkill(url, &["--budget"]);
    let (key, customer) = claimed.split_once(" customer ").expect("key and customer");
    (key.parse().expect("key"), customer.to_owned())
}

async fn the_reservation_is_released_once(url: &str) {
    let (key, customer) = claim_then_sigkill(url);
    let store = AnyClaimStore::connect(url).await.expect("connect");
    let desk = SupportDesk::on_store(&store).await.expect("desk");
    let row = store.fetch(&key).await.expect("fetch").expect("claim row");
    assert_eq!(row.status, ClaimStatus::InFlight);

    let after_lease = UnixMillis(row.lease_expires_at.0 + 1);
    let reconcile = || race_worker::reconcile(url, &key, after_lease, &["--actor", "fault-test"]);
    let out = reconcile();
    assert!(out.status.success(), "{out:?}");
    // Not stuck any more: exit 1, nothing written, nothing given back again.
    assert_eq!(reconcile().status.code(), Some(1));

    let tickets: Vec<SeedTicket> = (0..12)
        .map(|i| SeedTicket {
            id: format!("{customer}-after-{i}"),
            customer_id: customer.clone(),
            assignee: "race-agent".to_owned(),
            version: 1,
        })
        .collect();
    desk.seed(&tickets).await.expect("seed");
    let policy = policy();
    let (mut executed, mut over) = (0, 0);
    for t in &tickets {
        let mut scope = Map::new();
        scope.insert("customer_id".into(), json!(customer));
        scope.insert("ticket_id".into(), json!(t.id));
        let d = race_worker::credit(&policy, &desk, &store, &scope, 1000, now_millis()).await;
        match (d.outcome(), d.reason()) {
            (Outcome::Executed, _) => executed += 1,
            (Outcome::PendingApproval, Some(Reason::BudgetExceeded)) => over += 1,
            _ => panic!("{d:?}"),
        }
    }
    assert_eq!(
        (executed, over),
        (10, 2),
        "the killed claim's 10.00 came back once"
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn sqlite_killed_reservation_is_released_once() {
    let path = std::env::temp_dir().join(format!(
        "toolgate-budget-fault-{}.db",
        support::random_hex()
    ));
    runtime().block_on(the_reservation_is_released_once(&format!(
        "sqlite://{}",
        path.display()
    )));
    // The database and the WAL files SQLite keeps beside it.
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
}

support::on_network_databases!(|url: &str| runtime().block_on(the_reservation_is_released_once(url)) =>
    postgres_killed_reservation_is_released_once,
    mariadb_killed_reservation_is_released_once
);
