//! Every error answer is an RFC 9457 problem: `application/problem+json`
//! with `type`, `title`, `status`, `detail` and the stable `code`, whoever
//! produced it (a handler, axum's routing and extractors, tower-http's
//! deadline and body limit). Decisions with the same statuses stay
//! `application/json` decisions.

mod support;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use support::http::{agent_post_with_length, chunked_body};
use support::*;
use tower::ServiceExt;

struct Answer {
    status: StatusCode,
    content_type: String,
    headers: axum::http::HeaderMap,
    json: Value,
}

#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
async fn send(app: &Router, req: Request<Body>) -> Answer {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer {
        status,
        content_type,
        headers,
        json,
    }
}

fn request(method: &str, path: &str, key: Option<&str>, body: Body) -> Request<Body> {
    let mut b = Request::builder().method(method).uri(path);
    if let Some(k) = key {
        b = b.header(header::AUTHORIZATION, format!("Bearer {k}"));
    }
    b.body(body).unwrap()
}

fn post(path: &str, key: &str, body: &Value) -> Request<Body> {
    request("POST", path, Some(key), Body::from(body.to_string()))
}

/// The agent's credit of 100 on ticket t-1 at version 7.
fn small_credit() -> Request<Body> {
    post("/v1/decisions", AGENT_KEY, &credit_on_t1(100))
}

fn get(path: &str, key: &str) -> Request<Body> {
    request("GET", path, Some(key), Body::empty())
}

/// Asserts `a` is a problem of `status` and `code`, with every member RFC
/// 9457 and the documentation promise.
#[track_caller]
fn assert_problem(a: &Answer, status: StatusCode, code: &str) {
    assert_eq!(a.status, status, "{code}: {}", a.json);
    assert_eq!(a.content_type, "application/problem+json", "{code}");
    let p = &a.json;
    assert_eq!(
        p["type"],
        format!("https://toolgate.dev/problems/{code}"),
        "{p}"
    );
    assert_eq!(p["code"], code, "{p}");
    assert_eq!(p["status"], status.as_u16(), "{p}");
    assert!(p["title"].as_str().is_some_and(|t| !t.is_empty()), "{p}");
    assert!(p["detail"].as_str().is_some_and(|t| !t.is_empty()), "{p}");
}

#[tokio::test]
async fn handler_errors_are_problems() {
    let (router, _) = app_router();
    // 401, with the challenge.
    let a = send(
        &router,
        request("POST", "/v1/decisions", None, Body::empty()),
    )
    .await;
    assert_problem(&a, StatusCode::UNAUTHORIZED, "unauthorized");
    assert_eq!(
        a.headers[header::WWW_AUTHENTICATE],
        "Bearer realm=\"toolgate\""
    );
    // 400: a malformed header, an operation key, a listing, a query, a path;
    // 403: a capability the key lacks; 409: reconciling a claim that is not
    // stuck; 422: a body that is not the endpoint's.
    let bad_idem = Request::post("/v1/decisions")
        .header(header::AUTHORIZATION, format!("Bearer {AGENT_KEY}"))
        .header("Idempotency-Key", "")
        .body(Body::from("{}"))
        .unwrap();
    let key = "0".repeat(64);
    let reconcile = format!("/v1/claims/{key}/reconcile");
    let cases = [
        (bad_idem, StatusCode::BAD_REQUEST, "invalid_idempotency_key"),
        (
            post("/v1/claims/zz/complete", CLIENT_KEY, &json!({})),
            StatusCode::BAD_REQUEST,
            "invalid_operation_key",
        ),
        (
            get("/v1/claims", OPERATOR_KEY),
            StatusCode::BAD_REQUEST,
            "unsupported_listing",
        ),
        (
            get("/v1/claims?stuck=maybe", OPERATOR_KEY),
            StatusCode::BAD_REQUEST,
            "invalid_query",
        ),
        (
            post("/v1/review/items/first/approve", REVIEWER_KEY, &json!({})),
            StatusCode::BAD_REQUEST,
            "invalid_path",
        ),
        (
            get("/metrics", AGENT_KEY),
            StatusCode::FORBIDDEN,
            "missing_capability",
        ),
        (
            post(&reconcile, OPERATOR_KEY, &json!({"applied": true})),
            StatusCode::CONFLICT,
            "not_stuck",
        ),
        (
            post("/v1/decisions", AGENT_KEY, &json!({"provider": "envelope"})),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
        ),
    ];
    for (req, status, code) in cases {
        assert_problem(&send(&router, req).await, status, code);
    }
    // 409: completing a claim the caller does not hold (here none exists:
    // the same answer as for another's claim) names the resource.
    let a = send(
        &router,
        post(
            &format!("/v1/claims/{key}/complete"),
            CLIENT_KEY,
            &json!({"holder": "00".repeat(16), "result": {}}),
        ),
    )
    .await;
    assert_problem(&a, StatusCode::CONFLICT, "stale_holder");
    assert_eq!(a.json["instance"], format!("/v1/claims/{key}"));
}

