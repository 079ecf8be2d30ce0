//! `toolgate claims stuck`: the listing scripts read, on an
//! embedded SQLite store.

#![expect(
    clippy::disallowed_methods,
    reason = "the tests read JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};
use toolgate::claim::conformance::{self, Namespace, T0};
use toolgate::claim::{
    ClaimStatus, ClaimStore, Completion, ExecutorKind, JsonText, OperationKey, RawClaim,
};
use toolgate_store::StoreOptions;
use toolgate_store::sqlite::SqliteClaimStore;

#[path = "support/faults.rs"]
mod faults;
use faults::Scratch;

/// A fresh SQLite file (with its `-wal` and `-shm`) in a directory of its
/// own, removed with it.
struct TempDb {
    path: PathBuf,
    _dir: Scratch,
}

impl TempDb {
    fn new() -> Self {
        let hex = toolgate_store::fresh_holder().expect("rng").to_hex();
        let dir = Scratch::new("cli-claims", &hex);
        Self {
            path: dir.0.join("claims.db"),
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }
}

fn toolgate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .output()
        .expect("run toolgate");
    (
        out.status.code().expect("exit code"),
        String::from_utf8(out.stdout).expect("UTF-8"),
        String::from_utf8(out.stderr).expect("UTF-8"),
    )
}

/// `toolgate claims stuck --db URL --now NOW`.
fn stuck(db: &TempDb, now: i64) -> (i32, String, String) {
    toolgate(&[
        "claims",
        "stuck",
        "--db",
        &db.url(),
        "--now",
        &now.to_string(),
    ])
}

/// `toolgate claims reconcile --db URL --now NOW KEY`, then `answer`.
fn reconcile(db: &TempDb, now: i64, key: &OperationKey, answer: &[&str]) -> (i32, String, String) {
    let (url, now, key) = (db.url(), now.to_string(), key.to_hex());
    let mut args = vec!["claims", "reconcile", "--db", &url, "--now", &now, &key];
    args.extend_from_slice(answer);
    toolgate(&args)
}

/// A fresh SQLite store with one claim of `executor`'s kind in flight
/// since `T0`: the database, the store and the claim's key.
async fn one_claim_in_flight(
    namespace: u8,
    executor: ExecutorKind,
) -> (TempDb, SqliteClaimStore, OperationKey) {
    let db = TempDb::new();
    let store = SqliteClaimStore::connect(&db.url(), StoreOptions::default())
        .await
        .expect("open");
    let ns = Namespace::new([namespace; 16]);
    let key = ns.key(1, 0);
    let req = conformance::request(&ns, key, 1, 1500, T0).with_executor(executor);
    assert!(matches!(
        store.claim(req).await.expect("claim"),
        RawClaim::Acquired(_)
    ));
    (db, store, key)
}

/// One stuck claim, one live, one completed, one corrupt row: the listing
/// shows exactly the stuck one in full and reports the corrupt one by key.
#[tokio::test]
async fn stuck_lists_only_expired_in_flight_claims_and_reports_corrupt_rows() {
    let db = TempDb::new();
    let store = SqliteClaimStore::connect(&db.url(), StoreOptions::default())
        .await
        .expect("open");
    let ns = Namespace::new([0x5a; 16]);
    let stuck_key = ns.key(1, 0);
    let live_key = ns.key(1, 1);
    let done_key = ns.key(1, 2);
    let stuck_req = conformance::request(&ns, stuck_key, 1, 1500, T0);
    let stuck_holder = *stuck_req.holder();
    for req in [
        stuck_req,
        conformance::request(&ns, live_key, 1, 1500, T0.plus_millis(3_600_000)),
        conformance::request(&ns, done_key, 1, 1500, T0),
    ] {
        assert!(matches!(
            store.claim(req).await.expect("claim"),
            RawClaim::Acquired(_)
        ));
    }
    let done_holder = store
        .fetch(&done_key)
        .await
        .expect("fetch")
        .expect("row")
        .holder;
    let receipt = JsonText::result("{}".into()).expect("json");
    let done = conformance::executed_completion(done_key, done_holder, receipt, T0);
    let c = store.complete(done).await.expect("complete");
    assert_eq!(c, Completion::Recorded);
    sqlx::query(
        "INSERT INTO toolgate_claims (operation_key, fingerprint, tool, arguments, scope, \
         version_seen, proposer, status, holder, lease_expires_at, claimed_at) \
         VALUES (x'0102', x'00', 't', 'not json', '{}', '1', 'a', 'in_flight', x'00', 0, 0)",
    )
    .execute(store.pool())
    .await
    .expect("corrupt row");
    store.pool().close().await;

    let lease_ms = i64::try_from(conformance::LEASE.as_millis()).expect("lease");
    let now = T0.0 + lease_ms + 5_000;
    let (code, stdout, stderr) = stuck(&db, now);
    assert_eq!(code, 0, "stderr: {stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(
        lines,
        vec![
            // Oldest lease first: the corrupt row's lease is 0.
            json!({"corrupt": {
                "raw_key": "0102",
                "field": "operation_key",
                "message": "operation key must be 32 bytes, found 2",
            }}),
            json!({
                "operation_key": stuck_key.to_hex(),
                "fingerprint": conformance::fingerprint(1).to_hex(),
                "tool": "refund_order",
                "status": "in_flight",
                "executor": "in_process",
                "holder": stuck_holder.to_hex(),
                "claimed_at": T0.0,
                "lease_expires_at": T0.0 + lease_ms,
                "attempt": 1,
                "idempotency_key": stuck_key.to_hex(),
                "stuck_for_ms": 5_000,
                "proposal": {
                    "arguments": {"amount_minor": 1500, "reason_code": "late_delivery"},
                    "scope": {"customer": "c-1", "order": "o-9"},
                    "version_seen": "7",
                    "proposer": "agent:1",
                },
            }),
        ]
    );

    // Before the lease ends nothing is stuck but the corrupt row.
    let (code, stdout, _) = stuck(&db, T0.0 + 1);
    assert_eq!(code, 0);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
}

