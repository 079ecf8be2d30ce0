//! The reviewer page's own protections: security headers on every answer,
//! a `Secure` session cookie off loopback, and the CSRF token compared.

mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use support::*;
use tower::ServiceExt;

async fn call(router: &axum::Router, req: Request<Body>) -> axum::response::Response {
    router.clone().oneshot(req).await.unwrap()
}

fn login(host: &str) -> Request<Body> {
    Request::post("/review/login")
        .header(header::HOST, host)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("key={REVIEWER_KEY}")))
        .unwrap()
}

#[tokio::test]
async fn every_page_answer_is_uncached_unframed_and_scriptless() {
    let (state, _) = app();
    let router = toolgate_http::router(state);
    let login_page = call(
        &router,
        Request::get("/review").body(Body::empty()).unwrap(),
    )
    .await;
    let logged_in = call(&router, login("review.example.com")).await;
    for r in [&login_page, &logged_in] {
        let h = r.headers();
        assert_eq!(h[header::CACHE_CONTROL], "no-store");
        let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        for part in [
            "default-src 'none'",
            "frame-ancestors 'none'",
            "form-action 'self'",
        ] {
            assert!(csp.contains(part), "{csp}");
        }
        assert_eq!(h[header::X_FRAME_OPTIONS], "DENY");
    }
}

#[tokio::test]
async fn the_session_cookie_is_secure_except_on_loopback() {
    let (state, _) = app();
    let router = toolgate_http::router(state);
    let cookie =
        |r: &axum::response::Response| r.headers()[header::SET_COOKIE].to_str().unwrap().to_owned();
    let remote = cookie(&call(&router, login("review.example.com")).await);
    assert!(remote.contains("; Secure"), "{remote}");
    assert!(
        remote.contains("HttpOnly") && remote.contains("SameSite=Strict"),
        "{remote}"
    );
    for host in ["127.0.0.1:8080", "localhost:8080", "[::1]:8080"] {
        let local = cookie(&call(&router, login(host)).await);
        assert!(!local.contains("Secure"), "{host}: {local}");
    }
}

#[tokio::test]
async fn an_action_with_another_csrf_token_is_refused() {
    let (state, _) = app();
    let router = toolgate_http::router(state);
    let r = call(&router, login("127.0.0.1")).await;
    let session = r.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    for token in ["", "00", &"0".repeat(32)] {
        let r = call(
            &router,
            Request::post("/review/items/1/deny")
                .header(header::COOKIE, &session)
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(format!("csrf={token}")))
                .unwrap(),
        )
        .await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{token:?}");
    }
}
