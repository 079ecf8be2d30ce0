//! The step that reads the file's top-level settings and `[review]`: the
//! HTTP door's limits and the service's settings, defaults filled in.

use std::time::Duration;

use toolgate::review::QueueLimits;
use toolgate_service::{HttpLimits, IssuerSettings, Issuers, ReviewWebhook, Settings};

use super::Ctx;
use super::raw::{File, IssuerEntry, ReviewFile};
use crate::ConfigError;

/// Milliseconds as written, or the default.
fn millis(v: Option<u64>, default: Duration) -> Duration {
    v.map_or(default, Duration::from_millis)
}

impl Ctx<'_> {
    /// The settings, each checked, then both groups built.
    pub(super) fn settings(&self, file: &File) -> Result<(HttpLimits, Settings), ConfigError> {
        self.check_limits(file)?;
        self.check_public_url(file.public_url.as_deref())?;
        self.check_result_cap(file.max_result_bytes)?;
        let review_webhook = match &file.review {
            Some(r) => self.review_webhook(r)?,
            None => None,
        };
        let review_queue = self.review_queue(file.review.as_ref())?;
        let issuers = self.issuers(&file.issuers)?;
        let defaults = Settings::default();
        let service = Settings {
            review_webhook,
            lease: millis(file.lease_ms, defaults.lease),
            max_result_bytes: file.max_result_bytes.unwrap_or(defaults.max_result_bytes),
            review_queue,
            public_url: file.public_url.clone(),
            issuers,
        };
        Ok((http_limits(file), service))
    }

    /// `[[issuers]]`, each checked: HTTPS URLs (plain HTTP on loopback
    /// only), asymmetric algorithms, a skew of at most five minutes.
    fn issuers(&self, entries: &[IssuerEntry]) -> Result<Issuers, ConfigError> {
        let mut list = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            let at = |f: &str| format!("issuers[{i}].{f}");
            for (field, url) in [
                ("issuer", Some(&e.issuer)),
                ("jwks_url", e.jwks_url.as_ref()),
            ] {
                if let Some(u) = url
                    && !secure_url(u)
                {
                    return Err(self.err(
                        &at(field),
                        "must be an https:// URL (http:// only on 127.0.0.1 or localhost)",
                    ));
                }
            }
            if e.audience.is_empty() {
                return Err(self.err(&at("audience"), "must name this resource's public URL"));
            }
            if let Some((name, claim)) = e
                .attributes
                .iter()
                .find(|(n, c)| n.is_empty() || c.is_empty())
            {
                return Err(self.err(
                    &at("attributes"),
                    format!("{name:?} = {claim:?}: an attribute and its claim are both named"),
                ));
            }
            let skew = e.clock_skew_secs.unwrap_or(60);
            if skew > 300 {
                return Err(self.err(&at("clock_skew_secs"), "must be at most 300"));
            }
            list.push(IssuerSettings {
                issuer: e.issuer.clone(),
                audience: e.audience.clone(),
                jwks_url: e.jwks_url.clone(),
                algorithms: e
                    .algorithms
                    .clone()
                    .unwrap_or_else(|| vec!["RS256".into(), "ES256".into()]),
                clock_skew: Duration::from_secs(skew),
                principal_claim: e.principal_claim.clone().unwrap_or_else(|| "sub".into()),
                client_claims: e
                    .client_claims
                    .clone()
                    .unwrap_or_else(|| vec!["azp".into(), "client_id".into()]),
                scope_capabilities: e.scopes.clone(),
                groups_claim: e.groups_claim.clone(),
                group_capabilities: e.groups.clone(),
                refetch_interval: Duration::from_secs(e.refetch_secs.unwrap_or(30).max(1)),
                attributes: e.attributes.clone(),
            });
        }
        Issuers::new(list).map_err(|e| self.err("issuers", e.to_string()))
    }

    fn positive(&self, field: &str, v: Option<u64>) -> Result<(), ConfigError> {
        match v {
            Some(0) => Err(self.err(field, "must be greater than 0")),
            _ => Ok(()),
        }
    }

    /// No limit or timeout is 0.
    fn check_limits(&self, file: &File) -> Result<(), ConfigError> {
        self.positive("lease_ms", file.lease_ms)?;
        self.positive("request_timeout_ms", file.request_timeout_ms)?;
        self.positive("header_read_timeout_ms", file.header_read_timeout_ms)?;
        for (field, v) in [
            ("body_limit_bytes", file.body_limit_bytes),
            ("max_result_bytes", file.max_result_bytes),
            ("connection_limit", file.connection_limit),
            ("connection_limit_per_peer", file.connection_limit_per_peer),
            ("idempotency_capacity", file.idempotency_capacity),
        ] {
            if v == Some(0) {
                return Err(self.err(field, "must be greater than 0"));
            }
        }
        self.positive(
            "max_requests_per_connection",
            file.max_requests_per_connection,
        )?;
        self.positive("max_connection_age_ms", file.max_connection_age_ms)
    }

    fn check_public_url(&self, url: Option<&str>) -> Result<(), ConfigError> {
        let Some(url) = url else { return Ok(()) };
        let lower = url.to_ascii_lowercase();
        let host = lower
            .strip_prefix("https://")
            .or_else(|| lower.strip_prefix("http://"));
        if host.is_none_or(str::is_empty) {
            return Err(self.err(
                "public_url",
                "must be an http:// or https:// URL (the address reviewers open /review at)",
            ));
        }
        Ok(())
    }

    /// One meaning of "too large" for a result: the store's ceiling (what
    /// any stored result must meet when read back) bounds the cap.
    fn check_result_cap(&self, cap: Option<usize>) -> Result<(), ConfigError> {
        let ceiling = toolgate::claim::RESULT_JSON_LIMITS.max_bytes();
        match cap {
            Some(cap) if cap > ceiling => Err(self.err(
                "max_result_bytes",
                format!("{cap} is over {ceiling}, the largest result a claim store records"),
            )),
            _ => Ok(()),
        }
    }

    /// `[review]`'s webhook: both its URL and its secret, or neither.
    fn review_webhook(&self, r: &ReviewFile) -> Result<Option<ReviewWebhook>, ConfigError> {
        let (url, secret_env) = match (&r.webhook_url, &r.webhook_secret_env) {
            (None, None) => return Ok(None),
            (None, Some(_)) => {
                return Err(self.err(
                    "review.webhook_url",
                    "missing: webhook_secret_env signs the webhook's requests",
                ));
            }
            (Some(_), None) => {
                return Err(self.err(
                    "review.webhook_secret_env",
                    "missing: the webhook's requests must be signed",
                ));
            }
            (Some(url), Some(secret_env)) => (url, secret_env),
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(self.err("review.webhook_url", "must be an http:// or https:// URL"));
        }
        let secret = std::env::var(secret_env)
            .ok()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                self.err(
                    "review.webhook_secret_env",
                    format!("{secret_env} is not set or empty"),
                )
            })?;
        self.positive("review.webhook_timeout_ms", r.webhook_timeout_ms)?;
        Ok(Some(ReviewWebhook {
            url: url.clone(),
            secret: secret.into_bytes(),
            timeout: millis(r.webhook_timeout_ms, Duration::from_secs(5)),
        }))
    }

    /// `[review]`'s queue bounds over the service's defaults.
    fn review_queue(&self, review: Option<&ReviewFile>) -> Result<QueueLimits, ConfigError> {
        let mut queue = Settings::default().review_queue;
        let Some(r) = review else { return Ok(queue) };
        for (field, v) in [
            ("review.max_open_items", r.max_open_items),
            (
                "review.max_open_items_per_principal",
                r.max_open_items_per_principal,
            ),
            ("review.rejection_window_ms", r.rejection_window_ms),
        ] {
            if v == Some(0) {
                return Err(self.err(field, "must be greater than 0"));
            }
        }
        queue.total = r.max_open_items.unwrap_or(queue.total);
        queue.per_principal = r
            .max_open_items_per_principal
            .unwrap_or(queue.per_principal);
        if let Some(ms) = r.rejection_window_ms {
            queue.rejection_window_ms = i64::try_from(ms)
                .map_err(|_| self.err("review.rejection_window_ms", "is out of range"))?;
        }
        Ok(queue)
    }
}

