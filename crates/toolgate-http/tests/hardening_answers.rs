//! Issue 14 hardening: the result cap on every way a result is recorded,
//! one answer to whoever does not hold a claim, and the authoriser's words
//! kept out of the answers. Each test fails on the code before it.

mod support;

use axum::Router;
use axum::http::StatusCode;
use serde_json::{Value, json};
use support::http::{
    assert_outcome, assert_problem, complete, decide, post, reconcile_applied, send,
};
use support::{
    AGENT_KEY, CLIENT_KEY, DeskRef, app_router, credit, credit_on_t1, decision_body, router_with,
    service_settings, test_state,
};
use toolgate::claim::MemoryClaimStore;
use toolgate::pipeline::{Authorizer, AuthzDecision, AuthzRequest};
use toolgate_service::Parts;

/// A client-mode permit on ticket t-1: (operation key, holder).
async fn permit(router: &Router) -> (String, String) {
    let (s, d) = decide(router, CLIENT_KEY, &credit_on_t1(1200)).await;
    assert_outcome(s, &d, StatusCode::OK, "permitted");
    let p = &d["permit"];
    (
        p["operation_key"].as_str().unwrap().to_owned(),
        p["holder"].as_str().unwrap().to_owned(),
    )
}

/// A result of about `bytes` bytes of JSON text.
fn result_of(bytes: usize) -> Value {
    json!({"receipt": "r".repeat(bytes.saturating_sub(14))})
}

#[tokio::test]
async fn a_completion_over_the_result_cap_is_refused_and_nothing_is_recorded() {
    let (router, _) = router_with(toolgate_service::Settings {
        max_result_bytes: 1000,
        ..service_settings()
    });
    let (key, holder) = permit(&router).await;
    let (s, p) = complete(&router, CLIENT_KEY, &key, &holder, &result_of(1001)).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{p}");
    assert_eq!(p["code"], "result_too_large");
    assert!(p["detail"].as_str().unwrap().contains("1000 bytes"), "{p}");
    // Nothing recorded: the claim is still in flight, and the holder can
    // still complete it with a result under the cap.
    let (s, d) = decide(&router, CLIENT_KEY, &credit_on_t1(1200)).await;
    assert_outcome(s, &d, StatusCode::CONFLICT, "in_flight");
    let small = result_of(1000);
    assert_eq!(small.to_string().len(), 1000);
    let (s, j) = complete(&router, CLIENT_KEY, &key, &holder, &small).await;
    assert_eq!(s, StatusCode::OK, "{j}");
}

#[tokio::test]
async fn an_executor_receipt_over_the_cap_is_not_recorded_and_the_claim_is_reconciled() {
    // The test desk's receipt names the credit and repeats the arguments:
    // about 80 bytes.
    let (router, desk) = router_with(toolgate_service::Settings {
        max_result_bytes: 40,
        ..service_settings()
    });
    let body = credit_on_t1(1200);
    let (s, d) = decide(&router, AGENT_KEY, &body).await;
    // The write happened downstream; the gate recorded nothing, so the
    // outcome is unknown to it: the claim stays in flight for
    // reconciliation, never executed again.
    assert_eq!(s, StatusCode::CONFLICT, "{d}");
    assert_eq!(d["outcome"], "needs_reconciliation");
    assert_eq!(d["reason"], "executor_failed");
    assert!(
        d["message"].as_str().unwrap().contains("result_too_large"),
        "{d}"
    );
    assert!(d.get("result").is_none_or(Value::is_null), "{d}");
    assert_eq!(desk.credits_for("t-1"), 1);
    let (s, again) = decide(&router, AGENT_KEY, &body).await;
    assert_outcome(s, &again, StatusCode::CONFLICT, "in_flight");
    assert_eq!(desk.credits_for("t-1"), 1, "never executed twice");
}

