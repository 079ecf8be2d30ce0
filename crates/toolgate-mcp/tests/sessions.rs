//! 2025-11-25 sessions on `/mcp` are the opener's: another key's POST, GET
//! or DELETE on the id is `404`, as for an id that never existed; and a
//! caller, and all callers, hold a bounded number of them. A browser page
//! of another origin is refused, and whatever the transport refuses is a
//! JSON-RPC error, never `text/plain`.

use std::io::{Read, Write};

#[path = "support/raw_http.rs"]
mod raw_http;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use raw_http::Nothing;
use toolgate::contract::Policy;
use toolgate::pipeline::Principal;
use toolgate_mcp::catalog::Catalog;
use toolgate_mcp::gateway::{Gateway, Identity};
use toolgate_mcp::http::{HttpSettings, router};
use toolgate_mcp::sessions::SessionLimits;
use toolgate_service::{ApiKey, ExecutionMode, Issuers, KeyRing};

/// One request, in `session` if given.
fn send(
    addr: SocketAddr,
    method: &str,
    key: &str,
    session: Option<&str>,
    body: &str,
) -> (u16, Option<String>, String) {
    raw_http::request(addr, method, key, &raw_http::json_in(session), body)
}

use raw_http::request as send_with;

const POLICY: &str = r#"version = 1
abstain_message = "no"
[[tools]]
name = "refund_order"
description = "Refund an order."
capability = "refund:issue"
operation_key = ["order"]
schema = '{"additionalProperties":false,"properties":{"order_id":{"type":"integer"}},"required":["order_id"],"type":"object"}'
"#;

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;

fn open(addr: SocketAddr, key: &str) -> String {
    let (status, id, raw) = send(addr, "POST", key, None, INIT);
    assert_eq!(status, 200, "{raw}");
    let id = id.unwrap_or_else(|| panic!("no session: {raw}"));
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(send(addr, "POST", key, Some(&id), note).0, 202);
    id
}

fn key(name: &str) -> ApiKey {
    ApiKey {
        sha256: ApiKey::digest(&format!("key-{name}")),
        principal: Principal::new(name, Vec::<String>::new()).unwrap(),
        mode: ExecutionMode::InProcess,
        act_for_users: false,
    }
}

async fn serve(limits: SessionLimits) -> SocketAddr {
    serve_with(limits, Duration::from_secs(10)).await
}

