//! What the tests of real `toolgate serve` processes (faults_kill.rs,
//! faults_pg_restart.rs, scale_out.rs) share: a server process on the
//! support-desk example, plain HTTP/1.1 to it, the example's own tables
//! read straight from the database, the `toolgate claims` commands, and a
//! database of a test's own.

#![allow(
    dead_code,
    reason = "each server test target uses its own part of this module"
)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate_service::ApiKey;
use toolgate_store::AnyClaimStore;
use toolgate_support_desk::{SeedTicket, SupportDesk};

pub const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

/// How long a server may take to start, or a request to be answered, before
/// the test gives up: a guard against hanging, not a performance assertion.
pub const PATIENCE: Duration = Duration::from_secs(120);

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

/// A temporary directory for the deployment file, logs and SQLite files;
/// removed at the end, kept (and named) when the test failed.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(what: &str, run: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("toolgate-{what}-{run}"));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("files and server logs kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The deployment file for one run: the support-desk example with a short
/// lease, and one key (`secret`) for the run's agent that may also list and
/// reconcile claims. Returns the file's path.
pub fn write_config(dir: &Path, agent: &str, secret: &str, lease_ms: u64) -> PathBuf {
    std::fs::write(dir.join("policy.toml"), toolgate_support_desk::POLICY).expect("policy");
    let config = dir.join("toolgate.toml");
    std::fs::write(
        &config,
        format!(
            "policy = \"policy.toml\"\napplication = \"support-desk\"\nlease_ms = {lease_ms}\nrequest_timeout_ms = 10000\n\n\
             [[keys]]\nsha256 = \"{}\"\nprincipal = \"{agent}\"\n\
             capabilities = [\"credit:issue\", \"toolgate:operate\"]\nexecution = \"in_process\"\n",
            hex(&ApiKey::digest(secret))
        ),
    )
    .expect("config");
    config
}

/// One `toolgate serve MODE --db URL` process. Dropping it kills the
/// process, so a failed assertion never leaves a server running; on a
/// failed test the tail of its log is printed.
pub struct Server {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
    lines: mpsc::Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- server {} log (last lines) ---", self.name);
            eprintln!("{}", log_tail(&self.log, 30));
        }
    }
}

pub fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Server {
    /// Starts `toolgate serve --config FILE` on a free loopback port and
    /// waits until it reports listening and answers `/healthz`.
    pub fn start(name: &str, config: &Path, url: &str, dir: &Path) -> (Server, SocketAddr) {
        let mode = ["--config".as_ref(), config.as_os_str()];
        let mut server = Server::spawn(name, &mode, url, dir);
        let addr = server.ready(Instant::now() + PATIENCE);
        (server, addr)
    }

    /// Starts `toolgate serve MODE --db URL` on a free loopback port, MODE
    /// being `--config FILE` or `--demo`. Returns at once; [`Server::ready`]
    /// waits for it.
    pub fn spawn(name: &str, mode: &[&std::ffi::OsStr], url: &str, dir: &Path) -> Server {
        let log = dir.join(format!("server-{name}.log"));
        // stderr (a JSON line per request) goes to a file: a pipe nobody
        // drains would fill and stall the server.
        let stderr = std::fs::File::create(&log).expect("server log file");
        let mut child = Command::new(BIN)
            .arg("serve")
            .args(mode)
            .args(["--db", url, "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn toolgate serve");
        // stdout is read on a thread so that waiting for the start line can
        // have a deadline.
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Server {
            name: name.to_owned(),
            child,
            log,
            lines,
        }
    }

    /// Waits for `listening on http://ADDR` (printed once the database is
    /// migrated and the socket bound), then for `/healthz` to answer.
    pub fn ready(&mut self, deadline: Instant) -> SocketAddr {
        let addr = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(a) = line.strip_prefix("listening on http://") {
                        break a.parse::<SocketAddr>().expect("listen address");
                    }
                }
                Err(e) => {
                    let status = self.child.try_wait();
                    panic!(
                        "server {} did not report listening ({e}); exit status {status:?}; log:\n{}",
                        self.name,
                        log_tail(&self.log, 30)
                    );
                }
            }
        };
        wait_for(deadline, &format!("server {} /healthz", self.name), || {
            matches!(http(addr, "GET", "/healthz", None, ""), Ok((200, _)))
        });
        addr
    }

    /// SIGKILL (std's `Child::kill` on Unix): no destructor, no shutdown
    /// hook, no completion runs in the server.
    pub fn sigkill(&mut self) {
        self.child.kill().expect("SIGKILL");
        let status = self.child.wait().expect("wait");
        assert!(!status.success(), "{status:?}");
    }

    /// The server's log holds no panic.
    pub fn assert_no_panic(&self) {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        assert!(
            !log.contains("panicked"),
            "server {} panicked:\n{}",
            self.name,
            log_tail(&self.log, 40)
        );
    }
}

