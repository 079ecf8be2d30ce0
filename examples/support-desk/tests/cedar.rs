//! The support-desk Cedar policies through the real pipeline: assignment,
//! customer, evaluation errors (a truthy `1`) and missing entities deny.

use std::future::Future;
use std::pin::pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use serde_json::{Map, Value, json};
use toolgate::claim::{
    ClaimRecord, HolderToken, JsonText, MemoryClaimStore, ReconcileOutcome, UnixMillis,
};
use toolgate::contract::{self, CheckOptions, Policy};
use toolgate::pipeline::{
    AuthzRequest, Decision, ExecError, ExecOutcome, ExecPermit, Executor, Gate, Outcome, Principal,
    Reason, Request, StateError, StateScope, StateSource, StateVersion, decide,
};
use toolgate::provider::Provider;
use toolgate_cedar::{Attr, CedarAuthorizer, EntityError, EntityRecord, EntitySource};
use toolgate_support_desk::cedar::{POLICIES, mapping};

fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("pended"),
    }
}

/// The directory: a ticket's assignee and customer, an agent's `active`.
struct Directory {
    assignee: Mutex<String>,
    customer: Mutex<String>,
    active: Mutex<Value>,
    ticket_exists: Mutex<bool>,
}

impl EntitySource for Directory {
    fn entities(
        &self,
        r: &AuthzRequest<'_>,
    ) -> impl Future<Output = Result<Vec<EntityRecord>, EntityError>> + Send {
        let agent = EntityRecord::new("Agent", r.principal().id())
            .attr("active", Attr::Value(self.active.lock().unwrap().clone()));
        let ticket = EntityRecord::new("Ticket", "t-9")
            .attr(
                "assignee",
                Attr::Entity("Agent".to_owned(), self.assignee.lock().unwrap().clone()),
            )
            .attr(
                "customer",
                Attr::Value(json!(*self.customer.lock().unwrap())),
            );
        let list = if *self.ticket_exists.lock().unwrap() {
            vec![agent, ticket]
        } else {
            vec![agent]
        };
        std::future::ready(Ok(list))
    }
}

struct Fixed;
impl StateSource for Fixed {
    fn current_version(
        &self,
        _s: StateScope<'_>,
    ) -> impl Future<Output = Result<StateVersion, StateError>> + Send {
        std::future::ready(Ok(StateVersion::from(7)))
    }
}

