//! Hostile callers: the cases an attack pass against a release build found,
//! each as a named test that failed before its fix.
//!
//! - An approval served whoever sent the same proposal next: a reviewer
//!   who approved it, another agent, a client key (which got the permit).
//!   A grant now serves only its proposer, checked in the claim's own
//!   transaction on every store (memory, SQLite, PostgreSQL, MariaDB).
//! - Any key, even one without the tool's capability, filled the review
//!   queue: unknown tools with 690 KB scope values, thousands of small
//!   rejections. Every request's scope is bounded, rejections open items
//!   only for callers who hold the capability, or, for an unknown tool, at
//!   most one per principal, reason and window; the queue has caps, and a
//!   listing carries summaries.
//! - Decisions and refusals that were not audited: a model's tool name
//!   with a newline, a NUL or 300 bytes of it, and every request-level
//!   refusal (`actor_not_allowed`, `invalid_scope`, …).
//! - `version_seen` with three spellings, actors with bidi and zero-width
//!   characters or over 128 bytes, `via` not shown, the cookie's `Secure`
//!   flag taken from `Host`, and SQL text in a 503.
//!
//! PostgreSQL and MariaDB run when `TOOLGATE_TEST_POSTGRES_URL` /
//! `TOOLGATE_TEST_MYSQL_URL` are set (required with
//! `TOOLGATE_REQUIRE_DATABASES=1`).

mod support;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};
use support::databases::{now_nanos, on_each_backend, on_every_store};
use support::http::{
    act, assert_outcome, assert_problem, decide, get, post, send_text as send, session_cookie,
};
use support::*;
use toolgate::claim::{ClaimStore, MemoryClaimStore, OperationKey};
use toolgate::contract::Policy;
use toolgate::pipeline::{Principal, StateError, StateScope, StateSource, StateVersion};
use toolgate::review::QueueLimits;
use toolgate_http::Settings;
use toolgate_service::{ApiKey, ExecutionMode, KeyRing, Parts};
use toolgate_store::AnyClaimStore;
use tower::ServiceExt;

fn refund(amount: i64, ticket: &str) -> Value {
    decision_body(support::refund(amount), ticket, "7")
}

/// A ticket of this run at version 7 (the databases outlive a run).
fn ticket(desk: &DeskRef, name: &str) -> String {
    let t = format!("{name}-{:x}", now_nanos());
    desk.set_version(&t, "7");
    t
}

async fn app_on(url: Option<&str>, settings: impl Into<Both>) -> (Router, DeskRef, StoreRef) {
    let settings = settings.into();
    let desk = DeskRef::default();
    let policy = Policy::load(POLICY).unwrap();
    match url {
        None => {
            let (claims, store) = shared();
            let components = desk_components(&desk, claims);
            let state = new_app(policy, components, keys(), settings);
            (toolgate_http::router(state), desk, StoreRef::Memory(store))
        }
        Some(url) => {
            let store = AnyClaimStore::connect(url).await.unwrap();
            let components = desk_components(&desk, store.clone());
            let state = new_app(policy, components, keys(), settings);
            (toolgate_http::router(state), desk, StoreRef::Any(store))
        }
    }
}

/// The claim store a test app runs on, for reading back what it wrote.
enum StoreRef {
    Memory(std::sync::Arc<MemoryClaimStore>),
    Any(AnyClaimStore),
}

impl StoreRef {
    async fn proposer(&self, key: &OperationKey) -> Option<String> {
        let record = match self {
            Self::Memory(s) => s.fetch(key).await,
            Self::Any(s) => s.fetch(key).await,
        };
        record.unwrap().map(|r| r.proposal.proposer().to_owned())
    }
}

/// A memory store shared with the test, so it can read the audit log
/// (support's switchable store, never switched off here).
fn shared() -> (SwitchStore, std::sync::Arc<MemoryClaimStore>) {
    let store = SwitchStore::default();
    let inner = std::sync::Arc::clone(&store.inner);
    (store, inner)
}

