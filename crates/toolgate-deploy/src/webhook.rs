//! The webhook executor: the permit POSTed, signed, to the application,
//! which performs the write with the version as its precondition.
//!
//! Classification of the answer (docs/deploy.md):
//!
//! | answer | outcome |
//! |---|---|
//! | 2xx, a JSON object ≤ 64 KiB | applied; the object is the recorded result |
//! | 409 or 412 | precondition failed (`state_changed`), `current_version` if given |
//! | 410 `{"error": "fenced"}` or `{"error": "lease_expired"}` | not applied: the attempt was fenced by a status request, or arrived after its lease; the claim is reconciled |
//! | timeout, 5xx, refused or reset connection, 2xx not a JSON object, 3xx | unknown: the claim stays in flight for reconciliation |
//! | any other 4xx | refused by the application (see [`WebhookExecutor::execute`]) |
//!
//! An unknown outcome is never re-sent: the claim stays in flight until its
//! lease runs out, then reconciliation asks the status URL, whose answer
//! fences the attempt's idempotency key (docs/design.md invariant 8).
//!
//! The call is bounded twice: by the tool's `timeout_ms`, and by the time
//! left on the claim's lease less [`crate::LEASE_MARGIN_MS`], so that the
//! gate never waits for an answer after the claim could have been
//! reconciled.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::{StatusCode, Url};
use serde_json::{Value, json};
use toolgate::claim::{ClaimRecord, ExecutorKind, JsonText, ReconcileOutcome, UnixMillis};
use toolgate::pipeline::{ExecError, ExecOutcome, ExecPermit, StateVersion};
use toolgate::sign;

use crate::http::{bounded_body, describe, signature, strict_json};

/// One tool's webhook.
#[derive(Debug, Clone)]
pub struct WebhookExecutor {
    client: reqwest::Client,
    url: Url,
    status_url: Url,
    secret: Vec<u8>,
    timeout: Duration,
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The permit as the webhook receives it.
pub fn permit_body(permit: &ExecPermit<'_>) -> Value {
    json!({
        "operation_key": permit.key().to_hex(),
        "attempt": permit.attempt(),
        "idempotency_key": permit.idempotency_key(),
        "tool": permit.tool(),
        "arguments": permit.arguments(),
        "scope": permit.scope(),
        "precondition_version": permit.precondition().as_str(),
        "actor": permit.principal().id(),
        "lease_expires_at": permit.lease_expires_at().0,
    })
}

/// A JSON value as a version, if it is a usable one.
fn version(v: &Value) -> Option<StateVersion> {
    match v {
        Value::String(s) => StateVersion::new(s.clone()),
        Value::Number(n) if n.is_i64() || n.is_u64() => StateVersion::new(n.to_string()),
        _ => None,
    }
}

/// How long a call may wait at `now` for a claim whose lease ends at
/// `lease_expires_at`: the configured `timeout`, cut to the lease's
/// remainder less the margin. `None` when nothing is left: the call must
/// not start.
pub fn call_bound(
    timeout: Duration,
    lease_expires_at: UnixMillis,
    now: UnixMillis,
) -> Option<Duration> {
    let margin = i64::try_from(crate::LEASE_MARGIN_MS).unwrap_or(i64::MAX);
    let left = lease_expires_at
        .0
        .saturating_sub(now.0)
        .saturating_sub(margin);
    let left = u64::try_from(left).ok().filter(|ms| *ms > 0)?;
    Some(timeout.min(Duration::from_millis(left)))
}

impl WebhookExecutor {
    /// A webhook at `url`, reconciled through `status_url`, signing with
    /// `secret`, waiting at most `timeout` for each answer.
    pub fn new(
        client: reqwest::Client,
        url: Url,
        status_url: Url,
        secret: Vec<u8>,
        timeout: Duration,
    ) -> Self {
        Self {
            client,
            url,
            status_url,
            secret,
            timeout,
        }
    }

