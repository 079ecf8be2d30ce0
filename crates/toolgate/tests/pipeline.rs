//! The decision pipeline against spies: docs/design.md §1's order and invariants.
//!
//! Every part is a spy that logs its calls into one shared log, so a test
//! can assert not only the outcome but what was touched, and in which
//! order. The futures involved never pend, so a minimal `block_on` drives
//! them and the core needs no runtime even in its tests.

mod support;

use support::{approval_request, approve, block_on};

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};
use toolgate::claim::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStatus, ClaimStore, CompleteRequest, Completion,
    GrantUse, HolderToken, JsonText, MemoryClaimStore, OperationKey, RawClaim, ReconcileOutcome,
    ReconcileRequest, Reconciled, StoreError, StuckEntry, UnixMillis,
};
use toolgate::contract::{self, CheckOptions, Policy};
use toolgate::op::operation_key;
use toolgate::pipeline::{
    AppliedCompletion, Approval, Authorizer, AuthzDecision, AuthzRequest, Call, CallError,
    Completed, Decision, ExecError, ExecOutcome, ExecPermit, Executor, FORBIDDEN_DETAIL, Front,
    Gate, Note, Outcome, Principal, Reason, ReconcileReport, Refusal, Request, Settled, StateError,
    StateScope, StateSource, StateVersion, VersionSeen, decide, decide_call, reconcile,
};
use toolgate::provider::Provider;
use toolgate::review::{
    ApprovalTerms, ItemStatus, NewItem, QueueLimits, Requested, ReviewStore, ReviewerAct, Verdict,
    Voted,
};

type Log = Arc<Mutex<Vec<&'static str>>>;

fn push(log: &Log, what: &'static str) {
    log.lock().unwrap().push(what);
}

/// Allows or denies by principal id, logging each call.
struct SpyAuthorizer {
    log: Log,
    denied: Mutex<Vec<String>>,
    broken: Mutex<bool>,
    /// The application-sent entities of the last request.
    attributes: Mutex<Map<String, Value>>,
}

impl Authorizer for SpyAuthorizer {
    fn authorize(&self, r: &AuthzRequest<'_>) -> impl Future<Output = AuthzDecision> + Send {
        push(&self.log, "authorize");
        *self.attributes.lock().unwrap() = r.attributes().clone();
        let d = if *self.broken.lock().unwrap() {
            AuthzDecision::Error {
                message: "attribute `assigned` is 1, not a boolean".into(),
            }
        } else if self
            .denied
            .lock()
            .unwrap()
            .iter()
            .any(|d| d == r.principal().id())
        {
            AuthzDecision::Deny {
                message: "not assigned to this ticket".into(),
            }
        } else {
            AuthzDecision::Allow
        };
        std::future::ready(d)
    }
}

/// The ticket's current version, shared with the executor (the "downstream
/// system").
struct SpyState {
    log: Log,
    version: Arc<Mutex<i64>>,
    /// `false`: a source that reads nothing (`state = { source = "none" }`).
    reads: AtomicBool,
    /// The next read answers this version, as a read that ran just before
    /// a concurrent write would.
    stale_next: Mutex<Option<i64>>,
}

impl StateSource for SpyState {
    fn current_version(
        &self,
        _scope: StateScope<'_>,
    ) -> impl Future<Output = Result<StateVersion, StateError>> + Send {
        push(&self.log, "state");
        let read = self
            .stale_next
            .lock()
            .unwrap()
            .take()
            .unwrap_or(*self.version.lock().unwrap());
        std::future::ready(Ok(StateVersion::from(read)))
    }

    fn reads_state(&self, _tool: &str) -> bool {
        self.reads.load(Ordering::SeqCst)
    }
}

/// A MemoryClaimStore that logs every call.
struct SpyStore {
    log: Log,
    inner: MemoryClaimStore,
}