/// Polls `done` until it holds; fails the test after `deadline`.
pub fn wait_for(deadline: Instant, what: &str, mut done: impl FnMut() -> bool) {
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn request_text(method: &str, path: &str, key: Option<&str>, body: &str) -> String {
    let auth = key.map_or_else(String::new, |k| format!("Authorization: Bearer {k}\r\n"));
    format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// One HTTP/1.1 exchange on `conn` (`Connection: close`): status and body,
/// or the connection error as text.
pub fn exchange(mut conn: TcpStream, request: &str) -> Result<(u16, String), String> {
    conn.set_read_timeout(Some(PATIENCE))
        .map_err(|e| e.to_string())?;
    conn.write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let text = String::from_utf8(raw).map_err(|e| e.to_string())?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("connection closed before a complete answer: {text:?}"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    Ok((status, body.to_owned()))
}

pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: &str,
) -> Result<(u16, String), String> {
    let conn = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    exchange(conn, &request_text(method, path, key, body))
}

/// The desk's tables on `store`, seeded with `n` tickets at version 1
/// assigned to `agent`, each for a customer of its own: ticket
/// `{letter}{tag}-{i}`, customer `{letter}C{tag}-{i}`.
pub async fn seed_tickets(
    store: &AnyClaimStore,
    letter: char,
    tag: &str,
    n: usize,
    agent: &str,
) -> Vec<SeedTicket> {
    let tickets = SeedTicket::series(
        &format!("{letter}{tag}"),
        &format!("{letter}C{tag}"),
        agent,
        n,
    );
    SupportDesk::on_store(store)
        .await
        .expect("desk tables")
        .seed(&tickets)
        .await
        .expect("seed");
    tickets
}

/// A goodwill credit proposed for `ticket` at version 1, in the envelope
/// provider's shape.
pub fn credit_body(ticket: &str, customer: &str, amount: u64, reason: &str) -> String {
    json!({
        "provider": "envelope",
        "response": {"outcome": "action", "reply": "Applying a goodwill credit.",
            "proposed_action": {"tool": "apply_goodwill_credit",
                "arguments": {"amount_minor": amount, "reason_code": reason}}},
        "scope": {"customer_id": customer, "ticket_id": ticket, "version_seen": 1},
    })
    .to_string()
}

/// What the server said to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A decision (`outcome`) with its status.
    Decision { status: u16, body: Value },
    /// An RFC 9457 problem (`code`) with its status.
    Problem { status: u16, code: String },
    /// No answer: the connection was refused, reset or closed early.
    Connection(String),
}

impl Reply {
    #[expect(
        clippy::disallowed_methods,
        reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
    )]
    pub fn from(result: Result<(u16, String), String>) -> Reply {
        match result {
            Err(e) => Reply::Connection(e),
            Ok((status, text)) => {
                let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
                    panic!("status {status}: the body is not JSON ({e}): {text:?}")
                });
                if let Some(outcome) = body.get("outcome").and_then(Value::as_str) {
                    assert!(!outcome.is_empty(), "{body}");
                    Reply::Decision { status, body }
                } else if let Some(code) = body.get("code").and_then(Value::as_str) {
                    assert!(
                        status >= 400 && body["status"] == status,
                        "a problem's status: {status} {body}"
                    );
                    Reply::Problem {
                        status,
                        code: code.to_owned(),
                    }
                } else {
                    panic!("status {status}: neither a decision nor a problem: {body}")
                }
            }
        }
    }

    pub fn outcome(&self) -> Option<&str> {
        match self {
            Reply::Decision { body, .. } => body["outcome"].as_str(),
            _ => None,
        }
    }

    pub fn key(&self) -> Option<&str> {
        match self {
            Reply::Decision { body, .. } => body["operation_key"].as_str(),
            _ => None,
        }
    }

    /// A short label for counting: the outcome, `problem:CODE` or
    /// `connection_error`.
    pub fn label(&self) -> String {
        match self {
            Reply::Decision { body, .. } => match body["reason"].as_str() {
                Some(reason) => format!("{}:{reason}", body["outcome"].as_str().unwrap_or("?")),
                None => body["outcome"].as_str().unwrap_or("?").to_owned(),
            },
            Reply::Problem { status, code } => format!("problem:{status}:{code}"),
            Reply::Connection(_) => "connection_error".to_owned(),
        }
    }
}

/// The decision outcomes and statuses a proposal may get (docs/design.md
/// §2); anything else is a test failure.
pub fn decision_status_ok(outcome: &str, status: u16) -> bool {
    matches!(
        (outcome, status),
        ("executed", 201)
            | ("replayed", 200)
            | ("in_flight", 409)
            | ("conflict", 422)
            | ("state_changed", 409)
            | ("needs_reconciliation", 409)
    )
}