#[tokio::test]
async fn a_reconciliation_answer_over_the_cap_is_refused() {
    let (router, _) = router_with(toolgate_service::Settings {
        max_result_bytes: 1000,
        // Short, so the claim is past its lease after the sleep below.
        lease: std::time::Duration::from_millis(500),
        ..service_settings()
    });
    let (key, _) = permit(&router).await;
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let (s, p) = reconcile_applied(&router, &key, &result_of(5000)).await;
    assert_problem(s, &p, StatusCode::PAYLOAD_TOO_LARGE, "result_too_large");
    let (s, j) = reconcile_applied(&router, &key, &json!({"credit_id": 7})).await;
    assert_eq!(s, StatusCode::OK, "{j}");
}

/// Everything but the `instance` (which repeats the key the caller sent).
fn without_instance(mut p: Value) -> Value {
    p.as_object_mut().unwrap().remove("instance");
    p
}

#[tokio::test]
async fn whoever_does_not_hold_a_claim_gets_one_answer_whether_or_not_it_exists() {
    let (router, _) = app_router();
    let (key, holder) = permit(&router).await;
    let wrong = "00".repeat(16);
    let result = json!({"credit_id": "x"});
    let complete = |k: &str, who: &str, h: &str| {
        post(
            &format!("/v1/claims/{k}/complete"),
            who,
            &json!({"holder": h, "result": result}),
        )
    };
    let nobody = "ab".repeat(32);
    let answers = [
        // No claim has this key.
        send(&router, complete(&nobody, AGENT_KEY, &wrong)).await,
        // The claim exists; another principal, a guessed token.
        send(&router, complete(&key, AGENT_KEY, &wrong)).await,
        // The claim exists; another principal with the real token.
        send(&router, complete(&key, AGENT_KEY, &holder)).await,
        // The permit's principal with a wrong token.
        send(&router, complete(&key, CLIENT_KEY, &wrong)).await,
    ];
    let (status, first) = &answers[0];
    assert_eq!(*status, StatusCode::CONFLICT, "{first}");
    assert_eq!(first["code"], "stale_holder");
    for (s, p) in &answers[1..] {
        assert_eq!(s, status, "{p}");
        assert_eq!(without_instance(p.clone()), without_instance(first.clone()));
    }
    // The holder still completes: nothing above wrote.
    let (s, j) = send(&router, complete(&key, CLIENT_KEY, &holder)).await;
    assert_eq!(s, StatusCode::OK, "{j}");
}

/// Denies everything, in the words a real authoriser would use: a missing
/// entity is an evaluation error that names it, an existing one a policy
/// denial.
struct Wordy;

impl Authorizer for Wordy {
    async fn authorize(&self, r: &AuthzRequest<'_>) -> AuthzDecision {
        match r.scope().get("ticket_id").and_then(Value::as_str) {
            Some("t-1") => AuthzDecision::Deny {
                message: "denied by policy7 (team_only)".into(),
            },
            other => AuthzDecision::Error {
                message: format!("entity Ticket::{other:?} does not exist"),
            },
        }
    }
}

#[tokio::test]
async fn the_authorisers_words_stay_in_the_server_log_and_both_denials_read_alike() {
    let desk = DeskRef::default();
    desk.set_version("t-1", "7");
    desk.set_version("t-404", "7");
    let components = Parts::new(Wordy, desk.clone(), MemoryClaimStore::new(), desk);
    let state = test_state(components);
    let router = toolgate_http::router(state);
    let exists = decide(&router, AGENT_KEY, &credit_on_t1(100)).await;
    let missing = decide(
        &router,
        AGENT_KEY,
        &decision_body(credit(100), "t-404", "7"),
    )
    .await;
    for (s, d) in [&exists, &missing] {
        assert_eq!(*s, StatusCode::FORBIDDEN, "{d}");
        assert_eq!(d["outcome"], "forbidden");
        assert_eq!(d["reason"], "not_authorized");
        let text = d.to_string();
        for word in ["policy7", "team_only", "Ticket", "exist"] {
            assert!(!text.contains(word), "{word} reached the client: {text}");
        }
    }
    assert_eq!(
        exists, missing,
        "a denial and a missing entity must read alike"
    );
}
