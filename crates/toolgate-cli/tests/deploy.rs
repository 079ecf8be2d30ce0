//! `serve --config` and `config check` on a deployment file's [[tools]]
//! (docs/deploy.md): a start-time mistake exits 2 naming the file, the tool
//! and the field, before anything is served; a good file serves its own
//! tool with no support-desk code. The application database here is SQLite,
//! so these run everywhere; examples/refunds runs the same on PostgreSQL.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[path = "support/databases.rs"]
#[allow(dead_code, reason = "this test uses the module's random names only")]
mod support;

const POLICY: &str = r#"
version = 1
reply_max_bytes = 2000
abstain_message = "Someone will follow up."

[[tools]]
name = "refund_order"
description = "Refund part of an order."
capability = "refund:issue"
operation_key = ["order_id", "version_seen"]
scope_types = { order_id = "integer" }
needs_approval = false
max_argument_bytes = 1024
schema = '''
{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "required": ["amount_minor"],
  "properties": {"amount_minor": {"type": "integer", "minimum": 1, "maximum": 5000}}
}
'''
"#;

const CEDAR: &str = r#"
permit (principal is Agent, action == Action::"refund_order", resource is Order)
when { principal.team == resource.team };
"#;

const KEY: &str = "tg_deploy_test_client_key";

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `toolgate args` to its end; one still running after 60 s (a `serve`
/// that should have refused its file) is killed and fails the test.
fn toolgate(args: &[&str]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .env_remove("TOOLGATE_DB_URL")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run toolgate");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("toolgate {args:?} still running after 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    Run {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8(out.stdout).expect("UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("UTF-8"),
    }
}

/// A directory with the policy, the Cedar policies and the application's
/// SQLite database (orders and agents), and a deployment file made from
/// `tools` (the [[tools]] part) and `app_db`.
fn deployment(what: &str, app_db: &str, tools: &str) -> (PathBuf, PathBuf) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("deploy-{what}-{}", support::random_hex()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("policy.toml"), POLICY).expect("policy");
    std::fs::write(dir.join("policy.cedar"), CEDAR).expect("cedar");
    let shop = dir.join("shop.db");
    let status = Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import sqlite3; c = sqlite3.connect({:?}); c.executescript('''\
             CREATE TABLE orders (id INTEGER PRIMARY KEY, team TEXT NOT NULL, version INTEGER NOT NULL);\
             CREATE TABLE agents (id TEXT PRIMARY KEY, team TEXT NOT NULL);\
             INSERT INTO orders VALUES (7, 'eu', 3), (8, 'us', 1);\
             INSERT INTO agents VALUES ('shop-app', 'eu');'''); c.commit()",
            shop.display().to_string()
        ))
        .status()
        .expect("python3 makes the application's SQLite database");
    assert!(status.success());
    let digest = hex_sha256(KEY);
    let file = dir.join("toolgate.toml");
    std::fs::write(
        &file,
        format!(
            "policy = \"policy.toml\"\ncedar = \"policy.cedar\"\n\
             db = \"sqlite://{}\"\n\n\
             [[keys]]\nsha256 = \"{digest}\"\nprincipal = \"shop-app\"\n\
             capabilities = [\"refund:issue\"]\n\n\
             {app_db}\n{tools}\n",
            dir.join("claims.db").display()
        )
        .replace("SHOP_DB", &format!("sqlite://{}", shop.display())),
    )
    .expect("deployment");
    (dir, file)
}

fn hex_sha256(text: &str) -> String {
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().expect("stdin").write_all(text.as_bytes())?;
            c.wait_with_output()
        })
        .expect("sha256sum");
    String::from_utf8(out.stdout).expect("UTF-8")[..64].to_owned()
}

const APP_DB: &str = "[app_db]\nurl = \"SHOP_DB\"\n";

const GOOD_TOOLS: &str = r#"
[[tools]]
name = "refund_order"
executor = { kind = "client" }
state = { source = "sql", query = "SELECT version FROM orders WHERE id = :order_id" }
cedar = { principal_type = "Agent", resource_type = "Order", resource_field = "order_id" }

[[tools.entities]]
type = "Order"
source = "sql"
query = "SELECT id, team FROM orders WHERE id = :order_id"

[[tools.entities]]
type = "Agent"
source = "sql"
query = "SELECT id, team FROM agents WHERE id = :actor"
"#;