/// Every credit row of the support desk: ticket → operation keys (hex).
/// Read from the example's own table, not through toolgate.
pub async fn credits(store: &AnyClaimStore) -> BTreeMap<String, Vec<String>> {
    const SQL: &str = "SELECT ticket_id, operation_key FROM credits";
    let rows: Vec<(String, Vec<u8>)> = match store {
        AnyClaimStore::Sqlite(s) => sqlx::query_as(SQL).fetch_all(s.pool()).await,
        AnyClaimStore::Postgres(s) => sqlx::query_as(SQL).fetch_all(s.pool()).await,
        AnyClaimStore::MySql(s) => sqlx::query_as(SQL).fetch_all(s.pool()).await,
    }
    .expect("reading credits");
    let mut by_ticket: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (ticket, key) in rows {
        by_ticket.entry(ticket).or_default().push(hex(&key));
    }
    by_ticket
}

/// Every ticket's version, from the example's own table.
pub async fn versions(store: &AnyClaimStore) -> BTreeMap<String, i64> {
    const SQL: &str = "SELECT id, version FROM tickets";
    let rows: Vec<(String, i64)> = match store {
        AnyClaimStore::Sqlite(s) => sqlx::query_as(SQL).fetch_all(s.pool()).await,
        AnyClaimStore::Postgres(s) => sqlx::query_as(SQL).fetch_all(s.pool()).await,
        AnyClaimStore::MySql(s) => sqlx::query_as(SQL).fetch_all(s.pool()).await,
    }
    .expect("reading tickets");
    rows.into_iter().collect()
}

/// `toolgate claims stuck --db URL --now MS`: every claim in flight whose
/// lease ended before `now`, as (operation key, ticket id).
#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
pub fn claims_stuck_cli(url: &str, now: i64) -> BTreeMap<String, String> {
    let out = Command::new(BIN)
        .args(["claims", "stuck", "--db", url, "--now", &now.to_string()])
        .output()
        .expect("claims stuck");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    text.lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).expect("a JSON line");
            assert!(v.get("corrupt").is_none(), "corrupt row listed: {v}");
            assert_eq!(v["status"], "in_flight", "{v}");
            assert_eq!(v["executor"], "in_process", "{v}");
            (
                v["operation_key"].as_str().expect("key").to_owned(),
                v["proposal"]["scope"]["ticket_id"]
                    .as_str()
                    .expect("ticket")
                    .to_owned(),
            )
        })
        .collect()
}

/// `GET /v1/claims?stuck=true` on the server: the operation keys listed.
#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
pub fn claims_stuck_http(addr: SocketAddr, key: &str) -> Vec<String> {
    let (status, text) = http(
        addr,
        "GET",
        "/v1/claims?stuck=true&limit=1000",
        Some(key),
        "",
    )
    .expect("GET /v1/claims");
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).expect("JSON");
    v["claims"]
        .as_array()
        .expect("claims")
        .iter()
        .map(|c| c["operation_key"].as_str().expect("key").to_owned())
        .collect()
}

/// Now, in Unix milliseconds, on this machine's clock (the one the server
/// judges leases by).
pub fn now_ms() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock");
    i64::try_from(d.as_millis()).expect("millis")
}

/// A database of its own next to the one `url` names (PostgreSQL or
/// MariaDB), dropped again when this goes out of scope, also when the test
/// failed: each run starts empty, concurrent runs never see each other's
/// claims, and processes can be seen migrating a fresh database together.
/// Needs the right to create databases (CI's users have it).
pub struct FreshDatabase {
    admin: String,
    name: String,
    pub url: String,
}

impl FreshDatabase {
    pub fn create(url: &str, what: &str) -> FreshDatabase {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let (server, db) = base.rsplit_once('/').expect("a database URL ends in /NAME");
        let name = format!(
            "{db}_{what}_{}",
            &toolgate_store::fresh_holder().expect("random").to_hex()[..12]
        );
        let fresh = FreshDatabase {
            admin: url.to_owned(),
            url: if query.is_empty() {
                format!("{server}/{name}")
            } else {
                format!("{server}/{name}?{query}")
            },
            name,
        };
        fresh
            .execute(&format!("CREATE DATABASE {}", fresh.name))
            .unwrap_or_else(|e| panic!("creating {}: {e}", fresh.name));
        fresh
    }

    fn is_postgres(&self) -> bool {
        self.admin.starts_with("postgres")
    }

    /// One statement on the database `url` named (not the fresh one).
    fn execute(&self, statement: &str) -> Result<(), sqlx::Error> {
        let statement = sqlx::AssertSqlSafe(statement.to_owned());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            if self.is_postgres() {
                let pool = sqlx::PgPool::connect(&self.admin).await?;
                sqlx::query(statement).execute(&pool).await.map(drop)
            } else {
                let pool = sqlx::MySqlPool::connect(&self.admin).await?;
                sqlx::query(statement).execute(&pool).await.map(drop)
            }
        })
    }
}

impl Drop for FreshDatabase {
    fn drop(&mut self) {
        // FORCE: a killed server's connections may not be gone yet.
        let force = if self.is_postgres() {
            " WITH (FORCE)"
        } else {
            ""
        };
        if let Err(e) = self.execute(&format!("DROP DATABASE IF EXISTS {}{force}", self.name)) {
            eprintln!("could not drop the test database {}: {e}", self.name);
        }
    }
}
