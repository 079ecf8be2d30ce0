//! Fault test (issue 4, §9): a worker process SIGKILLed after claiming and
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

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Map, Value, json};
use toolgate::claim::{ClaimStatus, ClaimStore, OperationKey, UnixMillis};
use toolgate::contract::{self, CheckOptions, Policy};
use toolgate::pipeline::{Gate, Outcome, Principal, Reason, Request, StateVersion, decide};
use toolgate::provider::Provider;
use toolgate_cedar::CedarAuthorizer;
use toolgate_store::{AnyClaimStore, fresh_holder};
use toolgate_support_desk::cedar::{self as desk_cedar, DeskEntities};
use toolgate_support_desk::{POLICY, SupportDesk};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

/// Starts a race worker that claims and blocks, waits for the key it
/// claimed, and kills it with SIGKILL.
fn claim_then_sigkill(url: &str) -> OperationKey {
    let mut child = Command::new(BIN)
        .args([
            "bench",
            "race",
            "--db",
            url,
            "--workers",
            "1",
            "--tickets",
            "1",
        ])
        .arg("--hold-after-claim")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn toolgate");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read");
    let key = line
        .trim()
        .strip_prefix("claimed ")
        .unwrap_or_else(|| panic!("unexpected output {line:?}"))
        .parse::<OperationKey>()
        .expect("key");
    // std's Child::kill is SIGKILL on Unix: no destructor, no rollback
    // handler, no completion runs in the worker.
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert!(!status.success());
    key
}

#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
async fn killed_worker_leaves_a_claim_to_reconcile(url: &str) {
    let key = claim_then_sigkill(url);
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
    let authz = CedarAuthorizer::new(
        desk_cedar::POLICIES,
        &desk_cedar::mapping(),
        DeskEntities(desk.clone()),
    )
    .expect("cedar");
    let after_lease = UnixMillis(row.lease_expires_at.0 + 1);
    let retry = |now: UnixMillis| {
        let body = json!({"outcome": "action", "reply": "Retrying the credit.",
            "proposed_action": {"tool": "apply_goodwill_credit",
                "arguments": {"amount_minor": 101, "reason_code": "late_delivery"}}});
        let proposal = contract::check(
            &policy,
            Provider::Envelope,
            body.to_string().as_bytes(),
            &CheckOptions::default(),
        );
        let gate = Gate {
            policy: &policy,
            authorizer: &authz,
            state: &desk,
            claims: &store,
            executor: &desk,
        };
        let scope = scope.clone();
        async move {
            let principal = Principal::new("race-agent", ["credit:issue"]).expect("principal");
            let seen = StateVersion::from(1);
            let request = Request {
                principal: &principal,
                scope: &scope,
                version_seen: &seen,
                attributes: &Map::new(),
                approval: None,
                now,
                holder: fresh_holder().expect("holder"),
                lease: Duration::from_secs(30),
            };
            decide(&gate, proposal, &request).await.expect("decide")
        }
    };
    let d = retry(after_lease).await;
    assert_eq!(d.outcome(), Outcome::NeedsReconciliation, "{d:?}");
    assert_eq!(d.reason(), Some(Reason::LeaseExpired));
    assert_eq!(d.key(), Some(key));
    assert_eq!(desk.credit_count(&ticket).await.expect("count"), 0);
    assert_eq!(desk.ticket_version(&ticket).await.expect("v"), Some(1));

    // Reconcile: the credits table has no row for the key, so the claim is
    // closed as not applied; nothing is executed.
    let out = Command::new(BIN)
        .args([
            "claims",
            "reconcile",
            "--support-desk",
            "--db",
            url,
            &key.to_hex(),
        ])
        .args(["--now", &after_lease.0.to_string(), "--actor", "fault-test"])
        .output()
        .expect("reconcile");
    assert!(out.status.success(), "{out:?}");
    let line: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(line["reconciled"], "not_applied");
    assert_eq!(line["result"]["applied"], false);

    // Reconciling again: not stuck any more (exit 1), nothing written.
    let again = Command::new(BIN)
        .args([
            "claims",
            "reconcile",
            "--support-desk",
            "--db",
            url,
            &key.to_hex(),
        ])
        .args(["--now", &after_lease.0.to_string()])
        .output()
        .expect("reconcile");
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

#[test]
fn postgres_killed_worker_needs_reconciliation() {
    if let Some(url) = support::database_url("TOOLGATE_TEST_POSTGRES_URL", "PostgreSQL") {
        runtime().block_on(killed_worker_leaves_a_claim_to_reconcile(&url));
    }
}

#[test]
fn mysql_killed_worker_needs_reconciliation() {
    if let Some(url) = support::database_url("TOOLGATE_TEST_MYSQL_URL", "MariaDB") {
        runtime().block_on(killed_worker_leaves_a_claim_to_reconcile(&url));
    }
}
