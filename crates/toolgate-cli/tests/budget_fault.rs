//! A process killed between a claim that reserved budget and any release
//! (issue 16): `toolgate bench race --budget --hold-after-claim` claims one
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

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Map, json};
use toolgate::claim::{ClaimStatus, ClaimStore, OperationKey, UnixMillis};
use toolgate::contract::{self, CheckOptions, Policy};
use toolgate::pipeline::{Gate, Outcome, Principal, Reason, Request, StateVersion, decide};
use toolgate::provider::Provider;
use toolgate_cedar::CedarAuthorizer;
use toolgate_store::{AnyClaimStore, fresh_holder, now_millis};
use toolgate_support_desk::cedar::{self as desk_cedar, DeskEntities};
use toolgate_support_desk::{POLICY, SeedTicket, SupportDesk};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

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

fn claim_then_sigkill(url: &str) -> (OperationKey, String) {
    let mut child = Command::new(BIN)
        .args([
            "bench",
            "race",
            "--budget",
            "--hold-after-claim",
            "--db",
            url,
        ])
        .args(["--workers", "1", "--tickets", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn toolgate");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    let rest = line
        .trim()
        .strip_prefix("claimed ")
        .unwrap_or_else(|| panic!("unexpected output {line:?}"));
    let (key, customer) = rest.split_once(" customer ").expect("key and customer");
    // SIGKILL: no destructor, no rollback handler, no release runs.
    child.kill().expect("SIGKILL");
    assert!(!child.wait().expect("wait").success());
    (key.parse().expect("key"), customer.to_owned())
}

async fn the_reservation_is_released_once(url: &str) {
    let (key, customer) = claim_then_sigkill(url);
    let store = AnyClaimStore::connect(url).await.expect("connect");
    let desk = SupportDesk::on_store(&store).await.expect("desk");
    let row = store.fetch(&key).await.expect("fetch").expect("claim row");
    assert_eq!(row.status, ClaimStatus::InFlight);

    let after_lease = UnixMillis(row.lease_expires_at.0 + 1);
    let reconcile = || {
        Command::new(BIN)
            .args(["claims", "reconcile", "--support-desk", "--db", url])
            .arg(key.to_hex())
            .args(["--now", &after_lease.0.to_string(), "--actor", "fault-test"])
            .output()
            .expect("reconcile")
    };
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
    let authz = CedarAuthorizer::new(
        desk_cedar::POLICIES,
        &desk_cedar::mapping(),
        DeskEntities(desk.clone()),
    )
    .expect("cedar");
    let gate = Gate {
        policy: &policy,
        authorizer: &authz,
        state: &desk,
        claims: &store,
        executor: &desk,
    };
    let (mut executed, mut over) = (0, 0);
    for t in &tickets {
        let body = json!({"outcome": "action", "reply": "Credited.",
            "proposed_action": {"tool": "apply_goodwill_credit",
                "arguments": {"amount_minor": 1000, "reason_code": "late_delivery"}}});
        let proposal = contract::check(
            &policy,
            Provider::Envelope,
            body.to_string().as_bytes(),
            &CheckOptions::default(),
        );
        let mut scope = Map::new();
        scope.insert("customer_id".into(), json!(customer));
        scope.insert("ticket_id".into(), json!(t.id));
        let principal = Principal::new("race-agent", ["credit:issue"]).expect("principal");
        let seen = StateVersion::from(1);
        let request = Request {
            principal: &principal,
            scope: &scope,
            version_seen: &seen,
            attributes: &Map::new(),
            approval: None,
            now: now_millis(),
            holder: fresh_holder().expect("holder"),
            lease: Duration::from_secs(30),
        };
        let d = decide(&gate, proposal, &request).await.expect("decide");
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

#[test]
fn postgres_killed_reservation_is_released_once() {
    if let Some(url) = support::database_url("TOOLGATE_TEST_POSTGRES_URL", "PostgreSQL") {
        runtime().block_on(the_reservation_is_released_once(&url));
    }
}

#[test]
fn mariadb_killed_reservation_is_released_once() {
    if let Some(url) = support::database_url("TOOLGATE_TEST_MYSQL_URL", "MySQL/MariaDB") {
        runtime().block_on(the_reservation_is_released_once(&url));
    }
}
