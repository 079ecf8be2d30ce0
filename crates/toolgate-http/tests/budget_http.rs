//! Budgets over HTTP (issue 16): a credit over a customer's daily budget is
//! `pending_approval` with `budget_exceeded`, the budget in the decision and
//! a review item; a reviewer approves it, and the proposer's own retry uses
//! the approval and executes beyond the limit.

mod support;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use support::*;
use toolgate::claim::MemoryClaimStore;
use toolgate::contract::Policy;
use toolgate_http::{AppState, Components, Settings};
use tower::ServiceExt;

#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
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

fn budget_policy() -> Policy {
    let marker = "\n[[tools]]\nname = \"refund_order\"";
    assert!(POLICY.contains(marker));
    Policy::load(&POLICY.replacen(
        marker,
        &format!(
            "\n[[tools.budgets]]\nname = \"daily_credit_per_customer\"\namount = \"/amount_minor\"\nper = [\"customer_id\"]\nwindow = \"day\"\nlimit = 5000\nover = \"pending_approval\"\n{marker}"
        ),
        1,
    ))
    .unwrap()
}

#[tokio::test]
async fn over_budget_goes_to_a_reviewer_and_the_approved_retry_executes() {
    let desk = DeskRef::default();
    for t in ["t-1", "t-2", "t-3"] {
        desk.set_version(t, "7");
    }
    let components = Components {
        authorizer: desk.clone(),
        state: desk.clone(),
        claims: MemoryClaimStore::new(),
        executor: desk.clone(),
    };
    let state = AppState::new(budget_policy(), components, keys(), Settings::default());
    let app = toolgate_http::router(state);
    for t in ["t-1", "t-2"] {
        let (s, j) = send(
            &app,
            post(
                "/v1/decisions",
                AGENT_KEY,
                &decision_body(credit(2000), t, "7"),
            ),
        )
        .await;
        assert_eq!(j["outcome"], "executed", "{s} {j}");
    }
    let third = decision_body(credit(2000), "t-3", "7");
    let (_, j) = send(&app, post("/v1/decisions", AGENT_KEY, &third)).await;
    assert_eq!(j["outcome"], "pending_approval", "{j}");
    assert_eq!(j["reason"], "budget_exceeded", "{j}");
    assert_eq!(
        j["budget"],
        json!({"name": "daily_credit_per_customer", "limit": 5000, "used": 4000,
               "remaining": 1000, "amount": 2000})
    );
    let item = j["review_item"].as_u64().expect("a review item");
    assert_eq!(desk.credits_for("t-3"), 0);

    let (s, j) = send(
        &app,
        post(
            &format!("/v1/review/items/{item}/approve"),
            REVIEWER_KEY,
            &json!({}),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{j}");
    // Approving runs nothing; the proposer's own retry does.
    assert_eq!(desk.credits_for("t-3"), 0);
    let (_, j) = send(&app, post("/v1/decisions", AGENT_KEY, &third)).await;
    assert_eq!(j["outcome"], "executed", "{j}");
    assert_eq!(j["reason"], "budget_exceeded_approved", "{j}");
    assert_eq!(desk.credits_for("t-3"), 1);

    // 6000 held against the 5000 limit: the gauge says so.
    let resp = app
        .clone()
        .oneshot(
            Request::get("/metrics")
                .header(header::AUTHORIZATION, format!("Bearer {METRICS_KEY}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains("toolgate_budget_reserved{budget=\"daily_credit_per_customer\"} 6000"),
        "{text}"
    );
}
