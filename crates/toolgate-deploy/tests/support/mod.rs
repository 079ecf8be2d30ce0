//! What the tests share: the application's tables (created by the test on
//! SQLite, PostgreSQL or MariaDB), the policy and Cedar policies of a shop's
//! `refund_order` tool, an HTTP server on loopback playing the shop, and a
//! helper that runs one proposal through the real pipeline.

#![allow(dead_code, reason = "each test target uses part of the support module")]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use toolgate::claim::{HolderToken, MemoryClaimStore, UnixMillis};
use toolgate::contract::{self, CheckOptions, Policy};
use toolgate::pipeline::{Decision, Gate, GateError, Principal, Request, StateVersion, decide};
use toolgate::provider::Provider;
use toolgate_deploy::Prepared;

pub const REQUIRE: &str = "TOOLGATE_REQUIRE_DATABASES";

pub const POLICY: &str = include_str!("../../../../fixtures/policies/refund_order.toml");

/// Same team, a refundable order, an amount within the order's limit; no
/// blocked order; only staff.
pub const CEDAR: &str = r#"
permit(principal, action == Action::"refund_order", resource)
when {
  principal.team == resource.team && resource.refundable &&
  context.arguments.amount_minor <= resource.max_refund
};
forbid(principal, action, resource) when { resource has blocked_reason };
forbid(principal, action, resource) unless { principal in Team::"staff" };
"#;

/// Refunds `CEDAR` denies, as (actor, order, amount): another team's
/// order; a blocked order; one not refundable; over the order's limit; an
/// agent with no parent team (NULL: no parent, so not in the staff).
pub const DENIED_REFUNDS: [(&str, i64, i64); 5] = [
    ("agent-ana", 3, 500),
    ("agent-ana", 2, 500),
    ("agent-ana", 4, 500),
    ("agent-ana", 1, 10_001),
    ("agent-eve", 1, 500),
];

pub const SECRET: &str = "a-test-secret-of-32-bytes-length";

pub fn policy() -> Policy {
    Policy::load(POLICY).unwrap()
}

/// The tables, named with `prefix`, in SQL all three backends read.
pub fn schema(prefix: &str) -> Vec<String> {
    vec![
        format!(
            "CREATE TABLE {prefix}orders (id INTEGER PRIMARY KEY, version INTEGER NOT NULL, \
             team VARCHAR(32) NOT NULL, refundable BOOLEAN NOT NULL, max_refund INTEGER NOT NULL, \
             blocked_reason VARCHAR(64))"
        ),
        format!(
            "CREATE TABLE {prefix}agents (id VARCHAR(64) PRIMARY KEY, team VARCHAR(32) NOT NULL, \
             parent_team VARCHAR(32))"
        ),
        format!(
            "INSERT INTO {prefix}orders VALUES (1, 3, 'blue', TRUE, 10000, NULL), \
             (2, 3, 'blue', TRUE, 10000, 'fraud'), (3, 3, 'red', TRUE, 10000, NULL), \
             (4, 3, 'blue', FALSE, 10000, NULL)"
        ),
        format!(
            "INSERT INTO {prefix}agents VALUES ('agent-ana', 'blue', 'staff'), \
             ('agent-eve', 'blue', NULL)"
        ),
    ]
}

pub fn drop_schema(prefix: &str) -> Vec<String> {
    vec![
        format!("DROP TABLE IF EXISTS {prefix}orders"),
        format!("DROP TABLE IF EXISTS {prefix}agents"),
    ]
}

/// The `[[tools]]` entry with `executor` (TOML inline table) and the given
/// state source, entities reading the tables named with `prefix`.
pub fn tool_toml(prefix: &str, executor: &str, state: &str) -> String {
    format!(
        r#"
[[tools]]
name = "refund_order"
executor = {executor}
state = {state}

[tools.cedar]
principal_type = "Agent"
resource_type = "Order"
resource_field = "order_id"

[[tools.entities]]
type = "Order"
source = "sql"
query = "SELECT id, team, refundable, max_refund, blocked_reason FROM {prefix}orders WHERE id = :order_id"

[[tools.entities]]
type = "Agent"
source = "sql"
query = "SELECT id, team, parent_team AS \"parent_Team\" FROM {prefix}agents WHERE id = :actor"
"#
    )
}

pub fn sql_state(prefix: &str) -> String {
    format!(
        r#"{{ source = "sql", query = "SELECT version FROM {prefix}orders WHERE id = :order_id" }}"#
    )
}

/// A unique, per-process name part.
pub fn unique(tag: &str) -> String {
    format!("tgd{}_{tag}_", std::process::id())
}

/// A fresh path in the temporary directory (tests in one process run in
/// parallel: a counter keeps two calls with the same tag apart).
pub fn temp_path(tag: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    std::env::temp_dir().join(format!("{}{n}", unique(tag)))
}

