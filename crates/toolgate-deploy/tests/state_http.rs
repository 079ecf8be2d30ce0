//! The `http` state source over real HTTP: every GET carries a v2
//! `Toolgate-Signature` over its method, its exact request target and an
//! empty body, which the receiver verifies with `toolgate::sign::verify`;
//! placeholders are percent-encoded, `.` included.

mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use support::*;
use toolgate::claim::MemoryClaimStore;
use toolgate::pipeline::Outcome;
use toolgate::sign;
use toolgate_deploy::{ConfigError, DeploySection, Prepared};

/// One GET: its request target and whether its signature verified.
type Asked = (String, Result<(), sign::Refusal>);

/// What the state endpoint saw, and the secret it verifies with.
#[derive(Clone, Default)]
struct Seen {
    asked: Arc<Mutex<Vec<Asked>>>,
    secret: Arc<Mutex<Vec<u8>>>,
}

async fn version(State(seen): State<Seen>, uri: Uri, headers: HeaderMap) -> Response {
    let target = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header = headers
        .get(sign::HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let secret = seen.secret.lock().unwrap().clone();
    let verdict = sign::verify(&secret, header, now, 300, "GET", &target, b"");
    seen.asked.lock().unwrap().push((target, verdict));
    if verdict.is_err() {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        json!({"version": 3}).to_string(),
    )
        .into_response()
}

async fn start(secret: &[u8]) -> (String, Seen) {
    let seen = Seen::default();
    *seen.secret.lock().unwrap() = secret.to_vec();
    let app = Router::new()
        .route("/orders/{id}/version", get(version))
        .with_state(seen.clone());
    (serve(app).await, seen)
}

async fn load(db: &str, executor: &str, state: &str) -> Result<Prepared, ConfigError> {
    let text = format!(
        "[app_db]\nurl = \"{db}\"\n{}",
        tool_toml("", executor, state)
    );
    let section = DeploySection::from_toml(&text)?;
    Prepared::load(&section, Path::new("."), &policy(), CEDAR).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_get_is_signed_over_its_exact_target() {
    let db = sqlite_app_db("httpsig").await;
    // An agent whose id holds a `.` and a `/`, which the URL must carry
    // encoded.
    let pool = sqlx::SqlitePool::connect(&db).await.unwrap();
    sqlx::query("INSERT INTO agents VALUES ('agent.ana/x', 'blue', 'staff')")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let own = temp_path("httpsig-own");
    std::fs::write(&own, "the-state-source-own-secret-0123\n").unwrap();
    let (base, seen) = start(b"the-state-source-own-secret-0123").await;
    let state = format!(
        r#"{{ source = "http", url = "{base}/orders/{{order_id}}/version?who={{actor}}", secret_file = "{}" }}"#,
        own.display()
    );
    let d = load(&db, "{ kind = \"client\" }", &state).await.unwrap();
    let actor = agent("agent.ana/x");
    let ok = propose(&d, &MemoryClaimStore::new(), &actor, json!(1), 500, "3", 1)
        .await
        .unwrap();
    assert_eq!(ok.outcome(), Outcome::Permitted, "{ok:?}");
    let asked = seen.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].0, "/orders/1/version?who=agent%2Eana%2Fx");
    assert_eq!(asked[0].1, Ok(()), "the receiver verifies the signature");

    // A receiver holding another secret refuses it: the signature is what
    // authenticates the GET.
    *seen.secret.lock().unwrap() = b"some-other-secret-of-enough-bytes".to_vec();
    let e = propose(&d, &MemoryClaimStore::new(), &actor, json!(1), 500, "3", 2)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("401"), "{e}");
    let asked = seen.asked.lock().unwrap().clone();
    assert_eq!(asked[1].1, Err(sign::Refusal::Mismatch));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_get_signs_with_the_webhook_secret_by_default() {
    let db = sqlite_app_db("httpsigwh").await;
    let secret = secret_file("httpsigwh");
    let (base, seen) = start(SECRET.as_bytes()).await;
    let executor = format!(
        r#"{{ kind = "webhook", url = "{base}/w", status_url = "{base}/s", secret_file = "{}" }}"#,
        secret.display()
    );
    let state = format!(r#"{{ source = "http", url = "{base}/orders/{{order_id}}/version" }}"#);
    let d = load(&db, &executor, &state).await.unwrap();
    let stale = propose(
        &d,
        &MemoryClaimStore::new(),
        &agent("agent-ana"),
        json!(1),
        500,
        "2",
        1,
    )
    .await
    .unwrap();
    assert_eq!(stale.outcome(), Outcome::StateChanged, "{stale:?}");
    let asked = seen.asked.lock().unwrap().clone();
    assert_eq!(asked, vec![("/orders/1/version".to_owned(), Ok(()))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_state_source_without_a_secret_is_refused() {
    let db = sqlite_app_db("httpsignone").await;
    let state = r#"{ source = "http", url = "http://127.0.0.1:9/orders/{order_id}/version" }"#;
    match load(&db, "{ kind = \"client\" }", state).await {
        Ok(_) => panic!("loaded an unsigned state source"),
        Err(e) => {
            assert_eq!(e.field(), "tools[refund_order].state.secret_env", "{e}");
            assert!(
                e.message().contains("needs a secret to sign its GET"),
                "{e}"
            );
        }
    }
}
