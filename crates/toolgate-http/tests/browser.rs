//! The reviewer page in headless Chromium, driven over WebDriver
//! (chromedriver) with a minimal HTTP client: sign in with the reviewer
//! key, see a conflict with the prior proposal and its recorded result
//! beside the new one, click Approve on a pending action and see the
//! outcome; the write happened exactly once.
//!
//! Needs Debian's `chromium` and `chromium-driver`. Without them the test
//! skips with a message on a laptop, and fails where a browser is required
//! (`CI=true` or `TOOLGATE_REQUIRE_BROWSER=1`).

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

fn browser_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
        || std::env::var("TOOLGATE_REQUIRE_BROWSER").is_ok_and(|v| v == "1")
}

/// One HTTP/1.1 request over a fresh connection; the body is read to EOF.
#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let payload = body.map(Value::to_string).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    )
    .unwrap();
    // chromedriver keeps the connection open despite `Connection: close`:
    // read the head, then exactly Content-Length bytes.
    let mut raw = Vec::new();
    let mut chunk = [0u8; 8192];
    let (head_end, len) = loop {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed before the response head");
        raw.extend_from_slice(&chunk[..n]);
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (end + 4, len);
        }
    };
    while raw.len() < head_end + len {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed before the response body");
        raw.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let body = String::from_utf8_lossy(&raw[head_end..head_end + len]).into_owned();
    let body = body.as_str();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

struct Driver {
    addr: SocketAddr,
    child: Child,
    session: String,
}

impl Driver {
    fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        // Wait for the driver to accept connections (a readiness poll, not a
        // timed assertion).
        let mut ready = false;
        for _ in 0..200 {
            if TcpStream::connect(addr).is_ok() {
                ready = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(ready, "chromedriver did not start listening");
        let profile =
            std::env::temp_dir().join(format!("toolgate-chromium-{}", std::process::id()));
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                         "--no-first-run", "--disable-background-networking",
                         "--disable-component-update", "--disable-sync",
                         format!("--user-data-dir={}", profile.display())]
            }
        }}});
        let (status, v) = http(addr, "POST", "/session", Some(&caps));
        assert_eq!(status, 200, "new session: {v}");
        let session = v["value"]["sessionId"].as_str().unwrap().to_owned();
        let driver = Self {
            addr,
            child,
            session,
        };
        // A click that submits a form returns before the next page has
        // loaded; let element look-ups wait for it instead of racing it
        // (seen failing on a loaded two-core machine).
        driver.cmd("POST", "/timeouts", Some(json!({"implicit": 15000})));
        driver
    }

    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, v) = http(
            self.addr,
            method,
            &format!("/session/{}{path}", self.session),
            body.as_ref(),
        );
        assert_eq!(status, 200, "{method} {path}: {v}");
        v["value"].clone()
    }

    fn go(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({"url": url})));
    }

    fn find(&self, css: &str) -> String {
        let v = self.cmd(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap()
            .to_owned()
    }

    fn text(&self, css: &str) -> String {
        let id = self.find(css);
        self.cmd("GET", &format!("/element/{id}/text"), None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn attribute(&self, css: &str, name: &str) -> String {
        let id = self.find(css);
        self.cmd("GET", &format!("/element/{id}/attribute/{name}"), None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn click(&self, css: &str) {
        let id = self.find(css);
        self.cmd("POST", &format!("/element/{id}/click"), Some(json!({})));
    }

    fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css);
        self.cmd(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({"text": text})),
        );
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = http(
            self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
fn reviewer_resolves_a_conflict_and_approves_a_pending_action_in_chromium() {
    if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
        let msg = format!(
            "{CHROMIUM} or {CHROMEDRIVER} is missing (apt-get install chromium chromium-driver)"
        );
        assert!(!browser_required(), "{msg}");
        eprintln!("skipping the browser test: {msg}");
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (state, desk) = app();
    let support::Running {
        addr,
        stop: stop_tx,
        server,
    } = support::start(&runtime, state, Duration::from_secs(1));
    let api = |key: &str, body: Value| -> Value {
        let mut s = TcpStream::connect(addr).unwrap();
        let payload = body.to_string();
        write!(
            s,
            "POST /v1/decisions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
            payload.len()
        )
        .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        serde_json::from_str(raw.split_once("\r\n\r\n").unwrap().1).unwrap()
    };
    // A credit executed, then a different amount on the same version: a
    // conflict. A refund that needs a person's approval: pending.
    assert_eq!(
        api(AGENT_KEY, decision_body(credit(1500), "t-1", "7"))["outcome"],
        "executed"
    );
    assert_eq!(
        api(AGENT_KEY, decision_body(credit(1999), "t-1", "7"))["outcome"],
        "conflict"
    );
    let pending = api(
        AGENT_KEY,
        decision_body(
            action("refund_order", json!({"amount_minor": 4321})),
            "t-2",
            "3",
        ),
    );
    assert_eq!(pending["outcome"], "pending_approval");
    let item = pending["review_item"].as_u64().unwrap();
    assert_eq!(desk.credits_for("t-2"), 0);

    let d = Driver::start();
    let base = format!("http://{addr}");
    d.go(&format!("{base}/review"));
    d.type_into("#key", REVIEWER_KEY);
    d.click("#login");
    // The conflict: the prior proposal and its recorded result beside the new one.
    let conflict = d.text(".item.conflict");
    assert!(
        conflict.contains("Prior proposal") && conflict.contains("New proposal"),
        "{conflict}"
    );
    assert!(d.text(".item.conflict .prior-arguments").contains("1500"));
    assert!(d.text(".item.conflict .new-arguments").contains("1999"));
    assert!(d.text(".item.conflict .prior-result").contains("credit_id"));
    // Approve the pending refund with a real click.
    assert!(d.text(&format!("#item-{item}")).contains("4321"));
    d.click(&format!("#approve-{item}"));
    let after = d.text(&format!("#item-{item} .status"));
    assert!(after.contains("approved by reviewer-1"), "{after}");
    assert!(
        after.contains("waiting for the proposer's retry"),
        "{after}"
    );
    // The conflict is resolved with a note, from the page too.
    let conflict_id: u64 = d
        .attribute(".item.conflict", "id")
        .trim_start_matches("item-")
        .parse()
        .unwrap();
    d.type_into(
        &format!("#item-{conflict_id} input[name=note]"),
        "paid once, closed",
    );
    d.click(&format!("#resolve-{conflict_id}"));
    let closed = d.text(&format!("#item-{conflict_id} .status"));
    assert!(
        closed.contains("resolved by reviewer-1") && closed.contains("paid once"),
        "{closed}"
    );
    drop(d);
    // Approving ran nothing; the proposer's retry does, once.
    assert_eq!(desk.credits_for("t-2"), 0);
    let retry = api(
        AGENT_KEY,
        decision_body(
            action("refund_order", json!({"amount_minor": 4321})),
            "t-2",
            "3",
        ),
    );
    assert_eq!(retry["outcome"], "executed");
    assert_eq!(desk.credits_for("t-2"), 1);
    let retry = api(
        AGENT_KEY,
        decision_body(
            action("refund_order", json!({"amount_minor": 4321})),
            "t-2",
            "3",
        ),
    );
    assert_eq!(retry["outcome"], "replayed");
    let _ = stop_tx.send(());
    runtime.block_on(server).unwrap().unwrap();
}