/// A fresh SQLite file holding the tables; its `sqlite://` URL.
pub async fn sqlite_app_db(tag: &str) -> String {
    let path = temp_path(tag);
    let _ = std::fs::remove_file(&path);
    let url = format!("sqlite://{}", path.display());
    let opts: sqlx::sqlite::SqliteConnectOptions = url.parse().unwrap();
    let pool = sqlx::SqlitePool::connect_with(opts.create_if_missing(true))
        .await
        .unwrap();
    for s in schema("") {
        sqlx::raw_sql(sqlx::AssertSqlSafe(s))
            .execute(&pool)
            .await
            .unwrap();
    }
    pool.close().await;
    url
}

/// A secret file the webhook signs with.
pub fn secret_file(tag: &str) -> PathBuf {
    let path = temp_path(&format!("{tag}secret"));
    std::fs::write(&path, format!("{SECRET}\n")).unwrap();
    path
}

/// HMAC-SHA256 written out from RFC 2104 over sha2, independent of the
/// crate's `hmac` dependency, to verify what the crate signed.
pub fn independent_hmac(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut k = if key.len() > 64 {
        Sha256::digest(key).to_vec()
    } else {
        key.to_vec()
    };
    k.resize(64, 0);
    let ipad: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
    let opad: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
    let inner = Sha256::new()
        .chain_update(&ipad)
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(&opad)
        .chain_update(inner)
        .finalize()
        .into()
}

/// Whether a `Toolgate-Signature` header signs (`method`, `target`,
/// `body`) with [`SECRET`] (signature v2: HMAC-SHA256 over
/// `"<t>\n<METHOD>\n<target>\n<body>"`), written out here as a receiver
/// would, independently of the crate's code.
pub fn signature_ok(header: Option<&str>, method: &str, target: &str, body: &[u8]) -> bool {
    let Some(h) = header else { return false };
    let Some((t, v2)) = h
        .strip_prefix("t=")
        .and_then(|rest| rest.split_once(",v2="))
    else {
        return false;
    };
    if t.parse::<u64>().is_err() {
        return false;
    }
    let mut signed = format!("{t}\n{method}\n{target}\n").into_bytes();
    signed.extend_from_slice(body);
    hex::encode(independent_hmac(SECRET.as_bytes(), &signed)) == v2
}

/// One request the shop received.
#[derive(Debug, Clone)]
pub struct Received {
    pub mode: String,
    pub signature_ok: bool,
    pub idempotency_key: Option<String>,
    pub content_type: Option<String>,
    pub body: Value,
}

/// One status question the shop received.
#[derive(Debug, Clone)]
pub struct StatusAsked {
    pub idempotency_key: Option<String>,
    pub signature_ok: bool,
}

/// The shop's side: what it received and how the status URL answers.
#[derive(Debug, Clone, Default)]
pub struct Shop {
    pub received: Arc<Mutex<Vec<Received>>>,
    pub status_asked: Arc<Mutex<Vec<StatusAsked>>>,
    /// The status answer: (HTTP status, body).
    pub status_answer: Arc<Mutex<(u16, String)>>,
    /// The `http` state source's versions, by order id.
    pub versions: Arc<Mutex<HashMap<String, Value>>>,
}

fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it, not a door for model JSON"
)]
async fn webhook(
    State(shop): State<Shop>,
    Path(mode): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let ok = signature_ok(
        header(&headers, "toolgate-signature").as_deref(),
        "POST",
        &format!("/w/{mode}"),
        &body,
    );
    shop.received.lock().unwrap().push(Received {
        mode: mode.clone(),
        signature_ok: ok,
        idempotency_key: header(&headers, "idempotency-key"),
        content_type: header(&headers, "content-type"),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let json_answer = |status: StatusCode, v: Value| {
        (
            status,
            [("content-type", "application/json")],
            v.to_string(),
        )
            .into_response()
    };
    match mode.as_str() {
        "ok" => json_answer(
            StatusCode::CREATED,
            json!({"refund_id": 7, "status": "issued"}),
        ),
        "conflict" => json_answer(StatusCode::CONFLICT, json!({"current_version": 4})),
        "precondition" => StatusCode::PRECONDITION_FAILED.into_response(),
        "error" => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        "refuse" => json_answer(StatusCode::UNPROCESSABLE_ENTITY, json!({"error": "no"})),
        "fenced" => json_answer(StatusCode::GONE, json!({"error": "fenced"})),
        // Fenced the first time, applied after: a new attempt's key is not
        // the fenced one.
        "second" if shop.received.lock().unwrap().len() == 1 => {
            json_answer(StatusCode::GONE, json!({"error": "fenced"}))
        }
        "second" => json_answer(
            StatusCode::CREATED,
            json!({"refund_id": 8, "status": "issued"}),
        ),
        "text" => (StatusCode::OK, "refunded").into_response(),
        "array" => json_answer(StatusCode::OK, json!([1, 2])),
        "hang" => {
            // Longer than any timeout the tests configure; the client gives
            // up first and the connection is dropped.
            tokio::time::sleep(Duration::from_secs(60)).await;
            StatusCode::OK.into_response()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn status(
    State(shop): State<Shop>,
    Query(q): Query<HashMap<String, String>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    let target = uri.path_and_query().map_or("/status", |p| p.as_str());
    shop.status_asked.lock().unwrap().push(StatusAsked {
        idempotency_key: q.get("idempotency_key").cloned(),
        signature_ok: signature_ok(
            header(&headers, "toolgate-signature").as_deref(),
            "GET",
            target,
            b"",
        ),
    });
    let (code, body) = shop.status_answer.lock().unwrap().clone();
    (
        StatusCode::from_u16(code).unwrap(),
        [("content-type", "application/json")],
        body,
    )
        .into_response()
}

async fn version(State(shop): State<Shop>, Path(id): Path<String>) -> Response {
    match shop.versions.lock().unwrap().get(&id) {
        Some(v) => (
            StatusCode::OK,
            [("content-type", "application/json")],
            v.to_string(),
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Starts the shop on a loopback port; its base URL (`http://127.0.0.1:N`).
pub async fn start_shop() -> (String, Shop) {
    let shop = Shop::default();
    let app = Router::new()
        .route("/w/{mode}", post(webhook))
        .route("/status", get(status))
        .route("/orders/{id}/version", get(version))
        .with_state(shop.clone());
    (serve(app).await, shop)
}

/// Serves `app` on a loopback port for the rest of the test; its base URL
/// (`http://127.0.0.1:N`).
pub async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    format!("http://{addr}")
}

/// A loopback port nothing listens on (bound, then released).
pub async fn refused_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

pub fn agent(id: &str) -> Principal {
    Principal::new(id, ["refund:issue"]).unwrap()
}

/// The wall clock: the webhook executor bounds its call by the time left
/// on the claim's lease, read from it.
pub fn now() -> UnixMillis {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    UnixMillis(i64::try_from(ms).unwrap())
}

/// A minute from now: every lease [`propose`] gives has ended by then.
pub fn later() -> UnixMillis {
    now().plus_millis(60_000)
}

/// The lease [`propose`] gives: longer than any webhook timeout the tests
/// set plus the margin, so that the webhook's own timeout decides.
pub const LEASE: Duration = Duration::from_secs(10);

/// One proposal to refund `amount` on `order`, the model having seen
/// `version_seen`, through the real pipeline with the deployment's parts.
pub async fn propose(
    d: &Prepared,
    store: &MemoryClaimStore,
    actor: &Principal,
    order: Value,
    amount: i64,
    version_seen: &str,
    holder: u8,
) -> Result<Decision, GateError> {
    let facts = Facts {
        d,
        store,
        actor,
        order,
        amount,
        version_seen,
        holder,
    };
    propose_with(facts, &Map::new()).await
}

/// What [`propose`] takes: one proposal's every fixed fact.
pub struct Facts<'a> {
    pub d: &'a Prepared,
    pub store: &'a MemoryClaimStore,
    pub actor: &'a Principal,
    pub order: Value,
    pub amount: i64,
    pub version_seen: &'a str,
    pub holder: u8,
}

/// [`propose`] with the entities the application sends in the request.
pub async fn propose_with(
    facts: Facts<'_>,
    attributes: &Map<String, Value>,
) -> Result<Decision, GateError> {
    let policy = policy();
    let body = json!({"outcome":"action","reply":"Refunded.",
        "proposed_action":{"tool":"refund_order","arguments":{"amount_minor":facts.amount}}});
    let proposal = contract::check(
        &policy,
        Provider::Envelope,
        body.to_string().as_bytes(),
        &CheckOptions::default(),
    );
    let mut scope = Map::new();
    scope.insert("order_id".into(), facts.order);
    let gate = Gate {
        policy: &policy,
        authorizer: &facts.d.authorizer,
        state: &facts.d.state,
        claims: facts.store,
        executor: &facts.d.executor,
    };
    let version_seen = StateVersion::new(facts.version_seen).unwrap();
    let request = Request {
        principal: facts.actor,
        scope: &toolgate::pipeline::Scope::new(scope.clone(), Some(version_seen.clone())),
        attributes,
        approval: None,
        now: now(),
        holder: HolderToken::from_bytes([facts.holder; 16]),
        lease: LEASE,
    };
    decide(&gate, proposal, &request).await
}
