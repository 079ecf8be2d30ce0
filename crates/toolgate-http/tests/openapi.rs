//! The OpenAPI document: the served one is the committed
//! `docs/openapi.json`, and real answers of every status validate against
//! the schemas it declares for them.
//!
//! After changing a handler's declaration or a wire type, regenerate the
//! committed file with
//!
//! ```sh
//! TOOLGATE_BLESS=1 cargo test -p toolgate-http --test openapi
//! ```

mod support;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use support::http::assert_problem;
use support::*;
use tower::ServiceExt;

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json");

async fn served_text(router: &Router) -> String {
    let resp = router
        .clone()
        .oneshot(Request::get("/openapi.json").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The served document, read as JSON.
#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
async fn served_document(router: &Router) -> Value {
    serde_json::from_str(&served_text(router).await).unwrap()
}

#[tokio::test]
async fn the_served_document_is_the_committed_one() {
    let (state, _) = app();
    let served = served_text(&toolgate_http::router(state)).await;
    if std::env::var_os("TOOLGATE_BLESS").is_some() {
        std::fs::write(COMMITTED, &served).expect("write docs/openapi.json");
        return;
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    if served != committed {
        let line = served
            .lines()
            .zip(committed.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || served.lines().count().min(committed.lines().count()) + 1,
                |i| i + 1,
            );
        panic!(
            "the served OpenAPI document differs from docs/openapi.json (first at line {line}).\n\
             If the change is intended, regenerate the file:\n\
             \n    TOOLGATE_BLESS=1 cargo test -p toolgate-http --test openapi\n\
             \nand commit it with the change."
        );
    }
}

#[tokio::test]
async fn the_document_declares_the_wire_precisely() {
    let (state, _) = app();
    let doc = served_document(&toolgate_http::router(state)).await;
    let schemas = &doc["components"]["schemas"];
    // outcome and reason are enums of the documented codes.
    let outcomes = schemas["OutcomeCode"]["enum"].as_array().unwrap();
    assert_eq!(outcomes.len(), toolgate::pipeline::Outcome::ALL.len());
    for o in toolgate::pipeline::Outcome::ALL {
        assert!(outcomes.contains(&json!(o.as_str())), "{o}");
    }
    let reasons = schemas["ReasonCode"]["enum"].as_array().unwrap();
    for r in toolgate::pipeline::Reason::OWN {
        assert!(reasons.contains(&json!(r.as_str())), "{r}");
    }
    for r in toolgate::contract::RejectReason::ALL {
        assert!(reasons.contains(&json!(r.as_str())), "{}", r.as_str());
    }
    // response: an object or a string.
    let response = &schemas["DecisionRequest"]["properties"]["response"]["oneOf"];
    let kinds: Vec<&Value> = response
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["type"])
        .collect();
    assert_eq!(kinds, [&json!("object"), &json!("string")]);
    // The problem body, with its code enum.
    let codes = schemas["ProblemCode"]["enum"].as_array().unwrap();
    assert_eq!(codes.len(), toolgate_http::ProblemCode::ALL.len());
    assert!(schemas["Problem"]["properties"].get("type").is_some());
    assert!(schemas["Permit"]["properties"].get("holder").is_some());
    // Every operation answers 408 and 413 as problems; the probes and the
    // document need no key; everything else names the bearer scheme.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for status in ["408", "413"] {
                assert!(
                    op["responses"][status]["content"]
                        .get("application/problem+json")
                        .is_some(),
                    "{method} {path} {status}"
                );
            }
            let open = ["/healthz", "/readyz", "/openapi.json"].contains(&path.as_str());
            assert_eq!(op.get("security").is_none(), open, "{method} {path}");
        }
    }
}

/// One answer as the client saw it.
struct Recorded {
    method: &'static str,
    /// The route template, as the document names it.
    route: &'static str,
    status: StatusCode,
    content_type: String,
    body: Value,
}

struct Recorder {
    router: Router,
    answers: Vec<Recorded>,
}

