//! The Cedar authoriser through the real pipeline, on a domain of its own
//! (a shop's `refund_order` on integer order ids): the mapping turns the
//! scope's resource field into the resource entity, policies see the
//! entities the application's source returns, and every evaluation error
//! or missing entity denies before the claim, so nothing is written.

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
    Authorizer, AuthzRequest, Decision, ExecError, ExecOutcome, ExecPermit, Executor, Gate,
    GateError, Outcome, Principal, Reason, Request, StateError, StateScope, StateSource,
    StateVersion, decide,
};
use toolgate::provider::Provider;
use toolgate_cedar::{Attr, CedarAuthorizer, EntityError, EntityRecord, EntitySource, Mapping};

const POLICY: &str = include_str!("../../../fixtures/policies/refund_order.toml");

/// Agents refund orders of their own team, up to the order's total.
const CEDAR: &str = r#"
permit (principal is Agent, action == Action::"refund_order", resource is Order)
when {
    principal.team == resource.team &&
    context.arguments.amount_minor <= resource.total_minor
};
"#;

fn mapping() -> Mapping {
    Mapping {
        principal_type: "Agent".to_owned(),
        resource_type: "Order".to_owned(),
        resource_field: "order_id".to_owned(),
    }
}

fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("pended"),
    }
}

/// The shop's directory: one order, its team and total, and the agents'
/// teams. Records which resource id Cedar was asked about.
struct Shop {
    order_team: Mutex<Value>,
    order_total: Mutex<Value>,
    order_exists: Mutex<bool>,
    asked_for: Mutex<Option<String>>,
    /// The directory's database is down.
    down: Mutex<bool>,
    /// The directory knows the agent (a token's person may be unknown to
    /// it, with the token's attributes as the only ones).
    agent_known: Mutex<bool>,
}

impl EntitySource for Shop {
    fn entities(
        &self,
        r: &AuthzRequest<'_>,
    ) -> impl Future<Output = Result<Vec<EntityRecord>, EntityError>> + Send {
        let order_id = r.scope().get("order_id").map(ToString::to_string);
        *self.asked_for.lock().unwrap() = order_id.clone();
        if *self.down.lock().unwrap() {
            return std::future::ready(Err(EntityError::Unavailable(
                "connection refused".to_owned(),
            )));
        }
        let agent_team = if r.principal().id() == "agent-eu" {
            "eu"
        } else {
            "us"
        };
        let mut list = Vec::new();
        if *self.agent_known.lock().unwrap() {
            list.push(
                EntityRecord::new("Agent", r.principal().id())
                    .attr("team", Attr::Value(json!(agent_team))),
            );
        }
        if *self.order_exists.lock().unwrap() {
            list.push(
                EntityRecord::new("Order", order_id.unwrap_or_default())
                    .attr("team", Attr::Value(self.order_team.lock().unwrap().clone()))
                    .attr(
                        "total_minor",
                        Attr::Value(self.order_total.lock().unwrap().clone()),
                    ),
            );
        }
        std::future::ready(Ok(list))
    }
}

impl Shop {
    /// An EU order with a total of 3000, a directory that answers.
    fn eu() -> Self {
        Shop {
            order_team: Mutex::new(json!("eu")),
            order_total: Mutex::new(json!(3000)),
            order_exists: Mutex::new(true),
            asked_for: Mutex::new(None),
            down: Mutex::new(false),
            agent_known: Mutex::new(true),
        }
    }
}

struct Fixed;
impl StateSource for Fixed {
    fn current_version(
        &self,
        _s: StateScope<'_>,
    ) -> impl Future<Output = Result<StateVersion, StateError>> + Send {
        std::future::ready(Ok(StateVersion::from(1)))
    }
}

