//! The MCP gateway as it is deployed: a real `toolgate serve --config`
//! process with `[[upstreams]]` (the committed example deployment,
//! examples/mcp/gateway/), the example shop (the official Python SDK's
//! server, writing SQLite) as its upstream, and the official Python SDK
//! client as the caller, each a process of its own.
//!
//! Covered: a hidden tool is unknown to the caller; an argument outside the
//! schema is rejected; another team's order is forbidden (Cedar over the
//! shop's live tables); twelve parallel identical calls make one upstream
//! execution (counted in the shop's database) and a repeat replays the
//! recorded result, also through `toolgate mcp stdio`; an approval round trip (over budget → the review item's
//! URL → approved on /v1/review → the repeat executes once), also offered
//! as URL-mode elicitation to a client that declares it; a call whose
//! gateway was killed mid-call is `needs_reconciliation` after a restart,
//! never executed twice (SQLite and PostgreSQL claim stores); two gateways
//! on one PostgreSQL replay byte for byte; a tool whose upstream schema
//! changes while serving is withheld at the next refresh.
//!
//! Needs examples/mcp/install.sh. Without it the test skips with a message,
//! unless CI or TOOLGATE_REQUIRE_MCP_EXAMPLE=1 says it must run.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate::decode::{Limits, decode_strict};

use proc::Proc;

#[path = "support/databases.rs"]
mod databases;
#[path = "support/faults.rs"]
mod faults;
#[path = "support/mcp_example.rs"]
mod mcp_example;
#[path = "../src/cmd/bench/proc.rs"]
mod proc;

use mcp_example::{example_dir, python};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");
const PATIENCE: Duration = Duration::from_secs(120);

const ANA: &str = "tg_mcp_example_agent_ana";
const BO: &str = "tg_mcp_example_agent_bo";
const READER: &str = "tg_mcp_example_reader";
const REVIEWER: &str = "tg_mcp_example_reviewer";
const OPERATOR: &str = "tg_mcp_example_operator";