#[test]
fn each_start_time_mistake_exits_2_naming_file_tool_and_field() {
    let cases: [(&str, String, &str); 6] = [
        (
            "a scope field no source binds",
            GOOD_TOOLS.replace(":order_id\" }", ":order_ref\" }"),
            "tools[refund_order].state",
        ),
        (
            "an entity type with no source",
            GOOD_TOOLS.replace("\ntype = \"Agent\"", "\ntype = \"Staff\""),
            "tools[refund_order]",
        ),
        (
            "a query that does not prepare",
            GOOD_TOOLS.replace("FROM orders WHERE id = :order_id\"\n", "FROM nowhere WHERE id = :order_id\"\n"),
            "tools[refund_order].entities",
        ),
        (
            "a webhook URL that is not absolute",
            GOOD_TOOLS.replace(
                "executor = { kind = \"client\" }",
                "executor = { kind = \"webhook\", url = \"/refund\", status_url = \"http://127.0.0.1:1/s\", secret_env = \"TG_DEPLOY_TEST_SECRET\" }",
            ),
            "tools[refund_order].executor.url",
        ),
        (
            "a missing secret",
            GOOD_TOOLS.replace(
                "executor = { kind = \"client\" }",
                "executor = { kind = \"webhook\", url = \"http://127.0.0.1:1/r\", status_url = \"http://127.0.0.1:1/s\", secret_env = \"TG_DEPLOY_TEST_UNSET_SECRET\" }",
            ),
            "tools[refund_order].executor.secret_env",
        ),
        (
            "a policy tool with no [[tools]] entry",
            GOOD_TOOLS.replace("name = \"refund_order\"", "name = \"refund_everything\""),
            "tools[refund_everything].name",
        ),
    ];
    for (what, tools, field) in cases {
        let (_dir, file) = deployment("bad", APP_DB, &tools);
        let path = file.display().to_string();
        for command in [
            &["serve", "--config", &path][..],
            &["config", "check", &path][..],
        ] {
            let run = toolgate(command);
            assert_eq!(run.code, 2, "{what}: {command:?}: {}", run.stderr);
            assert!(
                run.stderr.contains(&format!("{path}: {field}")),
                "{what}: {command:?}: no `{path}: {field}` in {}",
                run.stderr
            );
        }
    }
    // A lease that could end while the webhook call can still land: refused
    // at start by both commands, naming both fields.
    let tools = GOOD_TOOLS.replace(
        "executor = { kind = \"client\" }",
        "executor = { kind = \"webhook\", url = \"http://127.0.0.1:1/r\", status_url = \"http://127.0.0.1:1/s\", secret_env = \"TG_DEPLOY_TEST_SECRET\", timeout_ms = 3000 }",
    );
    for (lease, refused) in [(2000, true), (3999, true), (4000, false)] {
        let (_dir, file) = deployment("lease", APP_DB, &tools);
        let text = std::fs::read_to_string(&file).expect("read");
        std::fs::write(
            &file,
            text.replacen(
                "policy = \"policy.toml\"\n",
                &format!("policy = \"policy.toml\"\nlease_ms = {lease}\n"),
                1,
            ),
        )
        .expect("write");
        let path = file.display().to_string();
        // `serve` only where it must refuse: a file it accepts would serve.
        let serve = ["serve", "--config", path.as_str()];
        let check = ["config", "check", path.as_str()];
        let commands: &[&[&str]] = if refused {
            &[&serve, &check]
        } else {
            &[&check]
        };
        for &command in commands {
            let run = toolgate(command);
            let named = run
                .stderr
                .contains(&format!("{path}: lease_ms: {lease} ms"))
                && run
                    .stderr
                    .contains("tools[refund_order].executor.timeout_ms (3000 ms)");
            if refused {
                assert_eq!(run.code, 2, "lease {lease}: {command:?}: {}", run.stderr);
                assert!(named, "lease {lease}: {command:?}: {}", run.stderr);
            } else {
                // Long enough: whatever else the command meets (the unset
                // secret), it is not the lease.
                assert!(!run.stderr.contains("lease_ms"), "{}", run.stderr);
            }
        }
    }
    // A key in client mode would take every tool's write for the caller's
    // and a webhook would never be called: refused, naming the key.
    let (_dir, file) = deployment("client-key", APP_DB, GOOD_TOOLS);
    let text = std::fs::read_to_string(&file).expect("read");
    std::fs::write(
        &file,
        text.replace(
            "capabilities = [\"refund:issue\"]\n",
            "capabilities = [\"refund:issue\"]\nexecution = \"client\"\n",
        ),
    )
    .expect("write");
    let run = toolgate(&["config", "check", &file.display().to_string()]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(": keys[0].execution: "),
        "{}",
        run.stderr
    );
    // [review]: the webhook's secret comes from the environment, and its URL
    // must be http(s); either mistake is refused, naming the field.
    for (review, field) in [
        (
            "[review]\nwebhook_url = \"https://chat.example/h\"\nwebhook_secret_env = \"TG_REVIEW_TEST_UNSET_SECRET\"\n",
            "review.webhook_secret_env",
        ),
        (
            "[review]\nwebhook_url = \"chat.example/h\"\nwebhook_secret_env = \"TG_REVIEW_TEST_UNSET_SECRET\"\n",
            "review.webhook_url",
        ),
    ] {
        let (_dir, file) = deployment("review", APP_DB, GOOD_TOOLS);
        let text = std::fs::read_to_string(&file).expect("read");
        std::fs::write(&file, format!("{text}\n{review}")).expect("write");
        let run = toolgate(&["config", "check", &file.display().to_string()]);
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(
            run.stderr.contains(&format!(": {field}: ")),
            "{}",
            run.stderr
        );
    }
    // No [[tools]] at all, and no built-in application named: refused, not
    // the support desk by default.
    let (_dir, file) = deployment("none", "", "");
    let run = toolgate(&["serve", "--config", &file.display().to_string()]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(": tools: no [[tools]]"),
        "{}",
        run.stderr
    );
}

