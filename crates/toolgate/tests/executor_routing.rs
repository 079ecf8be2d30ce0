//! Invariant 13 in the core: every claim records the kind of executor that
//! owns its write, and reconciliation asks that executor and no other. A
//! delegated actor is what the pipeline sees, with the key kept as `via`.

mod support;

use support::{REFUND_POLICY as POLICY, block_on};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Map, json};
use toolgate::claim::{
    ClaimRecord, ClaimStore, ExecutorKind, HolderToken, JsonText, MemoryClaimStore, OperationKey,
    ReconcileOutcome, UnixMillis,
};
use toolgate::contract::{self, CheckOptions, Policy};
use toolgate::pipeline::{
    Authorizer, AuthzDecision, AuthzRequest, Decision, ExecError, ExecOutcome, ExecPermit,
    Executor, Gate, Outcome, Principal, ReconcileReport, Request, StateError, StateScope,
    StateSource, StateVersion, decide, reconcile, reconcile_answered,
};
use toolgate::provider::Provider;

/// Allows everyone except `agent-bob`.
struct Authz;

impl Authorizer for Authz {
    async fn authorize(&self, r: &AuthzRequest<'_>) -> AuthzDecision {
        if r.principal().id() == "agent-bob" {
            AuthzDecision::Deny {
                message: "not bob's order".into(),
            }
        } else {
            AuthzDecision::Allow
        }
    }
}

struct State;

impl StateSource for State {
    async fn current_version(&self, _: StateScope<'_>) -> Result<StateVersion, StateError> {
        Ok(StateVersion::from(3))
    }
}

/// An executor of a given kind whose `execute` leaves the outcome unknown
/// (or defers, for a client), and which counts reconciliation questions.
struct Exec {
    kind: ExecutorKind,
    asked: AtomicUsize,
}

impl Exec {
    fn new(kind: ExecutorKind) -> Self {
        Self {
            kind,
            asked: AtomicUsize::new(0),
        }
    }
}

impl Executor for Exec {
    async fn execute(&self, _p: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        match self.kind {
            ExecutorKind::Client => Ok(ExecOutcome::Deferred),
            _ => Err(ExecError::new("connection reset")),
        }
    }
    fn kind(&self, _tool: &str) -> ExecutorKind {
        self.kind
    }
    async fn reconcile(&self, _claim: &ClaimRecord) -> Result<ReconcileOutcome, ExecError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Ok(ReconcileOutcome::NotApplied {
            detail: JsonText::result(r#"{"found":false}"#.to_owned()).unwrap(),
        })
    }
}

fn decide_with(
    policy: &Policy,
    store: &MemoryClaimStore,
    exec: &Exec,
    principal: &Principal,
    order: i64,
) -> Decision {
    let body = json!({"outcome":"action","reply":"Refunded.",
        "proposed_action":{"tool":"refund_order","arguments":{"amount_minor":500}}});
    let proposal = contract::check(
        policy,
        Provider::Envelope,
        body.to_string().as_bytes(),
        &CheckOptions::default(),
    );
    let mut scope = Map::new();
    scope.insert("order_id".into(), json!(order));
    let gate = Gate {
        policy,
        authorizer: &Authz,
        state: &State,
        claims: store,
        executor: exec,
    };
    let request = Request {
        principal,
        scope: &toolgate::pipeline::Scope::new(scope.clone(), Some(StateVersion::from(3).clone())),
        attributes: &Map::new(),
        approval: None,
        now: UnixMillis(1_000),
        holder: HolderToken::from_bytes([order as u8; 16]),
        lease: Duration::from_millis(10),
    };
    block_on(decide(&gate, proposal, &request)).unwrap()
}

const LATER: UnixMillis = UnixMillis(60_000);

/// Decides order `order` through `exec`, expecting `outcome`; the claim
/// records `exec`'s kind. Returns the claim's key.
fn claimed_by(store: &MemoryClaimStore, exec: &Exec, order: i64, outcome: Outcome) -> OperationKey {
    let policy = Policy::load(POLICY).unwrap();
    let d = decide_with(&policy, store, exec, &service(), order);
    assert_eq!(d.outcome(), outcome);
    let key = d.key().unwrap();
    let record = block_on(store.fetch(&key)).unwrap().unwrap();
    assert_eq!(record.executor, exec.kind);
    key
}

fn service() -> Principal {
    Principal::new("shop-backend", ["refund:issue"]).unwrap()
}