/// JSON a process printed, through the project's strict decoder.
fn strict(bytes: &[u8]) -> Value {
    decode_strict(bytes, &Limits::provider_body().with_max_bytes(1 << 20))
        .unwrap_or_else(|r| panic!("{r}: {}", String::from_utf8_lossy(bytes)))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct Setup {
    dir: PathBuf,
    py: PathBuf,
    config: PathBuf,
    shop_db: PathBuf,
    port: u16,
    _shop: Proc,
}

/// The shop on a free port (holding a refund of order 1005 for ten seconds
/// inside its transaction, within the upstream's call timeout, for the
/// killed-gateway case; refund_order's largest amount read again from
/// `max-refund` in the setup's directory on every tools/list, 20000 while it
/// is absent), and the example deployment pointed at it, its tools pinned.
fn setup(py: PathBuf) -> Setup {
    let dir = std::env::temp_dir().join(format!(
        "toolgate-mcp-serve-{}",
        &databases::random_hex()[..12]
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let shop_db = dir.join("shop.sqlite");
    let shop_port = free_port();
    let shop = Command::new(&py)
        .arg(example_dir().join("shop_mcp.py"))
        .arg("--db")
        .arg(&shop_db)
        .args(["--hold-order", "1005", "--hold-ms", "10000"])
        .arg("--max-refund-file")
        .arg(dir.join("max-refund"))
        .args(["serve-http", "--port", &shop_port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let shop = Proc(shop);
    wait_for("the shop", || {
        TcpStream::connect(("127.0.0.1", shop_port)).is_ok()
    });
    let gateway = example_dir().join("gateway");
    for f in ["policy.toml", "policy.cedar"] {
        std::fs::copy(gateway.join(f), dir.join(f)).unwrap();
    }
    let port = free_port();
    let text = std::fs::read_to_string(gateway.join("toolgate.toml"))
        .unwrap()
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"))
        .replace("127.0.0.1:8931", &format!("127.0.0.1:{shop_port}"))
        .replace(
            "db = \"sqlite://toolgate-mcp.db\"",
            &format!("db = \"sqlite://{}\"", dir.join("toolgate.db").display()),
        )
        .replace(
            "url_env = \"SHOP_DB_URL\"",
            &format!("url = \"sqlite://{}\"", shop_db.display()),
        );
    let config = dir.join("toolgate.toml");
    std::fs::write(&config, text).unwrap();
    let out = Command::new(BIN)
        .args(["mcp", "import", "--upstream", "shop", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "import: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Setup {
        dir,
        py,
        config,
        shop_db,
        port,
        _shop: shop,
    }
}

/// `toolgate serve --config` on the setup's port; returns once it listens.
fn serve(s: &Setup, name: &str) -> Proc {
    serve_on(s, name, None, s.port)
}

/// The same on `port`, with the claim store on `db` if given.
fn serve_on(s: &Setup, name: &str, db: Option<&str>, port: u16) -> Proc {
    let log = std::fs::File::create(s.dir.join(format!("serve-{name}.log"))).unwrap();
    let mut command = Command::new(BIN);
    command
        .arg("serve")
        .arg("--config")
        .arg(&s.config)
        .args(["--listen", &format!("127.0.0.1:{port}")]);
    if let Some(db) = db {
        command.args(["--db", db]);
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    loop {
        match rx.recv_timeout(PATIENCE) {
            Ok(line) if line.starts_with("listening on http://") => break,
            Ok(_) => {}
            Err(e) => panic!(
                "toolgate serve did not start ({e}): {}",
                std::fs::read_to_string(s.dir.join(format!("serve-{name}.log")))
                    .unwrap_or_default()
            ),
        }
    }
    Proc(child)
}

fn url(s: &Setup) -> String {
    format!("http://127.0.0.1:{}/mcp", s.port)
}

/// The Python SDK client: the last JSON line it printed.
fn client_cmd(s: &Setup, key: &str, args: &[&str]) -> Command {
    client_at(s, &url(s), key, args)
}

fn client_at(s: &Setup, url: &str, key: &str, args: &[&str]) -> Command {
    let mut c = Command::new(&s.py);
    c.arg(example_dir().join("client.py"))
        .args([url, "--token", key])
        .args(args);
    c
}

fn last_line(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no output: {}", String::from_utf8_lossy(&out.stderr)));
    strict(line.as_bytes())
}

fn client(s: &Setup, key: &str, args: &[&str]) -> Value {
    last_line(&client_cmd(s, key, args).output().unwrap())
}

/// Runs every client command at once; the last JSON line of each.
fn all_at_once(commands: impl Iterator<Item = Command>) -> Vec<Value> {
    let children: Vec<Child> = commands
        .map(|mut c| {
            c.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| last_line(&c.wait_with_output().unwrap()))
        .collect()
}

fn refund(s: &Setup, key: &str, args: &Value) -> Value {
    client(s, key, &["call", "refund_order", &args.to_string()])
}

fn decision(answer: &Value) -> &Value {
    &answer["result"]["_meta"]["io.toolgate/decision"]
}

/// What a `tools/call` answer is: the decision's outcome, `executed` for
/// the upstream's own result, `replayed` for a recorded one.
fn outcome(answer: &Value) -> String {
    let result = &answer["result"];
    if let Some(o) = decision(answer)["outcome"].as_str() {
        return o.to_owned();
    }
    if result["_meta"]["io.toolgate/outcome"] == json!("replayed") {
        return "replayed".to_owned();
    }
    assert_eq!(result["isError"], json!(false), "{answer}");
    "executed".to_owned()
}

fn counts(s: &Setup) -> Value {
    let out = Command::new(&s.py)
        .arg(example_dir().join("shop_mcp.py"))
        .arg("--db")
        .arg(&s.shop_db)
        .arg("count")
        .output()
        .unwrap();
    strict(&out.stdout)
}

/// A JSON POST to the gateway's HTTP API.
fn post(port: u16, path: &str, key: &str, body: &str) -> (u16, String) {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        conn,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    conn.read_to_string(&mut raw).unwrap();
    (raw[9..12].parse().unwrap(), raw)
}

/// How a raw `tools/call` reaches `/mcp`.
#[derive(Clone, Copy)]
enum Raw {
    /// A new 2025-11-25 session (`initialize`, `notifications/initialized`).
    Session,
    /// One stateless 2026-07-28 request.
    Stateless,
}

/// One POST to `/mcp`: the response's status, head and body (de-chunked).
fn mcp_post(port: u16, key: &str, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    conn.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, mut rest) = raw.split_once("\r\n\r\n").unwrap();
    let chunked = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
    let body = if chunked {
        let mut body = String::new();
        loop {
            let (size, after) = rest.split_once("\r\n").unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            if size == 0 {
                break;
            }
            body.push_str(&after[..size]);
            rest = &after[size + 2..];
        }
        body
    } else {
        rest.to_owned()
    };
    (head[9..12].parse().unwrap(), head.to_owned(), body)
}

/// A response header's value.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The JSON-RPC message answering `id` in a response body, as the bytes
/// carried it: the body itself, or the `data:` of an SSE event.
fn answer_text(body: &str, id: &str) -> String {
    let id_member = format!("\"id\":{id}");
    if body.trim_start().starts_with('{') {
        return body.to_owned();
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim_start)
        .find(|d| d.contains(&id_member))
        .unwrap_or_else(|| panic!("no answer to {id}: {body}"))
        .to_owned()
}

/// The raw text of the top-level member `key` of the JSON object `text`:
/// the bytes as they came, never parsed and written again.
fn raw_member<'a>(text: &'a str, key: &str) -> &'a str {
    let bytes = text.as_bytes();
    // The end of the string starting at `i` (after its closing quote).
    let string_end = |mut i: usize| {
        i += 1;
        while bytes[i] != b'"' {
            i += if bytes[i] == b'\\' { 2 } else { 1 };
        }
        i + 1
    };
    let (mut i, mut depth) = (0, 0);
    let mut want_key = false;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let end = string_end(i);
                if depth == 1 && want_key && &text[i + 1..end - 1] == key {
                    let colon = end + text[end..].find(':').unwrap() + 1;
                    let start = colon + (text[colon..].len() - text[colon..].trim_start().len());
                    let (mut j, mut d) = (start, 0);
                    loop {
                        match bytes[j] {
                            b'"' => {
                                j = string_end(j);
                                if d == 0 {
                                    return &text[start..j];
                                }
                                continue;
                            }
                            b'{' | b'[' => d += 1,
                            b'}' | b']' if d == 0 => return text[start..j].trim_end(),
                            b'}' | b']' => {
                                d -= 1;
                                if d == 0 {
                                    return &text[start..=j];
                                }
                            }
                            b',' if d == 0 => return text[start..j].trim_end(),
                            _ => {}
                        }
                        j += 1;
                    }
                }
                want_key = false;
                i = end;
                continue;
            }
            b'{' => {
                depth += 1;
                want_key = true;
            }
            b',' => want_key = true,
            b'[' => depth += 1,
            b'}' | b']' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    panic!("no member {key:?} in {text}")
}

/// `tools/call refund_order` with `arguments` and JSON-RPC id `id` over a
/// raw HTTP exchange of its own: the `result` member's text as the response
/// carried it.
fn raw_refund(port: u16, how: Raw, id: &str, arguments: &Value) -> String {
    let client_info = json!({"name": "raw-http", "version": "0"});
    let mut params = json!({"name": "refund_order", "arguments": arguments});
    let mut headers: Vec<(&str, String)> = Vec::new();
    match how {
        Raw::Session => {
            let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client_info}});
            let (status, head, body) = mcp_post(port, ANA, &[], &init.to_string());
            assert_eq!(status, 200, "{head}{body}");
            let session = header(&head, "mcp-session-id")
                .unwrap_or_else(|| panic!("no session: {head}"))
                .to_owned();
            headers.push(("Mcp-Session-Id", session));
            headers.push(("MCP-Protocol-Version", "2025-11-25".to_owned()));
            let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let h: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let (status, head, body) = mcp_post(port, ANA, &h, &initialized.to_string());
            assert_eq!(status, 202, "{head}{body}");
        }
        Raw::Stateless => {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": client_info,
            });
            headers.push(("MCP-Protocol-Version", "2026-07-28".to_owned()));
            headers.push(("Mcp-Method", "tools/call".to_owned()));
            headers.push(("Mcp-Name", "refund_order".to_owned()));
        }
    }
    let call = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#);
    let h: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let (status, head, body) = mcp_post(port, ANA, &h, &call);
    assert_eq!(status, 200, "{head}{body}");
    raw_member(&answer_text(&body, id), "result").to_owned()
}

