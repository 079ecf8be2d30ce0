//! docs/design.md §13 through the sidecar: typed scope fields, actor
//! delegation, and reconciliation routed by the executor recorded on each
//! claim.

mod support;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use support::*;
use toolgate::claim::MemoryClaimStore;
use toolgate::contract::Policy;
use toolgate_http::{AppState, Backends, Settings};
use tower::ServiceExt;

async fn send(app: &Router, req: Request<Body>) -> (StatusCode, Value) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn post(path: &str, key: &str, body: &Value) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn decide(app: &Router, key: &str, body: &Value) -> (StatusCode, Value) {
    send(app, post("/v1/decisions", key, body)).await
}

/// The test desk's policy with `ticket_id` typed as an integer.
fn typed_app() -> (Router, DeskRef) {
    let text = POLICY.replacen(
        r#"operation_key = ["customer_id", "ticket_id", "version_seen"]
needs_approval = false"#,
        r#"operation_key = ["customer_id", "ticket_id", "version_seen"]
scope_types = { ticket_id = "integer" }
needs_approval = false"#,
        1,
    );
    assert_ne!(text, POLICY, "the test policy's credit tool has changed");
    let desk = DeskRef::default();
    desk.set_version("42", "7");
    let parts = Backends {
        authorizer: desk.clone(),
        state: desk.clone(),
        claims: MemoryClaimStore::new(),
        executor: desk.clone(),
    };
    let state = AppState::new(
        Policy::load(&text).unwrap(),
        parts,
        keys(),
        Settings::default(),
    );
    (toolgate_http::router(state), desk)
}

fn scoped(ticket: Value, customer: Value, version: Value) -> Value {
    json!({
        "provider": "envelope",
        "response": credit(1500),
        "scope": {"customer_id": customer, "ticket_id": ticket, "version_seen": version}
    })
}

#[tokio::test]
async fn an_integer_field_and_its_text_make_one_operation_key() {
    let (router, desk) = typed_app();
    let (s, first) = decide(
        &router,
        AGENT_KEY,
        &scoped(json!(42), json!("c-1"), json!(7)),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{first}");
    assert_eq!(first["outcome"], "executed");
    // `"42"` for the integer field and `"7"` for the version: the same
    // operation, replayed, not a second credit.
    let (s, second) = decide(
        &router,
        AGENT_KEY,
        &scoped(json!("42"), json!("c-1"), json!("7")),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{second}");
    assert_eq!(second["outcome"], "replayed");
    assert_eq!(second["operation_key"], first["operation_key"]);
    assert_eq!(desk.credits_for("42"), 1);
}

#[tokio::test]
async fn a_scope_value_of_the_wrong_type_is_invalid_scope() {
    let (router, desk) = typed_app();
    for (ticket, customer) in [
        (json!("042"), json!("c-1")),
        (json!("4.2"), json!("c-1")),
        (json!(4.2), json!("c-1")),
        (json!(true), json!("c-1")),
        (json!(null), json!("c-1")),
        // A string field given an integer.
        (json!(42), json!(42)),
    ] {
        let (s, j) = decide(
            &router,
            AGENT_KEY,
            &scoped(ticket.clone(), customer, json!(7)),
        )
        .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{ticket}: {j}");
        assert_eq!(j["code"], "invalid_scope", "{ticket}: {j}");
    }
    // A negative version is no version.
    let (s, j) = decide(
        &router,
        AGENT_KEY,
        &scoped(json!(42), json!("c-1"), json!(-7)),
    )
    .await;
    assert_eq!(
        (s, j["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_scope"))
    );
    assert_eq!(desk.credits_for("42"), 0);
}

#[tokio::test]
async fn untyped_desk_scopes_work_as_before() {
    let (state, desk) = app();
    let router = toolgate_http::router(state);
    // Strings for the ids and an integer version, as the desk sends them.
    let body = json!({"provider": "envelope", "response": credit(1500),
        "scope": {"customer_id": "c-1", "ticket_id": "t-1", "version_seen": 7}});
    let (s, j) = decide(&router, AGENT_KEY, &body).await;
    assert_eq!(
        (s, j["outcome"].as_str()),
        (StatusCode::CREATED, Some("executed")),
        "{j}"
    );
    let (s, j) = decide(&router, AGENT_KEY, &decision_body(credit(1500), "t-1", "7")).await;
    assert_eq!(
        (s, j["outcome"].as_str()),
        (StatusCode::OK, Some("replayed")),
        "{j}"
    );
    assert_eq!(desk.credits_for("t-1"), 1);
}
