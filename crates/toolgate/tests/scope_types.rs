//! Typed scope fields (docs/design.md §13): values are canonicalised by the
//! policy's `scope_types` before the operation key is built, so one resource
//! is never named two ways, and a value of the wrong type is `invalid_scope`
//! before anything is authorised, read or claimed.

mod support;

use support::{REFUND_POLICY as POLICY, block_on};

use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Map, Value, json};
use toolgate::claim::{
    ClaimRecord, HolderToken, JsonText, MemoryClaimStore, ReconcileOutcome, UnixMillis,
};
use toolgate::contract::{self, CheckOptions, Policy};
use toolgate::pipeline::{
    Authorizer, AuthzDecision, AuthzRequest, Decision, ExecError, ExecOutcome, ExecPermit,
    Executor, Gate, Outcome, Principal, Reason, Request, StateError, StateScope, StateSource,
    StateVersion, decide,
};
use toolgate::provider::Provider;

/// The refund policy with the shop in the operation key too: one untyped
/// scope field beside the typed order id.
fn policy_text() -> String {
    POLICY.replace(
        r#"["order_id", "version_seen"]"#,
        r#"["order_id", "shop", "version_seen"]"#,
    )
}

/// Records the scope every part was shown.
#[derive(Default)]
struct Seen {
    authz: Mutex<Vec<Map<String, Value>>>,
    state: Mutex<Vec<Map<String, Value>>>,
    exec: Mutex<Vec<Map<String, Value>>>,
}

impl Authorizer for Seen {
    async fn authorize(&self, r: &AuthzRequest<'_>) -> AuthzDecision {
        self.authz.lock().unwrap().push(r.scope().clone());
        AuthzDecision::Allow
    }
}

impl StateSource for Seen {
    async fn current_version(&self, s: StateScope<'_>) -> Result<StateVersion, StateError> {
        self.state.lock().unwrap().push(s.scope().clone());
        Ok(StateVersion::from(7))
    }
}

impl Executor for Seen {
    async fn execute(&self, p: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        self.exec.lock().unwrap().push(p.scope().clone());
        Ok(ExecOutcome::Applied {
            receipt: JsonText::result(r#"{"refund_id":1}"#.to_owned()).unwrap(),
        })
    }
    async fn reconcile(&self, _claim: &ClaimRecord) -> Result<ReconcileOutcome, ExecError> {
        Err(ExecError::new("not asked in these tests"))
    }
}

/// A refund pipeline whose authoriser, state source and executor record
/// the scope each was shown.
struct ScopeRecordingPipeline {
    policy: Policy,
    seen: Seen,
    store: MemoryClaimStore,
}

impl ScopeRecordingPipeline {
    fn new() -> Self {
        Self {
            policy: Policy::load(&policy_text()).unwrap(),
            seen: Seen::default(),
            store: MemoryClaimStore::new(),
        }
    }

