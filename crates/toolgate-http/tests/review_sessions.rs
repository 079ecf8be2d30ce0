//! Reviewer page logins as rows in the claim database: a
//! reviewer signed in on one replica is signed in on another and after a
//! restart, signing out on one ends the session everywhere, an expired
//! session is refused, and the CSRF token is still checked. The old
//! sessions lived in one process's memory, so every step across replicas
//! failed there. SQLite always; PostgreSQL and MariaDB when
//! `TOOLGATE_TEST_POSTGRES_URL` / `TOOLGATE_TEST_MYSQL_URL` are set (and
//! required with `TOOLGATE_REQUIRE_DATABASES=1`).

mod support;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::Value;
use support::databases::{now_nanos, on_each_backend, replica};
use support::*;
use toolgate::claim::UnixMillis;
use toolgate::review::{ReviewSession, ReviewStore, session_digest};
use tower::ServiceExt;

async fn send(app: &Router, req: Request<Body>) -> (StatusCode, String, Option<String>) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let cookie = resp
        .headers()
        .get(header::SET_COOKIE)
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned(), cookie)
}

fn login() -> Request<Body> {
    Request::post("/review/login")
        .header(header::HOST, "127.0.0.1:8080")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("key={REVIEWER_KEY}")))
        .unwrap()
}

fn page(token: &str) -> Request<Body> {
    Request::get("/review")
        .header(header::COOKIE, format!("toolgate_review={token}"))
        .body(Body::empty())
        .unwrap()
}

fn form(path: &str, token: &str, body: String) -> Request<Body> {
    Request::post(path)
        .header(header::COOKIE, format!("toolgate_review={token}"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap()
}

/// The CSRF token the page's forms carry.
fn csrf_of(html: &str) -> String {
    let start = html.find("name=\"csrf\" value=\"").unwrap() + "name=\"csrf\" value=\"".len();
    let len = html[start..].find('"').unwrap();
    html[start..start + len].to_owned()
}

#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it"
)]
async fn decide(app: &Router, body: &Value) -> Value {
    let req = Request::post("/v1/decisions")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {AGENT_KEY}"))
        .body(Body::from(body.to_string()))
        .unwrap();
    let (_, text, _) = send(app, req).await;
    serde_json::from_str(&text).unwrap()
}

#[expect(
    clippy::disallowed_methods,
    reason = "the test reads JSON that toolgate itself wrote; serde_json is an independent reader of it"
)]
async fn item_status(app: &Router, item: u64) -> String {
    // The page of one item: the newest below `item + 1`.
    let req = Request::get(format!("/v1/review/items?before={}&limit=1", item + 1))
        .header(header::AUTHORIZATION, format!("Bearer {REVIEWER_KEY}"))
        .body(Body::empty())
        .unwrap();
    let (_, text, _) = send(app, req).await;
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["items"][0]["id"].as_u64(), Some(item), "{v}");
    v["items"][0]["status"].as_str().unwrap().to_owned()
}

async fn sessions_on(url: &str) {
    let desk = DeskRef::default();
    let ticket = format!("t-{:x}", u64::from(std::process::id()) ^ now_nanos());
    desk.set_version(&ticket, "7");
    let (a, _) = replica(url, &desk).await;
    let (b, _) = replica(url, &desk).await;
    let proposal = decide(&a, &decision_body(refund(500), &ticket, "7")).await;
    let item = proposal["review_item"].as_u64().unwrap();
    // A second item stays open, so the page keeps a form (and its CSRF
    // token) after the first is approved.
    let other = format!("{ticket}-2");
    desk.set_version(&other, "7");
    decide(&a, &decision_body(refund(400), &other, "7")).await;

    // Signed in on A: the cookie names a session B knows.
    let (s, _, cookie) = send(&a, login()).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    let cookie = cookie.unwrap();
    let token = cookie
        .strip_prefix("toolgate_review=")
        .and_then(|c| c.split(';').next())
        .unwrap()
        .to_owned();
    let (s, html, _) = send(&b, page(&token)).await;
    assert_eq!(s, StatusCode::OK, "{html}");
    let csrf = csrf_of(&html);

    // A form with another CSRF token is refused on B; the session's own
    // token approves there.
    let approve = format!("/review/items/{item}/approve");
    let (s, _, _) = send(&b, form(&approve, &token, "csrf=0000".into())).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_eq!(item_status(&a, item).await, "open");
    let (s, body, _) = send(&b, form(&approve, &token, format!("csrf={csrf}"))).await;
    assert_eq!(s, StatusCode::SEE_OTHER, "{body}");
    assert_eq!(item_status(&a, item).await, "approved");

    // A restart (a new process on the same database) keeps the session.
    let (c, c_state) = replica(url, &desk).await;
    let (s, html, _) = send(&c, page(&token)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(csrf_of(&html), csrf);

    // The row is stored under the token's digest, not the token.
    let claims = c_state.service().store();
    let now = UnixMillis(i64::try_from(now_nanos() / 1_000_000).unwrap());
    assert!(
        claims
            .session(session_digest(&token), now)
            .await
            .unwrap()
            .is_some()
    );

    // Signing out on A ends it on B and C.
    let (s, _, _) = send(&a, form("/review/logout", &token, String::new())).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    for r in [&a, &b, &c] {
        let (s, _, _) = send(r, page(&token)).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
    }

    // An expired session is refused, and the next sign-in removes it.
    let expired = format!("expired-{ticket}");
    claims
        .open_session(
            session_digest(&expired),
            ReviewSession {
                principal: "reviewer-1".into(),
                csrf: "c".into(),
                expires_at: UnixMillis(now.0 - 1),
            },
            UnixMillis(now.0 - 2),
        )
        .await
        .unwrap();
    let (s, _, _) = send(&b, page(&expired)).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _, _) = send(&b, form(&approve, &expired, "csrf=c".into())).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(
        claims
            .session(session_digest(&expired), UnixMillis(now.0 - 2))
            .await
            .unwrap()
            .map(|s| s.principal),
        Some("reviewer-1".to_owned()),
        "the expired row is still there before a sign-in purges it"
    );
    let (s, _, _) = send(&a, login()).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert_eq!(
        claims
            .session(session_digest(&expired), UnixMillis(now.0 - 2))
            .await
            .unwrap(),
        None,
        "a sign-in purges expired sessions"
    );
}

on_each_backend!(sessions_on, "toolgate-sessions":
    sessions_are_shared_and_survive_a_restart_on_sqlite,
    sessions_are_shared_and_survive_a_restart_on_postgres,
    sessions_are_shared_and_survive_a_restart_on_mariadb
);
