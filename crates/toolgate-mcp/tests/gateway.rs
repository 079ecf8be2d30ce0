//! The gateway's client side, end to end with software nobody here wrote:
//! the official Python SDK client (protocol 2026-07-28) and the TypeScript
//! SDK client (1.32, protocol 2025-11-25 with a session) call `/mcp`, which
//! forwards to the example shop (the Python SDK's server) as a real process.
//!
//! The decision itself is the core's job and does not exist as one function
//! yet, so these tests decide with a stand-in defined here (`Standin`): it
//! follows the core's outcomes closely enough to exercise every path of the
//! gateway (a contract rejection, an execution, a replay, a state change on
//! a tool with an output schema) and records nothing durable. It is the only
//! `Decide` implementation there is, and it lives in this test.
//!
//! Needs examples/mcp/install.sh (see tests/support/mod.rs for the skip rule).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::claim::{OperationKey, ProposalRecord};
use toolgate::contract::{CheckOutcome, Policy};
use toolgate::decode::{Limits, decode_strict};
use toolgate::pipeline::{Decision, Operation, Principal, Reason, Rejection, StateVersion};
use toolgate_mcp::catalog::Catalog;
use toolgate_mcp::config::McpSection;
use toolgate_mcp::gateway::{Gateway, Identity};
use toolgate_mcp::http::{HttpSettings, router};
use toolgate_mcp::import::{import, policy_skeleton};
use toolgate_mcp::pin::compare;
use toolgate_mcp::upstream::UpstreamClient;
use toolgate_mcp::wire::{
    DECISION_META, Decide, DecideError, DecisionForWire, GatedCall, GatedRead, OUTCOME_META,
    ReadForWire,
};
use toolgate_service::{ApiKey, ExecutionMode, Issuers, KeyRing};

mod support;
use support::{counts, example_dir, python_and_node, shop};

struct Standin {
    upstream: UpstreamClient,
    done: Mutex<HashMap<String, Value>>,
}

fn operation(call: &GatedCall, key: &str) -> Operation {
    let action = call.proposal.action().unwrap();
    let mut bytes = [0u8; 32];
    for (i, b) in key.bytes().enumerate() {
        bytes[i % 32] ^= b;
    }
    Operation {
        tool: action.tool().to_owned(),
        key: OperationKey::from_bytes(bytes),
        fingerprint: *action.fingerprint(),
        version_seen: StateVersion::new("1").unwrap(),
    }
}

impl Decide for Standin {
    /// Forwards every read as it is: what the gateway does with an
    /// allowed read, without the service's judgement (the CLI's tests run
    /// that on a real deployment).
    async fn unknown_tool(&self, _: &toolgate::pipeline::Principal, _: &str) {}

    async fn read(&self, call: GatedRead) -> Result<ReadForWire, DecideError> {
        let action = call.proposal.action().unwrap();
        let arguments = action.arguments().as_object().cloned().unwrap_or_default();
        let result = self
            .upstream
            .read(action.tool(), arguments)
            .await
            .map_err(DecideError::Upstream)?;
        Ok(ReadForWire::Forwarded(result))
    }

    async fn decide(&self, call: GatedCall) -> Result<DecisionForWire, DecideError> {
        let plain = |decision| DecisionForWire {
            decision,
            review_url: None,
        };
        if call.proposal.outcome() != CheckOutcome::Action {
            return Ok(plain(Decision::Rejected(Rejection::Contract(
                call.proposal,
            ))));
        }
        let action = call.proposal.action().unwrap();
        let key = format!("{}:{}", action.tool(), Value::Object(call.scope.clone()));
        if action.tool() == "get_order" && call.scope.get("order") == Some(&json!(1003)) {
            return Ok(plain(Decision::StateChanged {
                operation: operation(&call, &key),
                reason: Reason::VersionMismatch,
                message: "the order moved on".into(),
                current_version: StateVersion::new("2"),
                result: None,
                prior: None,
            }));
        }
        if let Some(result) = self.done.lock().unwrap().get(&key).cloned() {
            let prior = ProposalRecord::new(
                action.tool().to_owned(),
                action.canonical_arguments().to_owned(),
                Value::Object(call.scope.clone()).to_string(),
                "1".into(),
                call.principal.id().to_owned(),
            )
            .unwrap();
            return Ok(plain(Decision::Replayed {
                operation: operation(&call, &key),
                result,
                reply: String::new(),
                prior,
            }));
        }
        let arguments = action.arguments().as_object().cloned().unwrap_or_default();
        let result = self
            .upstream
            .call(action.tool(), arguments, &key)
            .await
            .map_err(DecideError::Upstream)?;
        let result = serde_json::to_value(result).unwrap();
        self.done
            .lock()
            .unwrap()
            .insert(key.clone(), result.clone());
        Ok(plain(Decision::Executed {
            operation: operation(&call, &key),
            result,
            reply: String::new(),
            over_budget_approved: false,
        }))
    }
}

