//! Fault test: the late-commit race, on each claim store (docs/design.md
//! invariant 8).
//!
//! toolgate calls a webhook (a receiver on loopback, over real HTTP, that
//! keeps the contract of docs/deploy.md: one row per idempotency key, written
//! by the write or by a status request, whichever comes first). The receiver
//! holds the first attempt's write back past toolgate's bound on the call, so
//! toolgate answers `needs_reconciliation`; past the lease an operator
//! reconciles through the status URL; only then does the receiver try to
//! commit. The order is fixed by signals, not by timing:
//!
//! - reconcile first: the status request fences the key, the late commit is
//!   refused (410 fenced), toolgate records "not applied", and the retry runs
//!   as attempt 2, applied once;
//! - commit first: the status request finds the write, and toolgate records
//!   "applied" with the receiver's result.
//!
//! Either way toolgate's record equals the receiver's table.
//!
//! SQLite always runs. PostgreSQL and MariaDB run when
//! `TOOLGATE_TEST_POSTGRES_URL` / `TOOLGATE_TEST_MYSQL_URL` are set; unset,
//! they print a skip message, unless `TOOLGATE_REQUIRE_DATABASES=1`, which
//! makes a missing database a failure.

#[path = "support/databases.rs"]
mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, watch};
use toolgate::claim::{ClaimStore, OperationKey, ReconcileOutcome, Resolution, UnixMillis};
use toolgate::contract::{self, CheckOptions, Policy};
use toolgate::pipeline::{
    Decision, Gate, Outcome, Principal, Reason, ReconcileReport, Request, StateVersion, decide,
    reconcile,
};
use toolgate::provider::Provider;
use toolgate_deploy::{DeploySection, Prepared};
use toolgate_store::{AnyClaimStore, fresh_holder};

const POLICY: &str = include_str!("../../../fixtures/policies/refund_order.toml");

const SECRET: &str = "late-commit-test-secret-32-bytes";

/// The claim's lease, and the webhook's own bound on one call: the lease
/// outlasts the call by more than the margin, as a deployment must.
const LEASE: Duration = Duration::from_millis(1500);
const TIMEOUT_MS: u64 = 300;

/// The receiver's table: one row per idempotency key, with the write's
/// result, or none (a fence written by a status request).
#[derive(Default)]
struct Receiver {
    rows: Mutex<HashMap<String, Option<Value>>>,
    /// Releases the held first attempt's write.
    release: Notify,
    /// What the held write ended as: `applied`, `fenced` or
    /// `lease_expired`.
    late: watch::Sender<Option<String>>,
    /// Every write request received: (idempotency key, attempt).
    received: Mutex<Vec<(String, u64)>>,
}

fn now() -> UnixMillis {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    UnixMillis(i64::try_from(ms).expect("ms"))
}

fn unix_seconds() -> u64 {
    u64::try_from(now().0 / 1000).expect("seconds")
}

