//! Budgets over HTTP: a credit over a customer's daily budget is
//! `pending_approval` with `budget_exceeded`, the budget in the decision and
//! a review item; a reviewer approves it, and the proposer's own retry uses
//! the approval and executes beyond the limit.

mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::json;
use support::http::{decide, send_post};
use support::*;
use toolgate::claim::MemoryClaimStore;
use toolgate::contract::Policy;
use toolgate_http::Settings;
use tower::ServiceExt;

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
    let components = desk_components(&desk, MemoryClaimStore::new());
    let state = new_app(budget_policy(), components, keys(), Settings::default());
    let app = toolgate_http::router(state);
    for t in ["t-1", "t-2"] {
        let (s, j) = decide(&app, AGENT_KEY, &decision_body(credit(2000), t, "7")).await;
        assert_eq!(j["outcome"], "executed", "{s} {j}");
    }
    let third = decision_body(credit(2000), "t-3", "7");
    let (_, j) = decide(&app, AGENT_KEY, &third).await;
    assert_eq!(j["outcome"], "pending_approval", "{j}");
    assert_eq!(j["reason"], "budget_exceeded", "{j}");
    assert_eq!(
        j["budget"],
        json!({"name": "daily_credit_per_customer", "limit": 5000, "used": 4000,
               "remaining": 1000, "amount": 2000})
    );
    let item = j["review_item"].as_u64().expect("a review item");
    assert_eq!(desk.credits_for("t-3"), 0);

    let (s, j) = send_post(
        &app,
        &format!("/v1/review/items/{item}/approve"),
        REVIEWER_KEY,
        &json!({}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{j}");
    // Approving runs nothing; the proposer's own retry does.
    assert_eq!(desk.credits_for("t-3"), 0);
    let (_, j) = decide(&app, AGENT_KEY, &third).await;
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