impl ClaimStore for SpyStore {
    fn claim(
        &self,
        request: ClaimRequest,
    ) -> impl Future<Output = Result<RawClaim, StoreError>> + Send {
        push(&self.log, "claim");
        self.inner.claim(request)
    }
    fn complete(
        &self,
        request: CompleteRequest,
    ) -> impl Future<Output = Result<Completion, StoreError>> + Send {
        push(&self.log, "complete");
        self.inner.complete(request)
    }
    fn fetch(
        &self,
        key: &OperationKey,
    ) -> impl Future<Output = Result<Option<ClaimRecord>, StoreError>> + Send {
        push(&self.log, "fetch");
        self.inner.fetch(key)
    }
    fn list_stuck(
        &self,
        now: UnixMillis,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<StuckEntry>, StoreError>> + Send {
        push(&self.log, "list_stuck");
        self.inner.list_stuck(now, limit)
    }
    fn record_reconciliation(
        &self,
        request: ReconcileRequest<'_>,
    ) -> impl Future<Output = Result<Reconciled, StoreError>> + Send {
        push(&self.log, "record_reconciliation");
        self.inner.record_reconciliation(request)
    }
    fn append_audit(
        &self,
        entry: &AuditEntry,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        push(&self.log, "audit");
        self.inner.append_audit(entry)
    }
    fn audit_trail(
        &self,
        key: &OperationKey,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<AuditEntry>, StoreError>> + Send {
        self.inner.audit_trail(key, limit)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum ExecMode {
    /// Apply with the version as precondition.
    Normal,
    /// Fail with an unknown outcome (a connection lost mid-write).
    Fail,
    /// Apply, but an operator reconciles the claim before completion.
    LoseLease,
    /// Apply and complete in the write's own transaction
    /// (`execute_and_complete`), as an executor on the claim store's
    /// database does.
    Folded,
    /// As `Folded`, but an operator reconciles the claim before the
    /// write: the completion matches no row and the write is undone.
    FoldedLoseLease,
}

/// Credits with `UPDATE … WHERE version = precondition` semantics.
struct SpyExecutor {
    log: Log,
    version: Arc<Mutex<i64>>,
    credits: Mutex<Vec<Value>>,
    mode: Mutex<ExecMode>,
    store: Arc<Mutex<Option<Arc<SpyStore>>>>,
}

impl Executor for SpyExecutor {
    fn execute(
        &self,
        permit: ExecPermit<'_>,
    ) -> impl Future<Output = Result<ExecOutcome, ExecError>> + Send {
        push(&self.log, "execute");
        let mode = *self.mode.lock().unwrap();
        let out = (|| {
            if mode == ExecMode::Fail {
                return Err(ExecError::new("connection reset"));
            }
            let mut v = self.version.lock().unwrap();
            if permit.precondition().as_str() != v.to_string() {
                return Ok(ExecOutcome::PreconditionFailed {
                    current: Some(StateVersion::from(*v)),
                });
            }
            *v += 1;
            let mut credits = self.credits.lock().unwrap();
            credits.push(permit.arguments().clone());
            let receipt = json!({"applied": true, "credit_id": credits.len(),
                                 "amount_minor": permit.arguments()["amount_minor"]});
            Ok(ExecOutcome::Applied {
                receipt: JsonText::result(receipt.to_string()).unwrap(),
            })
        })();
        if mode == ExecMode::LoseLease {
            let store = self.store.lock().unwrap().clone().unwrap();
            let key = *permit.key();
            let outcome = ReconcileOutcome::NotApplied {
                detail: JsonText::result("{}".into()).unwrap(),
            };
            let r = block_on(store.inner.record_reconciliation(ReconcileRequest {
                key: &key,
                outcome: &outcome,
                now: UnixMillis(i64::MAX),
            }));
            assert!(matches!(r, Ok(Reconciled::Recorded)));
        }
        std::future::ready(out)
    }

    async fn execute_and_complete(
        &self,
        permit: ExecPermit<'_>,
        completion: &AppliedCompletion,
    ) -> Result<Completed, ExecError> {
        let mode = *self.mode.lock().unwrap();
        if !matches!(mode, ExecMode::Folded | ExecMode::FoldedLoseLease) {
            return self.execute(permit).await.map(Completed::Outcome);
        }
        push(&self.log, "execute_and_complete");
        let store = self.store.lock().unwrap().clone().unwrap();
        if mode == ExecMode::FoldedLoseLease {
            let outcome = ReconcileOutcome::NotApplied {
                detail: JsonText::result("{}".into()).unwrap(),
            };
            let r = store
                .inner
                .record_reconciliation(ReconcileRequest {
                    key: permit.key(),
                    outcome: &outcome,
                    now: UnixMillis(i64::MAX),
                })
                .await;
            assert!(matches!(r, Ok(Reconciled::Recorded)));
        }
        // One "transaction": the write is kept only if the completion is.
        let version = *self.version.lock().unwrap();
        if permit.precondition().as_str() != version.to_string() {
            return Ok(Completed::Outcome(ExecOutcome::PreconditionFailed {
                current: Some(StateVersion::from(version)),
            }));
        }
        let receipt = JsonText::result(json!({"applied": true, "folded": true}).to_string())
            .map_err(|e| ExecError::new(e.to_string()))?;
        let done = store
            .inner
            .complete(completion.request(receipt.clone()))
            .await
            .map_err(|e| ExecError::new(e.to_string()))?;
        if done != Completion::Recorded {
            return Ok(Completed::LeaseLost);
        }
        *self.version.lock().unwrap() += 1;
        self.credits
            .lock()
            .unwrap()
            .push(permit.arguments().clone());
        Ok(Completed::Recorded { receipt })
    }

    fn reconcile(
        &self,
        claim: &ClaimRecord,
    ) -> impl Future<Output = Result<ReconcileOutcome, ExecError>> + Send {
        push(&self.log, "reconcile");
        let applied = !self.credits.lock().unwrap().is_empty();
        let text = json!({"applied": applied, "tool": claim.proposal.tool()}).to_string();
        let text = JsonText::result(text).unwrap();
        std::future::ready(Ok(if applied {
            ReconcileOutcome::Applied { receipt: text }
        } else {
            ReconcileOutcome::NotApplied { detail: text }
        }))
    }
}

const APPROVAL_TOOL: &str = r#"
[[tools]]
name = "refund_order"
capability = "refund:issue"
operation_key = ["customer_id", "ticket_id", "version_seen"]
needs_approval = true
schema = '''{"type":"object","additionalProperties":false,"required":["amount_minor"],
             "properties":{"amount_minor":{"type":"integer","minimum":1,"maximum":100000}}}'''
"#;

/// The pipeline with a spy for every part, all logging to one call log,
/// over one ticket's scope.
struct SpyPipeline {
    log: Log,
    policy: Policy,
    authz: SpyAuthorizer,
    state: SpyState,
    store: Arc<SpyStore>,
    exec: SpyExecutor,
    version: Arc<Mutex<i64>>,
    scope: Map<String, Value>,
    attributes: Map<String, Value>,
    holder_counter: Mutex<u8>,
}

impl SpyPipeline {
    fn new() -> Self {
        let log: Log = Arc::default();
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/support-desk/policy.toml"
        ))
        .unwrap();
        let policy = Policy::load(&format!("{text}\n{APPROVAL_TOOL}")).unwrap();
        let version = Arc::new(Mutex::new(7));
        let store = Arc::new(SpyStore {
            log: log.clone(),
            inner: MemoryClaimStore::new(),
        });
        let mut scope = Map::new();
        scope.insert("customer_id".into(), json!("c-1"));
        scope.insert("ticket_id".into(), json!("t-9"));
        SpyPipeline {
            authz: SpyAuthorizer {
                log: log.clone(),
                denied: Mutex::default(),
                broken: Mutex::new(false),
                attributes: Mutex::default(),
            },
            state: SpyState {
                log: log.clone(),
                version: version.clone(),
                reads: AtomicBool::new(true),
                stale_next: Mutex::default(),
            },
            exec: SpyExecutor {
                log: log.clone(),
                version: version.clone(),
                credits: Mutex::default(),
                mode: Mutex::new(ExecMode::Normal),
                store: Arc::new(Mutex::new(Some(store.clone()))),
            },
            store,
            log,
            policy,
            version,
            scope,
            attributes: Map::new(),
            holder_counter: Mutex::new(0),
        }
    }

    fn proposal(&self, tool: &str, amount: i64, reply: &str) -> contract::Checked {
        let body = json!({"outcome":"action","reply":reply,
            "proposed_action":{"tool":tool,"arguments":
                if tool == "refund_order" { json!({"amount_minor": amount}) }
                else { json!({"amount_minor": amount, "reason_code": "late_delivery"}) }}});
        let d = contract::check(
            &self.policy,
            Provider::Envelope,
            body.to_string().as_bytes(),
            &CheckOptions::default(),
        );
        assert_eq!(d.outcome(), contract::CheckOutcome::Action, "{d:?}");
        d
    }

    fn credit(&self, amount: i64) -> contract::Checked {
        self.proposal("apply_goodwill_credit", amount, "I've added a credit.")
    }

    fn holder(&self) -> HolderToken {
        let mut n = self.holder_counter.lock().unwrap();
        *n += 1;
        HolderToken::from_bytes([*n; 16])
    }

    fn decide_as(
        &self,
        who: &Principal,
        proposal: contract::Checked,
        seen: i64,
        now: i64,
        approval: Option<&Approval>,
    ) -> Decision {
        self.log.lock().unwrap().clear();
        let gate = Gate {
            policy: &self.policy,
            authorizer: &self.authz,
            state: &self.state,
            claims: self.store.as_ref(),
            executor: &self.exec,
        };
        let seen = StateVersion::from(seen);
        let request = Request {
            principal: who,
            scope: &toolgate::pipeline::Scope::new(self.scope.clone(), Some(seen.clone())),
            attributes: &self.attributes,
            approval,
            now: UnixMillis(now),
            holder: self.holder(),
            lease: Duration::from_secs(30),
        };
        let d = block_on(decide(&gate, proposal, &request)).unwrap();
        // Every decision is one of the pairs docs/error-codes.md lists.
        assert!(
            toolgate::pipeline::decision_pairs().contains(&(d.outcome(), d.reason())),
            "({}, {:?}) is not in decision_pairs()",
            d.outcome(),
            d.reason().map(|r| r.as_str())
        );
        d
    }

    fn decide(&self, proposal: contract::Checked, seen: i64, now: i64) -> Decision {
        self.decide_as(&agent("agent-1"), proposal, seen, now, None)
    }

    fn calls(&self) -> Vec<&'static str> {
        self.log.lock().unwrap().clone()
    }

    fn credits(&self) -> usize {
        self.exec.credits.lock().unwrap().len()
    }

    fn deny(&self, id: &str) {
        self.authz.denied.lock().unwrap().push(id.into());
    }
}

fn agent(id: &str) -> Principal {
    Principal::new(id, ["credit:issue", "refund:issue"]).unwrap()
}

const T0: i64 = 1_000_000;

/// Asserts that authorisation ran first and that nothing stateful was
/// touched before it (docs/design.md invariant 3).
fn assert_authorized_first(calls: &[&str]) {
    let first_stateful = calls
        .iter()
        .position(|c| !matches!(*c, "authorize"))
        .unwrap_or(calls.len());
    let auth = calls.iter().position(|c| *c == "authorize");
    assert_eq!(auth, Some(0), "authorisation did not run first: {calls:?}");
    assert!(first_stateful >= 1, "{calls:?}");
}

#[test]
fn fresh_proposal_executes_once_after_authorisation() {
    let w = SpyPipeline::new();
    let d = w.decide(w.credit(1500), 7, T0);
    assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
    assert_eq!(
        w.calls(),
        ["authorize", "state", "claim", "execute", "complete"]
    );
    assert_eq!(d.result().unwrap()["credit_id"], 1);
    assert_eq!(d.reply(), Some("I've added a credit."));
    assert_eq!(w.credits(), 1);
    assert_eq!(*w.version.lock().unwrap(), 8);
}

#[test]
fn a_tool_without_a_state_read_leaves_the_version_to_the_executor() {
    let mut w = SpyPipeline::new();
    w.state.reads.store(false, Ordering::SeqCst);
    let d = w.decide(w.credit(1500), 7, T0);
    assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
    // No "state" call, and no lookup before the claim: the claim itself
    // resolves the operation, after authorisation (invariants 3 and 4).
    assert_eq!(w.calls(), ["authorize", "claim", "execute", "complete"]);
    assert_eq!(w.credits(), 1);

    // A stale version_seen is caught by the executor's precondition alone,
    // recorded as state_changed, and nothing is written.
    w.scope.insert("ticket_id".into(), json!("t-10"));
    let d = w.decide(w.credit(1500), 7, T0 + 1);
    assert_eq!(d.outcome(), Outcome::StateChanged, "{d:?}");
    assert_eq!(d.reason(), Some(Reason::PreconditionFailed));
    assert_eq!(d.current_version(), Some(&StateVersion::from(8)));
    assert!(!w.calls().contains(&"state"), "{:?}", w.calls());
    assert_eq!(w.credits(), 1);
    // Its claim is closed as not applied: a retry gets that answer again
    // (state_changed, with the version then current), never `replayed`,
    // which would say the write happened; and nothing is written.
    let again = w.decide(w.credit(1500), 7, T0 + 2);
    assert_eq!(again.outcome(), Outcome::StateChanged, "{again:?}");
    assert_eq!(again.reason(), Some(Reason::PreconditionFailed));
    assert_eq!(again.current_version(), Some(&StateVersion::from(8)));
    assert_eq!(w.credits(), 1);
}

#[test]
fn application_entities_reach_the_authoriser_but_not_the_key() {
    let mut w = SpyPipeline::new();
    let plain = w.decide(w.credit(1500), 7, T0);
    assert_eq!(plain.outcome(), Outcome::Executed, "{plain:?}");
    assert!(w.authz.attributes.lock().unwrap().is_empty());

    w.attributes = json!({"Customer": {"id": "c-1", "tier": "gold"}})
        .as_object()
        .unwrap()
        .clone();
    let d = w.decide(w.credit(1500), 7, T0 + 1);
    assert_eq!(
        Value::Object(w.authz.attributes.lock().unwrap().clone()),
        json!({"Customer": {"id": "c-1", "tier": "gold"}})
    );
    // The same operation with the entities added: one key, one write.
    assert_eq!(d.outcome(), Outcome::Replayed, "{d:?}");
    assert_eq!(d.key(), plain.key());
    assert_eq!(d.fingerprint(), plain.fingerprint());
    assert_eq!(w.credits(), 1);
}

#[test]
fn retry_of_a_completed_credit_is_replayed_not_state_changed() {
    let w = SpyPipeline::new();
    let first = w.decide(w.credit(1500), 7, T0);
    assert_eq!(first.outcome(), Outcome::Executed);
    // The credit advanced the ticket to version 8; the retry still carries
    // the version 7 the model read. Resolving the operation first makes
    // this a replay (invariant 4).
    let retry = w.decide(
        w.proposal("apply_goodwill_credit", 1500, "Done — credit applied!"),
        7,
        T0 + 5_000,
    );
    assert_eq!(retry.outcome(), Outcome::Replayed, "{retry:?}");
    assert_eq!(retry.reason(), None);
    assert_eq!(retry.key(), first.key());
    assert_eq!(retry.result(), first.result());
    assert_eq!(
        retry.result().unwrap(),
        &json!({"applied": true, "credit_id": 1, "amount_minor": 1500})
    );
    assert_eq!(retry.current_version(), None);
    assert_eq!(w.calls(), ["authorize", "state", "fetch", "audit"]);
    assert_eq!(w.credits(), 1);
}

#[test]
fn a_retry_racing_its_original_is_replayed_not_state_changed() {
    // The retry reads the state just before its original writes (version
    // 7 -> 8) and completes: the read agrees with the version the model
    // saw, so nothing answers from it, and the retry's claim reads back the
    // original's completed row: a replay, never a second write and never
    // `state_changed` (invariant 4). (An original that completed before the
    // retry's state read: retry_of_a_completed_credit_is_replayed_….)
    let w = SpyPipeline::new();
    let original = w.decide(w.credit(1500), 7, T0);
    assert_eq!(original.outcome(), Outcome::Executed);
    *w.state.stale_next.lock().unwrap() = Some(7);
    let retry = w.decide(w.credit(1500), 7, T0 + 1);
    assert_eq!(retry.outcome(), Outcome::Replayed, "{retry:?}");
    assert_eq!(retry.result(), original.result());
    assert_eq!(w.calls(), ["authorize", "state", "claim", "audit"]);
    assert_eq!(w.credits(), 1);
}

#[test]
fn different_amount_for_the_same_operation_is_a_conflict_with_the_prior_proposal() {
    let w = SpyPipeline::new();
    w.decide(w.credit(1500), 7, T0);
    let d = w.decide_as(&agent("agent-2"), w.credit(2000), 7, T0 + 1, None);
    assert_eq!(d.outcome(), Outcome::Conflict, "{d:?}");
    let prior = d.prior().unwrap();
    assert_eq!(
        prior.arguments(),
        r#"{"amount_minor":1500,"reason_code":"late_delivery"}"#
    );
    assert_eq!(prior.proposer(), "agent-1");
    assert_eq!(d.result().unwrap()["amount_minor"], 1500);
    assert_eq!(w.calls(), ["authorize", "state", "fetch", "audit"]);
    assert_eq!(w.credits(), 1);
}

#[test]
fn one_key_admits_one_write_whoever_proposes_and_however_worded() {
    // Invariant 5: twelve agents, twelve amounts, twelve replies; one key.
    let w = SpyPipeline::new();
    let mut outcomes = Vec::new();
    let mut keys = Vec::new();
    for i in 0..12 {
        let p = w.proposal(
            "apply_goodwill_credit",
            100 + i,
            &format!("Reworded reply number {i}."),
        );
        let d = w.decide_as(&agent(&format!("agent-{i}")), p, 7, T0 + i, None);
        outcomes.push(d.outcome());
        keys.push(d.key().unwrap());
    }
    assert_eq!(outcomes[0], Outcome::Executed);
    assert!(
        outcomes[1..].iter().all(|o| *o == Outcome::Conflict),
        "{outcomes:?}"
    );
    assert!(keys.iter().all(|k| *k == keys[0]));
    assert_eq!(w.credits(), 1);
}

#[test]
fn the_key_is_the_tool_and_the_named_scope_fields_only() {
    let fields: Vec<String> = ["customer_id", "ticket_id", "version_seen"]
        .map(String::from)
        .to_vec();
    let mut scope = Map::new();
    scope.insert("customer_id".into(), json!("c-1"));
    scope.insert("ticket_id".into(), json!("t-9"));
    scope.insert("version_seen".into(), json!("7"));
    let k = operation_key("apply_goodwill_credit", &fields, &scope).unwrap();
    // Fields the tool does not name (an actor, a request id) change nothing.
    let mut extra = scope.clone();
    extra.insert("actor".into(), json!("agent-2"));
    assert_eq!(
        operation_key("apply_goodwill_credit", &fields, &extra).unwrap(),
        k
    );
    // Each named field and the tool do.
    for (field, value) in [
        ("customer_id", "c-2"),
        ("ticket_id", "t-8"),
        ("version_seen", "8"),
    ] {
        let mut other = scope.clone();
        other.insert(field.into(), json!(value));
        assert_ne!(
            operation_key("apply_goodwill_credit", &fields, &other).unwrap(),
            k
        );
    }
    assert_ne!(operation_key("refund_order", &fields, &scope).unwrap(), k);
    // Pinned: the key of a known scope (SHA-256 of the canonical JSON
    // {"scope":{…},"tool":…}); changing the encoding changes every key.
    let canonical = r#"{"scope":{"customer_id":"c-1","ticket_id":"t-9","version_seen":"7"},"tool":"apply_goodwill_credit"}"#;
    use sha2::Digest;
    let expected: [u8; 32] = sha2::Sha256::digest(canonical.as_bytes()).into();
    assert_eq!(k.as_bytes(), &expected);
    assert!(matches!(
        operation_key("apply_goodwill_credit", &fields, &Map::new()),
        Err(toolgate::op::KeyError::MissingScope(f)) if f == "customer_id"
    ));
}

#[test]
fn stale_version_without_a_claim_is_state_changed_with_both_versions_and_claims_nothing() {
    let w = SpyPipeline::new();
    *w.version.lock().unwrap() = 9;
    let d = w.decide(w.credit(1500), 7, T0);
    assert_eq!(d.outcome(), Outcome::StateChanged);
    assert_eq!(d.reason(), Some(Reason::VersionMismatch));
    assert_eq!(d.version_seen().unwrap().as_str(), "7");
    assert_eq!(d.current_version().unwrap().as_str(), "9");
    // The second lookup rules out an original that claimed meanwhile.
    assert_eq!(w.calls(), ["authorize", "state", "fetch", "audit"]);
    assert_eq!(
        block_on(w.store.inner.fetch(&d.key().unwrap())).unwrap(),
        None
    );
}

#[test]
fn the_executor_precondition_catches_what_the_gate_filter_missed() {
    // Invariant 9: the state read said 7, but the downstream system moved
    // to 8 before the write; the precondition refuses it.
    struct LaggingState;
    impl StateSource for LaggingState {
        fn current_version(
            &self,
            _s: StateScope<'_>,
        ) -> impl Future<Output = Result<StateVersion, StateError>> + Send {
            std::future::ready(Ok(StateVersion::from(7)))
        }
    }
    let w = SpyPipeline::new();
    *w.version.lock().unwrap() = 8;
    let gate = Gate {
        policy: &w.policy,
        authorizer: &w.authz,
        state: &LaggingState,
        claims: w.store.as_ref(),
        executor: &w.exec,
    };
    let p = agent("agent-1");
    let seen = StateVersion::from(7);
    let request = Request {
        principal: &p,
        scope: &toolgate::pipeline::Scope::new(w.scope.clone(), Some(seen.clone())),
        attributes: &Map::new(),
        approval: None,
        now: UnixMillis(T0),
        holder: w.holder(),
        lease: Duration::from_secs(30),
    };
    let d = block_on(decide(&gate, w.credit(1500), &request)).unwrap();
    assert_eq!(d.outcome(), Outcome::StateChanged);
    assert_eq!(d.reason(), Some(Reason::PreconditionFailed));
    assert_eq!(d.current_version().unwrap().as_str(), "8");
    assert_eq!(w.credits(), 0);
    // The claim is closed as not applied: a retry replays that, not a write.
    let row = block_on(w.store.inner.fetch(&d.key().unwrap()))
        .unwrap()
        .unwrap();
    assert_eq!(row.status, ClaimStatus::Completed);
    assert_eq!(row.result().unwrap().value().unwrap()["applied"], false);
}

#[test]
fn in_flight_then_needs_reconciliation_never_a_second_execution() {
    let w = SpyPipeline::new();
    *w.exec.mode.lock().unwrap() = ExecMode::Fail;
    let d = w.decide(w.credit(1500), 7, T0);
    assert_eq!(d.outcome(), Outcome::NeedsReconciliation);
    assert_eq!(d.reason(), Some(Reason::ExecutorFailed));
    *w.exec.mode.lock().unwrap() = ExecMode::Normal;

    // Within the lease: in flight, and nothing runs.
    let d = w.decide(w.credit(1500), 7, T0 + 1_000);
    assert_eq!(d.outcome(), Outcome::InFlight);
    assert_eq!(w.calls(), ["authorize", "state", "claim", "audit"]);

    // Past the lease (invariant 8): reconcile, never execute.
    let d = w.decide(w.credit(1500), 7, T0 + 31_000);
    assert_eq!(d.outcome(), Outcome::NeedsReconciliation);
    assert_eq!(d.reason(), Some(Reason::LeaseExpired));
    assert_eq!(w.calls(), ["authorize", "state", "claim", "audit"]);
    assert_eq!(w.credits(), 0);

    // Reconciling asks the executor and records its answer; it never runs
    // the write. "Not applied" is final for that attempt, and not a dead
    // end: the retry runs the same operation again as attempt 2,
    // authorised, read and claimed again, and executes once.
    let key = d.key().unwrap();
    w.log.lock().unwrap().clear();
    let r = block_on(reconcile(
        w.store.as_ref(),
        &w.exec,
        &key,
        "operator:ops-1",
        UnixMillis(T0 + 32_000),
    ))
    .unwrap();
    assert!(matches!(
        r,
        ReconcileReport::Recorded(ReconcileOutcome::NotApplied { .. })
    ));
    assert_eq!(
        w.calls(),
        ["fetch", "reconcile", "record_reconciliation", "audit"]
    );
    let d = w.decide(w.credit(1500), 7, T0 + 33_000);
    assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
    assert_eq!(
        w.calls(),
        ["authorize", "state", "claim", "execute", "complete"]
    );
    assert_eq!(w.credits(), 1);
    let row = block_on(w.store.fetch(&key)).unwrap().unwrap();
    assert_eq!(row.attempt, 2);
    // And a retry of that replays it: one write.
    let d = w.decide(w.credit(1500), 7, T0 + 34_000);
    assert_eq!(d.outcome(), Outcome::Replayed, "{d:?}");
    assert_eq!(w.credits(), 1);
}

/// After an attempt reconciled as not applied, a retry against a version
/// that has moved meanwhile is `state_changed` with `version_mismatch`: the
/// model must read again, and nothing is claimed or sent.
#[test]
fn after_not_applied_a_moved_version_is_version_mismatch() {
    let w = SpyPipeline::new();
    *w.exec.mode.lock().unwrap() = ExecMode::Fail;
    let d = w.decide(w.credit(1500), 7, T0);
    assert_eq!(d.reason(), Some(Reason::ExecutorFailed));
    *w.exec.mode.lock().unwrap() = ExecMode::Normal;
    let key = d.key().unwrap();
    let r = block_on(reconcile(
        w.store.as_ref(),
        &w.exec,
        &key,
        "operator:ops-1",
        UnixMillis(T0 + 32_000),
    ))
    .unwrap();
    assert!(matches!(
        r,
        ReconcileReport::Recorded(ReconcileOutcome::NotApplied { .. })
    ));
    *w.state.version.lock().unwrap() = 8;
    let d = w.decide(w.credit(1500), 7, T0 + 33_000);
    assert_eq!(d.outcome(), Outcome::StateChanged, "{d:?}");
    assert_eq!(d.reason(), Some(Reason::VersionMismatch));
    assert_eq!(w.calls(), ["authorize", "state", "fetch", "audit"]);
    assert_eq!(w.credits(), 0);
    assert_eq!(block_on(w.store.fetch(&key)).unwrap().unwrap().attempt, 1);
}

#[test]
fn completion_after_the_lease_was_taken_over_leads_to_reconciliation() {
    // Invariant 7: completion is ownership-checked; zero rows → reconcile.
    let w = SpyPipeline::new();
    *w.exec.mode.lock().unwrap() = ExecMode::LoseLease;
    let d = w.decide(w.credit(1500), 7, T0);
    assert_eq!(d.outcome(), Outcome::NeedsReconciliation, "{d:?}");
    assert_eq!(d.reason(), Some(Reason::LeaseLost));
    assert_eq!(d.result(), None);
}

/// The audit entry is written with the completion and not appended again
/// by the driver: one decision, one entry, in one write.
#[test]
fn an_entry_written_with_the_completion_is_not_appended_again() {
    let w = SpyPipeline::new();
    let d = w.decide(w.credit(1500), 7, T0);
    assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
    assert_eq!(
        w.calls(),
        ["authorize", "state", "claim", "execute", "complete"]
    );
    let trail = block_on(w.store.inner.audit_trail(&d.key().unwrap(), 10)).unwrap();
    assert_eq!(trail.len(), 1, "{trail:?}");
    assert_eq!(trail[0].outcome(), "executed");
    assert_eq!(trail[0].actor(), "agent-1");
    assert_eq!(trail[0].fingerprint(), d.fingerprint().as_ref());
}

/// An executor that completes in its own write's transaction is not
/// completed again, nor its entry appended again: the pipeline records the
/// decision it answered, and a retry is replayed from that completion.
#[test]
fn a_completion_made_with_the_write_is_not_made_again() {
    let w = SpyPipeline::new();
    *w.exec.mode.lock().unwrap() = ExecMode::Folded;
    let d = w.decide(w.credit(1500), 7, T0);
    assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
    assert_eq!(d.result().unwrap()["folded"], true);
    assert_eq!(
        w.calls(),
        ["authorize", "state", "claim", "execute_and_complete"]
    );
    let trail = block_on(w.store.inner.audit_trail(&d.key().unwrap(), 10)).unwrap();
    let outcomes: Vec<&str> = trail.iter().map(|e| e.outcome()).collect();
    assert_eq!(outcomes, ["executed"]);
    assert_eq!(trail[0].fingerprint(), d.fingerprint().as_ref());
    let again = w.decide(w.credit(1500), 7, T0 + 1);
    assert_eq!(again.outcome(), Outcome::Replayed, "{again:?}");
    assert_eq!(again.result(), d.result());
    assert_eq!(w.credits(), 1);
}

/// A folded completion that matches no row undoes its write: the decision
/// is `needs_reconciliation` (lease lost), audited once by the driver.
#[test]
fn a_folded_completion_that_matches_no_row_is_a_lost_lease() {
    let w = SpyPipeline::new();
    *w.exec.mode.lock().unwrap() = ExecMode::FoldedLoseLease;
    let d = w.decide(w.credit(1500), 7, T0);
    assert_eq!(d.outcome(), Outcome::NeedsReconciliation, "{d:?}");
    assert_eq!(d.reason(), Some(Reason::LeaseLost));
    assert_eq!(w.credits(), 0);
    let trail = block_on(w.store.inner.audit_trail(&d.key().unwrap(), 10)).unwrap();
    let outcomes: Vec<&str> = trail.iter().map(|e| e.outcome()).collect();
    assert_eq!(outcomes, ["needs_reconciliation"]);
}

/// When the completion matches no row (the lease was taken over), the
/// store writes nothing with it, and the driver appends the entry for the
/// decision it did make: `needs_reconciliation`, once.
#[test]
fn a_lost_lease_is_audited_once_as_needs_reconciliation() {
    let w = SpyPipeline::new();
    *w.exec.mode.lock().unwrap() = ExecMode::LoseLease;
    let d = w.decide(w.credit(1500), 7, T0);
    assert_eq!(d.outcome(), Outcome::NeedsReconciliation, "{d:?}");
    assert_eq!(w.calls().last().copied(), Some("audit"));
    let trail = block_on(w.store.inner.audit_trail(&d.key().unwrap(), 10)).unwrap();
    let outcomes: Vec<&str> = trail.iter().map(|e| e.outcome()).collect();
    assert_eq!(outcomes, ["needs_reconciliation"]);
}

/// A principal who lost access gets `forbidden` on every path, with no
/// recorded result or prior proposal, and no state or claim-store call
/// other than the audit append after the decision.
#[test]
fn lost_access_is_forbidden_on_every_path_and_sees_nothing() {
    let check = |w: &SpyPipeline, label: &str| {
        let d = w.decide_as(&agent("agent-x"), w.credit(1500), 7, T0 + 2_000, None);
        assert_eq!(d.outcome(), Outcome::Forbidden, "{label}: {d:?}");
        assert_eq!(d.reason(), Some(Reason::NotAuthorized), "{label}");
        assert_eq!(d.result(), None, "{label}");
        assert_eq!(d.prior(), None, "{label}");
        assert_eq!(d.key(), None, "{label}");
        assert_eq!(d.current_version(), None, "{label}");
        assert_eq!(w.calls(), ["authorize", "audit"], "{label}");
        let d2 = w.decide_as(&agent("agent-x"), w.credit(900), 7, T0 + 2_000, None);
        assert_eq!(d2.outcome(), Outcome::Forbidden, "{label} (other amount)");
        assert_eq!(d2.prior(), None, "{label}");
        assert_eq!(w.calls(), ["authorize", "audit"], "{label}");
    };

    // Fresh: no claim yet.
    let w = SpyPipeline::new();
    w.deny("agent-x");
    check(&w, "fresh");

    // Replay and conflict: agent-x had access, its credit completed, then
    // it lost access.
    let w = SpyPipeline::new();
    let d = w.decide_as(&agent("agent-x"), w.credit(1500), 7, T0, None);
    assert_eq!(d.outcome(), Outcome::Executed);
    w.deny("agent-x");
    check(&w, "replay/conflict");

    // In flight.
    let w = SpyPipeline::new();
    *w.exec.mode.lock().unwrap() = ExecMode::Fail;
    let d = w.decide_as(&agent("agent-x"), w.credit(1500), 7, T0, None);
    assert_eq!(d.outcome(), Outcome::NeedsReconciliation);
    w.deny("agent-x");
    check(&w, "in flight");
    assert_eq!(w.credits(), 0);
}

#[test]
fn authorisation_runs_before_any_state_or_claim_call_on_every_path() {
    // Each decide clears the log first, so the log is this path's calls.
    let w = SpyPipeline::new();
    for (expected, amount, now) in [
        (Outcome::Executed, 1500, T0),
        (Outcome::Replayed, 1500, T0 + 1),
        (Outcome::Conflict, 1400, T0 + 2),
    ] {
        let d = w.decide(w.credit(amount), 7, now);
        assert_eq!(d.outcome(), expected);
        assert_authorized_first(&w.calls());
    }
    let w = SpyPipeline::new();
    *w.exec.mode.lock().unwrap() = ExecMode::Fail;
    w.decide(w.credit(1500), 7, T0);
    let d = w.decide(w.credit(1500), 7, T0 + 1);
    assert_eq!(d.outcome(), Outcome::InFlight);
    assert_authorized_first(&w.calls());
}

#[test]
fn missing_capability_and_authoriser_errors_deny_before_anything_is_read() {
    let w = SpyPipeline::new();
    let clerk = Principal::new("clerk-1", ["ticket:read"]).unwrap();
    let d = w.decide_as(&clerk, w.credit(1500), 7, T0, None);
    assert_eq!(d.outcome(), Outcome::Forbidden);
    assert_eq!(d.reason(), Some(Reason::MissingCapability));
    assert_eq!(w.calls(), ["audit"]);

    *w.authz.broken.lock().unwrap() = true;
    let d = w.decide(w.credit(1500), 7, T0);
    assert_eq!(d.outcome(), Outcome::Forbidden);
    assert_eq!(d.reason(), Some(Reason::AuthorizationError));
    assert_eq!(w.calls(), ["authorize", "audit"]);
    assert_eq!(w.credits(), 0);
}

#[test]
fn a_truthy_one_is_not_a_capability() {
    let ok = Principal::from_claims(
        &json!({"id":"agent-1","capabilities":{"credit:issue":true,"refund:issue":false}}),
    )
    .unwrap();
    assert!(ok.has_capability("credit:issue"));
    assert!(!ok.has_capability("refund:issue"));
    for bad in [json!(1), json!("true"), json!("yes"), json!(null)] {
        let e =
            Principal::from_claims(&json!({"id":"agent-1","capabilities":{"credit:issue":bad}}))
                .unwrap_err();
        assert_eq!(e.pointer(), "/capabilities/credit:issue");
    }
    assert!(Principal::from_claims(&json!({"id":"a","capabilities":{},"admin":true})).is_err());
    assert!(Principal::from_claims(&json!({"id":7})).is_err());
}

#[test]
fn approval_is_bound_to_key_fingerprint_and_version() {
    let w = SpyPipeline::new();
    let p = || w.proposal("refund_order", 5000, "Refund on its way.");
    let d = w.decide(p(), 7, T0);
    assert_eq!(d.outcome(), Outcome::PendingApproval);
    assert_eq!(d.reason(), Some(Reason::ApprovalRequired));
    assert_eq!(w.calls(), ["authorize", "state", "fetch", "audit"]);
    let key = d.key().unwrap();
    let fp = d.fingerprint().unwrap();

    // An approval for other arguments does not carry over.
    let other = w
        .proposal("refund_order", 9000, "x")
        .action()
        .map(|a| *a.fingerprint())
        .unwrap();
    // A reviewer other than the proposer approves the proposal's item;
    // the grant is bound to the tool contract's digest.
    let digest = w.policy.tool("refund_order").unwrap().digest().to_owned();
    let ask = NewItem {
        reason: Some(toolgate::pipeline::Reason::ApprovalRequired),
        ..approval_request(
            "refund_order",
            key,
            fp,
            UnixMillis(T0),
            ApprovalTerms {
                policy_digest: digest.clone(),
                approvers: 1,
                expires_at: UnixMillis(T0 + 1000),
            },
        )
    };
    let Requested::Pending {
        item,
        created: true,
    } = block_on(w.store.inner.request_approval(
        ask.clone(),
        UnixMillis(T0),
        &QueueLimits::default(),
    ))
    .unwrap()
    else {
        panic!("a first request opens an item")
    };
    assert_eq!(
        approve(&w.store.inner, item, "agent-1", UnixMillis(T0)),
        Voted::SelfApproval
    );
    assert_eq!(
        approve(&w.store.inner, item, "lead", UnixMillis(T0)),
        Voted::Recorded(ItemStatus::Approved)
    );
    let grant = GrantUse {
        item,
        policy_digest: digest.clone(),
    };
    let wrong = Approval {
        key,
        fingerprint: other,
        version: StateVersion::from(7),
        grant: grant.clone(),
    };
    let d = w.decide_as(&agent("agent-1"), p(), 7, T0 + 1, Some(&wrong));
    assert_eq!(d.outcome(), Outcome::PendingApproval);
    // Nor one for another version.
    let stale = Approval {
        key,
        fingerprint: fp,
        version: StateVersion::from(6),
        grant: grant.clone(),
    };
    let d = w.decide_as(&agent("agent-1"), p(), 7, T0 + 2, Some(&stale));
    assert_eq!(d.outcome(), Outcome::PendingApproval);

    // Nor one given under another contract: the claim refuses to use it
    // and nothing is written.
    let other_policy = Approval {
        key,
        fingerprint: fp,
        version: StateVersion::from(7),
        grant: GrantUse {
            item,
            policy_digest: "another".into(),
        },
    };
    let d = w.decide_as(&agent("agent-1"), p(), 7, T0 + 3, Some(&other_policy));
    assert_eq!(d.outcome(), Outcome::PendingApproval);
    assert_eq!(w.credits(), 0);

    let good = Approval {
        key,
        fingerprint: fp,
        version: StateVersion::from(7),
        grant,
    };
    let d = w.decide_as(&agent("agent-1"), p(), 7, T0 + 3, Some(&good));
    assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
    assert_eq!(w.credits(), 1);
    // The grant was used up with the claim.
    let used = block_on(w.store.inner.item(item, UnixMillis(T0 + 4)))
        .unwrap()
        .unwrap();
    assert_eq!(used.consumed_at, Some(UnixMillis(T0 + 3)));
    // The reviewer's vote is an audit entry naming them.
    let trail = block_on(w.store.inner.audit_trail(&key, 100)).unwrap();
    assert!(
        trail
            .iter()
            .any(|e| e.actor() == "lead" && e.outcome() == "approved"),
        "{trail:?}"
    );

    // A retry without the approval replays the write and never asks a
    // person again (invariant 4): the refund moved the version, so the
    // stale read looks the claim up ...
    let d = w.decide(p(), 7, T0 + 5);
    assert_eq!(d.outcome(), Outcome::Replayed, "{d:?}");
    assert_eq!(w.calls(), ["authorize", "state", "fetch", "audit"]);
    // ... and where no state is read, the missing approval does.
    w.state.reads.store(false, Ordering::SeqCst);
    let d = w.decide(p(), 7, T0 + 6);
    assert_eq!(d.outcome(), Outcome::Replayed, "{d:?}");
    assert_eq!(w.calls(), ["authorize", "fetch", "audit"]);
    assert_eq!(w.credits(), 1);
}

/// A grant serves only its proposer (docs/design.md §14): agent-1's
/// approved refund, presented by another agent, by the reviewer who
/// approved it, or by a key acting for agent-1, claims nothing and writes
/// nothing; another agent asking for the same proposal gets an item of its
/// own; agent-1 itself uses the grant, once, and the item says so. The
/// memory store is the reference: the SQL stores run the same checks in
/// the claim's transaction (toolgate-store's grant tests).
#[test]
fn a_grant_serves_only_its_proposer() {
    let w = SpyPipeline::new();
    let p = || w.proposal("refund_order", 5000, "Refund on its way.");
    let d = w.decide(p(), 7, T0);
    let (key, fp) = (d.key().unwrap(), d.fingerprint().unwrap());
    let digest = w.policy.tool("refund_order").unwrap().digest().to_owned();
    let ask = |proposer: &str, via: Option<&str>| NewItem {
        reason: Some(toolgate::pipeline::Reason::ApprovalRequired),
        proposer: proposer.into(),
        proposer_via: via.map(str::to_owned),
        ..approval_request(
            "refund_order",
            key,
            fp,
            UnixMillis(T0),
            ApprovalTerms {
                policy_digest: digest.clone(),
                approvers: 1,
                expires_at: UnixMillis(T0 + 10_000),
            },
        )
    };
    let store = &w.store.inner;
    let limits = QueueLimits::default();
    let Requested::Pending { item, .. } =
        block_on(store.request_approval(ask("agent-1", None), UnixMillis(T0), &limits)).unwrap()
    else {
        panic!("opens")
    };
    assert_eq!(
        approve(store, item, "lead", UnixMillis(T0)),
        Voted::Recorded(ItemStatus::Approved)
    );
    // Another principal asking for the same proposal is not handed
    // agent-1's grant: it gets an item of its own.
    match block_on(store.request_approval(ask("agent-2", None), UnixMillis(T0 + 1), &limits))
        .unwrap()
    {
        Requested::Pending {
            item: theirs,
            created: true,
        } => assert_ne!(theirs, item),
        other => panic!("agent-2 was answered {other:?}"),
    }
    assert!(matches!(
        block_on(store.request_approval(ask("agent-1", None), UnixMillis(T0 + 1), &limits))
            .unwrap(),
        Requested::Granted(_)
    ));
    let approval = Approval {
        key,
        fingerprint: fp,
        version: StateVersion::from(7),
        grant: GrantUse {
            item,
            policy_digest: digest.clone(),
        },
    };
    // Presented by anyone but agent-1 as itself, the grant is refused by
    // the claim, which writes nothing.
    let service = Principal::new("svc", ["refund:issue"]).unwrap();
    for who in [
        agent("agent-2"),
        agent("lead"),
        service.acting_for("agent-1").unwrap(),
    ] {
        let d = w.decide_as(&who, p(), 7, T0 + 2, Some(&approval));
        assert_eq!(d.outcome(), Outcome::PendingApproval, "{}: {d:?}", who.id());
        assert_eq!(w.credits(), 0, "{} wrote", who.id());
    }
    let d = w.decide_as(&agent("agent-1"), p(), 7, T0 + 3, Some(&approval));
    assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
    assert_eq!(w.credits(), 1);
    let used = block_on(store.item(item, UnixMillis(T0 + 4)))
        .unwrap()
        .unwrap();
    assert_eq!(
        (used.consumed_at, used.consumed_by.as_deref()),
        (Some(UnixMillis(T0 + 3)), Some("agent-1"))
    );
}

/// A principal who voted on an item never uses its grant: the key that
/// named the proposer may not vote, and the reviewer who approved, acting
/// for the proposer through a key of their own, is not the proposer's
/// `via`. (That the claim also checks the votes itself, whatever a store
/// let in, is shown on the SQL stores, where a vote row can be written
/// directly: toolgate-store's grant tests.)
#[test]
fn a_reviewer_never_uses_the_grant_it_approved() {
    let w = SpyPipeline::new();
    let p = || w.proposal("refund_order", 5000, "Refund on its way.");
    let d = w.decide(p(), 7, T0);
    let (key, fp) = (d.key().unwrap(), d.fingerprint().unwrap());
    let digest = w.policy.tool("refund_order").unwrap().digest().to_owned();
    let store = &w.store.inner;
    // The key "lead", acting for agent-1, proposed.
    let ask = NewItem {
        proposer_via: Some("lead".into()),
        ..approval_request(
            "refund_order",
            key,
            fp,
            UnixMillis(T0),
            ApprovalTerms {
                policy_digest: digest.clone(),
                approvers: 1,
                expires_at: UnixMillis(T0 + 10_000),
            },
        )
    };
    let Requested::Pending { item, .. } =
        block_on(store.request_approval(ask, UnixMillis(T0), &QueueLimits::default())).unwrap()
    else {
        panic!("opens")
    };
    // The store refuses the key that named the proposer as a reviewer.
    assert_eq!(
        approve(store, item, "lead", UnixMillis(T0)),
        Voted::SelfApproval
    );
    assert_eq!(
        approve(store, item, "other", UnixMillis(T0)),
        Voted::Recorded(ItemStatus::Approved)
    );
    let approval = Approval {
        key,
        fingerprint: fp,
        version: StateVersion::from(7),
        grant: GrantUse {
            item,
            policy_digest: digest,
        },
    };
    // The reviewer who approved, acting for agent-1 through a key of
    // their own, cannot use it.
    let other = Principal::new("other", ["refund:issue"]).unwrap();
    let d = w.decide_as(
        &other.acting_for("agent-1").unwrap(),
        p(),
        7,
        T0 + 1,
        Some(&approval),
    );
    assert_eq!(d.outcome(), Outcome::PendingApproval, "{d:?}");
    assert_eq!(w.credits(), 0);
    let lead = Principal::new("lead", ["refund:issue"]).unwrap();
    let d = w.decide_as(
        &lead.acting_for("agent-1").unwrap(),
        p(),
        7,
        T0 + 2,
        Some(&approval),
    );
    assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
}

#[test]
fn an_expired_approval_is_not_used_and_a_new_request_opens() {
    let w = SpyPipeline::new();
    let p = || w.proposal("refund_order", 5000, "Refund on its way.");
    let d = w.decide(p(), 7, T0);
    let (key, fp) = (d.key().unwrap(), d.fingerprint().unwrap());
    let digest = w.policy.tool("refund_order").unwrap().digest().to_owned();
    let ask = approval_request(
        "refund_order",
        key,
        fp,
        UnixMillis(T0),
        ApprovalTerms {
            policy_digest: digest.clone(),
            approvers: 2,
            expires_at: UnixMillis(T0 + 100),
        },
    );
    let store = &w.store.inner;
    let Requested::Pending { item, .. } =
        block_on(store.request_approval(ask.clone(), UnixMillis(T0), &QueueLimits::default()))
            .unwrap()
    else {
        panic!("opens")
    };
    // A retry before approval finds the same item.
    assert_eq!(
        block_on(store.request_approval(ask.clone(), UnixMillis(T0 + 1), &QueueLimits::default()))
            .unwrap(),
        Requested::Pending {
            item,
            created: false
        }
    );
    // Two distinct approvers; the same one twice counts once.
    let vote = |who: &str, at: i64| approve(store, item, who, UnixMillis(at));
    assert_eq!(vote("lead", T0 + 2), Voted::Recorded(ItemStatus::Open));
    assert_eq!(vote("lead", T0 + 3), Voted::AlreadyVoted);
    assert_eq!(
        vote("second", T0 + 4),
        Voted::Recorded(ItemStatus::Approved)
    );
    // Past its expiry the approval is unusable, and the item expired.
    let late = Approval {
        key,
        fingerprint: fp,
        version: StateVersion::from(7),
        grant: GrantUse {
            item,
            policy_digest: digest,
        },
    };
    let d = w.decide_as(&agent("agent-1"), p(), 7, T0 + 100, Some(&late));
    assert_eq!(d.outcome(), Outcome::PendingApproval);
    assert_eq!(w.credits(), 0);
    match block_on(store.request_approval(ask, UnixMillis(T0 + 100), &QueueLimits::default()))
        .unwrap()
    {
        Requested::Pending {
            item: again,
            created: true,
        } => assert!(again > item),
        other => panic!("expected a new item, got {other:?}"),
    }
    let old = block_on(store.item(item, UnixMillis(T0 + 100)))
        .unwrap()
        .unwrap();
    assert_eq!(old.status, ItemStatus::Expired);
}

#[test]
fn stateless_outcomes_pass_through_untouched_but_audited() {
    let w = SpyPipeline::new();
    let body = br#"{"outcome":"answer","reply":"Your parcel is on its way."}"#;
    let d = contract::check(
        &w.policy,
        Provider::Envelope,
        body,
        &CheckOptions::default(),
    );
    let d = w.decide_as(&agent("agent-1"), d, 7, T0, None);
    assert_eq!(d.outcome(), Outcome::Answer);
    assert_eq!(d.reply(), Some("Your parcel is on its way."));
    assert_eq!(w.calls(), ["audit"]);

    // Identity never comes from the model (invariant 1): an `actor_id`
    // argument rejects the proposal before anything else runs.
    let body =
        br#"{"outcome":"action","reply":"ok","proposed_action":{"tool":"apply_goodwill_credit",
        "arguments":{"amount_minor":1500,"reason_code":"late_delivery","actor_id":"admin"}}}"#;
    let d = contract::check(
        &w.policy,
        Provider::Envelope,
        body,
        &CheckOptions::default(),
    );
    let d = w.decide_as(&agent("agent-1"), d, 7, T0, None);
    assert_eq!(d.outcome(), Outcome::Rejected);
    assert_eq!(d.reason().map(Reason::as_str), Some("unknown_key"));
    assert_eq!(w.calls(), ["audit"]);
}