    /// The longest one call may wait (`timeout_ms`).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// POSTs the permit once. A 4xx other than 409/412 means the
    /// application refused the write without performing it; the core has
    /// no outcome for "refused" yet, so it is reported as an `Err` whose
    /// message says so: the claim stays in flight and reconciliation (the
    /// status URL answering `{"applied": false}`) records it as not
    /// applied. Nothing is ever sent twice.
    pub async fn execute(&self, permit: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        let Some(wait) = call_bound(
            self.timeout,
            permit.lease_expires_at(),
            UnixMillis(now_millis()),
        ) else {
            return Err(ExecError::new(format!(
                "webhook not called: the claim's lease (to {}) has less than the {} ms margin \
                 left; nothing was sent, reconcile through the status URL",
                permit.lease_expires_at(),
                crate::LEASE_MARGIN_MS
            )));
        };
        let body = serde_json::to_vec(&permit_body(&permit))
            .map_err(|e| ExecError::new(format!("webhook: encoding the permit: {e}")))?;
        let signature = signature(&self.secret, "POST", &self.url, &body);
        let sent = self
            .client
            .post(self.url.clone())
            .timeout(wait)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("Idempotency-Key", permit.idempotency_key())
            .header(sign::HEADER, signature)
            .body(body)
            .send()
            .await;
        let unknown = |why: String| {
            ExecError::new(format!(
                "webhook outcome unknown ({why}); not re-sent, reconcile through the status URL"
            ))
        };
        let response = sent.map_err(|e| unknown(describe(&e)))?;
        let status = response.status();
        if status == StatusCode::CONFLICT || status == StatusCode::PRECONDITION_FAILED {
            // The body is optional; a bad one does not change the outcome.
            let current = bounded_body(response)
                .await
                .ok()
                .and_then(|b| strict_json(&b).ok())
                .and_then(|v| v.get("current_version").and_then(version));
            return Ok(ExecOutcome::PreconditionFailed { current });
        }
        if status.is_success() {
            let body = bounded_body(response)
                .await
                .map_err(|e| unknown(format!("HTTP {status}, {e}")))?;
            let value = strict_json(&body).map_err(|e| unknown(format!("HTTP {status}, {e}")))?;
            if !value.is_object() {
                return Err(unknown(format!(
                    "HTTP {status}, the answer is not a JSON object"
                )));
            }
            let text = String::from_utf8(body)
                .map_err(|_| unknown(format!("HTTP {status}, the answer is not UTF-8")))?;
            let receipt = JsonText::result(text)
                .map_err(|e| unknown(format!("HTTP {status}, the answer: {e}")))?;
            return Ok(ExecOutcome::Applied { receipt });
        }
        if status == StatusCode::GONE {
            // The receiver refused this attempt's key for good: a status
            // request fenced it first, or the lease had ended. Nothing was
            // written; reconciliation records it and a new attempt may run.
            let error = bounded_body(response)
                .await
                .ok()
                .and_then(|b| strict_json(&b).ok())
                .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| "gone".to_owned());
            return Err(ExecError::new(format!(
                "webhook refused the attempt (HTTP 410, {error}): not applied by the \
                 application; not re-sent, reconciliation records it through the status URL"
            )));
        }
        if status.is_client_error() {
            return Err(ExecError::new(format!(
                "webhook refused the write (HTTP {status}): not applied by the application; \
                 not re-sent, reconciliation records it through the status URL"
            )));
        }
        Err(unknown(format!("HTTP {status}")))
    }

