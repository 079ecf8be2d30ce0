//! The metrics: per tool, per route template, and the gauges read at scrape
//! time. (The access log has its own binary, tests/access_log.rs.)

#[path = "support/observe.rs"]
mod observe;
mod support;

use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use observe::*;
use serde_json::{Value, json};
use support::*;

/// Leases of 1 ms, so that a permit becomes a stuck claim at once.
fn short_leases() -> toolgate_service::Settings {
    toolgate_service::Settings {
        lease: Duration::from_millis(1),
        ..service_settings()
    }
}

/// The value of one Prometheus series, by its exact name and labels.
fn series(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
}

#[tokio::test(flavor = "current_thread")]
async fn metrics_count_per_tool_per_route_and_read_the_queues_at_scrape_time() {
    let (app, _) = router_with(short_leases());
    let decide = |key: &'static str, body: Value| {
        let app = app.clone();
        async move {
            let req = post("/v1/decisions", key)
                .body(Body::from(body.to_string()))
                .unwrap();
            send(&app, req).await.0
        }
    };
    assert_eq!(
        decide(AGENT_KEY, credit_on_t1(1500)).await,
        StatusCode::CREATED
    );
    // A tool the model invented is counted, but never as a label of its own.
    let invented = action("transfer_all_funds", json!({"to": "me"}));
    assert_eq!(
        decide(AGENT_KEY, decision_body(invented, "t-2", "3")).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    // A permit handed to a client whose lease (1 ms) then ends: one stuck
    // claim. A stale version: one item in the reviewer queue.
    assert_eq!(
        decide(CLIENT_KEY, decision_body(credit(900), "t-2", "3")).await,
        StatusCode::OK
    );
    assert_eq!(
        decide(AGENT_KEY, decision_body(credit(700), "t-1", "6")).await,
        StatusCode::CONFLICT
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    let _ = send(&app, get("/nowhere", AGENT_KEY)).await;

    let (status, _, text) = send(&app, get("/metrics", METRICS_KEY)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let one = |s: &str| series(&text, s).unwrap_or_else(|| panic!("no {s} in\n{text}"));
    assert_eq!(
        one(r#"toolgate_decisions_total{outcome="executed",tool="apply_goodwill_credit"}"#),
        1.0
    );
    assert_eq!(
        one(r#"toolgate_decisions_total{outcome="rejected",tool=""}"#),
        1.0
    );
    assert!(!text.contains("transfer_all_funds"), "{text}");
    assert_eq!(
        one(r#"toolgate_http_requests_total{method="POST",route="/v1/decisions",status="201"}"#),
        1.0
    );
    assert_eq!(
        one(r#"toolgate_http_requests_total{method="GET",route="unmatched",status="404"}"#),
        1.0
    );
    assert!(text.contains(
        "toolgate_http_request_duration_seconds_bucket{method=\"POST\",route=\"/v1/decisions\""
    ));
    assert_eq!(one("toolgate_claims_stuck"), 1.0);
    assert!(one("toolgate_review_queue_depth") >= 1.0);
}
