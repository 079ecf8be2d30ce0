//! The access log: one INFO line per request, with its route template, status,
//! latency, request id and trace id. Its own test binary: `tracing` caches
//! per call site whether anyone listens, so a test-scoped subscriber must not
//! share a process with tests that log without one.

#[path = "support/observe.rs"]
mod observe;
mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use observe::*;
use serde_json::Value;
use support::*;

/// A writer the test subscriber logs into.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The access-log lines written so far, parsed.
    #[expect(
        clippy::disallowed_methods,
        reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
    )]
    fn access_lines(&self) -> Vec<Value> {
        let bytes = self.0.lock().unwrap().clone();
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["target"] == "toolgate::access")
            .collect()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn every_request_gets_one_access_line_with_its_route_template_and_request_id() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let (app, _) = app_router();

    // A caller's id is kept and echoed; a trace context is logged.
    let body = credit_on_t1(1500);
    let req = post("/v1/decisions", AGENT_KEY)
        .header("x-request-id", "req-from-gateway-1")
        .header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .body(Body::from(body.to_string()))
        .unwrap();
    let (status, headers, _) = send(&app, req).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(headers["x-request-id"], "req-from-gateway-1");

    // No id, or one that could break a log line: a fresh one.
    let req = Request::get("/healthz")
        .header("x-request-id", "bad id with spaces")
        .body(Body::empty())
        .unwrap();
    let (_, headers, _) = send(&app, req).await;
    let fresh = headers["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(fresh.len(), 32, "{fresh}");
    assert!(fresh.bytes().all(|b| b.is_ascii_hexdigit()));

    // A path carrying an operation key is logged as its template.
    let k = "ab".repeat(32);
    let req = post(&format!("/v1/claims/{k}/complete"), CLIENT_KEY)
        .body(Body::from("{}"))
        .unwrap();
    let (status, _, _) = send(&app, req).await;
    assert!(status.is_client_error(), "{status}");
    let (status, _, _) = send(&app, get("/no/such/route", AGENT_KEY)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let lines = captured.access_lines();
    assert_eq!(lines.len(), 4, "one line per request: {lines:#?}");
    let first = &lines[0];
    assert_eq!(first["level"], "INFO");
    assert_eq!(first["method"], "POST");
    assert_eq!(first["route"], "/v1/decisions");
    assert_eq!(first["status"], 201);
    assert_eq!(first["request_id"], "req-from-gateway-1");
    assert_eq!(first["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert!(first["latency_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(lines[1]["request_id"], fresh.as_str());
    assert_eq!(lines[1]["route"], "/healthz");
    assert_eq!(lines[2]["route"], "/v1/claims/{key}/complete");
    assert!(!lines[2].to_string().contains(&k), "no raw key in the log");
    assert_eq!(lines[3]["route"], "unmatched");
    assert_eq!(lines[3]["status"], 404);
}