impl Recorder {
    #[expect(
        clippy::disallowed_methods,
        reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
    )]
    async fn send(
        &mut self,
        method: &'static str,
        route: &'static str,
        path: &str,
        key: Option<&str>,
        body: Body,
    ) -> Value {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(k) = key {
            b = b.header(header::AUTHORIZATION, format!("Bearer {k}"));
        }
        let resp = self
            .router
            .clone()
            .oneshot(b.body(body).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let content_type = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        self.answers.push(Recorded {
            method,
            route,
            status,
            content_type,
            body: body.clone(),
        });
        body
    }

    async fn post(&mut self, route: &'static str, path: &str, key: &str, body: &Value) -> Value {
        self.send("POST", route, path, Some(key), Body::from(body.to_string()))
            .await
    }
}

/// The schema the document declares for `r`, with the document's
/// components beside it so that its `$ref`s resolve.
fn declared_schema(doc: &Value, r: &Recorded) -> Value {
    let media = r.content_type.split(';').next().unwrap_or("").trim();
    let schema = if r.route.is_empty() {
        // Not an operation's answer (an unknown path, a wrong method): the
        // problem body.
        json!({"$ref": "#/components/schemas/Problem"})
    } else {
        let op = &doc["paths"][r.route][r.method.to_ascii_lowercase()];
        assert!(op.is_object(), "no operation {} {}", r.method, r.route);
        let response = &op["responses"][r.status.as_str()];
        assert!(
            response.is_object(),
            "{} {} does not declare {}",
            r.method,
            r.route,
            r.status
        );
        response["content"][media]["schema"].clone()
    };
    assert!(
        !schema.is_null(),
        "{} {} {} declares no schema for {media}",
        r.method,
        r.route,
        r.status
    );
    json!({"allOf": [schema], "components": doc["components"]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::await_holding_lock,
    reason = "the executor blocks on this lock until the deadline has answered"
)]
#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
async fn answers_of_every_status_match_the_document() {
    let (state, _) = app();
    let mut r = Recorder {
        router: toolgate_http::router(state),
        answers: Vec::new(),
    };
    let doc = served_document(&r.router).await;
    let d = "/v1/decisions";

    // Service endpoints.
    r.send("GET", "/healthz", "/healthz", None, Body::empty())
        .await;
    r.send("GET", "/readyz", "/readyz", None, Body::empty())
        .await;
    r.send(
        "GET",
        "/metrics",
        "/metrics",
        Some(METRICS_KEY),
        Body::empty(),
    )
    .await;
    r.send(
        "GET",
        "/metrics",
        "/metrics",
        Some(AGENT_KEY),
        Body::empty(),
    )
    .await;
    // Decisions: 200, 201, 202, 403, 409, 422 (decision and problem), 400,
    // 401.
    let answer = json!({"provider": "envelope", "response": {"outcome": "answer", "reply": "Hi."}});
    r.post(d, d, AGENT_KEY, &answer).await;
    r.post(d, d, AGENT_KEY, &credit_on_t1(1500)).await;
    let refund = action("refund_order", json!({"amount_minor": 4000}));
    let pending = r
        .post(d, d, AGENT_KEY, &decision_body(refund, "t-1", "7"))
        .await;
    r.post(d, d, NOCAP_KEY, &decision_body(credit(100), "t-2", "3"))
        .await;
    r.post(d, d, AGENT_KEY, &decision_body(credit(100), "t-2", "2"))
        .await;
    r.post(d, d, AGENT_KEY, &credit_on_t1(1900)).await;
    r.post(
        d,
        d,
        AGENT_KEY,
        &json!({"provider": "nope", "response": {}}),
    )
    .await;
    r.send("POST", d, d, None, Body::from("{}")).await;
    let bad_idem = Request::post(d)
        .header(header::AUTHORIZATION, format!("Bearer {AGENT_KEY}"))
        .header("Idempotency-Key", "")
        .body(Body::from("{}"))
        .unwrap();
    let resp = r.router.clone().oneshot(bad_idem).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    r.answers.push(Recorded {
        method: "POST",
        route: d,
        status,
        content_type: "application/problem+json".to_owned(),
        body: serde_json::from_slice(&bytes).unwrap(),
    });
    // A permit, its completion (200), a second completion (409) and an
    // unknown claim (404).
    let complete = "/v1/claims/{key}/complete";
    let permitted = r
        .post(d, d, CLIENT_KEY, &decision_body(credit(50), "t-2", "3"))
        .await;
    let key = permitted["operation_key"].as_str().unwrap().to_owned();
    let holder = permitted["permit"]["holder"].as_str().unwrap().to_owned();
    let body = json!({"holder": holder, "result": {"credit_id": "c-1"}});
    let path = format!("/v1/claims/{key}/complete");
    r.post(complete, &path, CLIENT_KEY, &body).await;
    r.post(complete, &path, CLIENT_KEY, &body).await;
    let nobody = format!("/v1/claims/{}/complete", "0".repeat(64));
    r.post(complete, &nobody, CLIENT_KEY, &body).await;
    // A stuck claim, on a sidecar whose leases last a millisecond: listed
    // (200), reconciled (200), then not stuck any more (409).
    let short = toolgate_service::Settings {
        lease: std::time::Duration::from_millis(1),
        ..service_settings()
    };
    let (short_state, _) = app_with(short);
    let main = std::mem::replace(&mut r.router, toolgate_http::router(short_state));
    let stuck = r.post(d, d, CLIENT_KEY, &credit_on_t1(62)).await;
    let stuck_key = stuck["operation_key"].as_str().unwrap().to_owned();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    r.send(
        "GET",
        "/v1/claims",
        "/v1/claims?stuck=true",
        Some(OPERATOR_KEY),
        Body::empty(),
    )
    .await;
    let reconcile = "/v1/claims/{key}/reconcile";
    let path = format!("/v1/claims/{stuck_key}/reconcile");
    let report = json!({"applied": false, "detail": {"why": "never arrived"}});
    r.post(reconcile, &path, OPERATOR_KEY, &report).await;
    r.post(reconcile, &path, OPERATOR_KEY, &report).await;
    r.router = main;
    // The reviewer queue: list, approve (200), approve again (409), deny
    // an unknown item (404).
    r.send(
        "GET",
        "/v1/review/items",
        "/v1/review/items",
        Some(REVIEWER_KEY),
        Body::empty(),
    )
    .await;
    let item = pending["review_item"].as_u64().unwrap();
    // One item, whole (200), and an unknown one (404).
    let one = "/v1/review/items/{id}";
    r.send(
        "GET",
        one,
        &format!("/v1/review/items/{item}"),
        Some(REVIEWER_KEY),
        Body::empty(),
    )
    .await;
    r.send(
        "GET",
        one,
        "/v1/review/items/999",
        Some(REVIEWER_KEY),
        Body::empty(),
    )
    .await;
    let approve = "/v1/review/items/{id}/approve";
    let path = format!("/v1/review/items/{item}/approve");
    r.post(approve, &path, REVIEWER_KEY, &json!({})).await;
    r.post(approve, &path, REVIEWER_KEY, &json!({})).await;
    r.post(
        "/v1/review/items/{id}/deny",
        "/v1/review/items/999/deny",
        REVIEWER_KEY,
        &json!({}),
    )
    .await;
    // Resolve and dismiss: a pending approval is not theirs (409), an
    // unknown item is 404.
    r.post(
        "/v1/review/items/{id}/resolve",
        &format!("/v1/review/items/{item}/resolve"),
        REVIEWER_KEY,
        &json!({"note": "n"}),
    )
    .await;
    r.post(
        "/v1/review/items/{id}/dismiss",
        "/v1/review/items/999/dismiss",
        REVIEWER_KEY,
        &json!({}),
    )
    .await;
    // Routing: 404 and 405 (not an operation's answer).
    r.send("GET", "", "/v2/nothing", None, Body::empty()).await;
    r.send("DELETE", "", "/v1/decisions", None, Body::empty())
        .await;
    // 413 by length.
    let big = vec![b'x'; 3 * 1024 * 1024];
    r.send("POST", d, d, Some(AGENT_KEY), Body::from(big)).await;
    // 408: the executor waits on a lock the test holds past the deadline.
    let slow = toolgate_http::Settings {
        request_timeout: std::time::Duration::from_millis(50),
        ..toolgate_http::Settings::default()
    };
    let (slow_state, slow_desk) = app_with(slow);
    r.router = toolgate_http::router(slow_state);
    let held = slow_desk.0.credits.lock().unwrap();
    r.post(d, d, AGENT_KEY, &credit_on_t1(5)).await;
    drop(held);
    // 503: a store that does not answer.
    let (down_state, _, down) = app_with_switch();
    r.router = toolgate_http::router(down_state);
    down.store(true, std::sync::atomic::Ordering::SeqCst);
    r.send("GET", "/readyz", "/readyz", None, Body::empty())
        .await;
    r.post(d, d, AGENT_KEY, &credit_on_t1(5)).await;

    let mut statuses = std::collections::BTreeSet::new();
    for rec in &r.answers {
        let schema = declared_schema(&doc, rec);
        let validator = jsonschema::validator_for(&schema).unwrap_or_else(|e| {
            panic!("{} {}: schema does not compile: {e}", rec.method, rec.route)
        });
        let errors: Vec<String> = validator
            .iter_errors(&rec.body)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{} {} {} ({}) does not match the document: {errors:?}\n{}",
            rec.method,
            rec.route,
            rec.status,
            rec.content_type,
            rec.body
        );
        statuses.insert(rec.status.as_u16());
    }
    // The check has teeth: a decision is not a problem, and a member the
    // document does not declare is refused.
    let problem = declared_schema(&doc, &r.answers[r.answers.len() - 1]);
    let validator = jsonschema::validator_for(&problem).unwrap();
    assert!(!validator.is_valid(&json!({"outcome": "answer"})));
    let mut extra = r.answers[r.answers.len() - 1].body.clone();
    assert!(validator.is_valid(&extra), "{extra}");
    extra["undeclared"] = json!(1);
    assert!(!validator.is_valid(&extra));
    for status in [
        200, 201, 202, 400, 401, 403, 404, 405, 408, 409, 413, 422, 503,
    ] {
        assert!(
            statuses.contains(&status),
            "no answer with status {status} was checked"
        );
    }
}