    fn decide(&self, order_id: Value, shop: Value, holder: u8) -> Decision {
        let body = json!({"outcome":"action","reply":"Refunded.",
            "proposed_action":{"tool":"refund_order","arguments":{"amount_minor":500}}});
        let proposal = contract::check(
            &self.policy,
            Provider::Envelope,
            body.to_string().as_bytes(),
            &CheckOptions::default(),
        );
        assert_eq!(proposal.outcome(), contract::CheckOutcome::Action);
        let mut scope = Map::new();
        scope.insert("order_id".into(), order_id);
        scope.insert("shop".into(), shop);
        let principal = Principal::new("agent-1", ["refund:issue"]).unwrap();
        let seen = StateVersion::from(7);
        let gate = Gate {
            policy: &self.policy,
            authorizer: &self.seen,
            state: &self.seen,
            claims: &self.store,
            executor: &self.seen,
        };
        let scope = toolgate::pipeline::Scope::new(scope.clone(), Some(seen.clone()));
        let request = Request::plain(
            &principal,
            &scope,
            UnixMillis(1_000_000),
            HolderToken::from_bytes([holder; 16]),
            Duration::from_secs(30),
        );
        block_on(decide(&gate, proposal, &request)).unwrap()
    }
}

#[test]
fn an_integer_and_its_decimal_text_are_one_operation() {
    let w = ScopeRecordingPipeline::new();
    let first = w.decide(json!(42), json!("eu"), 1);
    assert_eq!(first.outcome(), Outcome::Executed, "{first:?}");
    let second = w.decide(json!("42"), json!("eu"), 2);
    assert_eq!(second.outcome(), Outcome::Replayed, "{second:?}");
    assert_eq!(first.key(), second.key());
    assert_eq!(w.seen.exec.lock().unwrap().len(), 1, "one write, not two");
    // Every part saw the canonical integer, never the text the request sent.
    let canonical = json!({"order_id": 42, "shop": "eu", "version_seen": "7"});
    for scope in w.seen.authz.lock().unwrap().iter() {
        assert_eq!(Value::Object(scope.clone()), canonical);
    }
    let state = w.seen.state.lock().unwrap();
    assert_eq!(Value::Object(state[0].clone()), canonical);
    let exec = w.seen.exec.lock().unwrap();
    assert_eq!(Value::Object(exec[0].clone()), canonical);
    // The proposal record stores the canonical scope too.
    let record = block_on(toolgate::claim::ClaimStore::fetch(
        &w.store,
        first.key().as_ref().unwrap(),
    ))
    .unwrap()
    .unwrap();
    let stored = toolgate::decode::decode_strict(
        record.proposal.scope().as_bytes(),
        &toolgate::decode::Limits::provider_body(),
    )
    .unwrap();
    assert_eq!(stored, canonical);
}

#[test]
fn a_value_of_the_wrong_type_is_invalid_scope_and_touches_nothing() {
    let cases = [
        (json!("042"), json!("eu")),
        (json!("4.2"), json!("eu")),
        (json!(4.2), json!("eu")),
        (json!(42.0), json!("eu")),
        (json!(true), json!("eu")),
        (json!(null), json!("eu")),
        (json!(9_007_199_254_740_992_u64), json!("eu")),
        // A string field given an integer: no silent `"42"`.
        (json!(42), json!(42)),
        (json!(42), json!("")),
    ];
    for (order_id, shop) in cases {
        let w = ScopeRecordingPipeline::new();
        let d = w.decide(order_id.clone(), shop.clone(), 1);
        assert_eq!(d.outcome(), Outcome::Rejected, "{order_id} {shop}: {d:?}");
        assert_eq!(d.reason(), Some(Reason::InvalidScope), "{order_id} {shop}");
        assert_eq!(d.reason().unwrap().as_str(), "invalid_scope");
        assert!(d.key().is_none(), "no key is built from a bad scope");
        assert!(w.seen.authz.lock().unwrap().is_empty(), "authorised anyway");
        assert!(w.seen.state.lock().unwrap().is_empty());
        assert!(w.seen.exec.lock().unwrap().is_empty());
        let trail = block_on(toolgate::claim::ClaimStore::list_stuck(
            &w.store,
            UnixMillis(i64::MAX),
            10,
        ))
        .unwrap();
        assert!(trail.is_empty(), "something was claimed");
    }
}

#[test]
fn the_policy_declares_types_only_for_key_fields_and_only_known_ones() {
    let with = |types: &str| policy_text().replace(r#"{ order_id = "integer" }"#, types);
    let unknown = Policy::load(&with(r#"{ order_id = "int" }"#)).unwrap_err();
    assert!(unknown.location.contains("scope_types"), "{unknown}");
    assert!(unknown.message.contains("unknown type"), "{unknown}");
    let stray = Policy::load(&with(r#"{ customer_id = "integer" }"#)).unwrap_err();
    assert!(stray.location.contains("scope_types"), "{stray}");
    assert!(stray.message.contains("operation_key"), "{stray}");
    // Declared, defaulted: version_seen is a version, the rest strings.
    let p = Policy::load(&with(
        r#"{ order_id = "integer", version_seen = "version" }"#,
    ))
    .unwrap();
    let t = p.tool("refund_order").unwrap();
    assert_eq!(t.scope_type("order_id").as_str(), "integer");
    assert_eq!(t.scope_type("shop").as_str(), "string");
    assert_eq!(t.scope_type("version_seen").as_str(), "version");
}