/// One HTTP/1.1 request on a fresh connection; (status, body).
fn http(addr: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let status = text[9..12].parse().expect("status");
    let body = text.split_once("\r\n\r\n").map_or("", |p| p.1).to_owned();
    (status, body)
}

/// `config check` names the token issuers a file trusts (their keys are
/// fetched on first use: a check connects to no issuer).
#[test]
fn config_check_names_the_token_issuers() {
    let tools = format!(
        "{GOOD_TOOLS}\n[[issuers]]\nissuer = \"https://id.example\"\naudience = \"https://gate.example/mcp\"\n"
    );
    let (_dir, file) = deployment("issuers", APP_DB, &tools);
    let check = toolgate(&["config", "check", &file.display().to_string()]);
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert!(
        check.stdout.contains("issuers: https://id.example"),
        "{}",
        check.stdout
    );
}

#[test]
#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
fn a_good_file_serves_its_own_tool_with_its_own_tables() {
    let (_dir, file) = deployment("good", APP_DB, GOOD_TOOLS);
    let check = toolgate(&["config", "check", &file.display().to_string()]);
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert!(
        check.stdout.contains(
            "tool refund_order: executor client, entities [Order, Agent], queries prepared"
        ),
        "{}",
        check.stdout
    );
    let (mut server, addr) = serve_file(&file);
    let turn = |amount: u32| {
        serde_json::json!({
            "outcome": "action", "reply": "Refunded.",
            "proposed_action": {"tool": "refund_order", "arguments": {"amount_minor": amount}}
        })
        .to_string()
    };
    let decide = |order: serde_json::Value, version: u32, amount: u32| {
        let body = serde_json::json!({
            "provider": "envelope", "response": turn(amount),
            "scope": {"order_id": order, "version_seen": version}
        });
        let (status, text) = http(&addr, "/v1/decisions", &body.to_string());
        let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        (status, v)
    };
    // The application's own version and team decide: permitted (a client
    // executor hands out the permit), stale, another team's order.
    let (s, d) = decide(serde_json::json!(7), 3, 1500);
    assert_eq!((s, d["outcome"].as_str()), (200, Some("permitted")), "{d}");
    let (s, d) = decide(serde_json::json!("7"), 3, 1500);
    assert_eq!((s, d["outcome"].as_str()), (409, Some("in_flight")), "{d}");
    let (s, d) = decide(serde_json::json!(7), 2, 1500);
    assert_eq!(
        (s, d["outcome"].as_str()),
        (409, Some("state_changed")),
        "{d}"
    );
    let (s, d) = decide(serde_json::json!(8), 1, 1500);
    assert_eq!((s, d["outcome"].as_str()), (403, Some("forbidden")), "{d}");
    server.kill().expect("kill");
    let _ = server.wait();
}