#[test]
fn every_decision_is_audited_with_actor_tool_outcome_reason_key_fingerprint_time() {
    let w = SpyPipeline::new();
    let a = w.decide(w.credit(1500), 7, T0);
    let b = w.decide_as(&agent("agent-2"), w.credit(1000), 7, T0 + 10, None);
    w.deny("agent-3");
    let _ = w.decide_as(&agent("agent-3"), w.credit(1500), 7, T0 + 20, None);
    let trail = block_on(w.store.inner.audit_trail(&a.key().unwrap(), 10)).unwrap();
    assert_eq!(trail.len(), 2, "forbidden decisions carry no key");
    assert_eq!(trail[0].actor(), "agent-1");
    assert_eq!(trail[0].tool(), Some("apply_goodwill_credit"));
    assert_eq!(trail[0].outcome(), "executed");
    assert_eq!(trail[0].fingerprint(), a.fingerprint().as_ref());
    assert_eq!(trail[0].at(), UnixMillis(T0));
    assert_eq!(trail[1].actor(), "agent-2");
    assert_eq!(trail[1].outcome(), "conflict");
    assert_eq!(trail[1].fingerprint(), b.fingerprint().as_ref());
}

#[test]
fn a_missing_scope_field_rejects_without_claiming() {
    let mut w = SpyPipeline::new();
    w.scope.remove("ticket_id");
    let d = w.decide(w.credit(1500), 7, T0);
    assert_eq!(d.outcome(), Outcome::Rejected);
    assert_eq!(d.reason(), Some(Reason::MissingScope));
    assert_eq!(w.calls(), ["authorize", "audit"]);
}