/// A reviewer approves the item whose page is `review_url` (on this
/// gateway), through `/v1/review`.
fn approve(s: &Setup, review_url: &str) {
    let prefix = format!("http://127.0.0.1:{}/review/items/", s.port);
    let item = review_url
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{review_url}"));
    let (status, body) = post(
        s.port,
        &format!("/v1/review/items/{item}/approve"),
        REVIEWER,
        "{}",
    );
    assert_eq!(status, 200, "{body}");
}

fn refund_args(order: u64, version: u64, amount: u64) -> Value {
    json!({"order_id": order, "expected_version": version, "amount_minor": amount, "reason": "damaged"})
}

#[test]
fn the_example_gateway_end_to_end() {
    let Some(py) = python() else { return };
    let s = setup(py);
    let gateway = serve(&s, "first");

    // Callers see the tools their key's capabilities allow; a hidden tool
    // is answered as one that does not exist.
    let listed = client(&s, ANA, &["list"]);
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["get_order", "refund_order"], "{listed}");
    assert_eq!(client(&s, READER, &["list"])["tools"], json!([]));
    let hidden = refund(&s, READER, &refund_args(1001, 1, 500));
    let unknown = client(&s, ANA, &["call", "drop_tables", "{}"]);
    assert_eq!(hidden["error"]["code"], json!(-32602), "{hidden}");
    assert_eq!(hidden["error"]["code"], unknown["error"]["code"]);

    // Arguments outside the contract are rejected before anything else.
    let mut extra = refund_args(1001, 1, 500);
    extra["approved_by"] = json!("me");
    let r = refund(&s, ANA, &extra);
    assert_eq!(decision(&r)["outcome"], json!("rejected"), "{r}");
    assert_eq!(decision(&r)["reason"], json!("unknown_key"), "{r}");
    let r = refund(&s, ANA, &refund_args(1001, 1, 0));
    assert_eq!(decision(&r)["reason"], json!("invalid_arguments"), "{r}");

    // The same tool through the sidecar's API: a scope naming another
    // order than the arguments send is refused before anything runs.
    let body = json!({
        "provider": "envelope",
        "response": {"outcome": "action", "reply": "",
                     "proposed_action": {"tool": "refund_order", "arguments": refund_args(1001, 1, 500)}},
        "scope": {"order_id": 1006, "version_seen": 1},
    });
    let (status, answer) = post(s.port, "/v1/decisions", ANA, &body.to_string());
    assert_eq!(status, 422, "{answer}");
    assert!(answer.contains("invalid_scope"), "{answer}");

    // Another team's order: Cedar over the shop's live tables says no.
    let r = refund(&s, BO, &refund_args(1001, 1, 500));
    assert_eq!(decision(&r)["outcome"], json!("forbidden"), "{r}");
    assert_eq!(counts(&s)["refund_order_calls"], json!(0));

    // Twelve parallel identical calls: one upstream execution.
    let args = refund_args(1001, 1, 500).to_string();
    let answers =
        all_at_once((0..12).map(|_| client_cmd(&s, ANA, &["call", "refund_order", &args])));
    let outcomes: Vec<String> = answers.iter().map(outcome).collect();
    assert_eq!(
        outcomes.iter().filter(|o| *o == "executed").count(),
        1,
        "{outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .all(|o| ["executed", "in_flight", "replayed"].contains(&o.as_str())),
        "{outcomes:?}"
    );
    assert_eq!(
        counts(&s),
        json!({"refund_order_calls": 1, "refunds": 1}),
        "{outcomes:?}"
    );
    // A thirteenth call replays the recorded result, content unchanged.
    let executed = answers.iter().find(|a| outcome(a) == "executed").unwrap();
    let again = refund(&s, ANA, &refund_args(1001, 1, 500));
    assert_eq!(outcome(&again), "replayed", "{again}");
    assert_eq!(again["result"]["content"], executed["result"]["content"]);
    assert_eq!(counts(&s)["refund_order_calls"], json!(1));

    // The same deployment on stdio (`toolgate mcp stdio`, the caller's key
    // in TOOLGATE_KEY), sharing the claim store: the call replays too.
    let stdio = format!(
        "env TOOLGATE_KEY={ANA} {BIN} mcp stdio --config {}",
        s.config.display()
    );
    let out = Command::new(&s.py)
        .arg(example_dir().join("client.py"))
        .args(["stdio", "--command", &stdio, "call", "refund_order"])
        .arg(refund_args(1001, 1, 500).to_string())
        .output()
        .unwrap();
    let over_stdio = last_line(&out);
    assert_eq!(outcome(&over_stdio), "replayed", "{over_stdio}");
    assert_eq!(
        over_stdio["result"]["content"],
        executed["result"]["content"]
    );

    // Over the daily budget: a person approves on /review, and the same
    // call, repeated, then executes once.
    let big = refund_args(1004, 1, 6000);
    let r = refund(&s, ANA, &big);
    assert_eq!(decision(&r)["outcome"], json!("pending_approval"), "{r}");
    approve(&s, decision(&r)["review_url"].as_str().unwrap());
    let r = refund(&s, ANA, &big);
    assert_eq!(outcome(&r), "executed", "{r}");
    let r = refund(&s, ANA, &big);
    assert_eq!(outcome(&r), "replayed", "{r}");
    assert_eq!(counts(&s), json!({"refund_order_calls": 2, "refunds": 2}));

    let (_gateway, key) = killed_mid_call(&s, gateway, || serve(&s, "second"));
    reconciled_then_replayed(&s, &key);
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// The shop's audit rows of `outcome` (and `reason`), from toolgate's own
/// SQLite claim store.
fn audited(s: &Setup, outcome: &str, reason: Option<&str>) -> u64 {
    let script = "import sqlite3, sys\n\
        c = sqlite3.connect(sys.argv[1])\n\
        r = sys.argv[3] if len(sys.argv) > 3 else None\n\
        print(c.execute('SELECT count(*) FROM toolgate_audit WHERE outcome = ? AND reason IS ?', \
        (sys.argv[2], r)).fetchone()[0])";
    let mut c = Command::new(&s.py);
    c.args(["-c", script])
        .arg(s.dir.join("toolgate.db"))
        .arg(outcome);
    if let Some(r) = reason {
        c.arg(r);
    }
    let out = c.output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// A read tool (`get_order`, `read = true` in the policy) through the
/// gateway: its capability, its schema and Cedar on the order it names,
/// audited, never claimed, and at most its rate a minute per caller; the
/// same tool proposed as a write through the sidecar is refused.
#[test]
fn a_read_tool_is_judged_and_forwarded_but_never_claimed() {
    let Some(py) = python() else { return };
    let s = setup(py);
    let text = std::fs::read_to_string(&s.config)
        .unwrap()
        .replace("rate_per_minute = 600", "rate_per_minute = 4");
    std::fs::write(&s.config, text).unwrap();
    let _gateway = serve(&s, "reads");
    let read = |key: &str, order: u64| {
        client(
            &s,
            key,
            &["call", "get_order", &json!({"order_id": order}).to_string()],
        )
    };

    // The agent reads the version it must send back, through the gate.
    let r = read(ANA, 1002);
    assert_eq!(r["result"]["isError"], json!(false), "{r}");
    let version = r["result"]["structuredContent"]["version"]
        .as_u64()
        .unwrap();
    assert!(
        r["result"]["_meta"].get("io.toolgate/outcome").is_none(),
        "{r}"
    );
    let w = refund(&s, ANA, &refund_args(1002, version, 300));
    assert_eq!(outcome(&w), "executed", "{w}");
    // A repeat is another read, answered by the shop, not a replay: it
    // shows the version the refund moved on.
    let again = read(ANA, 1002);
    assert_eq!(
        again["result"]["structuredContent"]["version"],
        json!(version + 1),
        "{again}"
    );
    assert!(
        again["result"]["_meta"]
            .get("io.toolgate/outcome")
            .is_none(),
        "{again}"
    );
    // The Node SDK (2025-11-25, a session) reads the same.
    let out = Command::new("node")
        .arg(example_dir().join("node/client.mjs"))
        .args([
            &url(&s),
            "--token",
            ANA,
            "call",
            "get_order",
            "{\"order_id\": 1001}",
        ])
        .output()
        .unwrap();
    let node = last_line(&out);
    assert_eq!(
        node["result"]["structuredContent"]["team"],
        json!("eu"),
        "{node}"
    );

    // Another team's order: Cedar says no, in the same words as a write.
    let r = read(BO, 1001);
    assert_eq!(decision(&r)["outcome"], json!("forbidden"), "{r}");
    assert_eq!(decision(&r)["reason"], json!("not_authorized"), "{r}");
    // The schema holds for reads too.
    let r = client(
        &s,
        ANA,
        &["call", "get_order", "{\"order_id\": 1001, \"all\": true}"],
    );
    assert_eq!(decision(&r)["reason"], json!("unknown_key"), "{r}");
    // A key without the capability does not see it; the call is audited
    // as the unknown tool it is answered as.
    let r = read(READER, 1001);
    assert_eq!(r["error"]["code"], json!(-32602), "{r}");
    assert_eq!(audited(&s, "rejected", Some("unknown_tool")), 1);
    // A flood of unknown names costs the caller, not the audit log: at
    // most 60 a minute per principal are written.
    for i in 0..70 {
        let call = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
            "name": format!("drop_table_{i}"), "arguments": {},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {},
                      "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}}}});
        let name = format!("drop_table_{i}");
        let headers = [
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", name.as_str()),
        ];
        let (status, head, body) = mcp_post(s.port, READER, &headers, &call.to_string());
        assert_eq!(status, 200, "{head}{body}");
        assert!(body.contains("-32602"), "{body}");
    }
    // 71 calls in all: 60 audited, unless a minute passed meanwhile and a
    // new window began (then more, but never all of them).
    let n = audited(&s, "rejected", Some("unknown_tool"));
    assert!((60..71).contains(&n), "{n} unknown-tool calls audited");

    // Four reads a minute for agent-ana (the schema's rejection counted
    // too): the fifth and sixth are refused, one of them audited.
    for _ in 0..2 {
        let r = read(ANA, 1001);
        assert_eq!(decision(&r)["reason"], json!("rate_limited"), "{r}");
    }
    assert_eq!(audited(&s, "rejected", Some("rate_limited")), 1);
    // Another caller's rate is its own.
    assert_eq!(decision(&read(BO, 1001))["outcome"], json!("forbidden"));

    // Each allowed read has one audit entry; nothing was claimed but the
    // refund.
    assert_eq!(audited(&s, "read", None), 3);
    assert_eq!(audited(&s, "forbidden", Some("not_authorized")), 2);
    assert_eq!(counts(&s), json!({"refund_order_calls": 1, "refunds": 1}));

    // Through the sidecar's API the read tool is no write to decide.
    let body = json!({
        "provider": "envelope",
        "response": {"outcome": "action", "reply": "",
                     "proposed_action": {"tool": "get_order", "arguments": {"order_id": 1001}}},
        "scope": {"order_id": 1001, "version_seen": 1},
    });
    let (status, answer) = post(s.port, "/v1/decisions", ANA, &body.to_string());
    assert!(
        answer.contains("\"reason\":\"read_tool\""),
        "{status} {answer}"
    );
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// The shop's pinned resources, resource template and prompt through the
/// gateway, with both official SDKs: listed as pinned to a caller with the
/// capability the deployment names, read and got through the upstream; a
/// key without it sees none and reads none; an entry whose pin was taken
/// out is neither listed nor read; a prompt gets only the arguments it
/// declares.
#[test]
fn pinned_resources_and_prompts_pass_through_with_their_capability() {
    let Some(py) = python() else { return };
    let s = setup(py);
    let gateway = serve(&s, "entries");
    let at = |key: &str, args: &[&str]| client(&s, key, args);

    let listed = at(ANA, &["resources"]);
    assert_eq!(
        listed["resources"][0]["uri"],
        json!("shop://policies/refunds"),
        "{listed}"
    );
    let read = at(ANA, &["read", "shop://policies/refunds"]);
    let text = read["result"]["contents"][0]["text"].as_str().unwrap_or("");
    assert!(text.starts_with("Refunds go back"), "{read}");
    // A URI of the pinned template is read through it.
    let read = at(ANA, &["read", "shop://policies/shipping"]);
    assert!(
        read["result"]["contents"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("ship")),
        "{read}"
    );
    // Nothing else of the upstream's.
    let other = at(ANA, &["read", "file:///etc/passwd"]);
    assert!(other["error"]["code"].is_i64(), "{other}");
    let prompts = at(ANA, &["prompts"]);
    assert_eq!(
        prompts["prompts"][0]["name"],
        json!("refund_note"),
        "{prompts}"
    );
    let got = at(ANA, &["prompt", "refund_note", "{\"order_id\": \"1001\"}"]);
    let said = got["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or("");
    assert!(said.contains("order 1001"), "{got}");
    let extra = at(
        ANA,
        &[
            "prompt",
            "refund_note",
            "{\"order_id\": \"1\", \"system\": \"x\"}",
        ],
    );
    assert_eq!(extra["error"]["code"], json!(-32602), "{extra}");
    let missing = at(ANA, &["prompt", "refund_note", "{}"]);
    assert_eq!(missing["error"]["code"], json!(-32602), "{missing}");

    // The Node SDK (2025-11-25, a session) sees the same.
    let node = |args: &[&str]| {
        let out = Command::new("node")
            .arg(example_dir().join("node/client.mjs"))
            .args([&url(&s), "--token", ANA])
            .args(args)
            .output()
            .unwrap();
        last_line(&out)
    };
    let r = node(&["templates"]);
    assert_eq!(
        r["resourceTemplates"][0]["uriTemplate"],
        json!("shop://policies/{topic}"),
        "{r}"
    );
    let r = node(&["read", "shop://policies/refunds"]);
    assert!(r["result"]["contents"][0]["text"].is_string(), "{r}");
    let r = node(&["prompt", "refund_note", "{\"order_id\": \"7\"}"]);
    assert!(r["result"]["messages"].is_array(), "{r}");

    // Without the capability: nothing listed, nothing read.
    assert_eq!(at(READER, &["resources"])["resources"], json!([]));
    assert_eq!(at(READER, &["prompts"])["prompts"], json!([]));
    let r = at(READER, &["read", "shop://policies/refunds"]);
    assert!(r["error"]["code"].is_i64(), "{r}");
    let r = at(READER, &["prompt", "refund_note", "{\"order_id\": \"1\"}"]);
    assert_eq!(r["error"]["code"], json!(-32602), "{r}");

    // The template's pin taken out: its URIs are unknown from the next
    // start on, and it is not listed.
    drop(gateway);
    let pins = s.dir.join("shop.pins.toml");
    let text = std::fs::read_to_string(&pins).unwrap();
    let start = text.find("[[resource_templates]]").unwrap();
    let end = text[start..]
        .find("\n\n")
        .map_or(text.len(), |e| start + e + 2);
    std::fs::write(&pins, format!("{}{}", &text[..start], &text[end..])).unwrap();
    let _again = serve(&s, "entries-again");
    assert_eq!(at(ANA, &["templates"])["resourceTemplates"], json!([]));
    let r = at(ANA, &["read", "shop://policies/shipping"]);
    assert!(r["error"]["code"].is_i64(), "{r}");
    let r = at(ANA, &["read", "shop://policies/refunds"]);
    assert!(r["result"]["contents"].is_array(), "{r}");
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// The gateway killed while the shop holds a refund of order 1005 inside
/// its transaction, then started again by `restart` on the same claim
/// store: the same call is never sent again; it is `in_flight` until the
/// lease is over and `needs_reconciliation` after.
fn killed_mid_call(s: &Setup, mut gateway: Proc, restart: impl FnOnce() -> Proc) -> (Proc, String) {
    let calls = counts(s)["refund_order_calls"].as_u64().unwrap();
    let held = refund_args(1005, 1, 700).to_string();
    let mut caller = client_cmd(s, ANA, &["call", "refund_order", &held])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the held refund to reach the shop", || {
        counts(s)["refund_order_calls"] == json!(calls + 1)
    });
    let _ = gateway.0.kill();
    let _ = gateway.0.wait();
    let _ = caller.wait();
    let gateway = restart();
    let mut seen = Vec::new();
    let mut key = String::new();
    wait_for("needs_reconciliation", || {
        let r = refund(s, ANA, &refund_args(1005, 1, 700));
        let o = outcome(&r);
        seen.push(o.clone());
        assert!(o == "in_flight" || o == "needs_reconciliation", "{r}");
        key = decision(&r)["operation_key"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        o == "needs_reconciliation"
    });
    assert_eq!(
        counts(s)["refund_order_calls"],
        json!(calls + 1),
        "{seen:?}"
    );
    (gateway, key)
}

/// The stuck claim `key` (the held refund of order 1005) reconciled: an
/// operator's error result through the CLI is refused (no applied write),
/// then the API asks the shop's status tool through the upstream; the call
/// repeated replays the recorded result to both SDKs, a valid
/// `CallToolResult`, and the shop is never called again.
fn reconciled_then_replayed(s: &Setup, key: &str) {
    let calls = counts(s)["refund_order_calls"].clone();
    let out = Command::new(BIN)
        .args(["claims", "reconcile", key, "--config"])
        .arg(&s.config)
        .args([
            "--applied",
            r#"{"content": [{"type": "text", "text": "oops"}], "isError": true}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(last_line(&out)["reconciled"], json!("answer_refused"));
    // No answer: the server asks refund_status over its own connection.
    let (status, answer) = post(s.port, &format!("/v1/claims/{key}/reconcile"), OPERATOR, "");
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("reconciled_applied"), "{answer}");
    let r = refund(s, ANA, &refund_args(1005, 1, 700));
    assert_eq!(outcome(&r), "replayed", "{r}");
    assert_eq!(r["result"]["isError"], json!(false), "{r}");
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("refund_id"), "{r}");
    let out = Command::new("node")
        .arg(example_dir().join("node/client.mjs"))
        .args([&url(s), "--token", ANA, "call", "refund_order"])
        .arg(refund_args(1005, 1, 700).to_string())
        .output()
        .unwrap();
    let node = last_line(&out);
    assert_eq!(
        node["result"]["_meta"]["io.toolgate/outcome"],
        json!("replayed"),
        "{node}"
    );
    assert_eq!(node["result"]["content"], r["result"]["content"]);
    assert_eq!(counts(s)["refund_order_calls"], calls);
}

/// A fresh PostgreSQL database for the claim store and the setup, or
/// `None` after a skip message (a failure when TOOLGATE_REQUIRE_DATABASES=1
/// and TOOLGATE_TEST_POSTGRES_URL is unset, or when the server refuses).
fn on_postgres() -> Option<(faults::FreshDatabase, Setup)> {
    let pg = databases::database_url("TOOLGATE_TEST_POSTGRES_URL", "MCP gateway")?;
    let py = python()?;
    Some((faults::FreshDatabase::create(&pg, "mcp"), setup(py)))
}

/// The same on a PostgreSQL claim store: the claim the killed process left
/// is found by the next one through the database, not through a file.
#[test]
fn a_gateway_killed_mid_call_on_postgres() {
    let Some((fresh, s)) = on_postgres() else {
        return;
    };
    let gateway = serve_on(&s, "pg-first", Some(&fresh.url), s.port);
    killed_mid_call(&s, gateway, || {
        serve_on(&s, "pg-second", Some(&fresh.url), s.port)
    });
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// The shop publishes another refund_order schema while the gateway serves
/// (a new release): the next comparison with the pins withholds the tool
/// (not listed, a call is an unknown tool), the log says what changed in
/// the words used at start, and nothing reaches the shop; once the shop
/// offers the pinned definition again the tool is served again.
#[test]
fn a_tool_changed_while_serving_is_withheld() {
    let Some(py) = python() else { return };
    let s = setup(py);
    let text = std::fs::read_to_string(&s.config).unwrap();
    let from = "call_timeout_ms = 15000";
    assert!(text.contains(from));
    std::fs::write(
        &s.config,
        text.replacen(from, &format!("{from}\nrefresh_secs = 1"), 1),
    )
    .unwrap();
    let _gateway = serve(&s, "refresh");
    let args = refund_args(1001, 1, 500);
    let r = refund(&s, ANA, &args);
    assert_eq!(outcome(&r), "executed", "{r}");

    let lists_refund = || {
        client(&s, ANA, &["list"])["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == json!("refund_order")))
    };
    std::fs::write(s.dir.join("max-refund"), "900000").unwrap();
    wait_for("refund_order to be withheld", || !lists_refund());
    let r = refund(&s, ANA, &args);
    assert_eq!(r["error"]["code"], json!(-32602), "{r}");
    let log = std::fs::read_to_string(s.dir.join("serve-refresh.log")).unwrap();
    assert!(
        log.contains(
            "tool `refund_order` withheld: input schema at \
             /properties/amount_minor/maximum: 20000 became 900000"
        ),
        "{log}"
    );
    assert_eq!(counts(&s)["refund_order_calls"], json!(1));

    std::fs::write(s.dir.join("max-refund"), "20000").unwrap();
    wait_for("refund_order to be served again", lists_refund);
    let r = refund(&s, ANA, &args);
    assert_eq!(outcome(&r), "replayed", "{r}");
    assert_eq!(counts(&s)["refund_order_calls"], json!(1));
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// An approval offered as URL-mode elicitation (protocol 2025-11-25's
/// URLElicitationRequiredError, -32042) to a caller that declares it, over
/// 2026-07-28 (capabilities in each request's `_meta`) and over a
/// 2025-11-25 session (capabilities in `initialize`): the error names the
/// review page. A caller that does not declare it gets today's
/// `pending_approval` result. Approved on the page's API, the same call
/// executes once.
#[test]
fn an_approval_is_a_url_elicitation_where_the_client_supports_it() {
    let Some(py) = python() else { return };
    let s = setup(py);
    let _gateway = serve(&s, "elicitation");
    let big = refund_args(1004, 1, 6000).to_string();
    let elicit = |mode: &str| {
        client(
            &s,
            ANA,
            &[
                "--mode",
                mode,
                "--url-elicitation",
                "call",
                "refund_order",
                &big,
            ],
        )
    };
    let stateless = elicit("auto");
    let legacy = elicit("legacy");
    assert_eq!(stateless["error"]["code"], json!(-32042), "{stateless}");
    let elicitation = &stateless["error"]["data"]["elicitations"][0];
    assert_eq!(elicitation["mode"], json!("url"), "{stateless}");
    let review_url = elicitation["url"].as_str().unwrap().to_owned();
    assert_eq!(legacy["error"]["code"], json!(-32042), "{legacy}");
    assert_eq!(
        legacy["error"]["data"]["elicitations"][0]["url"],
        json!(review_url)
    );

    let plain = client(&s, ANA, &["call", "refund_order", &big]);
    assert_eq!(
        decision(&plain)["outcome"],
        json!("pending_approval"),
        "{plain}"
    );
    assert_eq!(decision(&plain)["review_url"], json!(review_url));
    assert_eq!(counts(&s)["refund_order_calls"], json!(0));

    approve(&s, &review_url);
    let r = elicit("auto");
    assert_eq!(outcome(&r), "executed", "{r}");
    assert_eq!(counts(&s), json!({"refund_order_calls": 1, "refunds": 1}));
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// The deployment file's MCP part is checked before anything starts, each
/// error naming its field: an upstream's tool wired to another executor,
/// an `mcp_upstream` entry no upstream serves, a lease shorter than an
/// upstream's call plus the margin, and the replay-window mode (not built).
#[test]
fn config_check_refuses_a_gateway_wired_wrong() {
    let dir = std::env::temp_dir().join(format!("toolgate-mcp-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gateway = example_dir().join("gateway");
    for f in ["policy.toml", "policy.cedar"] {
        std::fs::copy(gateway.join(f), dir.join(f)).unwrap();
    }
    let good = std::fs::read_to_string(gateway.join("toolgate.toml")).unwrap();
    let cases: &[(&str, &str, &str)] = &[
        (
            "executor = { kind = \"mcp_upstream\" }",
            "executor = { kind = \"client\" }",
            "tools[refund_order].executor",
        ),
        (
            "name = \"get_order\"\nexecutor = { kind = \"mcp_upstream\" }",
            "name = \"get_order\"\nexecutor = { kind = \"client\" }",
            "tools[get_order].executor",
        ),
        (
            "rate_per_minute = 600",
            "rate_per_minute = 600\nversion_seen = { from = \"argument\", pointer = \"/order_id\" }",
            "upstreams[shop].tools[get_order].version_seen",
        ),
        (
            "resources = { capability = \"orders:read\" }",
            "resources = { capability = \"\" }",
            "upstreams[shop].resources.capability",
        ),
        (
            "lease_ms = 16000",
            "lease_ms = 15999",
            "upstreams[shop].call_timeout_ms",
        ),
        (
            "version_seen = { from = \"argument\", pointer = \"/expected_version\" }",
            "",
            "upstreams[shop].tools[refund_order].version_seen",
        ),
        (
            "scope.order_id = { from = \"argument\", pointer = \"/order_id\" }",
            "scope.order_id = { from = \"identity\", claim = \"principal\" }",
            "`order_id` is also an argument",
        ),
    ];
    for (from, to, says) in cases {
        assert!(good.contains(from), "{from}");
        let config = dir.join("toolgate.toml");
        std::fs::write(&config, good.replacen(from, to, 1)).unwrap();
        let out = Command::new(BIN)
            .args(["config", "check"])
            .arg(&config)
            .env("SHOP_DB_URL", "sqlite:///nonexistent/shop.sqlite")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{to}: {stderr}");
        assert!(stderr.contains(says), "{to}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two gateway processes on one PostgreSQL claim store, as replicas behind
/// a load balancer: twelve parallel identical calls, six to each, make one
/// upstream execution; a repeat gets the same recorded result from either
/// process, over either protocol revision (2026-07-28 stateless, 2025-11-25
/// with a session of its own) and with its own JSON-RPC ids.
#[test]
fn two_gateways_on_one_postgres() {
    let Some((fresh, s)) = on_postgres() else {
        return;
    };
    let port_b = free_port();
    let _a = serve_on(&s, "pg-a", Some(&fresh.url), s.port);
    let _b = serve_on(&s, "pg-b", Some(&fresh.url), port_b);
    let url_a = url(&s);
    let url_b = format!("http://127.0.0.1:{port_b}/mcp");

    let args = refund_args(1002, 1, 300).to_string();
    let answers = all_at_once((0..12).map(|i| {
        let at = if i % 2 == 0 { &url_a } else { &url_b };
        client_at(&s, at, ANA, &["call", "refund_order", &args])
    }));
    let outcomes: Vec<String> = answers.iter().map(outcome).collect();
    assert_eq!(
        outcomes.iter().filter(|o| *o == "executed").count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(
        counts(&s),
        json!({"refund_order_calls": 1, "refunds": 1}),
        "{outcomes:?}"
    );

    let repeat = |at: &str, mode: &str| {
        last_line(
            &client_at(
                &s,
                at,
                ANA,
                &["--mode", mode, "call", "refund_order", &args],
            )
            .output()
            .unwrap(),
        )
    };
    let from_a = repeat(&url_a, "auto");
    let from_b = repeat(&url_b, "auto");
    let legacy_b = repeat(&url_b, "legacy");
    assert_eq!(outcome(&from_a), "replayed", "{from_a}");
    assert_eq!(from_a["result"], from_b["result"]);
    assert_eq!(from_a["result"]["content"], legacy_b["result"]["content"]);
    assert_eq!(
        legacy_b["result"]["_meta"]["io.toolgate/outcome"],
        json!("replayed")
    );
    assert_eq!(counts(&s)["refund_order_calls"], json!(1));

    // Byte for byte, as the HTTP responses carried the `result` member: a
    // call executed on one process over a 2025-11-25 session, then repeated
    // with other JSON-RPC ids, in a new session on the same process and in
    // one on the other. Every repeat is the same bytes, and those are the
    // first answer's with the replay marker in `_meta`. Repeated statelessly
    // (2026-07-28) on either process, it is the same bytes again, with the
    // `resultType` that revision adds to every result before them.
    let args = refund_args(1006, 1, 200);
    let first = raw_refund(s.port, Raw::Session, "1", &args);
    let again = raw_refund(s.port, Raw::Session, "2", &args);
    assert_eq!(raw_refund(port_b, Raw::Session, "3", &args), again);
    assert!(!first.contains("io.toolgate/outcome"), "{first}");
    let marker = r#""io.toolgate/outcome":"replayed""#;
    let unmarked = again
        .replacen(&format!(",{marker}"), "", 1)
        .replacen(&format!("{marker},"), "", 1)
        .replacen(&format!(r#","_meta":{{{marker}}}"#), "", 1);
    assert_eq!(unmarked, first, "{again}");
    let stateless = raw_refund(port_b, Raw::Stateless, "\"four\"", &args);
    assert_eq!(raw_refund(s.port, Raw::Stateless, "5", &args), stateless);
    assert_eq!(
        stateless,
        again.replacen('{', r#"{"resultType":"complete","#, 1)
    );
    assert_eq!(counts(&s)["refund_order_calls"], json!(2));
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// A session id is the key to a caller's result stream: it is never
/// written to the log, at the default level or at `debug` (rmcp logs it
/// when it opens one; `serve` keeps rmcp's session layer at `warn`).
#[test]
fn a_session_id_is_never_logged() {
    let Some(py) = python() else { return };
    let s = setup(py);
    let gateway = serve(&s, "session-log");
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw-http", "version": "0"}}});
    let (status, head, body) = mcp_post(s.port, ANA, &[], &init.to_string());
    assert_eq!(status, 200, "{head}{body}");
    let session = header(&head, "mcp-session-id")
        .unwrap_or_else(|| panic!("no session: {head}"))
        .to_owned();
    let h = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let (status, _, _) = mcp_post(
        s.port,
        ANA,
        &h,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    );
    assert_eq!(status, 200);
    drop(gateway);
    let log = std::fs::read_to_string(s.dir.join("serve-session-log.log")).unwrap();
    assert!(
        !log.contains(&session),
        "the session id is in the log:\n{log}"
    );
}
