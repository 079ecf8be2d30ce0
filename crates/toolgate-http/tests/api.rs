//! The router driven with `oneshot`: statuses of docs/design.md §2, authentication,
//! idempotency keys, client-executed permits, approvals, claims operations
//! and the service endpoints.

mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};
use support::http::{
    agent_post_with_length, assert_outcome, assert_problem, chunked_body, decide, send_text as send,
};
use support::*;

fn post(path: &str, key: Option<&str>, body: &Value) -> Request<Body> {
    let mut b = Request::post(path).header(header::CONTENT_TYPE, "application/json");
    if let Some(k) = key {
        b = b.header(header::AUTHORIZATION, format!("Bearer {k}"));
    }
    b.body(Body::from(body.to_string())).unwrap()
}

fn get(path: &str, key: Option<&str>) -> Request<Body> {
    let mut b = Request::get(path);
    if let Some(k) = key {
        b = b.header(header::AUTHORIZATION, format!("Bearer {k}"));
    }
    b.body(Body::empty()).unwrap()
}

#[tokio::test]
async fn every_endpoint_but_the_probes_and_the_document_needs_a_valid_key() {
    let (router, _) = app_router();
    let (s, j, _) = send(&router, get("/healthz", None)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(j["status"], "ok");
    // The readiness probe and the document hold no secret either.
    let (s, j, _) = send(&router, get("/readyz", None)).await;
    assert_eq!((s, j["status"].as_str()), (StatusCode::OK, Some("ready")));
    let (s, j, _) = send(&router, get("/openapi.json", None)).await;
    assert_eq!(s, StatusCode::OK);
    assert!(j["openapi"].as_str().unwrap().starts_with("3."), "{j}");
    let k = "0".repeat(64);
    let protected = [
        ("GET", "/metrics".to_owned()),
        ("POST", "/v1/decisions".to_owned()),
        ("GET", "/v1/claims?stuck=true".to_owned()),
        ("POST", format!("/v1/claims/{k}/complete")),
        ("POST", format!("/v1/claims/{k}/reconcile")),
        ("GET", "/v1/review/items".to_owned()),
        ("POST", "/v1/review/items/1/approve".to_owned()),
        ("POST", "/v1/review/items/1/deny".to_owned()),
        ("POST", "/v1/review/items/1/resolve".to_owned()),
        ("POST", "/v1/review/items/1/dismiss".to_owned()),
    ];
    for (method, path) in &protected {
        for key in [None, Some("wrong-key"), Some("")] {
            let mut b = Request::builder().method(*method).uri(path);
            if let Some(k) = key {
                b = b.header(header::AUTHORIZATION, format!("Bearer {k}"));
            }
            let (s, j, _) = send(&router, b.body(Body::from("{}")).unwrap()).await;
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{method} {path} with {key:?}");
            assert_eq!(j["code"], "unauthorized");
        }
    }
    // The reviewer page answers 401 with its login form.
    let (s, _, html) = send(&router, get("/review", None)).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert!(html.contains("name=\"key\""), "{html}");
}

#[tokio::test]
async fn outcomes_map_to_the_design_statuses() {
    let (router, desk) = app_router();
    // executed 201, then the same retry replayed 200, with the same result.
    let (s, first) = decide(&router, AGENT_KEY, &credit_on_t1(1500)).await;
    assert_eq!(s, StatusCode::CREATED, "{first}");
    assert_eq!(first["outcome"], "executed");
    let (s, again) = decide(&router, AGENT_KEY, &credit_on_t1(1500)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(again["outcome"], "replayed");
    assert_eq!(again["result"], first["result"]);
    // A different amount on the same version: conflict 422 with the prior
    // proposal and its recorded result.
    let (s, c) = decide(&router, AGENT_KEY, &credit_on_t1(1900)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(c["outcome"], "conflict");
    assert_eq!(c["prior"]["arguments"]["amount_minor"], 1500);
    assert_eq!(c["result"], first["result"]);
    assert!(c["review_item"].is_u64());
    assert_eq!(desk.credits_for("t-1"), 1);
    // Stale version: state_changed 409 with both versions.
    let (s, sc) = decide(&router, AGENT_KEY, &decision_body(credit(1500), "t-2", "2")).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(sc["outcome"], "state_changed");
    assert_eq!(sc["version_seen"], "2");
    assert_eq!(sc["current_version"], "3");
    // An identity key the model slipped into the arguments: rejected 422.
    let bad = action(
        "apply_goodwill_credit",
        json!({"amount_minor": 1500, "reason_code": "late_delivery", "approved_by": "boss"}),
    );
    let (s, r) = decide(&router, AGENT_KEY, &decision_body(bad, "t-2", "3")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r["outcome"], "rejected");
    assert_eq!(r["reason"], "unknown_key");
    // No capability: forbidden 403.
    let (s, f) = decide(&router, NOCAP_KEY, &decision_body(credit(100), "t-2", "3")).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_eq!(f["outcome"], "forbidden");
    // Lost access: forbidden even for a replay, and no recorded result leaks.
    desk.0.revoked.lock().unwrap().insert("agent-1".into());
    let (s, f) = decide(&router, AGENT_KEY, &credit_on_t1(1500)).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert!(f["result"].is_null() && f["prior"].is_null(), "{f}");
    desk.0.revoked.lock().unwrap().clear();
    // Answer and abstain: 200.
    let answer = json!({"outcome": "answer", "reply": "Your parcel ships today."});
    let (s, a) = decide(
        &router,
        AGENT_KEY,
        &json!({"provider": "envelope", "response": answer}),
    )
    .await;
    assert_eq!((s, a["outcome"].as_str()), (StatusCode::OK, Some("answer")));
    let (s, a) = decide(
        &router,
        AGENT_KEY,
        &json!({"provider": "envelope", "response": "{\"outcome\":\"abstain\"}"}),
    )
    .await;
    assert_outcome(s, &a, StatusCode::OK, "abstain");
    assert_eq!(a["reply"], "A colleague will follow up.");
    // Approval needed: pending_approval 202.
    let refund = action("refund_order", json!({"amount_minor": 4000}));
    let (s, p) = decide(&router, AGENT_KEY, &decision_body(refund, "t-2", "3")).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    assert_eq!(p["outcome"], "pending_approval");
    // An executor that cannot say what happened: needs_reconciliation 409.
    *desk.0.fail_execute.lock().unwrap() = true;
    let (s, n) = decide(&router, AGENT_KEY, &decision_body(credit(700), "t-2", "3")).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(n["outcome"], "needs_reconciliation");
    // The same proposal while that claim's lease is live: in_flight 409.
    let (s, i) = decide(&router, AGENT_KEY, &decision_body(credit(700), "t-2", "3")).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(i["outcome"], "in_flight");
}

#[tokio::test]
async fn provider_stops_are_decisions_not_errors() {
    let (router, _) = app_router();
    let refusal = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [], "stop_reason": "refusal", "stop_sequence": null,
        "usage": {"input_tokens": 1, "output_tokens": 1}
    });
    let (s, d) = decide(
        &router,
        AGENT_KEY,
        &json!({"provider": "anthropic", "response": refusal}),
    )
    .await;
    assert_outcome(s, &d, StatusCode::OK, "refused");
    let cut = json!({
        "id": "msg_2", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": "I will app"}], "stop_reason": "max_tokens",
        "stop_sequence": null, "usage": {"input_tokens": 1, "output_tokens": 1}
    });
    let (s, d) = decide(
        &router,
        AGENT_KEY,
        &json!({"provider": "anthropic", "response": cut}),
    )
    .await;
    assert_outcome(s, &d, StatusCode::OK, "truncated");
}

#[tokio::test]
async fn malformed_requests_are_refused_with_stable_codes() {
    let (router, _) = app_router();
    let cases: Vec<(String, &str)> = vec![
        // Duplicate keys in the request itself (the strict decoder).
        (
            r#"{"provider":"envelope","provider":"gemini","response":{}}"#.into(),
            "invalid_body",
        ),
        // Identity in the body: no such field.
        (
            r#"{"provider":"envelope","response":{},"actor_id":"boss"}"#.into(),
            "invalid_body",
        ),
        // Identity in the scope: not a scope field of any tool.
        (
            credit_on_t1(1)
                .to_string()
                .replace("\"customer_id\"", "\"actor_id\""),
            "unknown_scope_field",
        ),
        (
            r#"{"provider":"nope","response":{}}"#.into(),
            "unknown_provider",
        ),
        (
            r#"{"provider":"envelope","response":{},"scope":{"ticket_id":true}}"#.into(),
            "invalid_scope",
        ),
        ("not json".into(), "invalid_body"),
        (
            "{\"provider\":\"envelope\",\"response\":1e999}".into(),
            "invalid_body",
        ),
    ];
    for (body, code) in cases {
        let req = Request::post("/v1/decisions")
            .header(header::AUTHORIZATION, format!("Bearer {AGENT_KEY}"))
            .body(Body::from(body.clone()))
            .unwrap();
        let (s, j, _) = send(&router, req).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(j["code"], code, "{body}: {j}");
    }
    // An action without the version the model read.
    let body = json!({"provider": "envelope", "response": credit(5), "scope": {"customer_id": "c-1", "ticket_id": "t-1"}});
    let (s, j) = decide(&router, AGENT_KEY, &body).await;
    assert_problem(s, &j, StatusCode::UNPROCESSABLE_ENTITY, "missing_scope");
}

#[tokio::test]
async fn an_oversized_body_is_413_and_the_server_keeps_serving() {
    let (router, _) = app_router();
    let big = vec![b'x'; 3 * 1024 * 1024];
    let req = agent_post_with_length(big.clone());
    let (s, _, _) = send(&router, req).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    // Streaming, without a Content-Length.
    let stream = chunked_body(big);
    let req = Request::post("/v1/decisions")
        .header(header::AUTHORIZATION, format!("Bearer {AGENT_KEY}"))
        .body(stream)
        .unwrap();
    let (s, _, _) = send(&router, req).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    let (s, _) = decide(&router, AGENT_KEY, &credit_on_t1(10)).await;
    assert_eq!(s, StatusCode::CREATED);
}

fn with_idem(key: &str, body: &Value, idem: &str) -> Request<Body> {
    Request::post("/v1/decisions")
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .header("Idempotency-Key", idem)
        .body(Body::from(body.to_string()))
        .unwrap()
}

#[tokio::test]
async fn idempotency_key_replays_and_refuses_another_payload() {
    let (router, desk) = app_router();
    let body = credit_on_t1(300);
    let (s1, j1, _) = send(&router, with_idem(AGENT_KEY, &body, "k-1")).await;
    assert_eq!(s1, StatusCode::CREATED);
    // The same key and body: the same response, byte for byte (not a
    // `replayed` decision: the first response itself).
    let (s2, j2, _) = send(&router, with_idem(AGENT_KEY, &body, "k-1")).await;
    assert_eq!((s2, &j2), (StatusCode::CREATED, &j1));
    // The same key, another body: 422.
    let other = credit_on_t1(301);
    let (s3, j3, _) = send(&router, with_idem(AGENT_KEY, &other, "k-1")).await;
    assert_eq!(s3, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(j3["code"], "idempotency_key_reused");
    // Keys are per principal: another caller's k-1 is its own.
    let (s4, j4, _) = send(&router, with_idem(CLIENT_KEY, &body, "k-1")).await;
    assert_eq!(s4, StatusCode::OK, "{j4}");
    assert_eq!(
        j4["outcome"], "replayed",
        "a different principal runs the pipeline: {j4}"
    );
    assert_eq!(desk.credits_for("t-1"), 1);
}

#[tokio::test]
async fn an_idempotency_key_replays_nothing_to_a_caller_who_lost_access() {
    // Invariant 12: the remembered 201 carries the recorded result; after
    // the agent's access is revoked, the same request with the same key is
    // authorised again and gets `forbidden`, as it would without the key.
    let (router, desk) = app_router();
    let body = credit_on_t1(300);
    let (s, j, _) = send(&router, with_idem(AGENT_KEY, &body, "k-r")).await;
    assert_eq!(s, StatusCode::CREATED, "{j}");
    desk.0.revoked.lock().unwrap().insert("agent-1".into());
    let (s, j, _) = send(&router, with_idem(AGENT_KEY, &body, "k-r")).await;
    assert_outcome(s, &j, StatusCode::FORBIDDEN, "forbidden");
    assert!(j.get("result").is_none_or(Value::is_null), "{j}");
    // Access restored: the first answer again.
    desk.0.revoked.lock().unwrap().clear();
    let (s, again, _) = send(&router, with_idem(AGENT_KEY, &body, "k-r")).await;
    assert_eq!(s, StatusCode::CREATED, "{again}");
    assert_eq!(desk.credits_for("t-1"), 1);
}

#[tokio::test]
async fn an_idempotency_key_does_not_remember_an_answer_that_is_not_final() {
    // A client holds the permit; a keyed request for the same operation is
    // `in_flight`. Once the client completes, the same keyed request must see
    // the completed operation (`replayed`), not a stale 409.
    let (router, _desk) = app_router();
    let body = credit_on_t1(1200);
    let (s, d) = decide(&router, CLIENT_KEY, &body).await;
    assert_eq!(d["outcome"], "permitted", "{s} {d}");
    let (s, j, _) = send(&router, with_idem(CLIENT_KEY, &body, "k-f")).await;
    assert_outcome(s, &j, StatusCode::CONFLICT, "in_flight");
    let key = d["permit"]["operation_key"].as_str().unwrap();
    let done = json!({"holder": d["permit"]["holder"], "result": {"refund_id": "r-1"}});
    let (s, c, _) = send(
        &router,
        post(
            &format!("/v1/claims/{key}/complete"),
            Some(CLIENT_KEY),
            &done,
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{c}");
    let (s, j, _) = send(&router, with_idem(CLIENT_KEY, &body, "k-f")).await;
    assert_outcome(s, &j, StatusCode::OK, "replayed");
    assert_eq!(j["result"]["refund_id"], "r-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::await_holding_lock,
    reason = "the point: the executor blocks on this lock while the test sends the second request"
)]
async fn idempotency_key_in_flight_is_409() {
    // Hold the first request inside the pipeline: the executor blocks on a
    // lock the test holds (one worker thread waits there).
    let (router, desk) = app_router();
    let body = credit_on_t1(300);
    let held = desk.0.credits.lock().unwrap();
    let r2 = router.clone();
    let b2 = body.clone();
    let first = tokio::spawn(async move { send(&r2, with_idem(AGENT_KEY, &b2, "k-9")).await });
    // Wait until the first request is inside the pipeline (a readiness
    // poll on the gauge, not a timed assertion).
    let mut inside = false;
    for _ in 0..5000 {
        let (_, _, m) = send(&router, get("/metrics", Some(METRICS_KEY))).await;
        if m.contains("toolgate_decisions_in_progress 1") {
            inside = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert!(inside, "the first request never reached the pipeline");
    let (s, second, _) = send(&router, with_idem(AGENT_KEY, &body, "k-9")).await;
    drop(held);
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(second["code"], "idempotency_key_in_flight");
    let (s, j, _) = first.await.unwrap();
    assert_eq!(s, StatusCode::CREATED, "{j}");
    // Finished: the key now replays the first response.
    let (s, again, _) = send(&router, with_idem(AGENT_KEY, &body, "k-9")).await;
    assert_eq!((s, &again), (StatusCode::CREATED, &j));
}

#[tokio::test]
async fn client_mode_gets_a_permit_and_completes_with_its_holder() {
    let (router, desk) = app_router();
    let (s, d) = decide(&router, CLIENT_KEY, &credit_on_t1(1200)).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_eq!(d["outcome"], "permitted");
    let permit = &d["permit"];
    assert_eq!(permit["operation_key"], d["operation_key"]);
    assert_eq!(permit["precondition_version"], "7");
    assert_eq!(permit["arguments"]["amount_minor"], 1200);
    assert_eq!(
        permit["canonical_arguments"],
        r#"{"amount_minor":1200,"reason_code":"late_delivery"}"#
    );
    assert!(permit["lease_expires_at"].as_i64().unwrap() > 0);
    assert_eq!(desk.credits_for("t-1"), 0, "the server wrote nothing");
    let key = permit["operation_key"].as_str().unwrap();
    let holder = permit["holder"].as_str().unwrap();
    let path = format!("/v1/claims/{key}/complete");
    // Before completion the same proposal is in flight.
    let (s, again) = decide(&router, CLIENT_KEY, &credit_on_t1(1200)).await;
    assert_outcome(s, &again, StatusCode::CONFLICT, "in_flight");
    // A wrong holder: 409, nothing written.
    let wrong = json!({"holder": "00".repeat(16), "result": {"refund_id": "evil"}});
    let (s, j, _) = send(&router, post(&path, Some(CLIENT_KEY), &wrong)).await;
    assert_problem(s, &j, StatusCode::CONFLICT, "stale_holder");
    // Another principal cannot complete it even with the holder, and is
    // told no more than about a claim that does not exist.
    let body = json!({"holder": holder, "result": {"credit_id": "php-1"}});
    let (s, j, _) = send(&router, post(&path, Some(AGENT_KEY), &body)).await;
    assert_problem(s, &j, StatusCode::CONFLICT, "stale_holder");
    // The holder completes.
    let (s, j, _) = send(&router, post(&path, Some(CLIENT_KEY), &body)).await;
    assert_eq!(s, StatusCode::OK, "{j}");
    assert_eq!(j["status"], "completed");
    // A second completion with the same (now stale) holder: 409.
    let body2 = json!({"holder": holder, "result": {"credit_id": "php-2"}});
    let (s, j, _) = send(&router, post(&path, Some(CLIENT_KEY), &body2)).await;
    assert_problem(s, &j, StatusCode::CONFLICT, "stale_holder");
    // A retry now replays the client's recorded result, unchanged.
    let (s, r) = decide(&router, CLIENT_KEY, &credit_on_t1(1200)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(r["outcome"], "replayed");
    assert_eq!(r["result"], json!({"credit_id": "php-1"}));
}

#[tokio::test]
async fn approval_never_runs_the_proposal_the_proposers_retry_does_once() {
    let (router, desk) = app_router();
    let (s, p) = decide(&router, AGENT_KEY, &decision_body(refund(4000), "t-1", "7")).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let item = p["review_item"].as_u64().unwrap();
    // The same proposal again: the same item, not a second one.
    let (_, p2) = decide(&router, AGENT_KEY, &decision_body(refund(4000), "t-1", "7")).await;
    assert_eq!(p2["review_item"].as_u64(), Some(item));
    // Only reviewers approve.
    let approve = format!("/v1/review/items/{item}/approve");
    let (s, j, _) = send(&router, post(&approve, Some(AGENT_KEY), &json!({}))).await;
    assert_problem(s, &j, StatusCode::FORBIDDEN, "missing_capability");
    // Approving records the vote and runs nothing (the old approve ran the
    // proposal and answered with its decision).
    let (s, j, text) = send(&router, post(&approve, Some(REVIEWER_KEY), &json!({}))).await;
    assert_eq!(s, StatusCode::OK, "{j}");
    assert_eq!(j["item"]["status"], "approved");
    assert!(
        j.get("decision").is_none() && !text.contains("holder"),
        "{text}"
    );
    assert_eq!(desk.credits_for("t-1"), 0);
    // Approved once: approving again is refused.
    let (s, j, _) = send(&router, post(&approve, Some(REVIEWER_KEY), &json!({}))).await;
    assert_problem(s, &j, StatusCode::CONFLICT, "not_pending");
    // The proposer's retry runs it, once, and uses the approval up.
    let (s, r) = decide(&router, AGENT_KEY, &decision_body(refund(4000), "t-1", "7")).await;
    assert_outcome(s, &r, StatusCode::CREATED, "executed");
    assert_eq!(r["review_item"].as_u64(), Some(item));
    assert_eq!(desk.credits_for("t-1"), 1);
    let (s, r) = decide(&router, AGENT_KEY, &decision_body(refund(4000), "t-1", "7")).await;
    assert_outcome(s, &r, StatusCode::OK, "replayed");
    assert_eq!(desk.credits_for("t-1"), 1);
    // Other arguments under the same operation: a conflict, never executed
    // on the strength of the first approval.
    let (s, c) = decide(&router, AGENT_KEY, &decision_body(refund(9000), "t-1", "7")).await;
    assert_outcome(s, &c, StatusCode::UNPROCESSABLE_ENTITY, "conflict");
    // An approval whose version moved before the retry: the retry is
    // state_changed and writes nothing.
    let (_, p) = decide(&router, AGENT_KEY, &decision_body(refund(100), "t-2", "3")).await;
    let item = p["review_item"].as_u64().unwrap();
    let approve = format!("/v1/review/items/{item}/approve");
    let (s, _, _) = send(&router, post(&approve, Some(REVIEWER_KEY), &json!({}))).await;
    assert_eq!(s, StatusCode::OK);
    desk.set_version("t-2", "4");
    let (s, r) = decide(&router, AGENT_KEY, &decision_body(refund(100), "t-2", "3")).await;
    assert_outcome(s, &r, StatusCode::CONFLICT, "state_changed");
    assert_eq!(desk.credits_for("t-2"), 0);
    // Deny: nothing runs, approving afterwards is refused, and the retry is
    // rejected with `approval_denied`.
    let (_, p) = decide(&router, AGENT_KEY, &decision_body(refund(200), "t-2", "4")).await;
    let item = p["review_item"].as_u64().unwrap();
    let (s, j, _) = send(
        &router,
        post(
            &format!("/v1/review/items/{item}/deny"),
            Some(REVIEWER_KEY),
            &json!({"note": "too much"}),
        ),
    )
    .await;
    assert_eq!(
        (s, j["item"]["status"].as_str()),
        (StatusCode::OK, Some("denied"))
    );
    assert_eq!(j["item"]["note"], "too much");
    let (s, _, _) = send(
        &router,
        post(
            &format!("/v1/review/items/{item}/approve"),
            Some(REVIEWER_KEY),
            &json!({}),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, r) = decide(&router, AGENT_KEY, &decision_body(refund(200), "t-2", "4")).await;
    assert_eq!(
        (s, r["outcome"].as_str(), r["reason"].as_str()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("rejected"),
            Some("approval_denied")
        )
    );
    assert_eq!(desk.credits_for("t-2"), 0);
    let (_, list, _) = send(&router, get("/v1/review/items", Some(REVIEWER_KEY))).await;
    let statuses: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["status"].as_str())
        .collect();
    assert!(
        statuses.contains(&"denied") && statuses.contains(&"approved"),
        "{statuses:?}"
    );
}

#[tokio::test]
async fn stuck_claims_are_listed_and_reconciled_never_executed() {
    let settings = toolgate_service::Settings {
        lease: std::time::Duration::from_millis(1),
        ..service_settings()
    };
    let (router, desk) = router_with(settings);
    // A permit whose client never comes back: stuck once the lease ends.
    let (_, d) = decide(&router, CLIENT_KEY, &credit_on_t1(50)).await;
    assert_eq!(d["outcome"], "permitted");
    let key = d["operation_key"].as_str().unwrap().to_owned();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    // Completing after the lease: refused, nothing written.
    let body = json!({"holder": d["permit"]["holder"], "result": {"late": true}});
    let (s, j, _) = send(
        &router,
        post(
            &format!("/v1/claims/{key}/complete"),
            Some(CLIENT_KEY),
            &body,
        ),
    )
    .await;
    assert_problem(s, &j, StatusCode::CONFLICT, "lease_expired");
    // The retry is needs_reconciliation, not a second execution.
    let (s, r) = decide(&router, CLIENT_KEY, &credit_on_t1(50)).await;
    assert_outcome(s, &r, StatusCode::CONFLICT, "needs_reconciliation");
    // Operators only.
    let (s, _, _) = send(&router, get("/v1/claims?stuck=true", Some(AGENT_KEY))).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, j, _) = send(&router, get("/v1/claims?stuck=true", Some(OPERATOR_KEY))).await;
    assert_eq!(s, StatusCode::OK);
    let listed = j["claims"].as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["operation_key"], key.as_str());
    assert!(
        listed[0].get("holder").is_none(),
        "a holder token is a capability: never listed"
    );
    // The client's downstream answer, reported by the operator.
    let path = format!("/v1/claims/{key}/reconcile");
    let report = json!({"applied": true, "detail": {"credit_id": "php-77"}});
    let (s, j, _) = send(&router, post(&path, Some(OPERATOR_KEY), &report)).await;
    assert_eq!(s, StatusCode::OK, "{j}");
    assert_eq!(j["status"], "reconciled_applied");
    // Twice: not stuck any more, nothing written.
    let (s, j, _) = send(&router, post(&path, Some(OPERATOR_KEY), &report)).await;
    assert_problem(s, &j, StatusCode::CONFLICT, "not_stuck");
    let (s, r) = decide(&router, CLIENT_KEY, &credit_on_t1(50)).await;
    assert_outcome(s, &r, StatusCode::OK, "replayed");
    assert_eq!(r["result"], json!({"credit_id": "php-77"}));
    assert_eq!(desk.credits_for("t-1"), 0, "the server never executed it");
    // In-process stuck claim, reconciled by asking the server's executor.
    *desk.0.fail_execute.lock().unwrap() = true;
    let (_, n) = decide(&router, AGENT_KEY, &decision_body(credit(60), "t-2", "3")).await;
    assert_eq!(n["outcome"], "needs_reconciliation");
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let k2 = n["operation_key"].as_str().unwrap();
    let req = Request::post(format!("/v1/claims/{k2}/reconcile"))
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR_KEY}"))
        .body(Body::empty())
        .unwrap();
    let (s, j, _) = send(&router, req).await;
    assert_eq!(s, StatusCode::OK, "{j}");
    assert_eq!(j["status"], "reconciled_not_applied");
}

#[tokio::test]
async fn metrics_and_openapi_describe_the_service() {
    let (router, _) = app_router();
    decide(&router, AGENT_KEY, &credit_on_t1(1)).await;
    decide(&router, CLIENT_KEY, &decision_body(credit(2), "t-2", "3")).await;
    // Scraping needs toolgate:metrics: an agent's key is refused.
    let (s, j, _) = send(&router, get("/metrics", Some(AGENT_KEY))).await;
    assert_problem(s, &j, StatusCode::FORBIDDEN, "missing_capability");
    let (s, _, text) = send(&router, get("/metrics", Some(METRICS_KEY))).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        text.contains(
            "toolgate_decisions_total{outcome=\"executed\",tool=\"apply_goodwill_credit\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "toolgate_decisions_total{outcome=\"permitted\",tool=\"apply_goodwill_credit\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("toolgate_decision_duration_seconds_bucket"),
        "{text}"
    );
    assert!(text.contains("toolgate_claims_in_flight 1"), "{text}");
    let (s, doc, _) = send(&router, get("/openapi.json", None)).await;
    assert_eq!(s, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/v1/decisions",
        "/v1/claims/{key}/complete",
        "/v1/claims",
        "/v1/claims/{key}/reconcile",
        "/healthz",
        "/metrics",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} missing");
    }
    let props = &doc["components"]["schemas"]["DecisionRequest"]["properties"];
    for field in ["provider", "response", "scope"] {
        assert!(props.get(field).is_some(), "DecisionRequest.{field}");
    }
    assert!(
        doc["components"]["schemas"]["Permit"]["properties"]
            .get("holder")
            .is_some()
    );
}