fn verified(headers: &HeaderMap, method: &str, target: &str, body: &[u8]) -> bool {
    let header = headers
        .get(toolgate::sign::HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    toolgate::sign::verify(
        SECRET.as_bytes(),
        header,
        unix_seconds(),
        300,
        method,
        target,
        body,
    )
    .is_ok()
}

fn answer(status: StatusCode, v: &Value) -> Response {
    (
        status,
        [("content-type", "application/json")],
        v.to_string(),
    )
        .into_response()
}

async fn hook(State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> Response {
    // On a task of its own: the application goes on with its write after
    // toolgate has given up on the call and closed the connection.
    tokio::spawn(write(r, headers, body))
        .await
        .expect("the write task")
}

#[expect(
    clippy::disallowed_methods,
    reason = "the receiver reads the permit toolgate wrote; serde_json plays the application's reader"
)]
async fn write(r: Arc<Receiver>, headers: HeaderMap, body: Bytes) -> Response {
    if !verified(&headers, "POST", "/hook", &body) {
        return answer(StatusCode::UNAUTHORIZED, &json!({"error": "bad signature"}));
    }
    let permit: Value = serde_json::from_slice(&body).expect("permit");
    let key = permit["idempotency_key"].as_str().expect("key").to_owned();
    let attempt = permit["attempt"].as_u64().expect("attempt");
    let lease_expires_at = permit["lease_expires_at"].as_i64().expect("lease");
    assert_eq!(
        headers.get("idempotency-key").and_then(|v| v.to_str().ok()),
        Some(key.as_str())
    );
    r.received.lock().unwrap().push((key.clone(), attempt));
    let held = attempt == 1;
    if held {
        // Slow work before the write; toolgate gives up on the call
        // meanwhile. The test says when it is done.
        r.release.notified().await;
    }
    // One critical section: the key's row first, whichever comes first.
    let outcome = {
        let mut rows = r.rows.lock().unwrap();
        match rows.get(&key) {
            Some(Some(result)) => Ok(result.clone()),
            Some(None) => Err("fenced"),
            // Never a commit past the permit's lease; a fence, when there
            // is one, is found first (above).
            None if now().0 >= lease_expires_at => Err("lease_expired"),
            None => {
                let result =
                    json!({"refund_id": key, "amount_minor": permit["arguments"]["amount_minor"]});
                rows.insert(key.clone(), Some(result.clone()));
                Ok(result)
            }
        }
    };
    if held {
        let ended = match &outcome {
            Ok(_) => "applied".to_owned(),
            Err(why) => (*why).to_owned(),
        };
        r.late.send_replace(Some(ended));
    }
    match outcome {
        Ok(result) => answer(StatusCode::CREATED, &result),
        Err(why) => answer(StatusCode::GONE, &json!({"error": why})),
    }
}

async fn status(
    State(r): State<Arc<Receiver>>,
    Query(q): Query<HashMap<String, String>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let target = uri.path_and_query().map_or("/status", |p| p.as_str());
    if !verified(&headers, "GET", target, b"") {
        return answer(StatusCode::UNAUTHORIZED, &json!({"error": "bad signature"}));
    }
    let key = q.get("idempotency_key").cloned().unwrap_or_default();
    // One critical section: a fence if the write has not written the row.
    let row = r.rows.lock().unwrap().entry(key).or_insert(None).clone();
    match row {
        Some(result) => answer(StatusCode::OK, &json!({"applied": true, "result": result})),
        None => answer(StatusCode::OK, &json!({"applied": false})),
    }
}

async fn start_receiver() -> (String, Arc<Receiver>) {
    let receiver = Arc::new(Receiver::default());
    let app = Router::new()
        .route("/hook", post(hook))
        .route("/status", get(status))
        .with_state(Arc::clone(&receiver));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        axum::serve(listener, app).await.expect("serve");
    });
    (format!("http://{addr}"), receiver)
}

async fn deployment(base: &str) -> (Prepared, Policy) {
    let dir = std::env::temp_dir().join(format!("toolgate-late-{}", support::random_hex()));
    std::fs::create_dir_all(&dir).expect("dir");
    let secret = dir.join("secret");
    std::fs::write(&secret, SECRET).expect("secret");
    let text = format!(
        "[[tools]]\nname = \"refund_order\"\n\
         executor = {{ kind = \"webhook\", url = \"{base}/hook\", status_url = \"{base}/status\", \
         secret_file = \"{}\", timeout_ms = {TIMEOUT_MS} }}\n\
         state = {{ source = \"none\" }}\n\
         cedar = {{ principal_type = \"Agent\", resource_type = \"Order\", resource_field = \"order_id\" }}\n\
         [[tools.entities]]\ntype = \"Agent\"\nsource = \"request\"\n\
         [[tools.entities]]\ntype = \"Order\"\nsource = \"request\"\n",
        secret.display()
    );
    let section = DeploySection::from_toml(&text).expect("section");
    section
        .check_lease(u64::try_from(LEASE.as_millis()).expect("ms"))
        .expect("the test's lease outlasts the call");
    let policy = Policy::load(POLICY).expect("policy");
    let d = Prepared::load(
        &section,
        &dir,
        &policy,
        "permit(principal, action, resource);",
    )
    .await
    .expect("deployment");
    (d, policy)
}

