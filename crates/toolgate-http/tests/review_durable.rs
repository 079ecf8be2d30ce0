//! Review items and approvals as rows in the claim database (docs/design.md
//! §14): ids that never repeat and items that survive a
//! restart (the old queue lived in one process's memory and restarted at
//! 1), acted on from a second replica, four-eyes (the old approve let a key
//! holding both capabilities approve its own proposal), audit rows naming
//! the reviewer, distinct approvers, and in client mode the permit going to
//! the proposer's retry only (the old approve handed it to the reviewer and
//! listed it to every reviewer). Each of these fails on the in-memory
//! queue. SQLite always; PostgreSQL and MariaDB when
//! `TOOLGATE_TEST_POSTGRES_URL` / `TOOLGATE_TEST_MYSQL_URL` are set (and
//! required with `TOOLGATE_REQUIRE_DATABASES=1`).

mod support;

use axum::Router;
use axum::http::StatusCode;
use serde_json::{Value, json};
use support::databases::{now_nanos, on_each_backend, replica_with};
use support::http::{act, assert_outcome, assert_problem, decide, get, post, send_text as send};
use support::*;
use toolgate::claim::{ClaimStore, MemoryClaimStore, OperationKey};
use toolgate::contract::Policy;
use toolgate_http::{AppState, Settings};

fn body(amount: i64, ticket: &str, version: &str) -> Value {
    decision_body(refund(amount), ticket, version)
}

fn policy_with(approvers: &str) -> Policy {
    let text = POLICY.replace(
        "needs_approval = true\n",
        &format!("needs_approval = true\n{approvers}\n"),
    );
    Policy::load(&text).unwrap()
}

#[tokio::test]
async fn the_proposer_cannot_approve_and_each_vote_is_an_audit_row_naming_the_reviewer() {
    let (state, desk) = app();
    let router = toolgate_http::router(state.clone());
    // lead-1 holds both refund:issue and toolgate:review.
    let (s, p) = decide(&router, LEAD_KEY, &body(700, "t-1", "7")).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let item = p["review_item"].as_u64().unwrap();
    let (s, j) = act(&router, LEAD_KEY, item, "approve").await;
    assert_problem(s, &j, StatusCode::CONFLICT, "self_approval");
    let (s, j) = act(&router, LEAD_KEY, item, "deny").await;
    assert_problem(s, &j, StatusCode::CONFLICT, "self_approval");
    // Nothing was recorded: the item is still open with no vote.
    let (_, list, _) = send(&router, get("/v1/review/items?status=open", REVIEWER_KEY)).await;
    let listed = &list["items"][0];
    assert_eq!(
        (
            listed["id"].as_u64(),
            listed["votes"].as_array().map(Vec::len)
        ),
        (Some(item), Some(0))
    );
    let (s, j) = act(&router, REVIEWER_KEY, item, "approve").await;
    assert_eq!(
        (s, j["item"]["status"].as_str()),
        (StatusCode::OK, Some("approved"))
    );
    assert_eq!(j["item"]["votes"][0]["reviewer"], "reviewer-1");
    let (s, r) = decide(&router, LEAD_KEY, &body(700, "t-1", "7")).await;
    assert_outcome(s, &r, StatusCode::CREATED, "executed");
    assert_eq!(desk.credits_for("t-1"), 1);
    assert_approved_by_reviewer_1(state.service().store(), &r).await;
}

