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
//! URL → approved on /v1/review → the repeat executes once); a call whose
//! gateway was killed mid-call is `needs_reconciliation` after a restart,
//! never executed twice.
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

#[path = "support/databases.rs"]
mod databases;
#[path = "support/faults.rs"]
mod faults;
#[path = "support/mcp_example.rs"]
mod mcp_example;

use mcp_example::{example_dir, python};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");
const PATIENCE: Duration = Duration::from_secs(120);

const ANA: &str = "tg_mcp_example_agent_ana";
const BO: &str = "tg_mcp_example_agent_bo";
const READER: &str = "tg_mcp_example_reader";
const REVIEWER: &str = "tg_mcp_example_reviewer";

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

/// A child process killed when the test ends.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
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
/// killed-gateway case), and the
/// example deployment pointed at it, its tools pinned.
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

fn refund_args(order: u64, version: u64, amount: u64) -> Value {
    json!({"order_id": order, "expected_version": version, "amount_minor": amount, "reason": "damaged"})
}

#[test]
fn the_example_gateway_end_to_end() {
    let Some(py) = python() else { return };
    let s = setup(py);
    let mut gateway = serve(&s, "first");

    // Callers see the tools their key's capabilities allow; a hidden tool
    // is answered as one that does not exist.
    let listed = client(&s, ANA, &["list"]);
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["refund_order"], "{listed}");
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
    let children: Vec<Child> = (0..12)
        .map(|_| {
            client_cmd(&s, ANA, &["call", "refund_order", &args])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let answers: Vec<Value> = children
        .into_iter()
        .map(|c| last_line(&c.wait_with_output().unwrap()))
        .collect();
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
    let review_url = decision(&r)["review_url"].as_str().unwrap().to_owned();
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
    let r = refund(&s, ANA, &big);
    assert_eq!(outcome(&r), "executed", "{r}");
    let r = refund(&s, ANA, &big);
    assert_eq!(outcome(&r), "replayed", "{r}");
    assert_eq!(counts(&s), json!({"refund_order_calls": 2, "refunds": 2}));

    // The gateway killed while the shop holds a refund: after a restart the
    // same call is never sent again; once the lease is over it is
    // needs_reconciliation.
    let held = refund_args(1005, 1, 700).to_string();
    let mut caller = client_cmd(&s, ANA, &["call", "refund_order", &held])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the held refund to reach the shop", || {
        counts(&s)["refund_order_calls"] == json!(3)
    });
    let _ = gateway.0.kill();
    let _ = gateway.0.wait();
    let _ = caller.wait();
    gateway = serve(&s, "second");
    let mut seen = Vec::new();
    wait_for("needs_reconciliation", || {
        let r = refund(&s, ANA, &refund_args(1005, 1, 700));
        let o = outcome(&r);
        seen.push(o.clone());
        assert!(o == "in_flight" || o == "needs_reconciliation", "{r}");
        o == "needs_reconciliation"
    });
    assert_eq!(counts(&s)["refund_order_calls"], json!(3), "{seen:?}");
    drop(gateway);
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
            "[[upstreams.tools]]\nname = \"refund_order\"",
            "[[upstreams.tools]]\nname = \"get_order\"",
            "tools[get_order].executor",
        ),
        (
            "lease_ms = 16000",
            "lease_ms = 15999",
            "upstreams[shop].call_timeout_ms",
        ),
        (
            "version_seen = { from = \"argument\", pointer = \"/expected_version\" }",
            "version_seen = { from = \"none\", replay_window = \"10m\" }",
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
    let Some(pg) = databases::database_url("TOOLGATE_TEST_POSTGRES_URL", "MCP gateway") else {
        return;
    };
    let Some(py) = python() else { return };
    let fresh = faults::FreshDatabase::create(&pg, "mcp");
    let s = setup(py);
    let port_b = free_port();
    let _a = serve_on(&s, "pg-a", Some(&fresh.url), s.port);
    let _b = serve_on(&s, "pg-b", Some(&fresh.url), port_b);
    let url_a = url(&s);
    let url_b = format!("http://127.0.0.1:{port_b}/mcp");

    let args = refund_args(1002, 1, 300).to_string();
    let children: Vec<Child> = (0..12)
        .map(|i| {
            let at = if i % 2 == 0 { &url_a } else { &url_b };
            client_at(&s, at, ANA, &["call", "refund_order", &args])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outcomes: Vec<String> = children
        .into_iter()
        .map(|c| outcome(&last_line(&c.wait_with_output().unwrap())))
        .collect();
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
    let _ = std::fs::remove_dir_all(&s.dir);
}