fn key_of(decision: &Value) -> OperationKey {
    OperationKey::from_slice(&hex::decode(decision["operation_key"].as_str().unwrap()).unwrap())
        .unwrap()
}

/// Ben approves ana's item, then sends the identical proposal himself. He
/// got `201 executed` with himself as the claim's proposer, and ana's retry
/// was `replayed`. Now his proposal is his own request for approval (a new
/// item), and ana's retry executes as ana.
async fn ben_approves_anas_item_then_sends_it_himself(url: Option<&str>) {
    let (app, desk, store) = app_on(url, Settings::default()).await;
    let t = ticket(&desk, "ben");
    // agent-1 is ana; lead-1 (refund:issue and toolgate:review) is ben.
    let (s, ana) = decide(&app, AGENT_KEY, &refund(700, &t)).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{ana}");
    let item = ana["review_item"].as_u64().unwrap();
    let (s, j) = act(&app, LEAD_KEY, item, "approve").await;
    assert_eq!(
        (s, j["item"]["status"].as_str()),
        (StatusCode::OK, Some("approved"))
    );
    let (s, ben) = decide(&app, LEAD_KEY, &refund(700, &t)).await;
    assert_eq!(s, StatusCode::ACCEPTED, "ben used ana's approval: {ben}");
    assert_eq!(ben["outcome"], "pending_approval");
    assert_ne!(ben["review_item"].as_u64(), Some(item), "{ben}");
    assert_eq!(desk.credits_for(&t), 0);
    let (s, retry) = decide(&app, AGENT_KEY, &refund(700, &t)).await;
    assert_outcome(s, &retry, StatusCode::CREATED, "executed");
    assert_eq!(
        store.proposer(&key_of(&retry)).await.as_deref(),
        Some("agent-1")
    );
    // The item says who used the grant.
    let (_, got, _) = send(&app, get(&format!("/v1/review/items/{item}"), REVIEWER_KEY)).await;
    assert_eq!(got["item"]["consumed_by"], "agent-1", "{got}");
}

/// With a client key, after the reviewer approved agent-1's item, another
/// client key's identical proposal got `200 permitted` and a permit. Now it
/// gets an item of its own and no permit.
async fn a_client_key_after_approval(url: Option<&str>) {
    let (app, desk, _) = app_on(url, Settings::default()).await;
    let t = ticket(&desk, "client");
    let (s, first) = decide(&app, AGENT_KEY, &refund(900, &t)).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let item = first["review_item"].as_u64().unwrap();
    act(&app, REVIEWER_KEY, item, "approve").await;
    let (s, php) = decide(&app, CLIENT_KEY, &refund(900, &t)).await;
    assert_eq!(
        s,
        StatusCode::ACCEPTED,
        "the client key took the permit: {php}"
    );
    assert!(php.get("permit").is_none_or(Value::is_null), "{php}");
    assert_ne!(php["review_item"].as_u64(), Some(item));
    // The proposer's own retry uses it.
    let (s, again) = decide(&app, AGENT_KEY, &refund(900, &t)).await;
    assert_outcome(s, &again, StatusCode::CREATED, "executed");
}

#[tokio::test]
async fn ben_approves_anas_item_then_sends_it_himself_in_memory() {
    ben_approves_anas_item_then_sends_it_himself(None).await;
    a_client_key_after_approval(None).await;
}

async fn ben_then_a_client_key(url: &str) {
    ben_approves_anas_item_then_sends_it_himself(Some(url)).await;
    a_client_key_after_approval(Some(url)).await;
}

on_each_backend!(ben_then_a_client_key, "toolgate-hostile":
    ben_approves_anas_item_then_sends_it_himself_on_sqlite,
    ben_approves_anas_item_then_sends_it_himself_on_postgres,
    ben_approves_anas_item_then_sends_it_himself_on_mariadb
);