/// Counts writes; authorisation must deny before any.
struct Refunds(Mutex<u32>);
impl Executor for Refunds {
    fn execute(
        &self,
        _p: ExecPermit<'_>,
    ) -> impl Future<Output = Result<ExecOutcome, ExecError>> + Send {
        *self.0.lock().unwrap() += 1;
        std::future::ready(Ok(ExecOutcome::Applied {
            receipt: JsonText::result(r#"{"refunded":true}"#.into()).unwrap(),
        }))
    }
    fn reconcile(
        &self,
        _c: &ClaimRecord,
    ) -> impl Future<Output = Result<ReconcileOutcome, ExecError>> + Send {
        std::future::ready(Err(ExecError::new("not used")))
    }
}

/// The refund pipeline under test: Cedar over the shop, an in-memory
/// claim store and a counting executor.
struct RefundPipeline {
    policy: Policy,
    authz: CedarAuthorizer<Shop>,
    store: MemoryClaimStore,
    refunds: Refunds,
}

fn refund_pipeline() -> RefundPipeline {
    RefundPipeline {
        policy: Policy::load(POLICY).unwrap(),
        authz: CedarAuthorizer::new(CEDAR, &mapping(), Shop::eu()).unwrap(),
        store: MemoryClaimStore::new(),
        refunds: Refunds(Mutex::new(0)),
    }
}

fn run(w: &RefundPipeline, who: &str, order: Value, amount: i64, n: u8) -> Decision {
    try_run(w, who, order, amount, n).unwrap()
}

fn try_run(
    w: &RefundPipeline,
    who: &str,
    order: Value,
    amount: i64,
    n: u8,
) -> Result<Decision, GateError> {
    try_run_with(w, &w.authz, who, order, amount, n)
}

fn try_run_with<A: Authorizer>(
    w: &RefundPipeline,
    authz: &A,
    who: &str,
    order: Value,
    amount: i64,
    n: u8,
) -> Result<Decision, GateError> {
    let principal = Principal::new(who, ["refund:issue"]).unwrap();
    try_run_as(w, authz, &principal, order, amount, n)
}

fn try_run_as<A: Authorizer>(
    w: &RefundPipeline,
    authz: &A,
    principal: &Principal,
    order: Value,
    amount: i64,
    n: u8,
) -> Result<Decision, GateError> {
    let body = json!({"outcome":"action","reply":"Refunded.","proposed_action":{
        "tool":"refund_order","arguments":{"amount_minor":amount}}});
    let proposal = contract::check(
        &w.policy,
        Provider::Envelope,
        body.to_string().as_bytes(),
        &CheckOptions::default(),
    );
    let gate = Gate {
        policy: &w.policy,
        authorizer: authz,
        state: &Fixed,
        claims: &w.store,
        executor: &w.refunds,
    };
    let mut scope = Map::new();
    scope.insert("order_id".into(), order);
    let seen = StateVersion::from(1);
    let scope = toolgate::pipeline::Scope::new(scope.clone(), Some(seen.clone()));
    let request = Request::plain(
        principal,
        &scope,
        UnixMillis(1_000 + i64::from(n)),
        HolderToken::from_bytes([n; 16]),
        Duration::from_secs(30),
    );
    block_on(decide(&gate, proposal, &request))
}

/// Authorisation denied `d`, for `reason`.
#[track_caller]
fn assert_forbidden(d: &Decision, reason: Reason) {
    assert_eq!(
        (d.outcome(), d.reason()),
        (Outcome::Forbidden, Some(reason)),
        "{d:?}"
    );
}

#[test]
fn an_agent_of_the_orders_team_may_refund_within_its_total() {
    let w = refund_pipeline();
    let d = run(&w, "agent-eu", json!(42), 1500, 1);
    assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
    // An integer resource id is the entity id's decimal digits.
    assert_eq!(
        w.authz.entity_source().asked_for.lock().unwrap().as_deref(),
        Some("42")
    );
    assert_eq!(*w.refunds.0.lock().unwrap(), 1);
}

/// A directory that does not answer is not a "no": a denial would be final
/// (and remembered by an Idempotency-Key memory) for a question nobody could
/// ask. The pipeline stops before any claim, so the same proposal executes
/// once the directory is back.
#[test]
fn an_entity_source_that_does_not_answer_decides_nothing() {
    let w = refund_pipeline();
    *w.authz.entity_source().down.lock().unwrap() = true;
    let err = try_run(&w, "agent-eu", json!(42), 1500, 1).unwrap_err();
    assert!(matches!(err, GateError::Authorizer(_)), "{err:?}");
    assert_eq!(*w.refunds.0.lock().unwrap(), 0);
    *w.authz.entity_source().down.lock().unwrap() = false;
    let d = run(&w, "agent-eu", json!(42), 1500, 2);
    assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
    assert_eq!(*w.refunds.0.lock().unwrap(), 1);
}

#[test]
fn another_team_or_more_than_the_total_is_not_authorized() {
    let w = refund_pipeline();
    let d = run(&w, "agent-us", json!(42), 1500, 1);
    assert_forbidden(&d, Reason::NotAuthorized);
    let d = run(&w, "agent-eu", json!(43), 4000, 2);
    assert_forbidden(&d, Reason::NotAuthorized);
    assert_eq!(*w.refunds.0.lock().unwrap(), 0);
}

#[test]
fn an_attribute_of_the_wrong_type_is_an_evaluation_error_and_denies() {
    let w = refund_pipeline();
    // A total stored as text: `<=` on a string is a type error in Cedar,
    // not a false comparison, and any evaluation error denies.
    *w.authz.entity_source().order_total.lock().unwrap() = json!("3000");
    let d = run(&w, "agent-eu", json!(42), 1500, 1);
    assert_forbidden(&d, Reason::AuthorizationError);
    assert_eq!(*w.refunds.0.lock().unwrap(), 0);
}

#[test]
fn an_order_the_source_does_not_know_denies() {
    let w = refund_pipeline();
    *w.authz.entity_source().order_exists.lock().unwrap() = false;
    let d = run(&w, "agent-eu", json!(42), 1500, 1);
    assert_eq!(d.outcome(), Outcome::Forbidden, "{d:?}");
    assert_eq!(*w.refunds.0.lock().unwrap(), 0);
}

/// `with_entities` evaluates the same policies over the borrowed source
/// alone: the authoriser's own source is not asked.
#[test]
fn a_borrowed_entity_source_replaces_the_own_one() {
    let w = refund_pipeline();
    *w.authz.entity_source().order_exists.lock().unwrap() = false;
    let borrowed = Shop::eu();
    let d = try_run_with(
        &w,
        &w.authz.with_entities(&borrowed),
        "agent-eu",
        json!(42),
        1500,
        1,
    )
    .unwrap();
    assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
    assert_eq!(borrowed.asked_for.lock().unwrap().as_deref(), Some("42"));
    assert_eq!(*w.authz.entity_source().asked_for.lock().unwrap(), None);
    // The same policies deny over a borrowed source that says so.
    *borrowed.order_team.lock().unwrap() = json!("us");
    let d = try_run_with(
        &w,
        &w.authz.with_entities(&borrowed),
        "agent-eu",
        json!(43),
        1500,
        2,
    )
    .unwrap();
    assert_forbidden(&d, Reason::NotAuthorized);
    assert_eq!(*w.refunds.0.lock().unwrap(), 1);
}

#[test]
fn attributes_the_principals_token_vouched_for_are_its_own() {
    let w = refund_pipeline();
    *w.authz.entity_source().agent_known.lock().unwrap() = false;
    let person = |team: Value| {
        let mut attrs = Map::new();
        attrs.insert("team".into(), team);
        Principal::new("claude-desktop", ["refund:issue"])
            .unwrap()
            .acting_for("alice")
            .unwrap()
            .with_attributes(attrs)
    };
    // The directory does not know alice: the token's team is the only one,
    // on a principal entity made for it.
    let d = try_run_as(&w, &w.authz, &person(json!("eu")), json!(50), 100, 1).unwrap();
    assert_eq!(d.outcome(), Outcome::Executed, "{d:?}");
    let d = try_run_as(&w, &w.authz, &person(json!("us")), json!(51), 100, 2).unwrap();
    assert_forbidden(&d, Reason::NotAuthorized);
    // Without the attribute, the policy cannot read it: denied.
    let bare = Principal::new("claude-desktop", ["refund:issue"])
        .unwrap()
        .acting_for("alice")
        .unwrap();
    let d = try_run_as(&w, &w.authz, &bare, json!(52), 100, 3).unwrap();
    assert_forbidden(&d, Reason::AuthorizationError);
    // The directory knows her too and says `us`: two sources for one
    // attribute is an error, which denies, whichever says `eu`.
    *w.authz.entity_source().agent_known.lock().unwrap() = true;
    let d = try_run_as(&w, &w.authz, &person(json!("eu")), json!(53), 100, 4).unwrap();
    assert_forbidden(&d, Reason::AuthorizationError);
    assert_eq!(*w.refunds.0.lock().unwrap(), 1);
    // A key's actor carries none of the key's attributes.
    assert!(
        person(json!("eu"))
            .acting_for("bob")
            .unwrap()
            .attributes()
            .is_empty()
    );
}

#[test]
fn a_malformed_policy_or_type_name_is_a_load_error() {
    let shop = Shop::eu;
    assert!(
        CedarAuthorizer::new(
            "permit (principal, action, resource) when { ",
            &mapping(),
            shop()
        )
        .is_err()
    );
    let bad = Mapping {
        resource_type: "Not A Type".to_owned(),
        ..mapping()
    };
    assert!(CedarAuthorizer::new(CEDAR, &bad, shop()).is_err());
}
