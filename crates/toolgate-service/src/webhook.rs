//! The optional review webhook (docs/design.md §14): a new review item is
//! announced to a channel (chat, an issue tracker) with a signed POST of
//! `{"id", "kind", "tool", "created_at"}`, signed as every request toolgate
//! sends an application (`toolgate::sign`: `Toolgate-Signature: t=<unix
//! seconds>,v2=<hex HMAC-SHA256 over "<t>\n<METHOD>\n<target>\n<body>">`).
//! Fire and forget, on its own
//! task with a short timeout: a slow or failing receiver never delays a
//! decision, and a lost announcement loses nothing (the item is in the
//! claim database and on `/review`). Approving stays an authenticated
//! action on toolgate itself.

use std::time::Duration;

use toolgate::claim::UnixMillis;
use toolgate::sign;

/// Where new review items are announced.
#[derive(Clone)]
pub struct ReviewWebhook {
    /// The receiver's URL (`http://` or `https://`).
    pub url: String,
    /// The shared secret the receiver verifies the signature with.
    pub secret: Vec<u8>,
    /// How long one announcement may take before it is given up.
    pub timeout: Duration,
}

impl std::fmt::Debug for ReviewWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret is never printed.
        f.debug_struct("ReviewWebhook")
            .field("url", &self.url)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The request target `url` is POSTed with (its path and query as on the
/// request line), which the signature covers; `/` for a URL that does not
/// parse, which the request then fails on anyway.
fn target(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => match u.query() {
            Some(q) => format!("{}?{q}", u.path()),
            None => u.path().to_owned(),
        },
        Err(_) => "/".to_owned(),
    }
}

/// Announces item `id` on its own task, if a webhook is configured.
pub fn announce(
    hook: Option<&ReviewWebhook>,
    client: &reqwest::Client,
    id: i64,
    kind: &str,
    tool: Option<&str>,
    created_at: UnixMillis,
) {
    let Some(hook) = hook.cloned() else {
        return;
    };
    let body = serde_json::json!({
        "id": id,
        "kind": kind,
        "tool": tool,
        "created_at": created_at.0,
    })
    .to_string();
    let client = client.clone();
    tokio::spawn(async move {
        let t = u64::try_from(created_at.0 / 1000).unwrap_or(0);
        let sent = client
            .post(&hook.url)
            .timeout(hook.timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                sign::HEADER,
                sign::header_value(&hook.secret, t, "POST", &target(&hook.url), body.as_bytes()),
            )
            .body(body)
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => tracing::warn!(item = id, status = %r.status(), "review webhook refused"),
            Err(e) => tracing::warn!(item = id, error = %e, "review webhook failed"),
        }
    });
}
