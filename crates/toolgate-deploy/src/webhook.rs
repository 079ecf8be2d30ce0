//! The webhook executor: the permit POSTed, signed, to the application,
//! which performs the write with the version as its precondition.
//!
//! Classification of the answer (docs/deploy.md):
//!
//! | answer | outcome |
//! |---|---|
//! | 2xx, a JSON object ≤ 64 KiB | applied; the object is the recorded result |
//! | 409 or 412 | precondition failed (`state_changed`), `current_version` if given |
//! | timeout, 5xx, refused or reset connection, 2xx not a JSON object, 3xx | unknown: the claim stays in flight for reconciliation |
//! | any other 4xx | refused by the application (see [`WebhookExecutor::execute`]) |
//!
//! An unknown outcome is never re-sent: the claim stays in flight until its
//! lease runs out, then reconciliation asks the status URL.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::{StatusCode, Url};
use serde_json::{Value, json};
use toolgate::claim::{ClaimRecord, ExecutorKind, JsonText, ReconcileOutcome};
use toolgate::pipeline::{ExecError, ExecOutcome, ExecPermit, StateVersion};

use crate::http::{bounded_body, describe, strict_json};
use crate::sign;

/// One tool's webhook.
#[derive(Debug, Clone)]
pub struct WebhookExecutor {
    client: reqwest::Client,
    url: Url,
    status_url: Url,
    secret: Vec<u8>,
    timeout: Duration,
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The permit as the webhook receives it.
pub fn permit_body(permit: &ExecPermit<'_>) -> Value {
    json!({
        "operation_key": permit.key().to_hex(),
        "tool": permit.tool(),
        "arguments": permit.arguments(),
        "scope": permit.scope(),
        "precondition_version": permit.precondition().as_str(),
        "actor": permit.principal().id(),
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

    /// POSTs the permit once. A 4xx other than 409/412 means the
    /// application refused the write without performing it; the core has
    /// no outcome for "refused" yet, so it is reported as an `Err` whose
    /// message says so: the claim stays in flight and reconciliation (the
    /// status URL answering `{"applied": false}`) records it as not
    /// applied. Nothing is ever sent twice.
    pub async fn execute(&self, permit: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        let body = serde_json::to_vec(&permit_body(&permit))
            .map_err(|e| ExecError::new(format!("webhook: encoding the permit: {e}")))?;
        let signature = sign::header_value(&self.secret, unix_seconds(), &body);
        let sent = self
            .client
            .post(self.url.clone())
            .timeout(self.timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("Idempotency-Key", permit.key().to_hex())
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
        if status.is_client_error() {
            return Err(ExecError::new(format!(
                "webhook refused the write (HTTP {status}): not applied by the application; \
                 not re-sent, reconciliation records it through the status URL"
            )));
        }
        Err(unknown(format!("HTTP {status}")))
    }

    /// Asks the status URL whether the write for `claim` happened:
    /// `GET status_url?operation_key=<hex>`, signed over an empty body.
    /// `{"applied": true, "result": {…}}` or `{"applied": false}`; anything
    /// else is an error saying why, and the claim stays stuck.
    pub async fn reconcile(&self, claim: &ClaimRecord) -> Result<ReconcileOutcome, ExecError> {
        if claim.executor != ExecutorKind::Webhook {
            return Err(ExecError::new(format!(
                "the claim was executed by `{}`, not a webhook: the webhook does not answer for it",
                claim.executor
            )));
        }
        let key = claim.key.to_hex();
        let mut url = self.status_url.clone();
        url.query_pairs_mut().append_pair("operation_key", &key);
        let signature = sign::header_value(&self.secret, unix_seconds(), b"");
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
        match (value.get("applied"), value.get("result")) {
            (Some(Value::Bool(true)), Some(result @ Value::Object(_))) => {
                let receipt = JsonText::result(result.to_string())
                    .map_err(|e| fail(format!("the result: {e}")))?;
                Ok(ReconcileOutcome::Applied { receipt })
            }
            (Some(Value::Bool(true)), _) => {
                Err(fail("`applied: true` without a `result` object".to_owned()))
            }
            (Some(Value::Bool(false)), _) => {
                let detail = JsonText::result(
                    json!({"applied": false, "source": "webhook status URL", "answer": value})
                        .to_string(),
                )
                .map_err(|e| fail(format!("the answer: {e}")))?;
                Ok(ReconcileOutcome::NotApplied { detail })
            }
            _ => Err(fail("the answer has no boolean `applied`".to_owned())),
        }
    }
}
