//! A scope field the deployment takes from the caller's identity
//! (`scope.<field> = { from = "identity", claim = "principal" }` on an
//! upstream tool) is the gate's to fill, on every door. Through
//! `POST /v1/decisions` it was the caller's: a per-agent budget was paid
//! out under invented agent names, and a claim was planted on another
//! agent's operation key, whose own call then got `conflict`.

mod support;

use axum::http::StatusCode;
use serde_json::{Value, json};
use support::http::{assert_outcome, decide};
use support::*;
use toolgate::claim::ClaimStore;
use toolgate::contract::{ArgumentScopes, Policy};

/// The test deployment with the credit tool's `customer_id` taken from the
/// caller's identity, and the store behind it.
fn app() -> (
    axum::Router,
    std::sync::Arc<toolgate::claim::MemoryClaimStore>,
    DeskRef,
) {
    let desk = DeskRef::default();
    desk.set_version("t-1", "7");
    let store = SwitchStore::default();
    let inner = std::sync::Arc::clone(&store.inner);
    let mut scopes = ArgumentScopes::new();
    scopes.insert_identity("apply_goodwill_credit", "customer_id");
    let policy = Policy::load_with(POLICY, &scopes).unwrap();
    let state = new_app(
        policy,
        desk_components(&desk, store),
        keys(),
        Both::default(),
    );
    (toolgate_http::router(state), inner, desk)
}

/// A credit on t-1 at version 7 whose scope names `customer_id` only when
/// `customer` is given.
fn credit(customer: Option<&str>) -> Value {
    let mut body = credit_on_t1(500);
    let scope = body["scope"].as_object_mut().unwrap();
    scope.remove("customer_id");
    if let Some(c) = customer {
        scope.insert("customer_id".into(), json!(c));
    }
    body
}

#[tokio::test]
async fn a_caller_cannot_set_a_field_the_gate_takes_from_the_identity() {
    let (app, store, desk) = app();

    // agent-1 names php-app as the customer, to plant a claim on the
    // operation key php-app's own call will have.
    let (s, j) = decide(&app, AGENT_KEY, &credit(Some("php-app"))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{j}");
    assert_eq!(j["code"], "identity_scope_field", "{j}");
    assert!(
        j["detail"].as_str().unwrap().contains("scope.customer_id"),
        "{j}"
    );
    // Its own name is refused as well: the field is never the caller's.
    let (_, j) = decide(&app, AGENT_KEY, &credit(Some("agent-1"))).await;
    assert_eq!(j["code"], "identity_scope_field", "{j}");
    assert!(desk.0.credits.lock().unwrap().is_empty());
    let log = store.audit_log().unwrap();
    assert_eq!(
        log.iter()
            .filter(|e| e.outcome() == "refused_request"
                && e.reason() == Some("identity_scope_field")
                && e.actor() == "agent-1"
                && e.tool() == Some("apply_goodwill_credit"))
            .count(),
        2,
        "{log:?}"
    );

    // Without it, the gate fills it in: one credit for agent-1 …
    let (s, mine) = decide(&app, AGENT_KEY, &credit(None)).await;
    assert_outcome(s, &mine, StatusCode::CREATED, "executed");
    let (s, again) = decide(&app, AGENT_KEY, &credit(None)).await;
    assert_outcome(s, &again, StatusCode::OK, "replayed");
    assert_eq!(again["operation_key"], mine["operation_key"]);
    // … and php-app's identical call is an operation of its own: a permit,
    // not a conflict with agent-1's.
    let (s, theirs) = decide(&app, CLIENT_KEY, &credit(None)).await;
    assert_outcome(s, &theirs, StatusCode::OK, "permitted");
    assert_ne!(theirs["operation_key"], mine["operation_key"]);

    // The claims record the identity as the scope.
    let key = |d: &Value| {
        toolgate::claim::OperationKey::from_slice(
            &hex::decode(d["operation_key"].as_str().unwrap()).unwrap(),
        )
        .unwrap()
    };
    for (decision, who) in [(&mine, "agent-1"), (&theirs, "php-app")] {
        let claim = store.fetch(&key(decision)).await.unwrap().unwrap();
        let scope = toolgate::decode::decode_strict(
            claim.proposal.scope().as_bytes(),
            &toolgate::decode::Limits::provider_body(),
        )
        .unwrap();
        assert_eq!(scope["customer_id"], who, "{scope}");
    }
    assert_eq!(desk.0.credits.lock().unwrap().len(), 1);
}