/// One request through `router`: its status and its body as JSON.
#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
async fn call(
    router: &Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, Value) {
    let mut b = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        b = b.header(*name, *value);
    }
    let resp = router
        .clone()
        .oneshot(b.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The constraints the server enforces are in the document, made from the
/// types that enforce them, and what the document allows the server takes.
#[tokio::test]
async fn the_document_and_the_server_agree_on_requests() {
    let (router, _) = app_router();
    let doc = served_document(&router).await;
    let request = &doc["components"]["schemas"]["DecisionRequest"];
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        names(&request["properties"]["provider"]["enum"]),
        toolgate::provider::Provider::ALL.map(|p| p.as_str().to_owned())
    );
    // The deployment's scope fields and no other.
    let scope = &request["properties"]["scope"];
    assert_eq!(scope["additionalProperties"], json!(false));
    let fields: Vec<&String> = scope["properties"].as_object().unwrap().keys().collect();
    assert_eq!(fields, ["customer_id", "ticket_id", "version_seen"]);
    // Each of the type the policy gives it: here the defaults, a string
    // and a version (an integer is a version, never a customer id).
    assert_eq!(scope["properties"]["customer_id"]["type"], "string");
    assert_eq!(
        scope["properties"]["version_seen"]["oneOf"][0]["type"],
        "integer"
    );
    // A stream needs a string body from a provider that streams.
    assert_eq!(request["then"]["properties"]["response"]["type"], "string");
    // The claims' key and the stuck listing's one required value.
    let key = &doc["paths"]["/v1/claims/{key}/reconcile"]["post"]["parameters"][0];
    assert_eq!(key["required"], json!(true));
    assert_eq!(key["schema"]["pattern"], "^[0-9a-fA-F]{64}$");
    let stuck = &doc["paths"]["/v1/claims"]["get"]["parameters"][0];
    assert_eq!(
        (&stuck["name"], &stuck["required"]),
        (&json!("stuck"), &json!(true))
    );
    assert_eq!(stuck["schema"]["enum"], json!([true]));

    // A reconciliation body the server refuses, the document refuses too.
    let reconcile = json!({"allOf": [{"$ref": "#/components/schemas/ReconcileRequest"}],
        "components": doc["components"]});
    let reconcile = jsonschema::validator_for(&reconcile).unwrap();
    for (body, valid) in [
        (json!({"applied": true, "result": {"id": 1}}), true),
        (json!({"applied": false, "detail": "declined"}), true),
        (json!({"applied": true, "detail": {"id": 1}}), true),
        (json!({"applied": false, "result": {}}), false),
        (json!({"applied": true, "result": 1, "detail": 2}), false),
        (
            json!({"applied": true, "result": {"n": 9_007_199_254_740_992_u64}}),
            false,
        ),
    ] {
        assert_eq!(reconcile.is_valid(&body), valid, "{body}");
    }
    let zeros = format!("/v1/claims/{}/reconcile", "0".repeat(64));
    let op = format!("Bearer {OPERATOR_KEY}");
    let op = [
        ("authorization", op.as_str()),
        ("content-type", "application/json"),
    ];
    let (s, j) = call(
        &router,
        "POST",
        &zeros,
        &op,
        r#"{"applied": false, "result": {}}"#,
    )
    .await;
    assert_problem(s, &j, StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
    // `null`, the optional body's other spelling, asks the executor like
    // an empty body: the claim does not exist.
    for body in ["", "null"] {
        let (s, j) = call(&router, "POST", &zeros, &op, body).await;
        assert_eq!(
            (s, j["code"].as_str()),
            (StatusCode::CONFLICT, Some("not_stuck")),
            "{body:?}"
        );
    }
    // The review actions' optional body likewise; whitespace is not JSON.
    let rv = format!("Bearer {REVIEWER_KEY}");
    let rv = [
        ("authorization", rv.as_str()),
        ("content-type", "application/json"),
    ];
    for (body, code) in [
        ("null", "not_found"),
        ("", "not_found"),
        (" ", "invalid_body"),
    ] {
        let (_, j) = call(&router, "POST", "/v1/review/items/999/dismiss", &rv, body).await;
        assert_eq!(j["code"].as_str(), Some(code), "{body:?}");
    }
    // A `before` above every id lists from the newest.
    let (s, _) = call(
        &router,
        "GET",
        &format!("/v1/review/items?before={}", u64::MAX),
        &rv,
        "",
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    // Idempotency-Key: bare or quoted once, never a quote inside.
    let agent = format!("Bearer {AGENT_KEY}");
    let answer = r#"{"provider": "envelope", "response": {"outcome": "answer", "reply": "Hi."}}"#;
    for (key, status) in [
        ("k-1", StatusCode::OK),
        ("\"k-2\"", StatusCode::OK),
        ("k\"3", StatusCode::BAD_REQUEST),
        ("\"k-4", StatusCode::BAD_REQUEST),
    ] {
        let headers = [("authorization", agent.as_str()), ("idempotency-key", key)];
        let (s, j) = call(&router, "POST", "/v1/decisions", &headers, answer).await;
        assert_eq!(s, status, "{key}: {j}");
    }
    let header = &doc["paths"]["/v1/decisions"]["post"]["parameters"][0];
    let pattern = matches_pattern(header["schema"]["pattern"].as_str().unwrap());
    assert!(pattern(r#"k-1"#) && pattern(r#""k-2""#) && !pattern(r#"k"3"#) && !pattern(r#""k-4"#));
}

/// The header pattern as the document states it, checked by a JSON Schema
/// validator (which reads ECMA-262 patterns).
fn matches_pattern(pattern: &str) -> impl Fn(&str) -> bool {
    let v = jsonschema::validator_for(&json!({"type": "string", "pattern": pattern})).unwrap();
    move |s| v.is_valid(&json!(s))
}