#[tokio::test]
async fn decisions_keep_their_json_at_error_statuses() {
    let (router, _) = app_router();
    let bad = action(
        "apply_goodwill_credit",
        json!({"amount_minor": 1500, "reason_code": "late_delivery", "approved_by": "boss"}),
    );
    let a = send(
        &router,
        post("/v1/decisions", AGENT_KEY, &decision_body(bad, "t-1", "7")),
    )
    .await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(a.content_type, "application/json");
    assert_eq!(a.json["outcome"], "rejected");
    assert!(a.json.get("type").is_none(), "{}", a.json);
}

#[tokio::test]
async fn routing_errors_are_problems() {
    let (router, _) = app_router();
    let a = send(&router, request("GET", "/v2/nothing", None, Body::empty())).await;
    assert_problem(&a, StatusCode::NOT_FOUND, "not_found");
    // 405 keeps axum's Allow header.
    let a = send(
        &router,
        request("DELETE", "/v1/decisions", None, Body::empty()),
    )
    .await;
    assert_problem(&a, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    assert_eq!(a.headers[header::ALLOW], "POST");
    // A form of the wrong media type on the reviewer page: the extractor's
    // 415, as a problem.
    let login = Request::post("/review/login")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{\"key\":\"x\"}"))
        .unwrap();
    let a = send(&router, login).await;
    assert_problem(
        &a,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    );
}