/// The HTTP door's limits: the file's (each already checked), or the
/// door's defaults.
fn http_limits(file: &File) -> HttpLimits {
    let d = HttpLimits::default();
    HttpLimits {
        request_timeout: millis(file.request_timeout_ms, d.request_timeout),
        body_limit: file.body_limit_bytes.unwrap_or(d.body_limit),
        idempotency_max_bytes: file
            .idempotency_max_bytes
            .unwrap_or(d.idempotency_max_bytes),
        header_read_timeout: millis(file.header_read_timeout_ms, d.header_read_timeout),
        max_connections: file.connection_limit.unwrap_or(d.max_connections),
        max_connections_per_peer: file
            .connection_limit_per_peer
            .unwrap_or(d.max_connections_per_peer),
        probe_headroom: file.probe_headroom.unwrap_or(d.probe_headroom),
        max_requests_per_connection: file
            .max_requests_per_connection
            .unwrap_or(d.max_requests_per_connection),
        max_connection_age: millis(file.max_connection_age_ms, d.max_connection_age),
        idempotency_capacity: file.idempotency_capacity.unwrap_or(d.idempotency_capacity),
    }
}

/// `https://…`, or `http://` to a loopback host (a test provider, a local
/// development one).
pub(crate) fn secure_url(u: &str) -> bool {
    if u.starts_with("https://") {
        return true;
    }
    let Some(rest) = u.strip_prefix("http://") else {
        return false;
    };
    let host = rest.split(['/', ':']).next().unwrap_or("");
    matches!(host, "127.0.0.1" | "localhost" | "[::1]")
}