    /// Asks the status URL whether the write for `claim`'s attempt
    /// happened: `GET status_url?idempotency_key=<key>`, signed v2 over the
    /// GET, its target and an empty body. The receiver answers in one
    /// transaction that also fences the key (docs/deploy.md):
    /// `{"applied": true, "result": {…}}` or `{"applied": false}`, which
    /// then stays true for good. Anything else is an error saying why, and
    /// the claim stays stuck.
    pub async fn reconcile(&self, claim: &ClaimRecord) -> Result<ReconcileOutcome, ExecError> {
        if claim.executor != ExecutorKind::Webhook {
            return Err(ExecError::new(format!(
                "the claim was executed by `{}`, not a webhook: the webhook does not answer for it",
                claim.executor
            )));
        }
        let key = claim.idempotency_key();
        let mut url = self.status_url.clone();
        url.query_pairs_mut().append_pair("idempotency_key", &key);
        let signature = signature(&self.secret, "GET", &url, b"");
        let fail = |why: String| ExecError::new(format!("status URL: {why}"));
        let response = self
            .client
            .get(url)
            .timeout(self.timeout)
            .header(sign::HEADER, signature)
            .send()
            .await
            .map_err(|e| fail(describe(&e)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(fail(format!("HTTP {status}")));
        }
        let body = bounded_body(response).await.map_err(fail)?;
        let value = strict_json(&body).map_err(fail)?;
        let answer = StatusAnswer::read(&value)
            .ok_or_else(|| fail("the answer has no boolean `applied`".to_owned()))?;
        match answer {
            StatusAnswer {
                applied: true,
                result: Some(result @ Value::Object(_)),
            } => {
                let receipt = JsonText::result(result.to_string())
                    .map_err(|e| fail(format!("the result: {e}")))?;
                Ok(ReconcileOutcome::Applied { receipt })
            }
            StatusAnswer { applied: true, .. } => {
                Err(fail("`applied: true` without a `result` object".to_owned()))
            }
            StatusAnswer { applied: false, .. } => {
                let detail = JsonText::result(
                    json!({
                        "applied": false,
                        "source": "webhook status URL",
                        "attempt": claim.attempt,
                        "idempotency_key": key,
                        "answer": value,
                    })
                    .to_string(),
                )
                .map_err(|e| fail(format!("the answer: {e}")))?;
                Ok(ReconcileOutcome::NotApplied { detail })
            }
        }
    }
}

/// The status URL's answer: `{"applied": true, "result": {…}}` or
/// `{"applied": false}`; other keys are the receiver's own.
#[derive(serde::Deserialize)]
struct StatusAnswer {
    applied: bool,
    #[serde(default)]
    result: Option<Value>,
}

impl StatusAnswer {
    /// The answer in `value`, if it is an object with a boolean `applied`.
    fn read(value: &Value) -> Option<Self> {
        use serde::Deserialize as _;
        value
            .is_object()
            .then(|| Self::deserialize(value).ok())
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::request_target;

    #[test]
    fn a_call_waits_at_most_the_lease_left_less_the_margin() {
        let t = Duration::from_millis(3000);
        // Plenty of lease: the configured timeout.
        assert_eq!(
            call_bound(t, UnixMillis(10_000), UnixMillis(0)),
            Some(Duration::from_millis(3000))
        );
        // Less lease than timeout + margin: what is left less the margin.
        assert_eq!(
            call_bound(t, UnixMillis(2_500), UnixMillis(0)),
            Some(Duration::from_millis(1500))
        );
        // The margin or less left, or the lease over: no call.
        assert_eq!(call_bound(t, UnixMillis(1_000), UnixMillis(0)), None);
        assert_eq!(call_bound(t, UnixMillis(0), UnixMillis(5_000)), None);
    }

    #[test]
    fn the_target_is_the_path_and_the_query_as_sent() {
        let mut u = Url::parse("http://shop.test:9100/status?tenant=a%20b").unwrap();
        u.query_pairs_mut().append_pair("idempotency_key", "ab.2");
        assert_eq!(
            request_target(&u),
            "/status?tenant=a%20b&idempotency_key=ab.2"
        );
        let plain = Url::parse("http://shop.test/refund").unwrap();
        assert_eq!(request_target(&plain), "/refund");
    }
}
