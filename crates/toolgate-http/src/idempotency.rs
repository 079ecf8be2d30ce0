//! The `Idempotency-Key` header (IETF httpapi draft): a client may attach a
//! key to a `POST /v1/decisions`. The first request with a key is processed
//! and its response remembered; a repeat with the same payload gets the same
//! response; a repeat while the first is still running gets 409; a repeat
//! with a different payload gets 422.
//!
//! The memory is rows in the claim database ([`toolgate::idempotency`]),
//! so a repeat reaching another replica, or arriving after a restart, finds
//! the first request. It sits on top of the gate's own idempotency (the
//! operation key): it only saves a client from re-sending work it already
//! sent, so a row lost or purged only costs a re-run.
//!
//! It is not an authority (docs/design.md invariant 12): only final answers
//! are remembered, and an answer that carries a recorded result, a prior
//! proposal or a permit is served again only after the pipeline has run for
//! the caller asking now (`routes/decisions.rs`).

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use toolgate::idempotency::{
    Begun, Bounds, IdemBegin, IdemFinish, IdemRun, IdempotencyStore, RETENTION_MS, Remembered, cost,
};
use toolgate::pipeline::Outcome;
use utoipa::openapi::path::{Parameter, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};

use crate::error::{ApiError, PROBLEM_JSON, ProblemCode};
use crate::state::AppState;

/// A remembered response.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The decision's outcome; `None` for a request error.
    pub outcome: Option<Outcome>,
    pub status: StatusCode,
    /// `application/json` for a decision, `application/problem+json` for
    /// a request error: a repeat gets the same answer, media type included.
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

const DECISION_JSON: &str = "application/json";

/// How much longer than the request timeout a running key is held before
/// another request may take it over (its runner died or hung).
const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// What a request with a key should do.
pub enum Begin {
    /// First use: process it, then [`Guard::finish`].
    Fresh(Guard),
    /// Same key, same payload, finished: send this again.
    Replay(Stored),
    /// Same key, still running.
    InFlight,
    /// Same key, different payload.
    Mismatch,
}

/// A key being processed. Dropped without [`Guard::finish`] (the request
/// failed before a final response existed, or was abandoned), the key is
/// forgotten so a retry can run; should that not happen (the process
/// died), the lease lets a retry take it over.
pub struct Guard {
    app: AppState,
    principal: String,
    key: String,
    runner: String,
    armed: bool,
}

fn store_error(e: toolgate::claim::StoreError) -> ApiError {
    if e.kind() == toolgate::claim::StoreErrorKind::Corrupt {
        ApiError::new(ProblemCode::CorruptRecord, e.to_string())
    } else {
        ApiError::unavailable(e.to_string())
    }
}

fn stored_of(r: Remembered) -> Result<Stored, ApiError> {
    let corrupt = |why: String| ApiError::new(ProblemCode::CorruptRecord, why);
    let outcome = match r.outcome {
        None => None,
        Some(code) => Some(
            Outcome::ALL
                .into_iter()
                .find(|o| o.as_str() == code)
                .ok_or_else(|| corrupt(format!("remembered answer: unknown outcome {code:?}")))?,
        ),
    };
    let content_type = match r.content_type.as_str() {
        DECISION_JSON => DECISION_JSON,
        PROBLEM_JSON => PROBLEM_JSON,
        other => {
            return Err(corrupt(format!(
                "remembered answer: unknown media type {other:?}"
            )));
        }
    };
    Ok(Stored {
        outcome,
        status: StatusCode::from_u16(r.status)
            .map_err(|_| corrupt(format!("remembered answer: status {}", r.status)))?,
        content_type,
        body: r.body,
    })
}

/// Keys are scoped to the principal: two callers never share one.
pub async fn begin(
    app: &AppState,
    principal: &str,
    key: &str,
    body: &[u8],
) -> Result<Begin, ApiError> {
    let payload: [u8; 32] = Sha256::digest(body).into();
    let runner = toolgate_service::clock::fresh_holder()
        .map_err(|_| ApiError::unavailable("the random number generator failed"))?
        .to_hex();
    let now = toolgate_service::clock::now_millis();
    let hold = (app.settings().request_timeout + LEASE_MARGIN).as_millis();
    let lease_until = now.plus_millis(i64::try_from(hold).unwrap_or(i64::MAX));
    let begun = app
        .service()
        .store()
        .idem_begin(IdemBegin {
            principal,
            key,
            payload,
            runner: &runner,
            now,
            lease_until,
        })
        .await
        .map_err(store_error)?;
    Ok(match begun {
        Begun::Fresh => Begin::Fresh(Guard {
            app: app.clone(),
            principal: principal.to_owned(),
            key: key.to_owned(),
            runner,
            armed: true,
        }),
        Begun::Replay(r) => Begin::Replay(stored_of(r)?),
        Begun::InFlight => Begin::InFlight,
        Begun::Mismatch => Begin::Mismatch,
    })
}

