//! A token issuer for tests: a JWKS (and OpenID metadata) server on
//! loopback over real HTTP, and tokens signed with the Ed25519 test keys
//! in `tests/keys`. Shared by toolgate-service's token tests and the
//! doors' (`#[path]`).

#![allow(dead_code, reason = "each test target uses a different subset")]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolgate_service::{IssuerSettings, Issuers};

/// The test keys, wherever the including test target is.
const KEYS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../toolgate-service/tests/keys"
);

pub const AUDIENCE: &str = "https://gate.example/mcp";

/// A JWKS (and OpenID metadata) server on loopback whose keys, and whether
/// it answers at all, the test changes as it goes.
pub struct Provider {
    pub issuer: String,
    jwks: Arc<Mutex<Value>>,
    pub up: Arc<AtomicBool>,
    pub fetches: Arc<AtomicUsize>,
    /// While set, a JWKS request is counted and then not answered: a slow
    /// issuer, for as long as the test wants.
    pub hold: Arc<AtomicBool>,
}

impl Provider {
    pub async fn start(keys: &[&str]) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", listener.local_addr().unwrap());
        let p = Self {
            issuer: issuer.clone(),
            jwks: Arc::new(Mutex::new(jwks(keys))),
            up: Arc::new(AtomicBool::new(true)),
            fetches: Arc::new(AtomicUsize::new(0)),
            hold: Arc::new(AtomicBool::new(false)),
        };
        let (jwks, up, fetches, hold) = (
            p.jwks.clone(),
            p.up.clone(),
            p.fetches.clone(),
            p.hold.clone(),
        );
        tokio::spawn(async move {
            loop {
                let (mut conn, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let n = conn.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = head.split(' ').nth(1).unwrap_or("").to_owned();
                let (status, body) = if !up.load(Ordering::SeqCst) {
                    ("503 Service Unavailable", "{}".to_owned())
                } else if path == "/jwks" {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    while hold.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    ("200 OK", jwks.lock().unwrap().to_string())
                } else if path == "/.well-known/openid-configuration" {
                    let meta = json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")});
                    ("200 OK", meta.to_string())
                } else {
                    ("404 Not Found", "{}".to_owned())
                };
                let answer = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            }
        });
        p
    }

    pub fn serve_keys(&self, keys: &[&str]) {
        *self.jwks.lock().unwrap() = jwks(keys);
    }

    pub fn settings(&self, jwks_url: Option<String>, refetch: Duration) -> IssuerSettings {
        IssuerSettings {
            issuer: self.issuer.clone(),
            audience: AUDIENCE.into(),
            jwks_url,
            algorithms: vec!["EdDSA".into(), "ES256".into()],
            clock_skew: Duration::from_secs(30),
            principal_claim: "sub".into(),
            client_claims: vec!["azp".into(), "client_id".into()],
            scope_capabilities: BTreeMap::from([(
                "refunds".to_owned(),
                vec!["refund:issue".to_owned()],
            )]),
            groups_claim: Some("groups".into()),
            group_capabilities: BTreeMap::from([(
                "support".to_owned(),
                vec!["credit:issue".to_owned()],
            )]),
            refetch_interval: refetch,
            attributes: BTreeMap::from([("team".to_owned(), "team".to_owned())]),
        }
    }

    pub fn issuers(&self, refetch: Duration) -> Issuers {
        Issuers::new(vec![
            self.settings(Some(format!("{}/jwks", self.issuer)), refetch),
        ])
        .unwrap()
    }
}

pub fn x(kid: &str) -> String {
    std::fs::read_to_string(format!("{KEYS}/ed_{kid}.x"))
        .unwrap()
        .trim()
        .to_owned()
}

pub fn jwks(kids: &[&str]) -> Value {
    let keys: Vec<Value> = kids
        .iter()
        .map(|k| json!({"kty": "OKP", "crv": "Ed25519", "x": x(k), "kid": k, "alg": "EdDSA", "use": "sig"}))
        .collect();
    json!({ "keys": keys })
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

pub fn claims(issuer: &str) -> Value {
    json!({
        "iss": issuer,
        "aud": AUDIENCE,
        "sub": "alice",
        "azp": "claude-desktop",
        "scope": "openid refunds",
        "groups": ["support"],
        "team": "eu",
        "email": "alice@example.com",
        "iat": now(),
        "exp": now() + 300,
    })
}

pub fn sign(kid: &str, claims: &Value) -> String {
    let pem = std::fs::read(format!("{KEYS}/ed_{kid}.pem")).unwrap();
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_ed_pem(&pem).unwrap()).unwrap()
}

pub fn b64(v: &Value) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}
