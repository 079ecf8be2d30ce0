//! Application-sent entities (`"entities"` in `POST /v1/decisions`,
//! docs/design.md §13): they reach the authoriser of the proposed tool and
//! nothing else; a malformed object, or a type the tool's authoriser does
//! not read, is refused before anything is decided.

mod support;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::StatusCode;
use serde_json::{Map, Value, json};
use support::http::decide;
use support::*;
use toolgate::claim::MemoryClaimStore;
use toolgate::pipeline::{Authorizer, AuthzDecision, AuthzRequest};
use toolgate_service::Parts;

/// Reads `Customer` entities from the request for the credit tool, records
/// what it was given, and allows only a `gold` customer.
#[derive(Clone, Default)]
struct TierAuthz {
    seen: Arc<Mutex<Vec<Map<String, Value>>>>,
}

impl Authorizer for TierAuthz {
    async fn authorize(&self, r: &AuthzRequest<'_>) -> AuthzDecision {
        self.seen.lock().unwrap().push(r.attributes().clone());
        match r.attributes().get("Customer").and_then(|c| c.get("tier")) {
            Some(t) if t == "gold" => AuthzDecision::Allow,
            _ => AuthzDecision::Deny {
                message: "only gold customers".into(),
            },
        }
    }

    fn accepts_request_entity(&self, tool: &str, entity_type: &str) -> bool {
        tool == "apply_goodwill_credit" && entity_type == "Customer"
    }
}

fn tier_app() -> (Router, DeskRef, TierAuthz) {
    let desk = DeskRef::default();
    desk.set_version("t-1", "7");
    let authz = TierAuthz::default();
    let components = Parts::new(
        authz.clone(),
        desk.clone(),
        MemoryClaimStore::new(),
        desk.clone(),
    );
    let state = test_state(components);
    (toolgate_http::router(state), desk, authz)
}

/// `POST /v1/decisions` as the agent: the desk's credit with `entities`.
async fn decide_with(app: &Router, entities: Value) -> (StatusCode, Value) {
    decide(app, AGENT_KEY, &with_entities(entities)).await
}

fn with_entities(entities: Value) -> Value {
    let mut body = credit_on_t1(1500);
    body["entities"] = entities;
    body
}

#[tokio::test]
async fn entities_reach_the_authoriser_and_decide() {
    let (router, desk, authz) = tier_app();
    let (s, j) = decide_with(
        &router,
        json!({"Customer": {"id": "c-1", "tier": "silver"}}),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{j}");
    assert_eq!(j["outcome"], "forbidden", "{j}");
    assert_eq!(desk.credits_for("t-1"), 0);

    let entities = json!({"Customer": {"id": "c-1", "tier": "gold",
        "flags": ["vip", "early"], "limits": {"daily": 3, "manual": false}}});
    let (s, j) = decide_with(&router, entities.clone()).await;
    assert_eq!(s, StatusCode::CREATED, "{j}");
    assert_eq!(j["outcome"], "executed", "{j}");
    assert_eq!(desk.credits_for("t-1"), 1);
    let seen = authz.seen.lock().unwrap().clone();
    assert_eq!(seen.last().cloned().map(Value::Object), Some(entities));
}

#[tokio::test]
async fn malformed_entities_are_invalid_body() {
    let (router, desk, authz) = tier_app();
    for bad in [
        json!(["Customer"]),
        json!({"Customer": "c-1"}),
        json!({"Customer": {"tier": "gold"}}),
        json!({"Customer": {"id": 7, "tier": "gold"}}),
        json!({"Customer": {"id": "", "tier": "gold"}}),
        json!({"Customer": {"id": "c-1", "tier": null}}),
        json!({"Customer": {"id": "c-1", "score": 1.5}}),
        json!({"Customer": {"id": "c-1", "tags": [1, null]}}),
        json!({"not a type": {"id": "c-1"}}),
    ] {
        let (s, j) = decide_with(&router, bad.clone()).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {j}");
        assert_eq!(j["code"], "invalid_body", "{bad}: {j}");
    }
    assert!(authz.seen.lock().unwrap().is_empty());
    assert_eq!(desk.credits_for("t-1"), 0);
}

#[tokio::test]
async fn a_type_the_tool_does_not_read_is_refused_loudly() {
    let (router, desk, authz) = tier_app();
    let (s, j) = decide_with(
        &router,
        json!({"Customer": {"id": "c-1", "tier": "gold"},
               "Agent": {"id": "agent-1", "team": "x"}}),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{j}");
    assert_eq!(j["code"], "unexpected_entities", "{j}");
    assert!(j["detail"].as_str().unwrap().contains("Agent"), "{j}");
    assert!(authz.seen.lock().unwrap().is_empty());
    assert_eq!(desk.credits_for("t-1"), 0);
}

#[tokio::test]
async fn an_authoriser_that_reads_no_entities_refuses_any() {
    // The desk's own authoriser keeps the trait's default: it reads none.
    let (router, desk) = app_router();
    desk.set_version("t-1", "7");
    let (s, j) = decide_with(&router, json!({"Customer": {"id": "c-1", "tier": "gold"}})).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{j}");
    assert_eq!(j["code"], "unexpected_entities", "{j}");
    assert_eq!(desk.credits_for("t-1"), 0);
    // Without them, the same request executes as before.
    let (s, j) = decide(&router, AGENT_KEY, &credit_on_t1(1500)).await;
    assert_eq!(s, StatusCode::CREATED, "{j}");
}