const DEPLOYMENT: &str = r#"
    [[upstreams]]
    name = "shop"
    url = "http://127.0.0.1:PORT/mcp"
    pins = "shop.pins.toml"

    [[upstreams.tools]]
    name = "refund_order"
    scope.order = { from = "argument", pointer = "/order_id" }
    version_seen = { from = "argument", pointer = "/expected_version" }
    status_tool = { name = "refund_status", key_argument = "operation_key" }

    [[upstreams.tools]]
    name = "get_order"
    scope.order = { from = "argument", pointer = "/order_id" }
    version_seen = { from = "meta", key = "io.example/version" }
"#;

fn key(name: &str, caps: &[&str]) -> ApiKey {
    ApiKey {
        sha256: ApiKey::digest(&format!("key-{name}")),
        principal: Principal::new(name, caps.iter().copied()).unwrap(),
        mode: ExecutionMode::InProcess,
        act_for_users: false,
    }
}

fn parse(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            decode_strict(
                l.as_bytes(),
                &Limits::provider_body().with_max_bytes(1 << 20),
            )
            .unwrap()
        })
        .collect()
}

fn python_client(py: &Path, url: &str, token: &str, args: &[&str]) -> (Output, Vec<Value>) {
    client(py.as_os_str(), "client.py", url, token, args)
}

fn node_client(url: &str, token: &str, args: &[&str]) -> (Output, Vec<Value>) {
    client(OsStr::new("node"), "node/client.mjs", url, token, args)
}

/// Runs one of the example's clients (`script` under its directory) and
/// parses the JSON lines it prints.
fn client(
    program: &OsStr,
    script: &str,
    url: &str,
    token: &str,
    args: &[&str],
) -> (Output, Vec<Value>) {
    let out = Command::new(program)
        .arg(example_dir().join(script))
        .args([url, "--token", token])
        .args(args)
        .output()
        .unwrap();
    let lines = parse(&out.stdout);
    (out, lines)
}

