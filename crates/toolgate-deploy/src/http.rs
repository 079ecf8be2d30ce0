//! The HTTP client the webhook executor and the `http` state source share,
//! and the checks on the URLs a deployment file names.

use std::time::Duration;

use reqwest::Url;
use serde_json::Value;
use toolgate::decode::{self, Limits};

/// Largest answer body read from the application, in bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// One client for every tool: its connection pool is shared. Redirects are
/// not followed: a webhook that answers 3xx did not say what it did, and a
/// POST turned into a GET by a redirect would be a different request.
pub fn client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("toolgate/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("building the HTTP client: {e}"))
}

/// An absolute http(s) URL with a host.
pub fn absolute_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| format!("`{text}` is not an absolute URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("`{text}` is not an http or https URL"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("`{text}` has no host"));
    }
    Ok(url)
}

/// Reads at most [`MAX_BODY_BYTES`] of a response's body; `Err` past that
/// or when the body breaks off.
pub async fn bounded_body(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading the answer: {}", describe(&e)))?
    {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(format!("the answer is longer than {MAX_BODY_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The answer's JSON, read with the core's strict decoder (duplicate keys,
/// lone surrogates and the like are refused, as for every other JSON
/// toolgate reads).
pub fn strict_json(body: &[u8]) -> Result<Value, String> {
    decode::decode_strict(body, &Limits::provider_body())
        .map_err(|r| format!("not valid JSON: {} at '{}'", r.message(), r.pointer()))
}

/// What kind of transport failure `e` is, in words for the audit.
pub fn describe(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else if e.is_body() || e.is_decode() {
        "the answer broke off"
    } else {
        "failed"
    };
    // The error's own text names the URL, which may carry a token in its
    // query; the kind and the source chain are enough to act on.
    let mut source = std::error::Error::source(e);
    let mut chain = Vec::new();
    while let Some(s) = source {
        chain.push(s.to_string());
        source = s.source();
    }
    if chain.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}: {}", chain.join(": "))
    }
}

/// The default timeout when the file names none.
pub fn timeout_or(ms: Option<u64>, default_ms: u64) -> Duration {
    Duration::from_millis(ms.unwrap_or(default_ms))
}

/// The request target a URL is sent with: its path and, when it has one,
/// `?` and its query, as they appear on the request line (what the v2
/// signature covers).
pub fn request_target(url: &Url) -> String {
    match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    }
}

/// The `Toolgate-Signature` value for a request to `url` sent now: every
/// request toolgate makes to an application (webhook, status URL, state
/// GET) is signed through this one place.
pub fn signature(secret: &[u8], method: &str, url: &Url, body: &[u8]) -> String {
    let unix_seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    toolgate::sign::header_value(secret, unix_seconds, method, &request_target(url), body)
}
