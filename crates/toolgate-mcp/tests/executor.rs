//! The upstream as the core's executor, driven by the core's pipeline as it
//! is today (`toolgate::pipeline::decide` on the in-memory claim store),
//! against the example shop as a real process: twelve parallel identical
//! calls make one upstream execution, and a call whose answer is lost is
//! never sent again but reconciled through the shop's status tool.
//!
//! The authoriser and state source here are the test's (allow; no state
//! read: the shop's precondition decides), since the gateway's come with
//! the core's decision function. Needs examples/mcp/install.sh (see
//! tests/support/mod.rs for the skip rule).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, json};
use toolgate::claim::{HolderToken, MemoryClaimStore, ReconcileOutcome, UnixMillis};
use toolgate::contract::{CheckOptions, Policy, check};
use toolgate::pipeline::{
    Authorizer, AuthzDecision, AuthzRequest, Decision, Gate, Outcome, Principal, Reason,
    ReconcileReport, Request, StateError, StateScope, StateSource, StateVersion, decide, reconcile,
};
use toolgate::provider::Provider;
use toolgate_mcp::config::StatusToolFile;
use toolgate_mcp::executor::{RECONCILED_META, UpstreamExecutor};
use toolgate_mcp::upstream::UpstreamClient;
use toolgate_mcp::wire::{DecisionForWire, OUTCOME_META, to_wire};

mod support;
use support::{counts, http_upstream, python, shop};

struct Allow;

impl Authorizer for Allow {
    async fn authorize(&self, _request: &AuthzRequest<'_>) -> AuthzDecision {
        AuthzDecision::Allow
    }
}

/// No state read: the shop's own precondition (`WHERE version = ?`) decides.
struct NoRead;

impl StateSource for NoRead {
    async fn current_version(&self, _scope: StateScope<'_>) -> Result<StateVersion, StateError> {
        Err(StateError::new("not read"))
    }
    fn reads_state(&self, _tool: &str) -> bool {
        false
    }
}

const POLICY: &str = r#"
version = 1
abstain_message = "no"

[[tools]]
name = "refund_order"
capability = "refund:issue"
operation_key = ["order", "version_seen"]
scope_types = { order = "integer" }
schema = '''{"type": "object", "additionalProperties": false,
  "required": ["order_id", "expected_version", "amount_minor", "reason"],
  "properties": {
    "order_id": {"type": "integer", "minimum": 1},
    "expected_version": {"type": "integer", "minimum": 1},
    "amount_minor": {"type": "integer", "minimum": 1, "maximum": 20000},
    "reason": {"enum": ["damaged", "not_delivered", "wrong_item", "late"]}}}'''
"#;

struct Parts {
    policy: Policy,
    claims: MemoryClaimStore,
    executor: UpstreamExecutor,
}

async fn parts(port: u16, call_timeout: Duration) -> Arc<Parts> {
    let upstream = http_upstream(port, call_timeout);
    let client = Arc::new(UpstreamClient::connect(&upstream).await.unwrap());
    let mut executor = UpstreamExecutor::new();
    executor.route(
        "refund_order",
        client,
        Some(StatusToolFile {
            name: "refund_status".into(),
            key_argument: "operation_key".into(),
        }),
    );
    Arc::new(Parts {
        policy: Policy::load(POLICY).unwrap(),
        claims: MemoryClaimStore::new(),
        executor,
    })
}

fn now() -> UnixMillis {
    UnixMillis(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
    )
}