fn tool_names(lines: &[Value]) -> Vec<String> {
    let tools = lines.iter().find_map(|l| l.get("tools")).unwrap();
    tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// A raw POST to `/mcp`, for what no SDK would send.
fn raw_post(addr: SocketAddr, token: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    (status, raw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_official_clients_through_the_gateway() {
    let Some(py) = python_and_node() else { return };
    let shop = shop(&py, "gateway", &[]);
    let section =
        McpSection::from_toml(&DEPLOYMENT.replace("PORT", &shop.port.to_string())).unwrap();
    let upstreams = section.check(&shop.dir).unwrap();
    let upstream = &upstreams[0];

    // Pin what the shop offers, and write the policy from the import's
    // skeleton with the operator's part filled in.
    let imported = import(upstream).await.unwrap();
    assert!(imported.refused.is_empty(), "{:?}", imported.refused);
    let skeleton = policy_skeleton(&imported.file, upstream, None);
    let policy_text = format!(
        "version = 1\nabstain_message = \"no\"\n{}",
        // Pins in name order: get_order's entry comes first, then
        // refund_order's, with the same suggested key.
        skeleton
            .replacen(
                "# capability = \"…\"                 # required: what a caller's key must carry to see and call it\n# operation_key = [\"order\", \"version_seen\"]",
                "capability = \"orders:read\"\noperation_key = [\"order\", \"version_seen\"]\n#",
                1,
            )
            .replace(
                "# capability = \"…\"                 # required: what a caller's key must carry to see and call it\n# operation_key = [\"order\", \"version_seen\"]",
                "capability = \"refund:issue\"\noperation_key = [\"order\", \"version_seen\"]\n#"
            )
            .replace("name = \"refund_status\"", "name = \"refund_status\"\ncapability = \"orders:read\"\noperation_key = [\"k\"]")
            .replace("\n# operation_key = [\"…\"]", "\n#")
    );
    let policy =
        Arc::new(Policy::load(&policy_text).unwrap_or_else(|e| panic!("{e}\n{policy_text}")));

    let client = UpstreamClient::connect(upstream).await.unwrap();
    let refresh = compare(&imported.file, &client.offered().await.unwrap());
    let mut catalog = Catalog::default();
    let notes = catalog.add_upstream(&policy, upstream, &imported.file, &refresh);
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(
        catalog.len(),
        2,
        "refund_status is pinned but not mapped: not served"
    );

    let keys = KeyRing::new([
        key("ana", &["refund:issue", "orders:read"]),
        key("reader", &["orders:read"]),
    ])
    .unwrap();
    let gateway = Gateway::new(
        Arc::clone(&policy),
        catalog,
        Identity::Keys(keys.clone()),
        Standin {
            upstream: client,
            done: Mutex::new(HashMap::new()),
        },
    );
    let app = router(gateway, keys, Issuers::default(), &HttpSettings::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let url = format!("http://127.0.0.1:{}/mcp", addr.port());

    tokio::task::spawn_blocking(move || {
        // tools/list per caller, on both revisions.
        let (_, lines) = python_client(&py, &url, "key-ana", &["list"]);
        assert_eq!(lines[0]["protocol_version"], json!("2026-07-28"));
        assert_eq!(tool_names(&lines), ["get_order", "refund_order"]);
        let (_, lines) = node_client(&url, "key-reader", &["list"]);
        assert_eq!(lines[0]["protocol_version"], json!("2025-11-25"));
        assert_eq!(tool_names(&lines), ["get_order"]);

        // A hidden tool is answered exactly as an unknown one.
        let refund = r#"{"order_id": 1001, "expected_version": 1, "amount_minor": 500, "reason": "damaged"}"#;
        let (out, hidden) = python_client(&py, &url, "key-reader", &["call", "refund_order", refund]);
        assert!(!out.status.success());
        assert_eq!(hidden.len(), 2, "{hidden:?} {}", String::from_utf8_lossy(&out.stderr));
        let (_, unknown) = python_client(&py, &url, "key-reader", &["call", "drop_tables", "{}"]);
        assert_eq!(hidden[1]["error"]["code"], json!(-32602));
        assert_eq!(
            hidden[1]["error"]["message"].as_str().unwrap().replace("refund_order", "X"),
            unknown[1]["error"]["message"].as_str().unwrap().replace("drop_tables", "X"),
        );

        // No key, or a wrong one: refused before rmcp reads the request.
        let (out, _) = python_client(&py, &url, "not-a-key", &["list"]);
        assert!(!out.status.success());

        // Executed, then replayed: one upstream execution, the same content.
        let (_, first) = python_client(&py, &url, "key-ana", &["call", "refund_order", refund]);
        let first = &first[1]["result"];
        assert_eq!(first["isError"], json!(false), "{first}");
        let (_, again) = node_client(&url, "key-ana", &["call", "refund_order", refund]);
        let again = &again[1]["result"];
        assert_eq!(again["_meta"][OUTCOME_META], json!("replayed"), "{again}");
        assert_eq!(again["content"], first["content"]);
        assert_eq!(
            counts(&py, &shop.db()),
            json!({"refund_order_calls": 1, "refunds": 1})
        );

        // An argument outside the schema never reaches the upstream.
        let bad = r#"{"order_id": 1002, "expected_version": 1, "amount_minor": "lots", "reason": "damaged"}"#;
        let (_, lines) = python_client(&py, &url, "key-ana", &["call", "refund_order", bad]);
        let r = &lines[1]["result"];
        assert_eq!(r["isError"], json!(true));
        assert_eq!(r["_meta"][DECISION_META]["outcome"], json!("rejected"));
        assert_eq!(r["_meta"][DECISION_META]["reason"], json!("invalid_arguments"));
        assert_eq!(r["structuredContent"]["reason"], json!("invalid_arguments"));

        // A gate outcome on a tool with an outputSchema: the TypeScript SDK
        // validates structuredContent even on an error result, so the
        // decision goes in _meta only, and the SDK accepts the result.
        let (out, lines) = node_client(&url, "key-ana", &["call", "get_order", r#"{"order_id": 1003}"#]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        let r = &lines[1]["result"];
        assert_eq!(r["isError"], json!(true), "{r}");
        assert_eq!(r["_meta"][DECISION_META]["outcome"], json!("state_changed"));
        assert!(r.get("structuredContent").is_none(), "{r}");
        let (_, lines) = python_client(&py, &url, "key-ana", &["call", "get_order", r#"{"order_id": 1003}"#]);
        assert_eq!(lines[1]["result"]["_meta"][DECISION_META]["current_version"], json!("2"));

        // A body with a duplicate key never reaches rmcp.
        let (status, raw) = raw_post(
            addr,
            "key-ana",
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"refund_order","arguments":{"amount_minor":1,"amount_minor":20000}}}"#,
        );
        assert_eq!(status, 400, "{raw}");
        assert!(raw.contains("-32700") && raw.contains("duplicate_key"), "{raw}");
        let (status, _) = raw_post(addr, "not-a-key", "{}");
        assert_eq!(status, 401);
    })
    .await
    .unwrap();
}