async fn propose(d: &Prepared, policy: &Policy, store: &AnyClaimStore, order: i64) -> Decision {
    let body = json!({"outcome": "action", "reply": "Refunded.",
        "proposed_action": {"tool": "refund_order", "arguments": {"amount_minor": 700}}});
    let proposal = contract::check(
        policy,
        Provider::Envelope,
        body.to_string().as_bytes(),
        &CheckOptions::default(),
    );
    let gate = Gate {
        policy,
        authorizer: &d.authorizer,
        state: &d.state,
        claims: store,
        executor: &d.executor,
    };
    let principal = Principal::new("agent-ana", ["refund:issue"]).expect("principal");
    let mut scope = Map::new();
    scope.insert("order_id".into(), json!(order));
    let seen = StateVersion::new("1").expect("version");
    // The application's own word for the entities Cedar sees.
    let entities = json!({"Agent": {"id": "agent-ana"}, "Order": {"id": order.to_string()}});
    let request = Request {
        principal: &principal,
        scope: &toolgate::pipeline::Scope::new(scope.clone(), Some(seen.clone())),
        attributes: entities.as_object().expect("object"),
        approval: None,
        now: now(),
        holder: fresh_holder().expect("holder"),
        lease: LEASE,
    };
    decide(&gate, proposal, &request).await.expect("decide")
}

/// Waits, on the wall clock, until the claim's lease has ended.
async fn past_the_lease(store: &AnyClaimStore, key: &OperationKey) -> UnixMillis {
    let end = store
        .fetch(key)
        .await
        .expect("fetch")
        .expect("row")
        .lease_expires_at;
    while now() <= end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    now()
}

/// An operator's reconciliation of `key` once its lease has ended.
async fn reconcile_after_the_lease(run: &Run, key: &OperationKey) -> ReconcileReport {
    let at = past_the_lease(&run.store, key).await;
    reconcile(&run.store, &run.d.executor, key, "fault-test", at)
        .await
        .expect("reconcile")
}

async fn late_outcome(r: &Receiver) -> String {
    let mut rx = r.late.subscribe();
    let got = rx.wait_for(Option::is_some).await.expect("watch");
    got.clone().expect("outcome")
}

/// The first attempt's call ends unknown: toolgate's bound on the call ran
/// out while the receiver held the write.
async fn first_attempt(run: &Run, order: i64) -> OperationKey {
    let first = propose(&run.d, &run.policy, &run.store, order).await;
    assert_eq!(
        (first.outcome(), first.reason()),
        (Outcome::NeedsReconciliation, Some(Reason::ExecutorFailed)),
        "{first:?}"
    );
    first.key().expect("key")
}

/// One run's parts: the deployment and its policy, the claim store and
/// the receiver holding the writes.
struct Run {
    d: Prepared,
    policy: Policy,
    store: AnyClaimStore,
    receiver: Arc<Receiver>,
}