async fn one(parts: &Parts, order: u64, holder: u8, lease: Duration, at: UnixMillis) -> Decision {
    let envelope = json!({
        "outcome": "action",
        "reply": "",
        "proposed_action": {"tool": "refund_order", "arguments": {
            "order_id": order, "expected_version": 1, "amount_minor": 700, "reason": "late"}},
    });
    let proposal = check(
        &parts.policy,
        Provider::Envelope,
        envelope.to_string().as_bytes(),
        &CheckOptions::default(),
    );
    let principal = Principal::new("agent-ana", ["refund:issue"]).unwrap();
    let mut scope = Map::new();
    scope.insert("order".into(), json!(order));
    let version = StateVersion::new("1").unwrap();
    let attributes = Map::new();
    let gate = Gate {
        policy: &parts.policy,
        authorizer: &Allow,
        state: &NoRead,
        claims: &parts.claims,
        executor: &parts.executor,
    };
    let request = Request {
        principal: &principal,
        scope: &toolgate::pipeline::Scope::new(scope.clone(), Some(version.clone())),
        attributes: &attributes,
        approval: None,
        now: at,
        holder: HolderToken::from_bytes([holder; 16]),
        lease,
    };
    decide(&gate, proposal, &request).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twelve_parallel_identical_calls_make_one_upstream_execution() {
    let Some(py) = python() else { return };
    let shop = shop(&py, "twelve", &[]);
    let parts = parts(shop.port, Duration::from_secs(30)).await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..12u8 {
        let parts = Arc::clone(&parts);
        tasks.spawn(async move { one(&parts, 1004, i + 1, Duration::from_secs(60), now()).await });
    }
    let mut outcomes = Vec::new();
    while let Some(d) = tasks.join_next().await {
        outcomes.push(d.unwrap());
    }
    let executed: Vec<&Decision> = outcomes
        .iter()
        .filter(|d| d.outcome() == Outcome::Executed)
        .collect();
    assert_eq!(executed.len(), 1, "{outcomes:?}");
    assert!(outcomes.iter().all(|d| matches!(
        d.outcome(),
        Outcome::Executed | Outcome::InFlight | Outcome::Replayed
    )));
    assert_eq!(
        counts(&py, &shop.db()),
        json!({"refund_order_calls": 1, "refunds": 1})
    );

    // A thirteenth, later: the recorded CallToolResult, marked replayed,
    // the same content as the execution's.
    let again = one(&parts, 1004, 13, Duration::from_secs(60), now()).await;
    assert_eq!(again.outcome(), Outcome::Replayed);
    let wire = |d: &Decision| {
        serde_json::to_value(
            to_wire(
                &DecisionForWire {
                    decision: d.clone(),
                    review_url: None,
                },
                false,
            )
            .unwrap(),
        )
        .unwrap()
    };
    let (first, replay) = (wire(executed[0]), wire(&again));
    assert_eq!(replay["_meta"][OUTCOME_META], json!("replayed"));
    assert_eq!(replay["content"], first["content"]);
    assert_eq!(
        counts(&py, &shop.db()),
        json!({"refund_order_calls": 1, "refunds": 1})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_is_reconciled_through_the_status_tool_never_resent() {
    let Some(py) = python() else { return };
    // The shop holds order 1005's refund for 1.5 s before committing; the
    // gateway waits 300 ms.
    let shop = shop(&py, "lost", &["--hold-order", "1005", "--hold-ms", "1500"]);
    let parts = parts(shop.port, Duration::from_millis(300)).await;
    let lease = Duration::from_millis(2_000);
    let t0 = now();
    let d = one(&parts, 1005, 1, lease, t0).await;
    assert_eq!(d.outcome(), Outcome::NeedsReconciliation, "{d:?}");
    assert_eq!(d.reason(), Some(Reason::ExecutorFailed));
    let key = d.key().unwrap();

    // A retry while the lease runs: in flight, not sent.
    let d = one(&parts, 1005, 2, lease, now()).await;
    assert_eq!(d.outcome(), Outcome::InFlight, "{d:?}");

    // Meanwhile the shop committed the refund it was holding.
    let deadline = Instant::now() + Duration::from_secs(30);
    while counts(&py, &shop.db())["refunds"] != json!(1) {
        assert!(Instant::now() < deadline, "the held refund never committed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Past the lease: a retry is told to reconcile, still not sent.
    let later = UnixMillis(t0.0 + 2_500);
    let d = one(&parts, 1005, 3, lease, later).await;
    assert_eq!(d.outcome(), Outcome::NeedsReconciliation, "{d:?}");
    assert_eq!(d.reason(), Some(Reason::LeaseExpired));

    // Reconciliation asks the status tool, which finds the refund.
    let report = reconcile(&parts.claims, &parts.executor, &key, "operator", later)
        .await
        .unwrap();
    assert!(
        matches!(
            report,
            ReconcileReport::Recorded(ReconcileOutcome::Applied { .. })
        ),
        "{report:?}"
    );
    // The retry now replays the upstream's record of it.
    let d = one(&parts, 1005, 4, lease, UnixMillis(later.0 + 1)).await;
    assert_eq!(d.outcome(), Outcome::Replayed, "{d:?}");
    let result = d.result().unwrap();
    assert_eq!(result["_meta"][RECONCILED_META], json!(true));
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("\"order_id\":1005")
    );
    // One call ever reached the tool.
    assert_eq!(
        counts(&py, &shop.db()),
        json!({"refund_order_calls": 1, "refunds": 1})
    );
}
