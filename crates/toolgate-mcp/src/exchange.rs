//! OAuth 2.0 token exchange (RFC 8693) for an upstream that acts as the
//! person: the caller's verified token is the subject token, and the
//! upstream is called with the token the issuer gave in exchange, cached
//! per (person, upstream) until it expires. The caller's own token never
//! reaches an upstream.
//!
//! The exchange runs before the decision ([`crate::Gateway`]), so an issuer
//! that refuses it is answered to the caller with nothing claimed; the
//! executor then finds the token in the cache. Only if it expired in
//! between does the executor exchange again, and a failure there is the
//! executor's "nothing sent" error, reconciled through the status tool.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::TokenExchange;
use serde_json::Value;
use toolgate::pipeline::Credential;

/// Largest token endpoint answer read, in bytes.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// How long an exchange may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// An exchanged token is used until this long before it expires, so it
/// does not expire on the way to the upstream.
const EXPIRY_MARGIN: Duration = Duration::from_secs(5);
/// A token that says nothing of its lifetime is kept this long.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(60);
/// Most people whose exchanged tokens are kept per upstream: past it, the
/// expired ones go, then the one that expires first. A flood of people
/// costs exchanges, never unbounded memory.
pub const MAX_CACHED: usize = 10_000;

/// `grant_type` of RFC 8693.
const GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The subject and requested token type: an access token.
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";

/// Why no token was exchanged. Each has a stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExchangeError {
    /// The caller presented no person's token (an API key): there is
    /// nothing to exchange.
    #[error(
        "upstream_needs_person: upstream `{0}` is called as the person; call with a signed token, not an API key"
    )]
    NeedsPerson(String),
    /// The token endpoint did not answer, or answered something that is not
    /// an exchanged access token.
    #[error("token_exchange_failed: {0}")]
    Failed(String),
}

impl ExchangeError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NeedsPerson(_) => "upstream_needs_person",
            Self::Failed(_) => "token_exchange_failed",
        }
    }
}

/// One upstream's token exchange: its settings, its client secret, and the
/// tokens it holds for people.
pub struct Exchanger {
    upstream: String,
    settings: TokenExchange,
    secret: String,
    http: reqwest::Client,
    cache: Mutex<HashMap<String, Cached>>,
}

#[derive(Clone)]
struct Cached {
    /// Which subject token it was exchanged for: another token of the same
    /// person (new scopes, a new sign-in) is exchanged again.
    subject: Credential,
    token: Credential,
    usable_until: Instant,
}

impl std::fmt::Debug for Exchanger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchanger")
            .field("upstream", &self.upstream)
            .field("token_url", &self.settings.token_url)
            .finish_non_exhaustive()
    }
}

impl Exchanger {
    /// The exchange of `upstream`, its client secret read from
    /// `settings.client_secret_env` now: a missing secret is an error at
    /// start, not at the first call.
    pub fn new(upstream: &str, settings: TokenExchange) -> Result<Self, String> {
        let secret = std::env::var(&settings.client_secret_env).map_err(|_| {
            format!(
                "upstream `{upstream}`: the environment variable {} (token_exchange.client_secret_env) is not set",
                settings.client_secret_env
            )
        })?;
        Self::with_secret(upstream, settings, secret)
    }

    /// [`Exchanger::new`] with the client secret given rather than read
    /// from the environment.
    pub fn with_secret(
        upstream: &str,
        settings: TokenExchange,
        secret: String,
    ) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(EXCHANGE_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("upstream `{upstream}`: the token exchange's HTTP client: {e}"))?;
        Ok(Self {
            upstream: upstream.to_owned(),
            settings,
            secret,
            http,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The upstream's name.
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cached>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The token to call the upstream with for `person`, whose verified
    /// token is `subject` (`None` for an API key): from the cache while it
    /// is usable, or exchanged now.
    pub async fn token_for(
        &self,
        person: &str,
        subject: Option<&Credential>,
    ) -> Result<Credential, ExchangeError> {
        let subject = subject.ok_or_else(|| ExchangeError::NeedsPerson(self.upstream.clone()))?;
        if let Some(c) = self.cache().get(person)
            && c.subject == *subject
            && Instant::now() < c.usable_until
        {
            return Ok(c.token.clone());
        }
        let (token, lifetime) = self.exchange(subject).await?;
        let usable_until = Instant::now() + lifetime.saturating_sub(EXPIRY_MARGIN);
        let mut cache = self.cache();
        if cache.len() >= MAX_CACHED && !cache.contains_key(person) {
            let now = Instant::now();
            cache.retain(|_, c| c.usable_until > now);
            if cache.len() >= MAX_CACHED
                && let Some(first) = cache
                    .iter()
                    .min_by_key(|(_, c)| c.usable_until)
                    .map(|(k, _)| k.clone())
            {
                cache.remove(&first);
            }
        }
        cache.insert(
            person.to_owned(),
            Cached {
                subject: subject.clone(),
                token: token.clone(),
                usable_until,
            },
        );
        Ok(token)
    }

    /// How many people have a token here (for tests and metrics).
    pub fn cached(&self) -> usize {
        self.cache().len()
    }

    async fn exchange(
        &self,
        subject: &Credential,
    ) -> Result<(Credential, Duration), ExchangeError> {
        let s = &self.settings;
        let mut form = vec![
            ("grant_type", GRANT),
            ("subject_token", subject.expose()),
            ("subject_token_type", ACCESS_TOKEN),
            ("requested_token_type", ACCESS_TOKEN),
            ("resource", s.resource.as_str()),
        ];
        if let Some(a) = &s.audience {
            form.push(("audience", a));
        }
        if let Some(scope) = &s.scope {
            form.push(("scope", scope));
        }
        let failed = |m: String| ExchangeError::Failed(format!("{}: {m}", s.token_url));
        let mut resp = self
            .http
            .post(&s.token_url)
            .basic_auth(&s.client_id, Some(&self.secret))
            .form(&form)
            .send()
            .await
            .map_err(|e| failed(e.to_string()))?;
        let status = resp.status();
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| failed(e.to_string()))? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(failed(format!("an answer over {MAX_ANSWER_BYTES} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        let limits = toolgate::decode::Limits::provider_body().with_max_bytes(MAX_ANSWER_BYTES);
        let doc = toolgate::decode::decode_strict(&body, &limits)
            .map_err(|e| failed(format!("HTTP {status}, not JSON: {e}")))?;
        if !status.is_success() {
            // The issuer's OAuth error code only: its description may quote
            // the subject token.
            let code = doc
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("no error code");
            return Err(failed(format!("HTTP {status}: {code}")));
        }
        let token = match doc.get("access_token") {
            Some(Value::String(t)) if !t.is_empty() => t,
            _ => return Err(failed("the answer has no access_token".into())),
        };
        if doc.get("issued_token_type").and_then(Value::as_str) != Some(ACCESS_TOKEN) {
            return Err(failed("the issued token is not an access token".into()));
        }
        let bearer = doc
            .get("token_type")
            .and_then(Value::as_str)
            .is_some_and(|t| t.eq_ignore_ascii_case("bearer"));
        if !bearer {
            return Err(failed("the issued token is not a bearer token".into()));
        }
        if token.as_str() == subject.expose() {
            return Err(failed("the issuer gave back the caller's own token".into()));
        }
        let lifetime = match doc.get("expires_in") {
            Some(v) => v
                .as_u64()
                .map(Duration::from_secs)
                .ok_or_else(|| failed("expires_in is not a whole number of seconds".into()))?,
            None => DEFAULT_LIFETIME,
        };
        Ok((Credential::new(token.as_str()), lifetime))
    }
}