/// One call through the core's whole decision ([`decide_call`]): the
/// pipeline on the spies, with the memory store as claim and review store.
fn front_call(
    w: &SpyPipeline,
    who: &Principal,
    proposal: contract::Checked,
    seen: Option<Value>,
    now: i64,
) -> Result<Settled, CallError> {
    w.log.lock().unwrap().clear();
    let gate = Gate {
        policy: &w.policy,
        authorizer: &w.authz,
        state: &w.state,
        claims: &w.store.inner,
        executor: &w.exec,
    };
    let front = Front {
        policy: &w.policy,
        pipeline: &gate,
        store: &w.store.inner,
        queue: QueueLimits::default(),
    };
    let call = Call {
        principal: who,
        proposal,
        scope: &w.scope,
        version_seen: seen.map_or(VersionSeen::Absent, VersionSeen::Given),
        attributes: &w.attributes,
        now: UnixMillis(now),
        holders: [w.holder(), w.holder()],
        lease: Duration::from_secs(30),
    };
    block_on(decide_call(&front, call))
}

/// The approval loop in the core: a proposal that needs a person opens one
/// item (asked again, the same item); a reviewer approves it; another
/// principal sending the same proposal gets an item of its own and writes
/// nothing; the proposer's retry claims with the grant, in one call, and
/// executes once; its next retry replays.
#[test]
fn the_core_decides_with_approvals_on_the_memory_review_store() {
    let w = SpyPipeline::new();
    let ana = agent("agent-1");
    let p = || w.proposal("refund_order", 5000, "Refund on its way.");
    let first = front_call(&w, &ana, p(), Some(json!(7)), T0).unwrap();
    assert_eq!(first.decision.outcome(), Outcome::PendingApproval);
    assert!(first.new_item);
    let item = first.review_item.expect("an item for the approval");
    assert_eq!(first.version_seen, Some(StateVersion::from(7)));
    // The reviewer sees the decision and the proposal's arguments.
    let shown = block_on(w.store.inner.item(item, UnixMillis(T0)))
        .unwrap()
        .unwrap();
    let toolgate::review::ItemDecision::Whole { view, arguments } = shown.decision else {
        panic!("a small decision is kept whole: {:?}", shown.decision);
    };
    assert_eq!(view.outcome, Outcome::PendingApproval);
    assert_eq!(arguments, Some(json!({"amount_minor": 5000})));

    let again = front_call(&w, &ana, p(), Some(json!("7")), T0 + 1).unwrap();
    assert_eq!(again.decision.outcome(), Outcome::PendingApproval);
    assert_eq!((again.review_item, again.new_item), (Some(item), false));

    assert_eq!(
        approve(&w.store.inner, item, "lead", UnixMillis(T0 + 2)),
        Voted::Recorded(ItemStatus::Approved)
    );
    // The grant serves only its proposer.
    let ben = agent("agent-2");
    let other = front_call(&w, &ben, p(), Some(json!(7)), T0 + 3).unwrap();
    assert_eq!(other.decision.outcome(), Outcome::PendingApproval);
    assert_ne!(other.review_item, Some(item));
    assert_eq!(w.credits(), 0);

    let used = front_call(&w, &ana, p(), Some(json!(7)), T0 + 4).unwrap();
    assert_eq!(
        used.decision.outcome(),
        Outcome::Executed,
        "{:?}",
        used.decision
    );
    assert_eq!((used.review_item, used.new_item), (Some(item), false));
    assert_eq!(w.credits(), 1);
    let consumed = block_on(w.store.inner.item(item, UnixMillis(T0 + 5)))
        .unwrap()
        .unwrap();
    assert_eq!(consumed.consumed_at, Some(UnixMillis(T0 + 4)));

    let replay = front_call(&w, &ana, p(), Some(json!(7)), T0 + 6).unwrap();
    assert_eq!(replay.decision.outcome(), Outcome::Replayed);
    assert_eq!(w.credits(), 1);
}

