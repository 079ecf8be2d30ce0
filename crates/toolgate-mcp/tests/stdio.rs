//! The gateway on a line-delimited stream (stdio): every line goes through
//! the strict decoder before rmcp reads it; `tools/list` is the fixed
//! caller's; a hidden tool is unknown; a call reaches the decision.
//!
//! The decision here is a test's (`Refuses`): it answers `state_changed` for
//! every action, which is enough to see the call reach it and the answer
//! come back on the wire.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use toolgate::claim::{Fingerprint, OperationKey};
use toolgate::contract::{CheckOutcome, Policy};
use toolgate::decode::{Limits, decode_strict};
use toolgate::pipeline::{Decision, Operation, Principal, Reason, Rejection, StateVersion};
use toolgate_mcp::catalog::Catalog;
use toolgate_mcp::config::McpSection;
use toolgate_mcp::gateway::{Gateway, Identity};
use toolgate_mcp::pin::{Offered, PinFile, compare};
use toolgate_mcp::stdio::serve_lines;
use toolgate_mcp::wire::{
    DECISION_META, Decide, DecideError, DecisionForWire, GatedCall, GatedRead, ReadForWire,
};

struct Refuses;

impl Decide for Refuses {
    async fn unknown_tool(&self, _: &toolgate::pipeline::Principal, _: &str) {}

    async fn read(&self, _: GatedRead) -> Result<ReadForWire, DecideError> {
        Err(DecideError::NotServed("no read tool is served here"))
    }

    async fn decide(&self, call: GatedCall) -> Result<DecisionForWire, DecideError> {
        let decision = if call.proposal.outcome() == CheckOutcome::Action {
            Decision::StateChanged {
                operation: Operation {
                    tool: "refund_order".into(),
                    key: OperationKey::from_bytes([7; 32]),
                    fingerprint: Fingerprint::from_bytes([8; 32]),
                    version_seen: StateVersion::new("1").unwrap(),
                },
                reason: Reason::VersionMismatch,
                message: format!("scope seen: {}", Value::Object(call.scope)),
                current_version: StateVersion::new("2"),
                result: None,
                prior: None,
            }
        } else {
            Decision::Rejected(Rejection::Contract(call.proposal))
        };
        Ok(DecisionForWire {
            decision,
            review_url: None,
        })
    }
}

fn offered(name: &str) -> Offered {
    Offered {
        name: name.into(),
        description: Some(format!("{name} an order")),
        input_schema: json!({
            "type": "object",
            "properties": {"order_id": {"type": "integer"}, "amount_minor": {"type": "integer"}},
            "required": ["order_id"]
        }),
        output_schema: None,
    }
}

const POLICY: &str = r#"
version = 1
abstain_message = "no"

[[tools]]
name = "refund_order"
capability = "refund:issue"
operation_key = ["order", "agent"]
schema = '{"additionalProperties":false,"properties":{"amount_minor":{"type":"integer"},"order_id":{"type":"integer"}},"required":["order_id"],"type":"object"}'

[[tools]]
name = "cancel_order"
capability = "orders:cancel"
operation_key = ["order"]
schema = '{"additionalProperties":false,"properties":{"amount_minor":{"type":"integer"},"order_id":{"type":"integer"}},"required":["order_id"],"type":"object"}'
"#;

const DEPLOYMENT: &str = r#"
[[upstreams]]
name = "shop"
command = "unused-here"
pins = "shop.pins.toml"

[[upstreams.tools]]
name = "refund_order"
scope.order = { from = "argument", pointer = "/order_id" }
scope.agent = { from = "identity", claim = "principal" }
version_seen = { from = "meta", key = "io.shop/version" }

[[upstreams.tools]]
name = "cancel_order"
scope.order = { from = "argument", pointer = "/order_id" }
version_seen = { from = "meta", key = "io.example/version" }
"#;

fn parse(line: &str) -> Value {
    decode_strict(line.as_bytes(), &Limits::provider_body()).unwrap()
}

