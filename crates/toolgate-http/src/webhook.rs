//! The optional review webhook (docs/design.md §14): a new review item is
//! announced to a channel (chat, an issue tracker) with a signed POST of
//! `{"id", "kind", "tool", "created_at"}`, the same signature as the
//! deployment's webhook executor (`Toolgate-Signature: t=<unix seconds>,
//! v1=<hex HMAC-SHA256 over "<t>.<body>">`). Fire and forget, on its own
//! task with a short timeout: a slow or failing receiver never delays a
//! decision, and a lost announcement loses nothing (the item is in the
//! claim database and on `/review`). Approving stays an authenticated
//! action on toolgate itself.

use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use toolgate::claim::UnixMillis;

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

/// The signature header's name.
pub const SIGNATURE_HEADER: &str = "Toolgate-Signature";

/// The header value for `body` sent at `unix_seconds`.
pub fn signature(secret: &[u8], unix_seconds: u64, body: &[u8]) -> String {
    let mut signed = Vec::with_capacity(body.len() + 21);
    signed.extend_from_slice(unix_seconds.to_string().as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(body);
    // INVARIANT: HMAC takes a key of any length, so this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts any key length");
    mac.update(&signed);
    format!(
        "t={unix_seconds},v1={}",
        hex::encode(mac.finalize().into_bytes())
    )
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
                SIGNATURE_HEADER,
                signature(&hook.secret, t, body.as_bytes()),
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