/// A denied proposal is `rejected` with `approval_denied`, never run.
#[test]
fn a_denial_in_the_core_rejects_the_proposal() {
    let w = SpyPipeline::new();
    let ana = agent("agent-1");
    let p = || w.proposal("refund_order", 5000, "Refund on its way.");
    let item = front_call(&w, &ana, p(), Some(json!(7)), T0)
        .unwrap()
        .review_item
        .unwrap();
    block_on(w.store.inner.vote(ReviewerAct::new(
        item,
        "lead",
        Verdict::Deny,
        UnixMillis(T0 + 1),
    )))
    .unwrap();
    let d = front_call(&w, &ana, p(), Some(json!(7)), T0 + 2).unwrap();
    assert_eq!(d.decision.outcome(), Outcome::Rejected);
    assert_eq!(d.decision.reason(), Some(Reason::ApprovalDenied));
    assert_eq!(d.review_item, Some(item));
    assert_eq!(w.credits(), 0);
}

/// What a front door could get wrong is the core's: a missing or malformed
/// version is a refusal, audited under the caller; a denial's words stay
/// out of the decision and reach the operator's note.
#[test]
fn refusals_and_concealment_are_the_cores() {
    let w = SpyPipeline::new();
    let ana = agent("agent-1");
    let missing = front_call(&w, &ana, w.credit(100), None, T0).unwrap_err();
    let CallError::Refused { refused, tool, .. } = missing else {
        panic!("{missing:?}")
    };
    assert_eq!(refused.refusal, Refusal::MissingScope);
    assert_eq!(tool.as_deref(), Some("apply_goodwill_credit"));
    for bad in [json!("07"), json!(" 7"), json!(true)] {
        let e = front_call(&w, &ana, w.credit(100), Some(bad.clone()), T0).unwrap_err();
        assert!(
            matches!(&e, CallError::Refused { refused, .. } if refused.refusal == Refusal::InvalidScope),
            "{bad}: {e:?}"
        );
    }
    let log = w.store.inner.audit_log().unwrap();
    let refusals = log
        .iter()
        .filter(|e| e.outcome() == "refused_request" && e.actor() == "agent-1")
        .count();
    assert_eq!(refusals, 4, "{log:?}");
    // Nothing was authorised, read or claimed for a refused request.
    assert!(w.calls().is_empty(), "{:?}", w.calls());
    assert_eq!(w.credits(), 0);

    w.deny("agent-1");
    let d = front_call(&w, &ana, w.credit(100), Some(json!(7)), T0 + 1).unwrap();
    assert_eq!(d.decision.outcome(), Outcome::Forbidden);
    assert_eq!(d.decision.message(), Some(FORBIDDEN_DETAIL));
    assert!(
        d.notes
            .iter()
            .any(|n| matches!(n, Note::Concealed { detail, .. }
            if detail == "not assigned to this ticket")),
        "{:?}",
        d.notes
    );
}
