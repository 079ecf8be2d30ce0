//! `/mcp` accepts the deployment's signed tokens beside its API keys: the
//! HTTP layer verifies the token before rmcp reads the request, and the
//! handler serves the person it names; a bad token is `401` before
//! anything is read, as a bad key is.

#[path = "../../toolgate-service/tests/support/provider.rs"]
mod provider;
#[path = "support/raw_http.rs"]
mod raw_http;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use provider::{Provider, claims, sign};
use raw_http::Nothing;
use serde_json::json;
use toolgate::contract::Policy;
use toolgate::pipeline::Principal;
use toolgate_mcp::catalog::Catalog;
use toolgate_mcp::config::McpSection;
use toolgate_mcp::gateway::{Gateway, Identity};
use toolgate_mcp::http::{HttpSettings, router};
use toolgate_mcp::pin::{Offered, PinFile, compare};
use toolgate_service::{ApiKey, ExecutionMode, KeyRing};

/// One POST to `/mcp` with `token`, in `session` if given.
fn post(
    addr: SocketAddr,
    token: &str,
    session: Option<&str>,
    body: &str,
) -> (u16, Option<String>, String) {
    raw_http::request(addr, "POST", token, &raw_http::json_in(session), body)
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

/// `/mcp` for `catalog` on a loopback port, with `p`'s issuer beside
/// `keys` and `public_url` as the resource's.
async fn serve(
    p: &Provider,
    policy: Arc<Policy>,
    catalog: Catalog,
    keys: KeyRing,
    public_url: &str,
) -> SocketAddr {
    let gateway = Gateway::new(policy, catalog, Identity::Keys(keys.clone()), Nothing);
    let settings = HttpSettings {
        public_url: Some(public_url.into()),
        ..HttpSettings::default()
    };
    let app = router(gateway, keys, p.issuers(Duration::from_secs(60)), &settings);
    raw_http::listen(app).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_token_opens_mcp_and_a_bad_one_is_401() {
    let p = Provider::start(&["a"]).await;
    let policy = Arc::new(Policy::load(POLICY).unwrap());
    let addr = serve(
        &p,
        policy,
        Catalog::default(),
        KeyRing::default(),
        "https://gate.example/",
    )
    .await;

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
            let challenge = raw
                .lines()
                .find(|l| l.to_ascii_lowercase().starts_with("www-authenticate:"))
                .unwrap_or_else(|| panic!("no challenge: {raw}"));
            assert!(
                challenge.ends_with(
                    "resource_metadata=\"https://gate.example/.well-known/oauth-protected-resource/mcp\""
                ),
                "{raw}"
            );
            // A token that fails a check says which one (RFC 6750 §3).
            if bad == expired {
                assert!(
                    challenge.contains(r#"error="invalid_token", error_description="invalid_token""#),
                    "{raw}"
                );
            } else if bad == "a.b.c" {
                assert!(challenge.contains(r#"error_description="malformed_token""#), "{raw}");
            } else {
                assert!(!challenge.contains("error="), "a non-token is no token error: {raw}");
            }
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
        let session = session(addr, &good);
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
        assert!(raw.contains(r#"error_description="unknown_issuer""#), "{raw}");
    })
    .await
    .unwrap();
}

const POLICY: &str = r#"version = 1
abstain_message = "no"
[[tools]]
name = "refund_order"
description = "Refund an order."
capability = "refund:issue"
operation_key = ["order"]
schema = '{"additionalProperties":false,"properties":{"order_id":{"type":"integer"}},"required":["order_id"],"type":"object"}'
"#;

/// A catalog serving one pinned `refund_order` (capability
/// `refund:issue`) of an upstream that is never called.
fn one_tool(policy: &Policy) -> Catalog {
    let section = McpSection::from_toml(
        r#"[[upstreams]]
name = "shop"
url = "http://127.0.0.1:9/mcp"
pins = "shop.pins.toml"
[[upstreams.tools]]
name = "refund_order"
scope.order = { from = "argument", pointer = "/order_id" }
version_seen = { from = "meta", key = "io.example/version" }
"#,
    )
    .unwrap();
    let upstreams = section.check(std::path::Path::new(".")).unwrap();
    let offered = Offered {
        name: "refund_order".into(),
        description: Some("Refund an order.".into()),
        input_schema: json!({"type": "object", "additionalProperties": false,
            "properties": {"order_id": {"type": "integer"}}, "required": ["order_id"]}),
        output_schema: None,
    };
    let (pins, refused) = PinFile::pin_all("shop", [&offered]);
    assert!(refused.is_empty(), "{refused:?}");
    let refresh = compare(&pins, std::slice::from_ref(&offered));
    let mut catalog = Catalog::default();
    let notes = catalog.add_upstream(policy, &upstreams[0], &pins, &refresh);
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(catalog.len(), 1);
    catalog
}

/// An initialised 2025-11-25 session for `token`.
fn session(addr: SocketAddr, token: &str) -> String {
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let (status, id, raw) = post(addr, token, None, init);
    assert_eq!(status, 200, "{raw}");
    let id = id.unwrap_or_else(|| panic!("no session id: {raw}"));
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(post(addr, token, Some(&id), note).0, 202);
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_the_scope_is_told_which_one_it_needs() {
    let p = Provider::start(&["a"]).await;
    let policy = Arc::new(Policy::load(POLICY).unwrap());
    let catalog = one_tool(&policy);
    let keys = KeyRing::new(vec![ApiKey {
        sha256: ApiKey::digest("key-reader"),
        principal: Principal::new("reader", Vec::<String>::new()).unwrap(),
        mode: ExecutionMode::InProcess,
        act_for_users: false,
    }])
    .unwrap();
    let addr = serve(&p, policy, catalog, keys, "https://gate.example").await;

    let with_scope = sign("a", &claims(&p.issuer));
    let mut narrow = claims(&p.issuer);
    narrow["scope"] = json!("openid");
    narrow["groups"] = json!([]);
    let narrow = sign("a", &narrow);
    tokio::task::spawn_blocking(move || {
        let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
        let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"refund_order","arguments":{"order_id":7}}}"#;

        // tools/list follows the capabilities the token's scopes map to.
        let s = session(addr, &with_scope);
        let (status, _, raw) = post(addr, &with_scope, Some(&s), list);
        assert_eq!(status, 200, "{raw}");
        assert!(raw.contains(r#""name":"refund_order""#), "{raw}");
        // Another caller's session lends nothing: each request is its own
        // bearer's, so the narrow token on the wide one's session still
        // sees no tool.
        let (status, _, raw) = post(addr, &narrow, Some(&s), list);
        assert_eq!(status, 200, "{raw}");
        assert!(raw.contains(r#""tools":[]"#), "{raw}");
        let s = session(addr, &narrow);
        let (status, _, raw) = post(addr, &narrow, Some(&s), list);
        assert_eq!(status, 200, "{raw}");
        assert!(raw.contains(r#""tools":[]"#), "{raw}");

        // Calling it anyway: 403, naming the scope that grants it, so the
        // host can ask its user for more (step-up).
        let (status, _, raw) = post(addr, &narrow, Some(&s), call);
        assert_eq!(status, 403, "{raw}");
        assert!(raw.contains(r#""code":"insufficient_scope""#), "{raw}");
        assert!(
            raw.contains(r#"Bearer error="insufficient_scope", scope="refunds", resource_metadata="https://gate.example/.well-known/oauth-protected-resource/mcp""#),
            "{raw}"
        );
        // A tool nobody serves is not a scope question: the handler's own
        // answer, as for a key.
        let unknown = call.replace("refund_order", "drop_tables");
        let (status, _, raw) = post(addr, &narrow, Some(&s), &unknown);
        assert_eq!(status, 200, "{raw}");
        assert!(!raw.contains("insufficient_scope"), "{raw}");
        // With the scope, the call reaches the decision (none here).
        let s = session(addr, &with_scope);
        let (status, _, raw) = post(addr, &with_scope, Some(&s), call);
        assert_eq!(status, 200, "{raw}");
        assert!(!raw.contains("insufficient_scope"), "{raw}");
        // A key cannot be stepped up: its answer is the unknown tool, as
        // before.
        let s = session(addr, "key-reader");
        let (status, _, raw) = post(addr, "key-reader", Some(&s), call);
        assert_eq!(status, 200, "{raw}");
        assert!(!raw.contains("insufficient_scope"), "{raw}");
    })
    .await
    .unwrap();
}
