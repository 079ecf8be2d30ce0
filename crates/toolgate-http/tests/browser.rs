//! The reviewer page in headless Chromium, driven over WebDriver
//! (chromedriver) with a minimal HTTP client: sign in with the reviewer
//! key, see a conflict with the prior proposal and its recorded result
//! beside the new one, click Approve on a pending action and see the
//! outcome; the write happened exactly once. And a support lead's page:
//! every kind of item (conflict, stale version, stuck claim, pending
//! approval, rejections) shows its scope, UTC and relative times, amounts
//! with two decimals and messages as text; approve, deny, resolve, dismiss,
//! applied and not applied are each clicked and checked against the item's
//! status and the audit trail; the filter form and the page links list
//! every item once.
//!
//! Needs Debian's `chromium` and `chromium-driver`. Without them the test
//! skips with a message on a laptop, and fails where a browser is required
//! (`CI=true` or `TOOLGATE_REQUIRE_BROWSER=1`).

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Whether chromium or chromedriver is missing, after printing a skip
/// message. In CI (`CI=true`) or with `TOOLGATE_REQUIRE_BROWSER=1` a
/// missing one fails the test instead.
fn browser_missing() -> bool {
    if Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists() {
        return false;
    }
    let required = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
        || std::env::var("TOOLGATE_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
    let msg = format!(
        "{CHROMIUM} or {CHROMEDRIVER} is missing (apt-get install chromium chromium-driver)"
    );
    assert!(!required, "{msg}");
    eprintln!("skipping the browser test: {msg}");
    true
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
        // One profile per browser: the tests run in parallel, and Chromium
        // refuses a profile another instance holds.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let profile =
            std::env::temp_dir().join(format!("toolgate-chromium-{}-{n}", std::process::id()));
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

    /// Clicks something that loads a page (a form's button, a link) and
    /// waits until the new document has loaded. WebDriver's click may
    /// return before a form's navigation ends, and reading the old page
    /// then makes the test flaky: the mark set on the old document is gone
    /// only once the new one replaced it.
    fn submit(&self, css: &str) {
        self.script("window.__toolgateOldPage = true; return null;");
        self.click(css);
        // A bound on the wait, not a timing assertion: a page that never
        // loads fails the test with this message instead of hanging it.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let loaded = self.script(
                "return window.__toolgateOldPage === undefined && document.readyState === 'complete';",
            );
            if loaded == Value::Bool(true) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "clicking {css} never loaded a new page"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn script(&self, body: &str) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": body, "args": []})),
        )
    }

    /// Opens the reviewer page at `base` and signs in with `key`.
    fn sign_in(&self, base: &str, key: &str) {
        self.go(&format!("{base}/review"));
        self.type_into("#key", key);
        self.submit("#login");
    }

    /// Presses the `action` button on item `item`'s card, with `note` typed
    /// into the card's note first: the card's status line after.
    fn act_on(&self, item: u64, action: &str, note: Option<&str>) -> String {
        if let Some(note) = note {
            self.type_into(&format!("#item-{item} input[name=note]"), note);
        }
        self.submit(&format!("#{action}-{item}"));
        self.text(&format!("#item-{item} .status"))
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
fn reviewer_resolves_a_conflict_and_approves_a_pending_action_in_chromium() {
    if browser_missing() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // The page is served over plain HTTP on loopback, as the demo is: its
    // public URL says so, so the session cookie is not `Secure`.
    let (state, desk) = app_with(toolgate_service::Settings {
        public_url: Some("http://127.0.0.1".into()),
        ..service_settings()
    });
    let support::Running {
        addr,
        stop: stop_tx,
        server,
    } = support::start(&runtime, state, Duration::from_secs(1));
    let api = |key: &str, body: Value| call(addr, "POST", "/v1/decisions", key, Some(&body)).1;
    // A credit executed, then a different amount on the same version: a
    // conflict. A refund that needs a person's approval: pending.
    assert_eq!(api(AGENT_KEY, credit_on_t1(1500))["outcome"], "executed");
    assert_eq!(api(AGENT_KEY, credit_on_t1(1999))["outcome"], "conflict");
    let pending = api(AGENT_KEY, decision_body(refund(4321), "t-2", "3"));
    assert_eq!(pending["outcome"], "pending_approval");
    let item = pending["review_item"].as_u64().unwrap();
    assert_eq!(desk.credits_for("t-2"), 0);

    let d = Driver::start();
    let base = format!("http://{addr}");
    d.sign_in(&base, REVIEWER_KEY);
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
    let after = d.act_on(item, "approve", None);
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
    let closed = d.act_on(conflict_id, "resolve", Some("paid once, closed"));
    assert!(
        closed.contains("resolved by reviewer-1") && closed.contains("paid once"),
        "{closed}"
    );
    drop(d);
    // Approving ran nothing; the proposer's retry does, once.
    assert_eq!(desk.credits_for("t-2"), 0);
    let retry = api(AGENT_KEY, decision_body(refund(4321), "t-2", "3"));
    assert_eq!(retry["outcome"], "executed");
    assert_eq!(desk.credits_for("t-2"), 1);
    let retry = api(AGENT_KEY, decision_body(refund(4321), "t-2", "3"));
    assert_eq!(retry["outcome"], "replayed");
    let _ = stop_tx.send(());
    runtime.block_on(server).unwrap().unwrap();
}

/// One request with a bearer key; the answer's status and JSON body.
#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    let payload = body.map(Value::to_string).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// The ids of the cards on the page the browser shows now, in order.
fn card_ids(d: &Driver) -> Vec<u64> {
    let html = d.cmd("GET", "/source", None);
    let html = html.as_str().unwrap_or_default();
    html.split("<div class=\"item ")
        .skip(1)
        .filter_map(|rest| {
            let start = rest.find("id=\"item-")? + "id=\"item-".len();
            rest[start..].split('"').next()?.parse().ok()
        })
        .collect()
}

/// Whether `text` holds a run of 13 digits: an epoch-millisecond time.
fn has_epoch_millis(text: &str) -> bool {
    text.split(|c: char| !c.is_ascii_digit())
        .any(|run| run.len() >= 13)
}

#[test]
fn a_support_lead_sees_and_acts_on_every_kind_of_item_in_chromium() {
    use std::str::FromStr;
    use toolgate::claim::{ClaimStore, OperationKey};

    if browser_missing() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // A short lease, so a client permit that is never completed becomes a
    // stuck claim while the test runs; in-process writes finish well
    // inside it.
    let (state, desk) = app_with(toolgate_service::Settings {
        lease: Duration::from_secs(2),
        public_url: Some("http://127.0.0.1".into()),
        ..service_settings()
    });
    for t in ["t-3", "t-4", "t-5", "t-6", "t-7", "t-8"] {
        desk.set_version(t, "5");
    }
    let store = state.clone();
    let support::Running {
        addr,
        stop: stop_tx,
        server,
    } = support::start(&runtime, state, Duration::from_secs(1));
    let decide = |key: &str, body: Value| call(addr, "POST", "/v1/decisions", key, Some(&body)).1;
    let status_of = |id: u64| -> String {
        let (s, page) = call(
            addr,
            "GET",
            "/v1/review/items?limit=200",
            REVIEWER_KEY,
            None,
        );
        assert_eq!(s, 200, "{page}");
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["id"] == id)
            .map(|i| i["status"].as_str().unwrap().to_owned())
            .unwrap()
    };
    let audit = |key: &str| -> Vec<(String, String)> {
        let key = OperationKey::from_str(key).unwrap();
        runtime
            .block_on(store.service().store().audit_trail(&key, 100))
            .unwrap()
            .iter()
            .map(|e| (e.actor().to_owned(), e.outcome().to_owned()))
            .collect()
    };
    let item_of = |d: &Value, outcome: &str| -> (u64, String) {
        assert_eq!(d["outcome"], outcome, "{d}");
        (
            d["review_item"].as_u64().unwrap(),
            d["operation_key"].as_str().unwrap_or_default().to_owned(),
        )
    };

    // Two client permits that are never completed: stuck once the lease ends.
    for t in ["t-7", "t-8"] {
        let p = decide(CLIENT_KEY, decision_body(credit(1250), t, "5"));
        assert_eq!(p["outcome"], "permitted", "{p}");
    }
    // A conflict: a credit executed, then another amount on the same version.
    assert_eq!(decide(AGENT_KEY, credit_on_t1(1500))["outcome"], "executed");
    let (conflict, conflict_key) = item_of(&decide(AGENT_KEY, credit_on_t1(1999)), "conflict");
    // A stale version: the model read 4, the ticket is at 5.
    let (stale, stale_key) = item_of(
        &decide(AGENT_KEY, decision_body(credit(700), "t-3", "4")),
        "state_changed",
    );
    // Rejections, one with a hostile reason code.
    let hostile = "<b>bold</b>";
    let (rejected_a, _) = item_of(
        &decide(
            AGENT_KEY,
            decision_body(
                action(
                    "apply_goodwill_credit",
                    json!({"amount_minor": 100, "reason_code": hostile}),
                ),
                "t-4",
                "5",
            ),
        ),
        "rejected",
    );
    let (rejected_b, _) = item_of(
        &decide(AGENT_KEY, decision_body(credit(999_999), "t-4", "5")),
        "rejected",
    );
    // Two refunds waiting for a person.
    let refund_on = |amount: i64, t: &str| decision_body(refund(amount), t, "5");
    let (approve_me, approve_key) = item_of(
        &decide(AGENT_KEY, refund_on(2000, "t-5")),
        "pending_approval",
    );
    let (deny_me, deny_key) = item_of(
        &decide(AGENT_KEY, refund_on(4321, "t-6")),
        "pending_approval",
    );
    // The stuck claims' retries: needs_reconciliation once the lease has
    // ended (a readiness poll on the claim's state, not a timed assertion).
    let stuck = |t: &str| -> (u64, String) {
        loop {
            let d = decide(CLIENT_KEY, decision_body(credit(1250), t, "5"));
            if d["outcome"] == "needs_reconciliation" {
                return item_of(&d, "needs_reconciliation");
            }
            assert_eq!(d["outcome"], "in_flight", "{d}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let (applied, applied_key) = stuck("t-7");
    let (not_applied, not_applied_key) = stuck("t-8");

    let d = Driver::start();
    let base = format!("http://{addr}");
    d.sign_in(&base, REVIEWER_KEY);

    // Every card: its scope, tool and human times; never epoch milliseconds.
    for id in [
        conflict,
        stale,
        rejected_a,
        rejected_b,
        approve_me,
        deny_me,
        applied,
        not_applied,
    ] {
        let card = d.text(&format!("#item-{id}"));
        assert!(card.contains("About: customer_id: c-1"), "{card}");
        assert!(card.contains("ticket_id: t-"), "{card}");
        let opened = d.text(&format!("#item-{id} .opened"));
        assert!(
            opened.contains(" UTC (") && opened.ends_with(" ago)"),
            "{opened}"
        );
        assert!(!has_epoch_millis(&card), "{card}");
    }
    assert!(
        d.text(&format!("#item-{conflict} .tool"))
            .contains("apply_goodwill_credit")
    );
    // Amounts in minor units with two decimals, beside the raw value.
    let prior = d.text(&format!("#item-{conflict} .prior-arguments"));
    assert!(
        prior.contains("15.00 (1500)") && prior.contains("late_delivery"),
        "{prior}"
    );
    let new = d.text(&format!("#item-{conflict} .new-arguments"));
    assert!(new.contains("19.99 (1999)"), "{new}");
    assert!(
        d.text(&format!("#item-{approve_me}"))
            .contains("20.00 (2000)")
    );
    // A pending approval says when it expires, relative too.
    let pending = d.text(&format!("#item-{approve_me}"));
    assert!(
        pending.contains("expires ") && pending.contains("(in "),
        "{pending}"
    );
    // The hostile message is text, without JSON's escaped quotes, and its
    // markup was not rendered.
    let message = d.text(&format!("#item-{rejected_a} .message"));
    assert!(
        message.contains("\"<b>bold</b>\" is not one of \"late_delivery\""),
        "{message}"
    );
    assert!(!message.contains("\\\""), "{message}");
    // The stuck claim's lease end is a UTC time.
    let lease = d.text(&format!("#item-{applied} .message"));
    assert!(
        lease.contains(" UTC") && !has_epoch_millis(&lease),
        "{lease}"
    );

    // Each action: the page says who did it and shows the note, and the
    // item's status and (where it has an operation) its audit trail follow.
    let act = |item: u64, key: Option<&str>, action: &str, note: Option<&str>| {
        let to = match action {
            "approve" => "approved",
            "deny" => "denied",
            "resolve" => "resolved",
            _ => "dismissed",
        };
        let s = d.act_on(item, action, note);
        assert!(s.contains(&format!("{to} by reviewer-1")), "{s}");
        assert!(note.is_none_or(|n| s.contains(n)), "{s}");
        assert_eq!(status_of(item), to);
        if let Some(key) = key {
            assert!(audit(key).contains(&("reviewer-1".into(), to.into())));
        }
    };
    act(approve_me, Some(&approve_key), "approve", None);
    let note = Some("too large <for> one order");
    act(deny_me, Some(&deny_key), "deny", note);
    let note = Some("paid once, closed");
    act(conflict, Some(&conflict_key), "resolve", note);
    let stale_key = Some(stale_key.as_str()).filter(|k| !k.is_empty());
    act(
        stale,
        stale_key,
        "dismiss",
        Some("the model will read again"),
    );
    act(rejected_a, None, "resolve", None);
    act(rejected_b, None, "dismiss", None);

    // The stuck claims, closed from their cards: the reconciliation is
    // recorded under the reviewer and the item resolved with a note.
    let s = d.act_on(applied, "applied", Some("credit c-77 is in the ledger"));
    assert!(
        s.contains("resolved by reviewer-1") && s.contains("reconciled as applied: credit c-77"),
        "{s}"
    );
    assert_eq!(status_of(applied), "resolved");
    let trail = audit(&applied_key);
    assert!(
        trail.contains(&("reviewer-1".into(), "reconciled_applied".into())),
        "{trail:?}"
    );
    assert!(
        trail.contains(&("reviewer-1".into(), "resolved".into())),
        "{trail:?}"
    );
    let s = d.act_on(not_applied, "not-applied", None);
    assert!(s.contains("reconciled as not applied"), "{s}");
    assert_eq!(status_of(not_applied), "resolved");
    let trail = audit(&not_applied_key);
    assert!(
        trail.contains(&("reviewer-1".into(), "reconciled_not_applied".into())),
        "{trail:?}"
    );
    // The claims are closed: a retry of the applied one replays the
    // reviewer's answer; the one reconciled as not applied runs again as
    // attempt 2 (a new permit, its own idempotency key). The server
    // executed neither.
    let r = decide(CLIENT_KEY, decision_body(credit(1250), "t-7", "5"));
    assert_eq!(r["outcome"], "replayed", "{r}");
    assert_eq!(r["result"]["reconciled_by"], "reviewer-1");
    let r = decide(CLIENT_KEY, decision_body(credit(1250), "t-8", "5"));
    assert_eq!(r["outcome"], "permitted", "{r}");
    assert_eq!(r["permit"]["attempt"], 2, "{r}");
    assert_eq!(
        r["permit"]["idempotency_key"],
        format!("{not_applied_key}.2"),
        "{r}"
    );
    assert_eq!(desk.credits_for("t-7") + desk.credits_for("t-8"), 0);

    // Filtering with the page's GET form.
    d.click("#filter-kind option[value=rejected]");
    d.click("#filter-status option[value=resolved]");
    d.submit("#filter-go");
    assert_eq!(card_ids(&d), vec![rejected_a]);
    // Paging: two cards a page, newest first, to the end.
    d.go(&format!("{base}/review?limit=2"));
    let mut seen = card_ids(&d);
    assert_eq!(seen.len(), 2);
    loop {
        let html = d.cmd("GET", "/source", None);
        if !html
            .as_str()
            .unwrap_or_default()
            .contains("id=\"next-page\"")
        {
            break;
        }
        d.submit("#next-page");
        let page = card_ids(&d);
        // A full page links onward without knowing whether more exist: the
        // page after the last full one may be empty, and is the end.
        if page.is_empty() && seen.len().is_multiple_of(2) {
            break;
        }
        assert!(
            page.len() <= 2 && !page.is_empty(),
            "{page:?} after {seen:?}"
        );
        // Cards are grouped by kind on a page; pages go strictly older.
        assert!(
            page.iter().max() < seen.iter().min(),
            "{page:?} after {seen:?}"
        );
        seen.extend(page);
    }
    let (_, all) = call(
        addr,
        "GET",
        "/v1/review/items?limit=200",
        REVIEWER_KEY,
        None,
    );
    let all: Vec<u64> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_u64().unwrap())
        .collect();
    // Every item once, none skipped.
    seen.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(seen, all);
    drop(d);

    // The page's reconcile action needs a live session (and its CSRF
    // token): a form post without one is answered with the sign-in page.
    let mut s = TcpStream::connect(addr).unwrap();
    let form = "csrf=x&applied=true";
    write!(
        s,
        "POST /review/items/{applied}/reconcile HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
        form.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 401"), "{raw}");
    let _ = stop_tx.send(());
    runtime.block_on(server).unwrap().unwrap();
}
