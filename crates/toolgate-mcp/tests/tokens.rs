//! `/mcp` accepts the deployment's signed tokens beside its API keys: the
//! HTTP layer verifies the token before rmcp reads the request, and the
//! handler serves the person it names; a bad token is `401` before
//! anything is read, as a bad key is.

#[path = "../../toolgate-service/tests/support/provider.rs"]
mod provider;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use provider::{Provider, claims, sign};
use serde_json::json;
use toolgate::contract::Policy;
use toolgate_mcp::catalog::Catalog;
use toolgate_mcp::gateway::{Gateway, Identity};
use toolgate_mcp::http::{HttpSettings, router};
use toolgate_mcp::wire::{Decide, DecideError, DecisionForWire, GatedCall};
use toolgate_service::KeyRing;

/// No tool is served, so nothing is decided.
struct Nothing;

impl Decide for Nothing {
    async fn decide(&self, _: GatedCall) -> Result<DecisionForWire, DecideError> {
        Err(DecideError::NotServed("no tool is served here"))
    }
}

/// One request to `/mcp` with `token`; the status, the session id and the
/// body.
fn post(
    addr: SocketAddr,
    token: &str,
    session: Option<&str>,
    body: &str,
) -> (u16, Option<String>, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let session = session
        .map(|id| format!("Mcp-Session-Id: {id}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2025-11-25\r\n{session}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    let id = raw
        .lines()
        .find_map(|l| {
            l.strip_prefix("mcp-session-id: ")
                .or_else(|| l.strip_prefix("Mcp-Session-Id: "))
        })
        .map(|v| v.trim().to_owned());
    (status, id, raw)
}

/// A GET without a credential: the status and the body.
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    let body = raw.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_token_opens_mcp_and_a_bad_one_is_401() {
    let p = Provider::start(&["a"]).await;
    let policy = Arc::new(
        Policy::load(
            r#"version = 1
abstain_message = "no"
[[tools]]
name = "refund_order"
description = "Refund an order."
capability = "refund:issue"
operation_key = ["order"]
schema = '{"additionalProperties":false,"properties":{"order_id":{"type":"integer"}},"required":["order_id"],"type":"object"}'
"#,
        )
        .unwrap(),
    );
    let keys = KeyRing::default();
    let gateway = Gateway::new(
        policy,
        Catalog::default(),
        Identity::Keys(keys.clone()),
        Nothing,
    );
    let settings = HttpSettings {
        public_url: Some("https://gate.example/".into()),
        ..HttpSettings::default()
    };
    let app = router(gateway, keys, p.issuers(Duration::from_secs(60)), &settings);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let good = sign("a", &claims(&p.issuer));
    let mut expired = claims(&p.issuer);
    expired["exp"] = json!(provider::now() - 600);
    let expired = sign("a", &expired);
    let issuer = p.issuer.clone();
    tokio::task::spawn_blocking(move || {
        let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
        for bad in [expired.as_str(), "not-a-key", "a.b.c"] {
            let (status, _, raw) = post(addr, bad, None, init);
            assert_eq!(status, 401, "{raw}");
            assert!(raw.contains("\"code\":\"unauthorized\""), "{raw}");
            // Where a host starts its OAuth discovery (RFC 9728 §5.1),
            // named from the configured public URL.
            assert!(
                raw.to_ascii_lowercase().contains(
                    "www-authenticate: bearer resource_metadata=\"https://gate.example/.well-known/oauth-protected-resource/mcp\""
                ),
                "{raw}"
            );
        }
        // The metadata itself, without a credential, at both paths.
        for path in [
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-protected-resource",
        ] {
            let (status, body) = get(addr, path);
            assert_eq!(status, 200, "{path}: {body}");
            let doc = toolgate::decode::decode_strict(body.as_bytes(), &toolgate::decode::Limits::provider_body()).unwrap();
            assert_eq!(doc["resource"], "https://gate.example/mcp", "{doc}");
            assert_eq!(doc["authorization_servers"], json!([issuer]), "{doc}");
            assert_eq!(doc["scopes_supported"], json!(["refunds"]), "{doc}");
            assert_eq!(doc["bearer_methods_supported"], json!(["header"]), "{doc}");
        }
        let (status, session, raw) = post(addr, &good, None, init);
        assert_eq!(status, 200, "{raw}");
        let session = session.unwrap_or_else(|| panic!("no session id: {raw}"));
        let (status, _, _) = post(
            addr,
            &good,
            Some(&session),
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        );
        assert_eq!(status, 202);
        // The handler serves the token's person: a listing (empty: no tool
        // is served), not "a valid API key is required".
        let (status, _, raw) = post(
            addr,
            &good,
            Some(&session),
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        );
        assert_eq!(status, 200, "{raw}");
        assert!(raw.contains(r#""tools":[]"#), "{raw}");
        // A token of another issuer is refused too.
        let mut other = claims(&issuer);
        other["iss"] = json!("https://evil.example");
        let (status, _, raw) = post(addr, &sign("a", &other), Some(&session), r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#);
        assert_eq!(status, 401, "{raw}");
    })
    .await
    .unwrap();
}