impl Guard {
    /// The running row this guard holds.
    fn run(&self) -> IdemRun<'_> {
        IdemRun {
            principal: &self.principal,
            key: &self.key,
            runner: &self.runner,
        }
    }

    /// Forgets the key now, so a repeat runs again (a non-final answer or a
    /// server-side failure is not remembered).
    pub async fn forget(mut self) {
        self.armed = false;
        if let Err(e) = self.app.service().store().idem_forget(self.run()).await {
            tracing::warn!(error = %e, "an Idempotency-Key could not be forgotten");
        }
    }

    /// Remembers the response for repeats, if it fits the principal's byte
    /// quota; one that cannot fit is not remembered (the key is
    /// forgotten): a repeat then runs again, which the operation key makes
    /// safe. The principal's oldest answers beyond its count and byte
    /// quota go in the same transaction (running totals, never a count of
    /// the table); a batch of answers past the retention is purged after.
    /// A store failure here only loses the memory, never the answer.
    pub async fn finish(mut self, response: Stored) {
        self.armed = false;
        let settings = self.app.settings();
        let bounds = Bounds {
            retention_ms: RETENTION_MS,
            capacity: settings.idempotency_capacity.max(1) as u64,
            max_bytes: settings.idempotency_max_bytes as u64,
        };
        let claims = self.app.service().store();
        let outcome = if cost(&self.principal, &self.key, response.body.len()) > bounds.max_bytes {
            claims.idem_forget(self.run()).await
        } else {
            let answer = Remembered {
                status: response.status.as_u16(),
                content_type: response.content_type.to_owned(),
                outcome: response.outcome.map(|o| o.as_str().to_owned()),
                body: response.body,
            };
            let now = toolgate_service::clock::now_millis();
            match claims
                .idem_finish(IdemFinish {
                    principal: &self.principal,
                    key: &self.key,
                    runner: &self.runner,
                    answer,
                    now,
                    bounds,
                })
                .await
            {
                Ok(()) => claims.idem_purge(now, bounds).await,
                Err(e) => Err(e),
            }
        };
        if let Err(e) = outcome {
            tracing::warn!(error = %e, "the Idempotency-Key memory could not be updated");
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let app = self.app.clone();
        let (principal, key, runner) = (
            std::mem::take(&mut self.principal),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.runner),
        );
        rt.spawn(async move {
            if let Err(e) = app
                .service()
                .store()
                .idem_forget(IdemRun {
                    principal: &principal,
                    key: &key,
                    runner: &runner,
                })
                .await
            {
                tracing::warn!(error = %e, "an Idempotency-Key could not be forgotten");
            }
        });
    }
}

/// The longest `Idempotency-Key`, in characters.
const MAX_IDEMPOTENCY_KEY: usize = 255;

/// The `Idempotency-Key` header, for the document: 1 to 255 visible ASCII
/// characters other than `"`, bare or quoted once (the draft's
/// structured-field string).
pub struct IdempotencyHeader;

impl utoipa::IntoParams for IdempotencyHeader {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let key = format!("[!#-~]{{1,{MAX_IDEMPOTENCY_KEY}}}");
        vec![crate::dto::param(
            "Idempotency-Key",
            ParameterIn::Header,
            false,
            "IETF httpapi draft: a repeat with the same body gets the first answer again; 409 \
             `idempotency_key_in_flight` while the first runs; 422 `idempotency_key_reused` with \
             another body. 1 to 255 visible ASCII characters other than `\"`, bare or in one \
             pair of quotes",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(format!("^({key}|\"{key}\")$"))),
        )]
    }
}

/// The `Idempotency-Key` value: 1 to 255 visible ASCII characters other
/// than `"`, bare or in one pair of quotes.
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let text = v.to_str().ok().map(|s| {
        s.strip_prefix('"')
            .and_then(|t| t.strip_suffix('"'))
            .unwrap_or(s)
            .to_owned()
    });
    match text {
        Some(t)
            if !t.is_empty()
                && t.len() <= MAX_IDEMPOTENCY_KEY
                && t.bytes().all(|b| b.is_ascii_graphic() && b != b'"') =>
        {
            Ok(Some(t))
        }
        _ => Err(ApiError::new(
            ProblemCode::InvalidIdempotencyKey,
            "Idempotency-Key must be 1 to 255 visible ASCII characters other than '\"', bare or in one pair of quotes",
        )),
    }
}