/// Reconcile first: the fence wins, the late commit is refused, and the
/// retry is attempt 2, applied once.
async fn reconcile_then_late_commit(run: &Run, order: i64) {
    let key = first_attempt(run, order).await;
    let report = reconcile_after_the_lease(run, &key).await;
    assert!(
        matches!(
            report,
            ReconcileReport::Recorded(ReconcileOutcome::NotApplied { .. })
        ),
        "{report:?}"
    );
    run.receiver.release.notify_one();
    assert_eq!(late_outcome(&run.receiver).await, "fenced");

    // toolgate's record equals the receiver's table: attempt 1 not applied.
    let row = run.store.fetch(&key).await.expect("fetch").expect("row");
    let completion = row.completion.as_ref().expect("closed");
    assert_eq!(completion.resolution, Resolution::ReconciledNotApplied);
    assert_eq!(row.attempt, 1);
    assert_eq!(
        run.receiver.rows.lock().unwrap().get(&key.to_hex()),
        Some(&None)
    );

    // The retry: attempt 2, its own key, applied once.
    let second = propose(&run.d, &run.policy, &run.store, order).await;
    assert_eq!(second.outcome(), Outcome::Executed, "{second:?}");
    let row = run.store.fetch(&key).await.expect("fetch").expect("row");
    assert_eq!(row.attempt, 2);
    let attempt_2 = format!("{}.2", key.to_hex());
    let table = run.receiver.rows.lock().unwrap().clone();
    let stored = table
        .get(&attempt_2)
        .cloned()
        .flatten()
        .expect("applied row");
    assert_eq!(row.result().expect("result").value().expect("json"), stored);
    assert_eq!(second.result(), Some(&stored));
    let applied = table
        .iter()
        .filter(|(k, v)| k.starts_with(&key.to_hex()) && v.is_some())
        .count();
    assert_eq!(applied, 1, "{table:?}");
    // A retry replays it; nothing is sent.
    let sent = run.receiver.received.lock().unwrap().len();
    let third = propose(&run.d, &run.policy, &run.store, order).await;
    assert_eq!(third.outcome(), Outcome::Replayed, "{third:?}");
    assert_eq!(run.receiver.received.lock().unwrap().len(), sent);
    run.receiver.late.send_replace(None);
}

/// Commit first: the held write lands before anyone asks, and the status
/// request finds it: toolgate records it as applied, with its result.
async fn late_commit_then_reconcile(run: &Run, order: i64) {
    let key = first_attempt(run, order).await;
    run.receiver.release.notify_one();
    assert_eq!(late_outcome(&run.receiver).await, "applied");
    let report = reconcile_after_the_lease(run, &key).await;
    assert!(
        matches!(
            report,
            ReconcileReport::Recorded(ReconcileOutcome::Applied { .. })
        ),
        "{report:?}"
    );
    let row = run.store.fetch(&key).await.expect("fetch").expect("row");
    let completion = row.completion.as_ref().expect("closed");
    assert_eq!(completion.resolution, Resolution::ReconciledApplied);
    let stored = run
        .receiver
        .rows
        .lock()
        .unwrap()
        .get(&key.to_hex())
        .cloned()
        .flatten()
        .expect("applied row");
    assert_eq!(completion.result.value().expect("json"), stored);
    let retry = propose(&run.d, &run.policy, &run.store, order).await;
    assert_eq!(retry.outcome(), Outcome::Replayed, "{retry:?}");
    run.receiver.late.send_replace(None);
}

async fn race_on(url: &str) {
    let store = AnyClaimStore::connect(url).await.expect("connect");
    let (base, receiver) = start_receiver().await;
    let (d, policy) = deployment(&base).await;
    // Orders unique to this run: the claim database may be shared.
    let base_order =
        i64::from(u16::from_str_radix(&support::random_hex()[..4], 16).expect("hex")) * 1000 + 1;
    let run = Run {
        d,
        policy,
        store,
        receiver,
    };
    for n in 0..2 {
        reconcile_then_late_commit(&run, base_order + n).await;
    }
    late_commit_then_reconcile(&run, base_order + 10).await;
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn sqlite_late_commit_race() {
    let path = std::env::temp_dir().join(format!("toolgate-late-{}.db", support::random_hex()));
    runtime().block_on(race_on(&format!("sqlite://{}", path.display())));
    let _ = std::fs::remove_file(&path);
}

support::on_network_databases!(|url: &str| runtime().block_on(race_on(url)) =>
    postgres_late_commit_race,
    mysql_late_commit_race
);