async fn serve_with(limits: SessionLimits, body_timeout: Duration) -> SocketAddr {
    let policy = Arc::new(Policy::load(POLICY).unwrap());
    let keys = KeyRing::new(vec![key("ana"), key("bo")]).unwrap();
    let gateway = Gateway::new(
        policy,
        Catalog::default(),
        Identity::Keys(keys.clone()),
        Nothing,
    );
    let settings = HttpSettings {
        sessions: limits,
        allowed_origins: vec!["https://gate.example".into()],
        body_limit: 64 * 1024,
        body_timeout,
        ..HttpSettings::default()
    };
    let app = router(gateway, keys, Issuers::default(), &settings);
    raw_http::listen(app).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_callers_session_is_not_found() {
    let addr = serve(SessionLimits::default()).await;
    tokio::task::spawn_blocking(move || {
        let ana = open(addr, "key-ana");
        // bo presents ana's id: to call, to read its stream, to end it.
        for (method, body) in [("POST", LIST), ("GET", ""), ("DELETE", "")] {
            let (status, _, raw) = send(addr, method, "key-bo", Some(&ana), body);
            assert_eq!(status, 404, "{method}: {raw}");
            assert!(raw.contains(r#""jsonrpc":"2.0""#), "{method}: {raw}");
            assert!(
                raw.to_ascii_lowercase()
                    .contains("content-type: application/json"),
                "{method}: {raw}"
            );
        }
        // The same 404 as an id nobody opened.
        let (status, _, _) = send(addr, "POST", "key-bo", Some("no-such-session"), LIST);
        assert_eq!(status, 404);
        // ana's session is untouched, and hers to end.
        let (status, _, raw) = send(addr, "POST", "key-ana", Some(&ana), LIST);
        assert_eq!(status, 200, "{raw}");
        let (status, _, raw) = send(addr, "DELETE", "key-ana", Some(&ana), "");
        assert!((200..300).contains(&status), "{raw}");
        let (status, _, _) = send(addr, "POST", "key-ana", Some(&ana), LIST);
        assert_eq!(status, 404, "ended");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_capped_per_caller_and_in_total() {
    let addr = serve(SessionLimits {
        per_caller: 2,
        total: 3,
        idle: Duration::from_secs(300),
    })
    .await;
    tokio::task::spawn_blocking(move || {
        let first = open(addr, "key-ana");
        open(addr, "key-ana");
        let (status, id, raw) = send(addr, "POST", "key-ana", None, INIT);
        assert_eq!((status, id), (429, None), "{raw}");
        assert!(raw.contains(r#""jsonrpc":"2.0""#), "{raw}");
        // A request that opens no session is not counted against her.
        let (status, _, raw) = send(addr, "POST", "key-ana", Some(&first), LIST);
        assert_eq!(status, 200, "{raw}");
        // bo has his own allowance, up to the total.
        open(addr, "key-bo");
        let (status, _, raw) = send(addr, "POST", "key-bo", None, INIT);
        assert_eq!(status, 503, "{raw}");
        // Ending one frees its place.
        let (status, _, _) = send(addr, "DELETE", "key-ana", Some(&first), "");
        assert!((200..300).contains(&status));
        open(addr, "key-bo");
    })
    .await
    .unwrap();
}

/// Many `initialize`s at once from one caller: the cap holds exactly, as
/// each takes its place before rmcp makes the session, and the refused
/// ones hold none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_initializes_cannot_pass_the_cap_together() {
    let addr = serve(SessionLimits {
        per_caller: 3,
        total: 100,
        idle: Duration::from_secs(300),
    })
    .await;
    tokio::task::spawn_blocking(move || {
        let answers: Vec<u16> = std::thread::scope(|scope| {
            let all: Vec<_> = (0..40)
                .map(|_| scope.spawn(|| send(addr, "POST", "key-ana", None, INIT).0))
                .collect();
            all.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let opened = answers.iter().filter(|s| **s == 200).count();
        let refused = answers.iter().filter(|s| **s == 429).count();
        assert_eq!((opened, refused), (3, 37), "{answers:?}");
        // bo's allowance is untouched: the refused ones left no slot.
        for _ in 0..3 {
            open(addr, "key-bo");
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_closed() {
    let addr = serve(SessionLimits {
        per_caller: 1,
        total: 10,
        idle: Duration::from_millis(300),
    })
    .await;
    tokio::task::spawn_blocking(move || {
        let first = open(addr, "key-ana");
        std::thread::sleep(Duration::from_millis(600));
        // Past its idle time it is gone, and its place with it.
        let (status, _, _) = send(addr, "POST", "key-ana", Some(&first), LIST);
        assert_eq!(status, 404);
        open(addr, "key-ana");
    })
    .await
    .unwrap();
}

/// The answer is a JSON-RPC error with `status`.
#[track_caller]
fn json_rpc_error(answer: &(u16, Option<String>, String), status: u16) {
    let (got, _, raw) = answer;
    assert_eq!(*got, status, "{raw}");
    assert!(
        raw.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{raw}"
    );
    assert!(
        raw.contains(r#""jsonrpc":"2.0""#) && raw.contains(r#""error""#),
        "{raw}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_origins_and_malformed_transport_get_json_rpc_errors() {
    let addr = serve(SessionLimits::default()).await;
    tokio::task::spawn_blocking(move || {
        let json = "Content-Type: application/json\r\n";
        // A page of another site, driving a gateway its visitor can reach.
        let evil = format!("{json}Origin: https://evil.example\r\n");
        json_rpc_error(&send_with(addr, "POST", "key-ana", &evil, INIT), 403);
        // The deployment's own origin, and clients that send none.
        let own = format!("{json}Origin: https://gate.example\r\n");
        assert_eq!(send_with(addr, "POST", "key-ana", &own, INIT).0, 200);
        assert_eq!(send_with(addr, "POST", "key-ana", json, INIT).0, 200);
        // A batch, a media type the transport does not read, a body over
        // the limit: each a JSON-RPC error with its status.
        let batch = format!("[{INIT},{LIST}]");
        let (status, _, _) = send_with(addr, "POST", "key-ana", json, &batch);
        assert!((400..500).contains(&status));
        json_rpc_error(&send_with(addr, "POST", "key-ana", json, &batch), status);
        let text = "Content-Type: text/plain\r\n";
        let (status, _, raw) = send_with(addr, "POST", "key-ana", text, INIT);
        assert!((400..500).contains(&status), "{raw}");
        json_rpc_error(&send_with(addr, "POST", "key-ana", text, INIT), status);
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"pad":"{}"}}}}"#,
            "x".repeat(70 * 1024)
        );
        json_rpc_error(&send_with(addr, "POST", "key-ana", json, &big), 413);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_ends_is_cut_off_at_its_deadline() {
    let addr = serve_with(SessionLimits::default(), Duration::from_millis(500)).await;
    tokio::task::spawn_blocking(move || {
        // A key with no capability at all, promising 1,000 bytes and
        // sending ten.
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        write!(
            s,
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer key-bo\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: 1000\r\n\r\n{{\"jsonrpc\""
        )
        .unwrap();
        let mut raw = String::new();
        let _ = s.read_to_string(&mut raw);
        json_rpc_error(&(raw[9..12].parse().unwrap(), None, raw.clone()), 408);
        assert!(raw.contains("did not arrive within 500 ms"), "{raw}");
    })
    .await
    .unwrap();
}