/// `/review` after the grant was used: the page says who used it (it said
/// "the proposer's retry used it" whoever had).
#[tokio::test]
async fn the_page_says_who_used_the_grant() {
    let (app, desk, _) = app_on(None, Settings::default()).await;
    let t = ticket(&desk, "page");
    let (_, d) = decide(&app, AGENT_KEY, &refund(700, &t)).await;
    let item = d["review_item"].as_u64().unwrap();
    act(&app, REVIEWER_KEY, item, "approve").await;
    decide(&app, AGENT_KEY, &refund(700, &t)).await;
    let html = review_page(&app, &format!("/review/items/{item}")).await;
    assert!(
        html.contains("used by <span class=\"used-by\">agent-1</span>"),
        "{html}"
    );
}

/// Signs in as reviewer-1 and reads `path`.
async fn review_page(app: &Router, path: &str) -> String {
    let login = Request::post("/review/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("key={REVIEWER_KEY}")))
        .unwrap();
    let r = app.clone().oneshot(login).await.unwrap();
    let cookie = session_cookie(&r);
    let (s, _, html) = send(
        app,
        Request::get(path)
            .header(header::COOKIE, cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{path}: {html}");
    html
}

async fn items(app: &Router, query: &str) -> Vec<Value> {
    let (s, j, _) = send(app, get(&format!("/v1/review/items?{query}"), REVIEWER_KEY)).await;
    assert_eq!(s, StatusCode::OK, "{j}");
    j["items"].as_array().cloned().unwrap_or_default()
}

/// The two tests that count the capability-less key's items on a shared
/// database: run side by side, one sees the other's items as its own.
static NOCAP_ITEMS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn unknown_tool(scope: Value) -> Value {
    json!({
        "provider": "envelope",
        "response": action("no_such_tool", json!({"x": 1})),
        "scope": scope,
    })
}

/// Sixty proposals of `no_such_tool`, each with three 690,000-byte scope
/// strings, from a key with no capability at all: each was `422` and each
/// opened a review item of about 2 MB. Now each is refused
/// (`invalid_scope`) before anything is stored, and audited.
async fn huge_scopes_for_an_unknown_tool_open_nothing(url: Option<&str>) {
    let _alone = NOCAP_ITEMS.lock().await;
    let (app, _, _) = app_on(url, Settings::default()).await;
    let newest = items(&app, "limit=1")
        .await
        .first()
        .and_then(|i| i["id"].as_u64())
        .unwrap_or(0);
    let big = "x".repeat(690_000);
    for _ in 0..3 {
        let body = unknown_tool(json!({
            "customer_id": big, "ticket_id": big, "version_seen": big
        }));
        let (s, j) = decide(&app, NOCAP_KEY, &body).await;
        assert_problem(s, &j, StatusCode::UNPROCESSABLE_ENTITY, "invalid_scope");
        assert!(j.get("review_item").is_none_or(Value::is_null), "{j}");
    }
    // Other tests of this binary open items on a shared database meanwhile:
    // only this key's items for this tool count.
    let opened: Vec<Value> = items(&app, "limit=200")
        .await
        .into_iter()
        .filter(|i| {
            i["id"].as_u64().is_some_and(|id| id > newest)
                && i["proposer"] == "agent-2"
                && i["tool"] == "no_such_tool"
        })
        .collect();
    assert!(opened.is_empty(), "items were opened: {opened:?}");
}

on_every_store!(huge_scopes_for_an_unknown_tool_open_nothing, "toolgate-hostile":
    huge_scopes_for_an_unknown_tool_open_nothing_on_every_store
);

/// 2,000 small rejected proposals opened 2,000 items in 1.6 s. A key
/// without the proposed tool's capability now opens none; rejections of an
/// unknown tool open one item per principal, reason and window, and every
/// answer names that item. (A key holding the capability opens an item per
/// rejection, within the queue's caps.)
async fn rejections_open_one_item_per_principal_and_reason(url: Option<&str>) {
    let _alone = NOCAP_ITEMS.lock().await;
    let (app, _, _) = app_on(url, Settings::default()).await;
    // agent-2 holds no capability: invalid arguments for a credit (a tool
    // it may not use) open nothing.
    let before = items(&app, "kind=rejected&limit=200").await;
    for amount in 0..20 {
        let body = decision_body(
            action(
                "apply_goodwill_credit",
                json!({"amount_minor": -amount, "reason_code": "late_delivery"}),
            ),
            "t-1",
            "7",
        );
        let (s, j) = decide(&app, NOCAP_KEY, &body).await;
        assert_outcome(s, &j, StatusCode::UNPROCESSABLE_ENTITY, "rejected");
        assert!(j.get("review_item").is_none_or(Value::is_null), "{j}");
    }
    // An unknown tool: one item for the window, whoever asks how often.
    let mut named = std::collections::BTreeSet::new();
    for i in 0..50 {
        let (s, j) = decide(
            &app,
            NOCAP_KEY,
            &unknown_tool(json!({"ticket_id": format!("t-{i}")})),
        )
        .await;
        assert_eq!(
            (s, j["reason"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("unknown_tool"))
        );
        named.insert(j["review_item"].as_u64().expect("an item is named"));
    }
    let after = items(&app, "kind=rejected&limit=200").await;
    let new: Vec<&Value> = after
        .iter()
        .filter(|i| !before.iter().any(|b| b["id"] == i["id"]))
        .collect();
    // One item per window (an item of an earlier run in this window on a
    // shared database stands for these too), and the test crosses at most
    // two windows.
    assert!(
        named.len() <= 2 && new.len() <= named.len(),
        "{} new items, {} named",
        new.len(),
        named.len()
    );
    assert!(
        new.iter()
            .all(|i| named.contains(&i["id"].as_u64().unwrap()))
    );
}

on_every_store!(rejections_open_one_item_per_principal_and_reason, "toolgate-hostile":
    rejections_open_one_item_per_principal_and_reason_on_every_store
);

/// The queue's caps: conflicts open items until the principal's cap, then
/// none (the decision stands); a request for approval past the cap says
/// the queue is full instead of naming an item nobody will see.
async fn the_queue_has_caps(url: Option<&str>) {
    let settings = toolgate_service::Settings {
        review_queue: QueueLimits {
            per_principal: 3,
            total: 1_000_000,
            rejection_window_ms: 3_600_000,
        },
        ..service_settings()
    };
    let (app, desk, _) = app_on(url, settings).await;
    let t = ticket(&desk, "caps");
    // php-app's own queue (each run of a shared database starts with the
    // items of earlier runs: the cap counts them too, so it is reached at
    // once or after a few).
    let body = |amount: i64| decision_body(credit(amount), &t, "7");
    let (s, _) = decide(&app, CLIENT_KEY, &body(100)).await;
    assert_eq!(s, StatusCode::OK);
    let mut opened = 0;
    for amount in 101..120 {
        let (s, j) = decide(&app, CLIENT_KEY, &body(amount)).await;
        assert_outcome(s, &j, StatusCode::UNPROCESSABLE_ENTITY, "conflict");
        if j["review_item"].as_u64().is_some() {
            opened += 1;
        }
    }
    assert!(opened <= 3, "{opened} items past a cap of 3");
    // php-app is at its cap now: a request for approval is still pending,
    // opens no item, and says so.
    let t = ticket(&desk, "full");
    let (s, j) = decide(&app, CLIENT_KEY, &refund(50, &t)).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    assert!(j.get("review_item").is_none_or(Value::is_null), "{j}");
    assert!(
        j["message"]
            .as_str()
            .unwrap()
            .contains("review queue is full"),
        "{j}"
    );
}

on_every_store!(the_queue_has_caps, "toolgate-hostile":
    the_queue_has_caps_on_every_store
);

/// One `/review` load took the server from 92 to 208 MiB: a listing loaded
/// every item's whole text. It now carries a summary of at most 2 KiB per
/// item, and the item itself has the whole decision.
async fn a_listing_carries_summaries(url: Option<&str>) {
    let (app, desk, _) = app_on(url, Settings::default()).await;
    // A client-executed credit completed with an 8 KB result, then a
    // conflicting proposal: its item's decision carries that result.
    let t = ticket(&desk, "summary");
    let (_, permitted) = decide(&app, CLIENT_KEY, &decision_body(credit(100), &t, "7")).await;
    let key = permitted["operation_key"].as_str().unwrap().to_owned();
    let long = "y".repeat(8_000);
    let done = json!({"holder": permitted["permit"]["holder"], "result": {"note": long}});
    let (s, _, text) = send(
        &app,
        post(&format!("/v1/claims/{key}/complete"), CLIENT_KEY, &done),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let (s, d) = decide(&app, CLIENT_KEY, &decision_body(credit(200), &t, "7")).await;
    assert_outcome(s, &d, StatusCode::UNPROCESSABLE_ENTITY, "conflict");
    let item = d["review_item"].as_u64().unwrap();
    let listed = items(&app, "kind=conflict&limit=200").await;
    let mine = listed.iter().find(|i| i["id"] == item).expect("listed");
    assert!(
        mine["decision"].to_string().len() <= 2048,
        "{}",
        mine["decision"]
    );
    assert_eq!(mine["decision"]["truncated"], true, "{}", mine["decision"]);
    let (_, whole, _) = send(&app, get(&format!("/v1/review/items/{item}"), REVIEWER_KEY)).await;
    assert_eq!(
        whole["item"]["decision"]["result"]["note"],
        long.as_str(),
        "{whole}"
    );
    let html = review_page(&app, "/review?kind=conflict").await;
    assert!(html.contains(&format!("href=\"/review/items/{item}\"")));
    assert!(!html.contains(&long), "a listing carried a whole text");
    let one = review_page(&app, &format!("/review/items/{item}")).await;
    assert!(
        one.contains(&long),
        "the item's own page lacks its whole decision"
    );
}

on_every_store!(a_listing_carries_summaries, "toolgate-hostile":
    a_listing_carries_summaries_on_every_store
);

fn memory_app() -> (Router, std::sync::Arc<MemoryClaimStore>, DeskRef) {
    let desk = DeskRef::default();
    desk.set_version("t-1", "7");
    desk.set_version("t-9", "1");
    let (claims, store) = shared();
    let components = desk_components(&desk, claims);
    let state = test_state(components);
    (toolgate_http::router(state), store, desk)
}

/// A tool name with a newline or a NUL, or 300 bytes of one, gave `422
/// rejected` and no audit row ("decision not audited"). Each now has its
/// row, the name escaped and bounded.
#[tokio::test]
async fn a_model_chosen_tool_name_is_audited_escaped_and_bounded() {
    let (app, store, _) = memory_app();
    let long = "t".repeat(300);
    for name in ["refund\norder", "refund\0order", long.as_str()] {
        let body = decision_body(action(name, json!({})), "t-1", "7");
        let (s, j) = decide(&app, AGENT_KEY, &body).await;
        assert_outcome(s, &j, StatusCode::UNPROCESSABLE_ENTITY, "rejected");
    }
    let log = store.audit_log().unwrap();
    let tools: Vec<&str> = log
        .iter()
        .filter(|e| e.outcome() == "rejected")
        .filter_map(|e| e.tool())
        .collect();
    assert_eq!(tools.len(), 3, "{log:?}");
    assert!(tools.contains(&"refund\\u{a}order"), "{tools:?}");
    assert!(tools.contains(&"refund\\u{0}order"), "{tools:?}");
    assert!(
        tools.iter().any(|t| t.len() <= 256 && t.ends_with('…')),
        "{tools:?}"
    );
}

/// Request-level refusals wrote no audit row. Each now has one, under the
/// key's principal, outcome `refused_request`, the problem code as its
/// reason.
#[tokio::test]
async fn request_refusals_are_audited_under_the_keys_principal() {
    let (app, store, _) = memory_app();
    let credit_body = || credit_on_t1(100);
    let mut with_actor = credit_body();
    with_actor["actor"] = json!("agent-ana");
    let mut bad_scope = credit_body();
    bad_scope["scope"]["ticket_id"] = json!("x".repeat(300));
    let mut unknown_field = credit_body();
    unknown_field["scope"]["actor_id"] = json!("admin");
    let mut entities = credit_body();
    entities["entities"] = json!({"Order": {"id": "o-1"}});
    let cases = [
        (with_actor, "actor_not_allowed"),
        (bad_scope, "invalid_scope"),
        (unknown_field, "unknown_scope_field"),
        (entities, "unexpected_entities"),
    ];
    for (body, code) in &cases {
        let (_, j) = decide(&app, AGENT_KEY, body).await;
        assert_eq!(j["code"], *code, "{j}");
    }
    let log = store.audit_log().unwrap();
    for (_, code) in &cases {
        assert!(
            log.iter().any(|e| e.outcome() == "refused_request"
                && e.reason() == Some(code)
                && e.actor() == "agent-1"),
            "no refused_request row for {code}: {log:?}"
        );
    }
    // The tool is kept where the proposal named one.
    assert!(
        log.iter().any(|e| e.reason() == Some("unexpected_entities")
            && e.tool() == Some("apply_goodwill_credit"))
    );
}

/// `1`, `"01"` and `" 1"` gave three operation keys and three permits on
/// one order. `"01"` and `" 1"` are refused, and `1` and `"1"` are one key.
#[tokio::test]
async fn version_seen_has_one_spelling() {
    let (app, _, _) = memory_app();
    let body = |v: Value| {
        let mut b = decision_body(credit(100), "t-9", "1");
        b["scope"]["version_seen"] = v;
        b
    };
    let (s, first) = decide(&app, CLIENT_KEY, &body(json!(1))).await;
    assert_outcome(s, &first, StatusCode::OK, "permitted");
    for bad in [json!("01"), json!(" 1"), json!("1 "), json!("+1")] {
        let (s, j) = decide(&app, CLIENT_KEY, &body(bad.clone())).await;
        assert_eq!(
            (s, j["code"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_scope")),
            "{bad}: {j}"
        );
    }
    let (_, same) = decide(&app, CLIENT_KEY, &body(json!("1"))).await;
    assert_eq!(same["outcome"], "in_flight", "{same}");
    assert_eq!(same["operation_key"], first["operation_key"]);
}

/// A key acting for users, for the actor and `via` tests.
const SERVICE_KEY: &str = "tg_test_service_acting_for_users";

fn delegating_app() -> (Router, std::sync::Arc<MemoryClaimStore>) {
    let desk = DeskRef::default();
    desk.set_version("t-1", "7");
    let (claims, store) = shared();
    let ring = vec![
        ApiKey {
            sha256: ApiKey::digest(SERVICE_KEY),
            principal: Principal::new("svc-helpdesk", ["refund:issue", "credit:issue"]).unwrap(),
            mode: ExecutionMode::InProcess,
            act_for_users: true,
        },
        ApiKey {
            sha256: ApiKey::digest(REVIEWER_KEY),
            principal: Principal::new("reviewer-1", ["toolgate:review"]).unwrap(),
            mode: ExecutionMode::InProcess,
            act_for_users: false,
        },
    ];
    let components = Parts::new(desk.clone(), desk.clone(), claims, desk);
    let state = new_app(
        Policy::load(POLICY).unwrap(),
        components,
        KeyRing::new(ring).unwrap(),
        Settings::default(),
    );
    (toolgate_http::router(state), store)
}

/// U+202E, U+2028, a zero-width space and 129 to 256 bytes were accepted
/// as actors and stored verbatim, where docs/http-api.md says 128. Each is
/// refused; a look-alike of another script is an identifier like any other
/// (documented), shown on `/review` with its code points, beside `via`.
#[tokio::test]
async fn actors_are_printable_at_the_documented_length_and_via_is_shown() {
    let (app, _) = delegating_app();
    let as_actor = |actor: &str| {
        let mut b = decision_body(
            action("refund_order", json!({"amount_minor": 10})),
            "t-1",
            "7",
        );
        b["actor"] = json!(actor);
        b
    };
    for bad in [
        "agent\u{202e}ana".to_owned(),
        "agent\u{2028}ana".to_owned(),
        "agent\u{200b}ana".to_owned(),
        " agent-ana".to_owned(),
        "a".repeat(129),
        "a".repeat(256),
    ] {
        let (s, j) = decide(&app, SERVICE_KEY, &as_actor(&bad)).await;
        assert_eq!(
            (s, j["code"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body")),
            "{bad:?}: {j}"
        );
    }
    let (s, _) = decide(&app, SERVICE_KEY, &as_actor(&"a".repeat(128))).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let (s, j) = decide(&app, SERVICE_KEY, &as_actor("\u{430}gent-ana")).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{j}");
    let html = review_page(&app, "/review?kind=pending_approval").await;
    assert!(html.contains("via svc-helpdesk"), "via is not shown");
    assert!(
        html.contains("U+0430"),
        "a look-alike reads as the id it imitates"
    );
}

/// The session cookie's `Secure` flag came from the `Host` header, so a
/// proxy on the same host forwarding `Host: 127.0.0.1` got none. It comes
/// from the configured public URL: `Secure` unless that is `http://`.
#[tokio::test]
async fn the_secure_flag_comes_from_the_public_url_not_the_host() {
    let cookie = |settings: toolgate_service::Settings, host: &'static str| async move {
        let (router, _) = router_with(settings);
        let r = router
            .oneshot(
                Request::post("/review/login")
                    .header(header::HOST, host)
                    .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .body(Body::from(format!("key={REVIEWER_KEY}")))
                    .unwrap(),
            )
            .await
            .unwrap();
        r.headers()[header::SET_COOKIE].to_str().unwrap().to_owned()
    };
    for host in ["127.0.0.1:8080", "localhost", "review.example.com"] {
        let c = cookie(service_settings(), host).await;
        assert!(c.contains("; Secure"), "{host}: {c}");
        let c = cookie(
            toolgate_service::Settings {
                public_url: Some("https://review.example.com".into()),
                ..service_settings()
            },
            host,
        )
        .await;
        assert!(c.contains("; Secure"), "{host}: {c}");
    }
    let c = cookie(
        toolgate_service::Settings {
            public_url: Some("http://127.0.0.1:8080".into()),
            ..service_settings()
        },
        "review.example.com",
    )
    .await;
    assert!(!c.contains("Secure"), "{c}");
}

/// A state source whose failures name the application's tables.
#[derive(Clone)]
struct LeakyState {
    misconfigured: bool,
}

impl StateSource for LeakyState {
    async fn current_version(&self, _: StateScope<'_>) -> Result<StateVersion, StateError> {
        let text = "relation \"shop.order_versions\" does not exist";
        if self.misconfigured {
            Err(StateError::misconfigured(format!(
                "the state query returned 2 rows, not one ({text})"
            )))
        } else {
            Err(StateError::new(text))
        }
    }
}

/// The state source's 503 showed SQL error text. Every 503 has the
/// generic detail (the text goes to the log), and a failure every retry
/// meets is `500 deployment_error`, not a retry-later.
#[tokio::test]
async fn a_state_source_failure_never_shows_its_sql() {
    for (misconfigured, status, code) in [
        (false, StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
        (true, StatusCode::INTERNAL_SERVER_ERROR, "deployment_error"),
    ] {
        let desk = DeskRef::default();
        let components = Parts::new(
            desk.clone(),
            LeakyState { misconfigured },
            MemoryClaimStore::new(),
            desk,
        );
        let state = test_state(components);
        let app = toolgate_http::router(state);
        let (s, j, text) = send(&app, post("/v1/decisions", AGENT_KEY, &credit_on_t1(5))).await;
        assert_eq!((s, j["code"].as_str()), (status, Some(code)), "{text}");
        assert!(
            !text.contains("relation") && !text.contains("order_versions"),
            "{text}"
        );
    }
}