/// Adds to the application's SQLite database of `file`'s directory.
fn shop_sql(file: &Path, sql: &str) {
    let shop = file.with_file_name("shop.db");
    let status = Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import sqlite3; c = sqlite3.connect({:?}); c.executescript({sql:?}); c.commit()",
            shop.display().to_string()
        ))
        .status()
        .expect("python3");
    assert!(status.success());
}

/// Starts `serve --config file`; the child and its address.
fn serve_file(file: &Path) -> (std::process::Child, String) {
    let mut server = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(file)
        .env_remove("TOOLGATE_DB_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let mut lines = BufReader::new(server.stdout.take().expect("stdout")).lines();
    let addr = loop {
        let line = lines.next().expect("a line").expect("UTF-8");
        if let Some(a) = line.strip_prefix("listening on http://") {
            break a.to_owned();
        }
    };
    (server, addr)
}

fn refund_request(order: u32, version: u32) -> String {
    let turn = "{\"outcome\":\"action\",\"reply\":\"Refunded.\",\"proposed_action\":\
                {\"tool\":\"refund_order\",\"arguments\":{\"amount_minor\":1500}}}";
    format!(
        "{{\"provider\":\"envelope\",\"response\":{turn:?},\
         \"scope\":{{\"order_id\":{order},\"version_seen\":{version}}}}}"
    )
}

/// Deterministic failures of the deployment's wiring were answered `503 …
/// retry later`, so a client retried them forever: an entity query that
/// returns 150 rows, a state query whose value is a `REAL` at run time.
/// The entity query now denies (a `forbidden` decision, audited); the state
/// query is `500 deployment_error`, not retryable; neither shows SQL.
#[test]
fn deterministic_deployment_failures_are_not_retry_later() {
    // 150 agents, and an entity query that forgot its WHERE.
    let many = GOOD_TOOLS.replace(
        "SELECT id, team FROM agents WHERE id = :actor",
        "SELECT id, team FROM agents",
    );
    let (_dir, file) = deployment("many-rows", APP_DB, &many);
    let rows: String = (0..150)
        .map(|i| format!("INSERT INTO agents VALUES ('agent-{i}', 'eu');"))
        .collect();
    shop_sql(&file, &rows);
    let (mut server, addr) = serve_file(&file);
    for _ in 0..2 {
        let (status, body) = http(&addr, "/v1/decisions", &refund_request(7, 3));
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("\"forbidden\""), "{body}");
    }
    server.kill().expect("kill");
    let _ = server.wait();

    // A resource that does not exist: the state query finds no row. The
    // request's fault, answered `404 resource_not_found` every time (not
    // an outage, `503`), without the query's text. Cedar here permits
    // without reading the order, so the state read is what finds out.
    let (dir, file) = deployment("no-such-order", APP_DB, GOOD_TOOLS);
    std::fs::write(
        dir.join("policy.cedar"),
        "permit(principal, action, resource);\n",
    )
    .expect("cedar");
    let (mut server, addr) = serve_file(&file);
    for _ in 0..2 {
        let (status, body) = http(&addr, "/v1/decisions", &refund_request(99, 1));
        assert_eq!(status, 404, "{body}");
        assert!(body.contains("\"resource_not_found\""), "{body}");
        assert!(
            !body.contains("SELECT") && !body.contains("orders"),
            "{body}"
        );
    }
    // An order that exists is decided as before.
    let (status, body) = http(&addr, "/v1/decisions", &refund_request(7, 3));
    assert_eq!(status, 200, "{body}");
    server.kill().expect("kill");
    let _ = server.wait();

    // A version that is a REAL when the query runs.
    let real = GOOD_TOOLS.replace(
        "SELECT version FROM orders WHERE id = :order_id",
        "SELECT version * 1.5 FROM orders WHERE id = :order_id",
    );
    let (_dir, file) = deployment("real-version", APP_DB, &real);
    let (mut server, addr) = serve_file(&file);
    for _ in 0..2 {
        let (status, body) = http(&addr, "/v1/decisions", &refund_request(7, 3));
        assert_eq!(status, 500, "{body}");
        assert!(body.contains("\"deployment_error\""), "{body}");
        assert!(!body.contains("REAL") && !body.contains("orders"), "{body}");
    }
    server.kill().expect("kill");
    let _ = server.wait();
}