struct Ledger(Mutex<u32>);
impl Executor for Ledger {
    fn execute(
        &self,
        _p: ExecPermit<'_>,
    ) -> impl Future<Output = Result<ExecOutcome, ExecError>> + Send {
        *self.0.lock().unwrap() += 1;
        std::future::ready(Ok(ExecOutcome::Applied {
            receipt: JsonText::result(r#"{"applied":true}"#.into()).unwrap(),
        }))
    }
    fn reconcile(
        &self,
        _c: &ClaimRecord,
    ) -> impl Future<Output = Result<ReconcileOutcome, ExecError>> + Send {
        std::future::ready(Err(ExecError::new("not used")))
    }
}

/// The desk's credit pipeline under test: Cedar over the directory, an
/// in-memory claim store and a counting ledger.
struct CreditPipeline {
    policy: Policy,
    authz: CedarAuthorizer<Directory>,
    store: MemoryClaimStore,
    ledger: Ledger,
}

fn credit_pipeline() -> CreditPipeline {
    let text = toolgate_support_desk::POLICY;
    let dir = Directory {
        assignee: Mutex::new("agent-1".into()),
        customer: Mutex::new("c-1".into()),
        active: Mutex::new(json!(true)),
        ticket_exists: Mutex::new(true),
    };
    CreditPipeline {
        policy: Policy::load(text).unwrap(),
        authz: CedarAuthorizer::new(POLICIES, &mapping(), dir).unwrap(),
        store: MemoryClaimStore::new(),
        ledger: Ledger(Mutex::new(0)),
    }
}

fn run(w: &CreditPipeline, who: &str, customer: &str, amount: i64, n: u8) -> Decision {
    let body = json!({"outcome":"action","reply":"Credit applied.","proposed_action":{
        "tool":"apply_goodwill_credit","arguments":{"amount_minor":amount,"reason_code":"late_delivery"}}});
    let proposal = contract::check(
        &w.policy,
        Provider::Envelope,
        body.to_string().as_bytes(),
        &CheckOptions::default(),
    );
    let gate = Gate {
        policy: &w.policy,
        authorizer: &w.authz,
        state: &Fixed,
        claims: &w.store,
        executor: &w.ledger,
    };
    let principal = Principal::new(who, ["credit:issue"]).unwrap();
    let mut scope = Map::new();
    scope.insert("customer_id".into(), json!(customer));
    scope.insert("ticket_id".into(), json!("t-9"));
    let seen = StateVersion::from(7);
    let request = Request {
        principal: &principal,
        scope: &toolgate::pipeline::Scope::new(scope.clone(), Some(seen.clone())),
        attributes: &Map::new(),
        approval: None,
        now: UnixMillis(1_000 + i64::from(n)),
        holder: HolderToken::from_bytes([n; 16]),
        lease: Duration::from_secs(30),
    };
    block_on(decide(&gate, proposal, &request)).unwrap()
}

#[test]
fn the_assigned_agent_of_the_same_customer_may_credit() {
    let w = credit_pipeline();
    assert_eq!(
        run(&w, "agent-1", "c-1", 1500, 1).outcome(),
        Outcome::Executed
    );
}

#[test]
fn another_agent_or_another_customer_is_not_authorized() {
    let w = credit_pipeline();
    let d = run(&w, "agent-2", "c-1", 1500, 1);
    assert_eq!(
        (d.outcome(), d.reason()),
        (Outcome::Forbidden, Some(Reason::NotAuthorized))
    );
    let d = run(&w, "agent-1", "c-2", 1500, 2);
    assert_eq!(
        (d.outcome(), d.reason()),
        (Outcome::Forbidden, Some(Reason::NotAuthorized))
    );
    assert_eq!(*w.ledger.0.lock().unwrap(), 0);
}

#[test]
fn reassigning_the_ticket_takes_the_recorded_result_away() {
    let w = credit_pipeline();
    assert_eq!(
        run(&w, "agent-1", "c-1", 1500, 1).outcome(),
        Outcome::Executed
    );
    assert_eq!(
        run(&w, "agent-1", "c-1", 1500, 2).outcome(),
        Outcome::Replayed
    );
    *w.authz.entity_source().assignee.lock().unwrap() = "agent-2".into();
    let d = run(&w, "agent-1", "c-1", 1500, 3);
    assert_eq!(d.outcome(), Outcome::Forbidden);
    assert_eq!(d.result(), None);
    let d = run(&w, "agent-1", "c-1", 900, 4);
    assert_eq!(
        d.outcome(),
        Outcome::Forbidden,
        "a conflict would show the prior proposal"
    );
    assert_eq!(d.prior(), None);
}

#[test]
fn a_truthy_one_is_an_evaluation_error_and_denies() {
    let w = credit_pipeline();
    *w.authz.entity_source().active.lock().unwrap() = json!(1);
    let d = run(&w, "agent-1", "c-1", 1500, 1);
    assert_eq!(
        (d.outcome(), d.reason()),
        (Outcome::Forbidden, Some(Reason::AuthorizationError)),
        "{d:?}"
    );
    *w.authz.entity_source().active.lock().unwrap() = json!("true");
    let d = run(&w, "agent-1", "c-1", 1500, 2);
    assert_eq!(d.reason(), Some(Reason::AuthorizationError));
    *w.authz.entity_source().active.lock().unwrap() = json!(false);
    let d = run(&w, "agent-1", "c-1", 1500, 3);
    assert_eq!(d.reason(), Some(Reason::NotAuthorized));
    assert_eq!(*w.ledger.0.lock().unwrap(), 0);
}

#[test]
fn a_ticket_missing_from_the_directory_denies() {
    let w = credit_pipeline();
    *w.authz.entity_source().ticket_exists.lock().unwrap() = false;
    let d = run(&w, "agent-1", "c-1", 1500, 1);
    assert_eq!(d.outcome(), Outcome::Forbidden, "{d:?}");
    assert_eq!(*w.ledger.0.lock().unwrap(), 0);
}

#[test]
fn a_malformed_policy_is_a_load_error() {
    let dir = Directory {
        assignee: Mutex::new(String::new()),
        customer: Mutex::new(String::new()),
        active: Mutex::new(json!(true)),
        ticket_exists: Mutex::new(true),
    };
    assert!(
        CedarAuthorizer::new(
            "permit (principal, action, resource) when { ",
            &mapping(),
            dir
        )
        .is_err()
    );
}