#[tokio::test]
async fn the_body_limit_is_a_problem_by_length_and_while_streaming() {
    let (router, _) = app_router();
    let big = vec![b'x'; 3 * 1024 * 1024];
    let req = agent_post_with_length(big.clone());
    let a = send(&router, req).await;
    assert_problem(&a, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
    assert!(
        a.json["detail"].as_str().unwrap().contains("2097152"),
        "{}",
        a.json
    );
    // No Content-Length: the body extractor stops at the limit.
    let stream = chunked_body(big);
    let req = Request::post("/v1/decisions")
        .header(header::AUTHORIZATION, format!("Bearer {AGENT_KEY}"))
        .body(stream)
        .unwrap();
    let a = send(&router, req).await;
    assert_problem(&a, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::await_holding_lock,
    reason = "the point: the executor blocks on this lock until the deadline has answered"
)]
async fn the_deadline_is_a_problem_and_the_decision_still_finishes() {
    let settings = toolgate_http::Settings {
        request_timeout: std::time::Duration::from_millis(50),
        ..toolgate_http::Settings::default()
    };
    let (state, desk) = app_with(settings);
    let router = toolgate_http::router(state.clone());
    // The executor waits on this lock, so the request cannot finish before
    // its deadline, however fast the machine.
    let held = desk.0.credits.lock().unwrap();
    let a = send(&router, small_credit()).await;
    drop(held);
    assert_problem(&a, StatusCode::REQUEST_TIMEOUT, "request_timeout");
    // The decision ran to its end on its own task.
    state.drain().await;
    assert_eq!(desk.credits_for("t-1"), 1);
}

#[tokio::test]
async fn a_failed_decision_task_is_a_500_problem() {
    let (router, desk) = app_router();
    *desk.0.panic_execute.lock().unwrap() = true;
    let a = send(&router, small_credit()).await;
    assert_problem(&a, StatusCode::INTERNAL_SERVER_ERROR, "internal");
}

#[tokio::test]
async fn a_store_that_does_not_answer_is_503_and_not_ready() {
    let (state, _, down) = app_with_switch();
    let router = toolgate_http::router(state);
    let a = send(&router, request("GET", "/readyz", None, Body::empty())).await;
    assert_eq!(
        (a.status, a.json["status"].as_str()),
        (StatusCode::OK, Some("ready"))
    );
    down.store(true, std::sync::atomic::Ordering::SeqCst);
    let a = send(&router, request("GET", "/readyz", None, Body::empty())).await;
    assert_problem(&a, StatusCode::SERVICE_UNAVAILABLE, "not_ready");
    // Liveness does not touch the store: the process still serves.
    let a = send(&router, request("GET", "/healthz", None, Body::empty())).await;
    assert_eq!(a.status, StatusCode::OK);
    let a = send(&router, small_credit()).await;
    assert_problem(&a, StatusCode::SERVICE_UNAVAILABLE, "store_unavailable");
    // Back up: ready again.
    down.store(false, std::sync::atomic::Ordering::SeqCst);
    let a = send(&router, request("GET", "/readyz", None, Body::empty())).await;
    assert_eq!(a.status, StatusCode::OK);
}

/// The text of docs/error-codes.md under `## {heading}`, up to the next
/// heading.
fn error_codes_section(heading: &str) -> String {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/error-codes.md"
    ))
    .unwrap();
    let start = doc
        .find(&format!("## {heading}\n"))
        .unwrap_or_else(|| panic!("docs/error-codes.md has no \"{heading}\" section"));
    let rest = &doc[start + heading.len() + 3..];
    rest[..rest.find("\n## ").unwrap_or(rest.len())].to_owned()
}

/// Every problem code has a row in `docs/error-codes.md` naming its status,
/// and every row of the HTTP table is a code the server has.
#[test]
fn every_problem_code_is_documented_with_its_status() {
    let section = error_codes_section("HTTP request errors");
    let mut rows = std::collections::BTreeMap::new();
    for line in section.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() > 3 && cells[1].starts_with('`') && cells[2].parse::<u16>().is_ok() {
            rows.insert(cells[1].trim_matches('`').to_owned(), cells[2].to_owned());
        }
    }
    for code in toolgate_http::ProblemCode::ALL {
        let status = rows.remove(code.as_str()).unwrap_or_else(|| {
            panic!(
                "docs/error-codes.md has no HTTP row for `{}`",
                code.as_str()
            )
        });
        assert_eq!(
            status,
            code.status().as_u16().to_string(),
            "{}",
            code.as_str()
        );
    }
    assert!(rows.is_empty(), "documented but not produced: {rows:?}");
}

/// The pair the sidecar sends for every pair a decision can have is the one
/// docs/error-codes.md's pairs table says: "as is", or the pair it names.
#[test]
fn every_pair_is_sent_as_the_pairs_table_says() {
    let section = error_codes_section("Decisions: outcome and reason pairs");
    for (outcome, reason) in toolgate::pipeline::decision_pairs() {
        let reason_cell = reason.map_or("—".to_owned(), |r| format!("`{}`", r.as_str()));
        let prefix = format!("| `{}` | {reason_cell} |", outcome.as_str());
        let row = section
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no pairs row starts with {prefix}"));
        let sent_cell = row
            .split('|')
            .map(str::trim)
            .nth(3)
            .unwrap_or_else(|| panic!("{row}: no HTTP column"));
        let sent = reason.map(toolgate_http::sent_reason);
        if sent == reason {
            assert!(
                sent_cell == "as is" || sent_cell.starts_with("the problem "),
                "{row}: the sidecar sends this pair as it is"
            );
        } else {
            let want = format!(
                "`{}` / `{}`",
                outcome.as_str(),
                sent.map_or("—", |r| r.as_str())
            );
            assert_eq!(sent_cell, want, "{row}");
        }
    }
}