#[tokio::test]
async fn in_client_mode_only_the_proposers_retry_receives_the_permit() {
    let (router, desk) = app_router();
    let (s, p) = decide(&router, CLIENT_KEY, &body(900, "t-1", "7")).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let item = p["review_item"].as_u64().unwrap();
    // The reviewer's approval and every listing carry no permit or holder.
    let (s, _, text) = send(
        &router,
        post(
            &format!("/v1/review/items/{item}/approve"),
            REVIEWER_KEY,
            &json!({}),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert!(!text.contains("holder"), "{text}");
    let (_, list, listed) = send(&router, get("/v1/review/items", REVIEWER_KEY)).await;
    assert!(!listed.contains("holder"), "{listed}");
    assert!(list["items"][0]["decision"]["permit"].is_null(), "{listed}");
    // The proposer's retry gets it, once.
    let (s, r) = decide(&router, CLIENT_KEY, &body(900, "t-1", "7")).await;
    assert_outcome(s, &r, StatusCode::OK, "permitted");
    assert!(r["permit"]["holder"].is_string(), "{r}");
    assert_eq!(desk.credits_for("t-1"), 0);
    let (_, r) = decide(&router, CLIENT_KEY, &body(900, "t-1", "7")).await;
    assert_eq!(r["outcome"], "in_flight");
    assert!(r["permit"].is_null());
}

#[tokio::test]
async fn a_tool_may_need_two_distinct_approvers() {
    let desk = DeskRef::default();
    desk.set_version("t-1", "7");
    let components = desk_components(&desk, MemoryClaimStore::new());
    let state = new_app(
        policy_with("approvers = 2"),
        components,
        keys(),
        Settings::default(),
    );
    let router = toolgate_http::router(state);
    let (_, p) = decide(&router, AGENT_KEY, &body(300, "t-1", "7")).await;
    let item = p["review_item"].as_u64().unwrap();
    let (s, j) = act(&router, REVIEWER_KEY, item, "approve").await;
    assert_eq!(
        (s, j["item"]["status"].as_str()),
        (StatusCode::OK, Some("open"))
    );
    let (s, j) = act(&router, REVIEWER_KEY, item, "approve").await;
    assert_problem(s, &j, StatusCode::CONFLICT, "already_voted");
    // One approval of two: the retry is still pending, on the same item.
    let (s, r) = decide(&router, AGENT_KEY, &body(300, "t-1", "7")).await;
    assert_eq!(
        (s, r["review_item"].as_u64()),
        (StatusCode::ACCEPTED, Some(item))
    );
    assert_eq!(desk.credits_for("t-1"), 0);
    let (s, j) = act(&router, REVIEWER2_KEY, item, "approve").await;
    assert_eq!(
        (s, j["item"]["status"].as_str()),
        (StatusCode::OK, Some("approved"))
    );
    let (s, r) = decide(&router, AGENT_KEY, &body(300, "t-1", "7")).await;
    assert_outcome(s, &r, StatusCode::CREATED, "executed");
    assert_eq!(desk.credits_for("t-1"), 1);
}

#[tokio::test]
async fn a_bad_listing_or_note_is_refused_with_a_stable_code() {
    let (router, _) = app_router();
    for q in [
        "limit=0",
        "limit=201",
        "status=stuck",
        "kind=answer",
        "colour=red",
    ] {
        let (s, j, _) = send(&router, get(&format!("/v1/review/items?{q}"), REVIEWER_KEY)).await;
        assert_eq!(
            (s, j["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_query")),
            "{q}"
        );
    }
    let (_, p) = decide(&router, AGENT_KEY, &body(300, "t-1", "7")).await;
    let item = p["review_item"].as_u64().unwrap();
    let long = "n".repeat(2001);
    let (s, j, _) = send(
        &router,
        post(
            &format!("/v1/review/items/{item}/deny"),
            REVIEWER_KEY,
            &json!({"note": long}),
        ),
    )
    .await;
    assert_problem(s, &j, StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
    // A pending approval is approved or denied, never resolved.
    let (s, j) = act(&router, REVIEWER_KEY, item, "resolve").await;
    assert_problem(s, &j, StatusCode::CONFLICT, "not_pending");
}

async fn replica(url: &str, desk: &DeskRef) -> (Router, AppState) {
    replica_with(url, desk, policy_with("")).await
}

/// Two replicas on one database, then a restart: items listed and acted on
/// from either, kept, and ids never handed out twice.
async fn durable_on(url: &str) {
    let desk = DeskRef::default();
    // Tickets unique to this run: the network databases keep earlier runs.
    let run = format!("{:x}", u64::from(std::process::id()) ^ now_nanos());
    let (t1, t2) = (format!("t1-{run}"), format!("t2-{run}"));
    desk.set_version(&t1, "7");
    desk.set_version(&t2, "3");
    let (a, _) = replica(url, &desk).await;
    let (b, _) = replica(url, &desk).await;
    let (s, p) = decide(&a, AGENT_KEY, &body(500, &t1, "7")).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{p}");
    let item = p["review_item"].as_u64().unwrap();
    // Twelve retries of one proposal racing on both replicas: one item.
    let t3 = format!("t3-{run}");
    desk.set_version(&t3, "1");
    let racing: Vec<_> = (0..12)
        .map(|i| {
            let r = if i % 2 == 0 { a.clone() } else { b.clone() };
            let body = body(50, &t3, "1");
            tokio::spawn(async move { decide(&r, AGENT_KEY, &body).await.1 })
        })
        .collect();
    let mut ids = std::collections::BTreeSet::new();
    for r in racing {
        ids.insert(r.await.unwrap()["review_item"].as_u64().unwrap());
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    // Replica B lists and approves what A opened.
    let (_, list, _) = send(
        &b,
        get(
            "/v1/review/items?kind=pending_approval&status=open&limit=200",
            REVIEWER_KEY,
        ),
    )
    .await;
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["id"].as_u64() == Some(item)),
        "{list}"
    );
    let (s, j) = act(&b, REVIEWER_KEY, item, "approve").await;
    assert_eq!(
        (s, j["item"]["status"].as_str()),
        (StatusCode::OK, Some("approved")),
        "{j}"
    );
    // A stale version on B: an item of another kind, resolved on A.
    let (s, stale) = decide(&b, AGENT_KEY, &decision_body(credit(100), &t2, "2")).await;
    assert_outcome(s, &stale, StatusCode::CONFLICT, "state_changed");
    let stale_item = stale["review_item"].as_u64().unwrap();
    assert!(stale_item > item);
    let (s, j, _) = send(
        &a,
        post(
            &format!("/v1/review/items/{stale_item}/resolve"),
            REVIEWER_KEY,
            &json!({"note": "re-read"}),
        ),
    )
    .await;
    assert_eq!(
        (s, j["item"]["status"].as_str()),
        (StatusCode::OK, Some("resolved")),
        "{j}"
    );
    // The restart: both replicas gone, a new one on the same database.
    drop((a, b));
    let (c, state) = replica(url, &desk).await;
    let (s, j) = act(&c, REVIEWER2_KEY, item, "approve").await;
    assert_problem(s, &j, StatusCode::CONFLICT, "not_pending");
    // The proposer's retry after the restart uses the approval, once.
    let (s, r) = decide(&c, AGENT_KEY, &body(500, &t1, "7")).await;
    assert_outcome(s, &r, StatusCode::CREATED, "executed");
    assert_eq!(desk.credits_for(&t1), 1);
    let (_, page, _) = send(
        &c,
        get(
            &format!("/v1/review/items?before={}&limit=1", item + 1),
            REVIEWER_KEY,
        ),
    )
    .await;
    let kept = &page["items"][0];
    assert_eq!(kept["id"].as_u64(), Some(item), "{page}");
    assert!(kept["consumed_at"].is_i64(), "{kept}");
    assert_eq!(kept["votes"][0]["reviewer"], "reviewer-1");
    // A new item after the restart has a new id.
    let (_, p) = decide(&c, AGENT_KEY, &body(600, &t2, "3")).await;
    assert!(p["review_item"].as_u64().unwrap() > stale_item, "{p}");
    // The reviewers' actions are audit rows naming them.
    assert_approved_by_reviewer_1(state.service().store(), &r).await;
}

/// The audit trail of `decision`'s claim has reviewer-1's approval.
async fn assert_approved_by_reviewer_1(claims: &impl ClaimStore, decision: &Value) {
    let trail = claims.audit_trail(&key_of(decision), 100).await.unwrap();
    assert!(
        trail
            .iter()
            .any(|e| e.actor() == "reviewer-1" && e.outcome() == "approved"),
        "{trail:?}"
    );
}

fn key_of(decision: &Value) -> OperationKey {
    let hex = decision["operation_key"].as_str().unwrap();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    OperationKey::from_slice(&bytes).unwrap()
}

on_each_backend!(durable_on, "toolgate-review":
    items_survive_a_restart_and_are_shared_by_replicas_on_sqlite,
    items_survive_a_restart_and_are_shared_by_replicas_on_postgres,
    items_survive_a_restart_and_are_shared_by_replicas_on_mariadb
);

/// The optional webhook: a real HTTP receiver on a loopback port gets one
/// signed POST per new item, and the signature verifies over the raw body.
#[tokio::test]
async fn a_new_item_is_announced_on_the_signed_webhook() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(String, Vec<u8>)>(4);
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let tx = tx.clone();
            tokio::spawn(async move {
                // One request: headers, then Content-Length bytes of body.
                let mut raw = Vec::new();
                let mut buf = [0u8; 4096];
                let (head, body) = loop {
                    let n = sock.read(&mut buf).await.unwrap();
                    raw.extend_from_slice(&buf[..n]);
                    if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&raw[..end]).into_owned();
                        let len: usize = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap())
                            })
                            .unwrap_or(0);
                        while raw.len() < end + 4 + len {
                            let n = sock.read(&mut buf).await.unwrap();
                            raw.extend_from_slice(&buf[..n]);
                        }
                        break (head, raw[end + 4..end + 4 + len].to_vec());
                    }
                };
                sock.write_all(
                    b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await
                .unwrap();
                tx.send((head, body)).await.unwrap();
            });
        }
    });
    let desk = DeskRef::default();
    desk.set_version("t-1", "7");
    let components = desk_components(&desk, MemoryClaimStore::new());
    let settings = toolgate_service::Settings {
        review_webhook: Some(toolgate_service::ReviewWebhook {
            url: format!("http://{addr}/toolgate-items"),
            secret: b"s3cret".to_vec(),
            timeout: std::time::Duration::from_secs(5),
        }),
        ..service_settings()
    };
    let router = toolgate_http::router(new_app(policy_with(""), components, keys(), settings));
    let (_, p) = decide(&router, AGENT_KEY, &body(300, "t-1", "7")).await;
    let item = p["review_item"].as_u64().unwrap();
    // The same proposal again opens no new item, so announces nothing; a
    // stale version is a new item, announced after the first.
    decide(&router, AGENT_KEY, &body(300, "t-1", "7")).await;
    let (_, stale) = decide(&router, AGENT_KEY, &decision_body(credit(100), "t-1", "6")).await;
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(rx.recv().await.unwrap());
    }
    got.sort_by_key(|(_, b)| String::from_utf8_lossy(b).contains("state_changed"));
    let (head, raw) = &got[0];
    assert!(head.starts_with("POST /toolgate-items "), "{head}");
    let sig = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("toolgate-signature: ")
                .or_else(|| l.strip_prefix("Toolgate-Signature: "))
        })
        .unwrap();
    let t: u64 = sig
        .strip_prefix("t=")
        .and_then(|s| s.split(',').next())
        .unwrap()
        .parse()
        .unwrap();
    // Verified as a receiver would, independently of the sender's code:
    // HMAC-SHA256 over "<t>\nPOST\n<target>\n<raw body>" (signature v2).
    let mut mac = <hmac::Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(b"s3cret").unwrap();
    hmac::Mac::update(&mut mac, format!("{t}\nPOST\n/toolgate-items\n").as_bytes());
    hmac::Mac::update(&mut mac, raw);
    let want = hex::encode(hmac::Mac::finalize(mac).into_bytes());
    assert_eq!(sig, format!("t={t},v2={want}"));
    let now = t + 1;
    assert_eq!(
        toolgate::sign::verify(b"s3cret", sig, now, 300, "POST", "/toolgate-items", raw),
        Ok(())
    );
    let announced =
        toolgate::decode::decode_strict(raw, &toolgate::decode::Limits::provider_body()).unwrap();
    assert_eq!(announced["id"].as_u64(), Some(item));
    assert_eq!(announced["kind"], "pending_approval");
    assert_eq!(announced["tool"], "refund_order");
    assert!(announced["created_at"].is_i64());
    let second =
        toolgate::decode::decode_strict(&got[1].1, &toolgate::decode::Limits::provider_body())
            .unwrap();
    assert_eq!(second["id"].as_u64(), stale["review_item"].as_u64());
    assert_eq!(second["kind"], "state_changed");
}