/// Writes one line to the server and reads its answer; a notification has
/// none.
async fn send(
    client_in: &mut DuplexStream,
    out: &mut Lines<BufReader<DuplexStream>>,
    line: &str,
) -> Option<Value> {
    client_in.write_all(line.as_bytes()).await.unwrap();
    client_in.write_all(b"\n").await.unwrap();
    if line.contains("notifications/") {
        return None;
    }
    let answer = tokio::time::timeout(Duration::from_secs(30), out.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    Some(parse(&answer))
}

#[tokio::test]
async fn each_line_is_strict_and_the_caller_is_the_fixed_key() {
    let upstreams = McpSection::from_toml(DEPLOYMENT)
        .unwrap()
        .check(Path::new("."))
        .unwrap();
    let upstream = &upstreams[0];
    // As the gateway loads it: the deployment says which scope fields come
    // from arguments and which from the identity.
    let scopes = toolgate_mcp::config::argument_scopes(&upstreams);
    let policy = Arc::new(Policy::load_with(POLICY, &scopes).unwrap());
    let live = [offered("refund_order"), offered("cancel_order")];
    let (pins, refused) = PinFile::pin_all("shop", &live);
    assert_eq!(refused, []);
    let mut catalog = Catalog::default();
    let notes = catalog.add_upstream(&policy, upstream, &pins, &compare(&pins, &live));
    assert!(notes.is_empty(), "{notes:?}");
    let principal = Principal::new("agent-ana", ["refund:issue"]).unwrap();
    let gateway = Gateway::new(
        Arc::clone(&policy),
        catalog,
        Identity::Fixed(principal),
        Refuses,
    );
    let handle = gateway.clone();

    let (mut client_in, server_in) = tokio::io::duplex(1 << 16);
    let (server_out, client_out) = tokio::io::duplex(1 << 16);
    let server = tokio::spawn(serve_lines(gateway, server_in, server_out, 4096));

    // A refresh that finds refund_order changed upstream, applied after the
    // lines below: from then on the tool is neither listed nor callable.
    let mut changed = offered("refund_order");
    changed.input_schema["properties"]["amount_minor"]["maximum"] = json!(1_000_000);
    let refresh = compare(&pins, &[changed, offered("cancel_order")]);
    let mut withheld = Catalog::default();
    let notes = withheld.add_upstream(&policy, upstream, &pins, &refresh);
    assert_eq!(
        notes,
        [
            "tool `refund_order` withheld: input schema at /properties/amount_minor/maximum: added 1000000"
        ]
    );

    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#.to_owned(),
        // Two `order_id`s: which one would the gate authorise?
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"refund_order","arguments":{"order_id":1,"order_id":2}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"cancel_order","arguments":{"order_id":1}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"refund_order","arguments":{"order_id":1001,"amount_minor":5},"_meta":{"io.shop/version":"7"}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"refund_order","arguments":{"order_id":1001,"note":"x"}}}"#.to_owned(),
        format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{{"pad":"{}"}}}}"#, "x".repeat(5000)),
    ];
    let mut out = BufReader::new(client_out).lines();
    let mut answers = Vec::new();
    for line in &lines {
        answers.extend(send(&mut client_in, &mut out, line).await);
    }
    handle.set_catalog(withheld);
    for line in [
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"refund_order","arguments":{"order_id":1001}}}"#,
    ] {
        answers.extend(send(&mut client_in, &mut out, line).await);
    }
    drop(client_in);
    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();

    assert_eq!(answers[0]["result"]["protocolVersion"], json!("2025-11-25"));
    // Only what the key's capabilities allow.
    let tools = answers[1]["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["name"], json!("refund_order"));
    // The duplicate key never reached rmcp: a parse error, id null.
    assert_eq!(answers[2]["error"]["code"], json!(-32700));
    assert_eq!(answers[2]["id"], Value::Null);
    assert!(
        answers[2]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("duplicate")
    );
    // A tool the key may not see is unknown.
    assert_eq!(answers[3]["error"]["code"], json!(-32602));
    // A call reaches the decision with the mapped scope.
    let r = &answers[4]["result"];
    assert_eq!(r["isError"], json!(true));
    assert_eq!(r["_meta"][DECISION_META]["outcome"], json!("state_changed"));
    // `agent` comes from the identity: the gate fills it in on every door
    // (`ArgumentScopes::insert_identity`), so the door sends only the rest.
    assert_eq!(
        r["_meta"][DECISION_META]["message"],
        json!(r#"scope seen: {"order":1001}"#)
    );
    // An argument the contract does not know: rejected by the core's
    // contract stage, never decided on.
    let r = &answers[5]["result"];
    assert_eq!(r["_meta"][DECISION_META]["reason"], json!("unknown_key"));
    // A line over the limit.
    assert_eq!(answers[6]["error"]["code"], json!(-32700));
    assert!(
        answers[6]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("4096")
    );
}

/// An input of one endless line: `len` bytes of `x`, then a newline and
/// `after`, produced as they are read, never held.
struct LongLine {
    left: usize,
    after: Vec<u8>,
}

impl tokio::io::AsyncRead for LongLine {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.left > 0 {
            let n = self.left.min(buf.remaining()).min(64 * 1024);
            buf.put_slice(&vec![b'x'; n]);
            self.left -= n;
        } else if !self.after.is_empty() {
            let n = self.after.len().min(buf.remaining());
            let rest = self.after.split_off(n);
            buf.put_slice(&self.after);
            self.after = rest;
        }
        std::task::Poll::Ready(Ok(()))
    }
}

/// Peak resident memory of this process, in KiB (Linux).
fn peak_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[tokio::test]
async fn an_overlong_line_is_answered_without_being_held() {
    let policy = Arc::new(Policy::load(POLICY).unwrap());
    let principal = Principal::new("agent-ana", ["refund:issue"]).unwrap();
    let gateway = Gateway::new(
        policy,
        Catalog::default(),
        Identity::Fixed(principal),
        Refuses,
    );
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let input = LongLine {
        left: 256 << 20,
        after: format!("\n{init}\n").into_bytes(),
    };
    let before = peak_kib();
    let (server_out, client_out) = tokio::io::duplex(1 << 16);
    let server = tokio::spawn(serve_lines(gateway, input, server_out, 4096));
    let mut out = BufReader::new(client_out).lines();
    async fn next(out: &mut Lines<BufReader<DuplexStream>>) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(120), out.next_line());
        parse(&line.await.unwrap().unwrap().unwrap())
    }
    // The 256 MiB line: one parse error; then the next line is served.
    let first = next(&mut out).await;
    assert_eq!(first["error"]["code"], -32700, "{first}");
    assert!(
        first["error"]["message"]
            .as_str()
            .unwrap()
            .contains("over 4096 bytes")
    );
    let second = next(&mut out).await;
    assert_eq!(second["id"], 1, "{second}");
    drop(out);
    let _ = server.await;
    if let (Some(before), Some(after)) = (before, peak_kib()) {
        let grew_mib = after.saturating_sub(before) / 1024;
        assert!(
            grew_mib < 64,
            "reading the line took {grew_mib} MiB more at peak"
        );
    }
}
