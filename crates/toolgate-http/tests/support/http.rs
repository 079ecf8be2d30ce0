//! Requests to the router in `oneshot`, as a caller with a bearer key sends
//! them, and the answers read back as JSON.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

/// The status, the body as JSON (`Null` when it is not JSON) and the body
/// as text.
#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
pub async fn send_text(app: &Router, req: Request<Body>) -> (StatusCode, Value, String) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, json, text)
}

/// The status and the body as JSON (`Null` when it is not JSON).
pub async fn send(app: &Router, req: Request<Body>) -> (StatusCode, Value) {
    let (status, json, _) = send_text(app, req).await;
    (status, json)
}

pub fn post(path: &str, key: &str, body: &Value) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .body(Body::from(body.to_string()))
        .unwrap()
}

pub fn get(path: &str, key: &str) -> Request<Body> {
    Request::get(path)
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .body(Body::empty())
        .unwrap()
}

/// `POST path` with `key` and a JSON body, answered as `send` answers.
pub async fn send_post(app: &Router, path: &str, key: &str, body: &Value) -> (StatusCode, Value) {
    send(app, post(path, key, body)).await
}

/// `POST /v1/claims/{key}/complete` as `caller`: `holder`'s `result`.
pub async fn complete(
    app: &Router,
    caller: &str,
    key: &str,
    holder: &str,
    result: &Value,
) -> (StatusCode, Value) {
    let path = format!("/v1/claims/{key}/complete");
    let body = json!({"holder": holder, "result": result});
    send_post(app, &path, caller, &body).await
}

/// `POST /v1/claims/{key}/reconcile` as the operator: applied, with `result`.
pub async fn reconcile_applied(app: &Router, key: &str, result: &Value) -> (StatusCode, Value) {
    let path = format!("/v1/claims/{key}/reconcile");
    let body = json!({"applied": true, "result": result});
    send_post(app, &path, super::OPERATOR_KEY, &body).await
}

/// `POST /v1/decisions` with `key`.
pub async fn decide(app: &Router, key: &str, body: &Value) -> (StatusCode, Value) {
    send_post(app, "/v1/decisions", key, body).await
}

/// A reviewer's action (`approve`, `reject`, …) on review item `item`.
pub async fn act(app: &Router, key: &str, item: u64, what: &str) -> (StatusCode, Value) {
    let path = format!("/v1/review/items/{item}/{what}");
    send_post(app, &path, key, &json!({})).await
}

/// An answer's status and `outcome` are `want` and `outcome`; the body is
/// printed when they are not.
#[track_caller]
pub fn assert_outcome(status: StatusCode, body: &Value, want: StatusCode, outcome: &str) {
    assert_answer(status, body, want, "outcome", outcome);
}

/// A problem answer's status and `code` are `want` and `code`, likewise.
#[track_caller]
pub fn assert_problem(status: StatusCode, body: &Value, want: StatusCode, code: &str) {
    assert_answer(status, body, want, "code", code);
}

#[track_caller]
fn assert_answer(status: StatusCode, body: &Value, want: StatusCode, field: &str, value: &str) {
    assert_eq!(
        (status, body[field].as_str()),
        (want, Some(value)),
        "{body}"
    );
}

/// `POST /v1/decisions` as the agent with `bytes` and their
/// `Content-Length`.
pub fn agent_post_with_length(bytes: Vec<u8>) -> Request<Body> {
    Request::post("/v1/decisions")
        .header(
            header::AUTHORIZATION,
            format!("Bearer {}", super::AGENT_KEY),
        )
        .header(header::CONTENT_LENGTH, bytes.len())
        .body(Body::from(bytes))
        .unwrap()
}

/// `bytes` as a body in 64 KiB chunks and without a size hint, so only the
/// streaming limit can stop it.
pub fn chunked_body(bytes: Vec<u8>) -> Body {
    let chunks: Vec<axum::body::Bytes> = bytes
        .chunks(64 * 1024)
        .map(axum::body::Bytes::copy_from_slice)
        .collect();
    Body::new(Chunks(chunks.into_iter()))
}

struct Chunks(std::vec::IntoIter<axum::body::Bytes>);

impl http_body::Body for Chunks {
    type Data = axum::body::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Ready(self.0.next().map(|b| Ok(http_body::Frame::data(b))))
    }
}

/// The `name=value` of the cookie a sign-in set, for a `Cookie` header.
pub fn session_cookie(resp: &axum::response::Response) -> String {
    resp.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}
