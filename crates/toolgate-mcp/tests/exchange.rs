//! Token exchange (RFC 8693) against a token endpoint that misbehaves as a
//! hostile or broken issuer would. The real provider's exchange, end to end
//! with the official SDKs, is examples/mcp/oauth/run.sh (`.ci/run`); this
//! is what no well-behaved provider will show: an issuer that echoes the
//! caller's token back, answers without end, or says too much in its error.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use toolgate::pipeline::Credential;
use toolgate_mcp::config::TokenExchange;
use toolgate_mcp::exchange::{ExchangeError, Exchanger};

/// What the endpoint answers, and what it was sent.
#[derive(Default)]
struct Issuer {
    answer: Mutex<Option<(u16, String)>>,
    requests: Mutex<Vec<(Option<String>, String)>>,
}

async fn token(State(issuer): State<Arc<Issuer>>, headers: HeaderMap, body: String) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    issuer.requests.lock().unwrap().push((auth, body.clone()));
    let subject = body
        .split('&')
        .find_map(|kv| kv.strip_prefix("subject_token="))
        .unwrap_or("")
        .to_owned();
    let (status, text) = issuer.answer.lock().unwrap().clone().unwrap_or_else(|| {
        (
            200,
            format!(
                r#"{{"access_token":"up-{subject}","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"bearer","expires_in":300}}"#
            ),
        )
    });
    (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "application/json")],
        text,
    )
        .into_response()
}

async fn start() -> (Arc<Issuer>, Exchanger) {
    let issuer = Arc::new(Issuer::default());
    let app = Router::new()
        .route("/token", axum::routing::post(token))
        .with_state(Arc::clone(&issuer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let exchanger = Exchanger::with_secret(
        "shop",
        TokenExchange {
            token_url: format!("http://{addr}/token"),
            client_id: "toolgate".into(),
            client_secret_env: "TG_TEST_EXCHANGE_SECRET".into(),
            resource: "http://127.0.0.1:9/mcp".into(),
            audience: None,
            scope: Some("orders".into()),
        },
        "s3cret".into(),
    )
    .unwrap();
    (issuer, exchanger)
}

#[tokio::test]
async fn one_exchange_per_person_and_subject_token_until_it_expires() {
    let (issuer, x) = start().await;
    let alice = Credential::new("alice-token-1");
    let got = x.token_for("alice", Some(&alice)).await.unwrap();
    assert_eq!(got.expose(), "up-alice-token-1");
    assert_eq!(x.token_for("alice", Some(&alice)).await.unwrap(), got);
    assert_eq!(issuer.requests.lock().unwrap().len(), 1, "cached");
    // What was asked, and how the gateway authenticated.
    let (auth, form) = issuer.requests.lock().unwrap()[0].clone();
    assert_eq!(auth.as_deref(), Some("Basic dG9vbGdhdGU6czNjcmV0"));
    for part in [
        "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange",
        "subject_token=alice-token-1",
        "subject_token_type=urn%3Aietf%3Aparams%3Aoauth%3Atoken-type%3Aaccess_token",
        "resource=http%3A%2F%2F127.0.0.1%3A9%2Fmcp",
        "scope=orders",
    ] {
        assert!(form.split('&').any(|p| p == part), "{part} not in {form}");
    }
    // Another person, or the same person signed in again: exchanged anew.
    x.token_for("bob", Some(&Credential::new("bob-token")))
        .await
        .unwrap();
    let again = x
        .token_for("alice", Some(&Credential::new("alice-token-2")))
        .await
        .unwrap();
    assert_eq!(again.expose(), "up-alice-token-2");
    assert_eq!(issuer.requests.lock().unwrap().len(), 3);
    assert_eq!(x.cached(), 2);
    // A token that is about to expire is not used: exchanged each time.
    *issuer.answer.lock().unwrap() = Some((
        200,
        r#"{"access_token":"short","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":2}"#.into(),
    ));
    let carol = Credential::new("carol-token");
    x.token_for("carol", Some(&carol)).await.unwrap();
    x.token_for("carol", Some(&carol)).await.unwrap();
    assert_eq!(issuer.requests.lock().unwrap().len(), 5);
}

#[tokio::test]
async fn a_key_has_nothing_to_exchange() {
    let (issuer, x) = start().await;
    let e = x.token_for("agent-ana", None).await.unwrap_err();
    assert_eq!(e.code(), "upstream_needs_person", "{e}");
    assert!(matches!(e, ExchangeError::NeedsPerson(_)));
    assert!(issuer.requests.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_issuer_that_misbehaves_gives_no_token() {
    let (issuer, x) = start().await;
    let subject = Credential::new("alice-token");
    let huge = format!(r#"{{"access_token":"{}"}}"#, "x".repeat(70 * 1024));
    let cases: Vec<(u16, String, &str)> = vec![
        // The caller's own token back: it must never reach the upstream.
        (200, r#"{"access_token":"alice-token","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":60}"#.into(), "own token"),
        (200, r#"{"access_token":"t","issued_token_type":"urn:ietf:params:oauth:token-type:id_token","token_type":"Bearer"}"#.into(), "not an access token"),
        (200, r#"{"access_token":"t","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"DPoP"}"#.into(), "not a bearer"),
        (200, r#"{"access_token":"t","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":-5}"#.into(), "expires_in"),
        (200, r#"{"access_token":"","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer"}"#.into(), "no access_token"),
        (200, r#"{"access_token":"a","access_token":"b"}"#.into(), "not JSON"),
        (200, huge, "over 65536 bytes"),
        // Only the OAuth error code is kept: a description may quote the
        // subject token.
        (400, r#"{"error":"invalid_grant","error_description":"alice-token is expired"}"#.into(), "invalid_grant"),
    ];
    for (status, body, says) in cases {
        *issuer.answer.lock().unwrap() = Some((status, body));
        let e = x.token_for("alice", Some(&subject)).await.unwrap_err();
        assert_eq!(e.code(), "token_exchange_failed", "{e}");
        let text = e.to_string();
        assert!(text.contains(says), "{says}: {text}");
        assert!(
            !text.contains("alice-token"),
            "the subject token leaked: {text}"
        );
    }
    assert_eq!(x.cached(), 0, "nothing cached from a failure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_people_keeps_the_cache_bounded() {
    let (issuer, x) = start().await;
    let total = toolgate_mcp::exchange::MAX_CACHED + 50;
    for i in 0..total {
        let person = format!("person-{i}");
        x.token_for(&person, Some(&Credential::new(&format!("t-{i}"))))
            .await
            .unwrap();
    }
    assert_eq!(issuer.requests.lock().unwrap().len(), total);
    assert_eq!(x.cached(), toolgate_mcp::exchange::MAX_CACHED);
    // The newest are kept; one that went is exchanged again when it calls.
    let last = format!("person-{}", total - 1);
    x.token_for(&last, Some(&Credential::new(&format!("t-{}", total - 1))))
        .await
        .unwrap();
    assert_eq!(issuer.requests.lock().unwrap().len(), total, "still cached");
}
