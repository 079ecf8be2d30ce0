//! The reviewer page's own protections: security headers on every answer,
//! a `Secure` session cookie unless the public URL is `http://`, and the
//! CSRF token compared.

mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use support::http::session_cookie;
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
    let (router, _) = app_router();
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

/// `Secure` whatever `Host` says, unless the configured public URL is
/// plain `http://` (hostile_callers.rs has the proxy's case).
#[tokio::test]
async fn the_session_cookie_is_secure_unless_the_public_url_is_http() {
    let cookie = async |router: &axum::Router, host: &str| {
        call(router, login(host)).await.headers()[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .to_owned()
    };
    let (router, _) = app_router();
    for host in [
        "review.example.com",
        "127.0.0.1:8080",
        "localhost:8080",
        "[::1]:8080",
    ] {
        let c = cookie(&router, host).await;
        assert!(c.contains("; Secure"), "{host}: {c}");
        assert!(
            c.contains("HttpOnly") && c.contains("SameSite=Strict"),
            "{c}"
        );
    }
    let (demo, _) = router_with(toolgate_service::Settings {
        public_url: Some("http://127.0.0.1:8080".into()),
        ..service_settings()
    });
    let c = cookie(&demo, "127.0.0.1:8080").await;
    assert!(!c.contains("Secure"), "{c}");
}

#[tokio::test]
async fn an_action_with_another_csrf_token_is_refused() {
    let (router, _) = app_router();
    let r = call(&router, login("127.0.0.1")).await;
    let session = session_cookie(&r);
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