/// A client-executed claim that is stuck: reconciling it without an answer
/// asks no executor (the desk's would say "no credit found" about a write
/// it never saw) and exits 2; the application's answer closes it.
#[tokio::test]
async fn a_stuck_client_claim_needs_an_explicit_answer() {
    let (db, store, key) = one_claim_in_flight(0x6b, ExecutorKind::Client).await;
    let later = T0.0 + 3_600_000;
    let hex = key.to_hex();
    let (code, stdout, _) = stuck(&db, later);
    assert_eq!(code, 0);
    assert!(stdout.contains(r#""executor":"client""#), "{stdout}");

    let (code, stdout, stderr) = reconcile(&db, later, &key, &[]);
    assert_eq!(code, 2, "{stdout} {stderr}");
    let line: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(
        line,
        json!({"operation_key": hex, "reconciled": "explicit_answer_required", "executor": "client"})
    );
    assert!(stderr.contains("--applied"), "{stderr}");
    let row = store.fetch(&key).await.expect("fetch").expect("row");
    assert_eq!(row.status, ClaimStatus::InFlight, "nothing was written");

    // Both answers at once is a usage error; a malformed receipt too.
    let (code, _, _) = reconcile(
        &db,
        later,
        &key,
        &["--applied", "{}", "--not-applied", "no"],
    );
    assert_eq!(code, 2);
    let (code, _, stderr) = reconcile(&db, later, &key, &["--applied", r#"{"a":1,"a":2}"#]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(
        store.fetch(&key).await.expect("fetch").expect("row").status,
        ClaimStatus::InFlight
    );

    let (code, stdout, stderr) = reconcile(
        &db,
        later,
        &key,
        &["--applied", r#"{"refund_id":"php-42"}"#],
    );
    assert_eq!(code, 0, "{stderr}");
    let line: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(
        line,
        json!({"operation_key": hex, "reconciled": "applied", "result": {"refund_id": "php-42"}})
    );
    let row = store.fetch(&key).await.expect("fetch").expect("row");
    assert_eq!(row.status, ClaimStatus::Completed);
    assert_eq!(row.executor, ExecutorKind::Client);
}

/// `--not-applied DETAIL` closes a stuck claim as not applied, with the
/// operator's note as its result.
#[tokio::test]
async fn not_applied_records_the_operators_detail() {
    let (db, _store, key) = one_claim_in_flight(0x6c, ExecutorKind::Webhook).await;
    let later = T0.0 + 3_600_000;
    let (code, stdout, stderr) = reconcile(
        &db,
        later,
        &key,
        &["--not-applied", "no refund in the shop's table"],
    );
    assert_eq!(code, 0, "{stderr}");
    let line: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(
        line["result"],
        json!({"applied": false, "detail": "no refund in the shop's table"})
    );
    assert_eq!(line["reconciled"], "not_applied");
}

#[test]
fn stuck_with_a_bad_url_exits_2() {
    let (code, stdout, stderr) = toolgate(&["claims", "stuck", "--db", "redis://x"]);
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert!(stderr.contains("sqlite://"), "{stderr}");
}

#[test]
fn stuck_without_db_is_a_usage_error() {
    let (code, _, stderr) = toolgate(&["claims", "stuck"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--db"), "{stderr}");
}

#[test]
fn stuck_on_a_missing_sqlite_file_exits_2_and_creates_nothing() {
    let db = TempDb::new();
    let (code, stdout, stderr) = toolgate(&["claims", "stuck", "--db", &db.url()]);
    assert_eq!(code, 2, "stdout={stdout}");
    assert!(stdout.is_empty());
    assert!(!stderr.is_empty());
    assert!(
        !db.path.exists(),
        "the command created {}",
        db.path.display()
    );
}