#[test]
fn a_client_claim_is_never_answered_by_another_executor() {
    let store = MemoryClaimStore::new();
    let client = Exec::new(ExecutorKind::Client);
    let key = claimed_by(&store, &client, 1, Outcome::Permitted);

    // The in-process executor (and a webhook one) would answer "not found":
    // neither is asked, and nothing is written.
    for kind in [ExecutorKind::InProcess, ExecutorKind::Webhook] {
        let other = Exec::new(kind);
        let report = block_on(reconcile(&store, &other, &key, "operator", LATER)).unwrap();
        assert!(
            matches!(&report, ReconcileReport::ExplicitAnswerRequired(r) if r.executor == ExecutorKind::Client),
            "{report:?}"
        );
        assert_eq!(other.asked.load(Ordering::SeqCst), 0, "{kind} was asked");
    }
    // Not even a client-kind executor answers for the client's write.
    let report = block_on(reconcile(&store, &client, &key, "operator", LATER)).unwrap();
    assert!(matches!(report, ReconcileReport::ExplicitAnswerRequired(_)));
    assert_eq!(client.asked.load(Ordering::SeqCst), 0);
    assert!(
        block_on(store.fetch(&key))
            .unwrap()
            .unwrap()
            .is_stuck(LATER)
    );

    // The application's explicit answer closes it.
    let answer = ReconcileOutcome::Applied {
        receipt: JsonText::result(r#"{"refund_id":9}"#.to_owned()).unwrap(),
    };
    let report = block_on(reconcile_answered(&store, answer, &key, "operator", LATER)).unwrap();
    assert!(matches!(report, ReconcileReport::Recorded(_)), "{report:?}");
    let trail = block_on(store.audit_trail(&key, 10)).unwrap();
    let outcomes: Vec<&str> = trail.iter().map(|e| e.outcome()).collect();
    assert_eq!(
        outcomes,
        [
            "permitted",
            "explicit_answer_required",
            "explicit_answer_required",
            "explicit_answer_required",
            "reconciled_applied"
        ]
    );
}

#[test]
fn an_executor_is_asked_only_about_the_claims_it_owns() {
    let store = MemoryClaimStore::new();
    let in_process = Exec::new(ExecutorKind::InProcess);
    let key = claimed_by(&store, &in_process, 2, Outcome::NeedsReconciliation);
    let webhook = Exec::new(ExecutorKind::Webhook);
    let report = block_on(reconcile(&store, &webhook, &key, "operator", LATER)).unwrap();
    assert!(matches!(report, ReconcileReport::ExplicitAnswerRequired(_)));
    assert_eq!(webhook.asked.load(Ordering::SeqCst), 0);
    let report = block_on(reconcile(&store, &in_process, &key, "operator", LATER)).unwrap();
    assert!(matches!(
        report,
        ReconcileReport::Recorded(ReconcileOutcome::NotApplied { .. })
    ));
    assert_eq!(in_process.asked.load(Ordering::SeqCst), 1);
}

#[test]
fn a_delegated_actor_is_who_the_pipeline_sees_and_the_key_is_kept_as_via() {
    let policy = Policy::load(POLICY).unwrap();
    let store = MemoryClaimStore::new();
    let client = Exec::new(ExecutorKind::Client);
    let bob = service().acting_for("agent-bob").unwrap();
    assert_eq!((bob.id(), bob.via()), ("agent-bob", Some("shop-backend")));
    assert!(bob.has_capability("refund:issue"), "the key's capabilities");
    let d = decide_with(&policy, &store, &client, &bob, 3);
    assert_eq!(d.outcome(), Outcome::Forbidden, "the authoriser saw bob");
    let ana = service().acting_for("agent-ana").unwrap();
    let d = decide_with(&policy, &store, &client, &ana, 4);
    assert_eq!(d.outcome(), Outcome::Permitted);
    let key = d.key().unwrap();
    let record = block_on(store.fetch(&key)).unwrap().unwrap();
    assert_eq!(record.proposal.proposer(), "agent-ana");
    let trail = block_on(store.audit_trail(&key, 10)).unwrap();
    assert_eq!(
        (trail[0].actor(), trail[0].via()),
        ("agent-ana", Some("shop-backend"))
    );
    assert!(service().acting_for("").is_err());
    assert!(service().acting_for("a\nb").is_err());
}

#[test]
fn a_principals_credential_is_never_printed_and_stays_with_whom_it_authenticated() {
    let secret = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2ln";
    let alice = Principal::new("alice", ["refund:issue"])
        .unwrap()
        .with_credential(toolgate::pipeline::Credential::new(secret));
    assert_eq!(alice.credential().map(|c| c.expose()), Some(secret));
    // Debug output reaches logs: the token is not in it.
    let printed = format!("{alice:?} {:?}", alice.credential());
    assert!(!printed.contains(secret), "{printed}");
    assert!(printed.contains("<redacted>"), "{printed}");
    // An actor a key names never carries the key's credential.
    assert!(alice.acting_for("bob").unwrap().credential().is_none());
}
