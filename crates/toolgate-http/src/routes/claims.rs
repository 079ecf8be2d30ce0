//! Claim operations: the client's ownership-checked completion, the stuck
//! listing and reconciliation.

use std::str::FromStr;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate::claim::{
    AuditEntry, ClaimRecord, ClaimStore, Completion, HolderToken, JsonText, OperationKey,
    ReconcileOutcome,
};
use toolgate::pipeline::{ExecError, ExecOutcome, ExecPermit, Executor, ReconcileReport};

use super::decisions::strict_body;
use crate::auth::{Caller, OPERATE_CAPABILITY};
use crate::dto::{CompleteRequest, CompleteResponse, ReconcileRequest, claim_json};
use crate::error::ApiError;
use crate::state::{AppState, Parts};

fn parse_key(text: &str) -> Result<OperationKey, ApiError> {
    OperationKey::from_str(text)
        .map_err(|e| ApiError::bad_request("invalid_operation_key", format!("operation key: {e}")))
}

fn store_error(e: impl std::fmt::Display) -> ApiError {
    ApiError::unavailable(e.to_string())
}

/// `POST /v1/claims/{key}/complete`: the client performed the write of a
/// `permitted` decision and records its result. Ownership-checked: only the
/// holder token of the permit, only while the claim is in flight and its
/// lease has not ended; anything else is 409 and nothing is written.
pub async fn complete<P: Parts>(
    State(app): State<AppState<P>>,
    caller: Caller,
    Path(key): Path<String>,
    body: Bytes,
) -> Result<Json<CompleteResponse>, ApiError> {
    let key = parse_key(&key)?;
    let req: CompleteRequest = strict_body(&body, app.settings().body_limit)?;
    let holder = HolderToken::from_str(&req.holder)
        .map_err(|e| ApiError::invalid_request("invalid_holder", format!("holder: {e}")))?;
    let text = serde_json::to_string(&req.result)
        .map_err(|e| ApiError::invalid_request("invalid_result", e.to_string()))?;
    let result = JsonText::result(text)
        .map_err(|e| ApiError::invalid_request("invalid_result", e.to_string()))?;
    let claims = app.parts().claims();
    let now = crate::clock::now_millis();
    let record = claims
        .fetch(&key)
        .await
        .map_err(store_error)?
        .ok_or_else(|| ApiError::not_found("no claim has this operation key"))?;
    if record.proposal.proposer() != caller.principal.id() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "not_proposer",
            "only the principal that received the permit completes its claim",
        ));
    }
    if record.is_stuck(now) {
        // Invariant 8: past its lease the claim's outcome is unknown to the
        // gate; an operator reconciles it.
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "lease_expired",
            "the permit's lease has ended: nothing was written; reconcile the claim",
        ));
    }
    match claims
        .complete(&key, &holder, &result, now)
        .await
        .map_err(store_error)?
    {
        Completion::Recorded => {
            app.inner.metrics.permit_closed();
            audit(
                &app,
                caller.principal.id(),
                &record,
                "client_completed",
                now,
            )
            .await;
            Ok(Json(CompleteResponse {
                status: "completed".to_owned(),
                operation_key: key.to_hex(),
            }))
        }
        Completion::Reconcile => Err(ApiError::new(
            StatusCode::CONFLICT,
            "stale_holder",
            "this holder token does not own an in-flight claim on this key (stale, wrong, or already completed): nothing was written",
        )),
    }
}

async fn audit<P: Parts>(
    app: &AppState<P>,
    actor: &str,
    record: &ClaimRecord,
    outcome: &str,
    now: toolgate::claim::UnixMillis,
) {
    let entry = AuditEntry::new(
        now,
        actor.to_owned(),
        Some(record.proposal.tool().to_owned()),
        outcome.to_owned(),
        None,
        Some(record.key),
        Some(record.fingerprint),
    );
    let appended = match entry {
        Ok(e) => app
            .parts()
            .claims()
            .append_audit(&e)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(error) = appended {
        tracing::error!(%error, "audit entry not appended");
    }
}

#[derive(Deserialize)]
pub struct ListQuery {
    stuck: Option<bool>,
    limit: Option<u32>,
}

/// `GET /v1/claims?stuck=true[&limit=N]`: claims in flight past their lease.
pub async fn list<P: Parts>(
    State(app): State<AppState<P>>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.require(OPERATE_CAPABILITY)?;
    if q.stuck != Some(true) {
        return Err(ApiError::bad_request(
            "unsupported_listing",
            "only stuck claims are listed: GET /v1/claims?stuck=true",
        ));
    }
    let now = crate::clock::now_millis();
    let limit = q.limit.unwrap_or(100).min(1000);
    let entries = app
        .parts()
        .claims()
        .list_stuck(now, limit)
        .await
        .map_err(store_error)?;
    let listed: Vec<Value> = entries
        .iter()
        .map(|e| match e {
            Ok(r) => claim_json(r, now.0),
            // A corrupt row is reported by its raw key, never shown.
            Err(c) => json!({"corrupt": {
                "raw_key": hex::encode(&c.raw_key),
                "field": c.problem.field(),
                "message": c.problem.message(),
            }}),
        })
        .collect();
    Ok(Json(json!({"claims": listed})))
}

/// An executor that only answers a reconciliation with what an operator
/// reported from the downstream system. It never executes.
struct Reported(ReconcileOutcome);

impl Executor for Reported {
    async fn execute(&self, _permit: ExecPermit<'_>) -> Result<ExecOutcome, ExecError> {
        Err(ExecError::new("reconciliation never executes"))
    }

    async fn reconcile(&self, _claim: &ClaimRecord) -> Result<ReconcileOutcome, ExecError> {
        Ok(self.0.clone())
    }
}

/// `POST /v1/claims/{key}/reconcile`: closes a stuck claim with what the
/// downstream system says. With an empty body the server's executor is
/// asked; with `{"applied": bool, "detail": …}` the operator's answer is
/// recorded. Never executes (invariant 8).
pub async fn reconcile_claim<P: Parts>(
    app: &AppState<P>,
    actor: &str,
    key: &OperationKey,
    reported: Option<ReconcileOutcome>,
) -> Result<(StatusCode, Value), ApiError> {
    let now = crate::clock::now_millis();
    let claims = app.parts().claims();
    let report = match reported {
        Some(o) => toolgate::pipeline::reconcile(claims, &Reported(o), key, actor, now).await,
        None => {
            toolgate::pipeline::reconcile(claims, app.parts().executor(), key, actor, now).await
        }
    }
    .map_err(store_error)?;
    Ok(match report {
        ReconcileReport::Recorded(o) => {
            let (status, detail) = match &o {
                ReconcileOutcome::Applied { receipt } => ("reconciled_applied", receipt),
                ReconcileOutcome::NotApplied { detail } => ("reconciled_not_applied", detail),
            };
            (
                StatusCode::OK,
                json!({"status": status, "operation_key": key.to_hex(), "result": detail.value().ok()}),
            )
        }
        ReconcileReport::NotStuck(r) => (
            StatusCode::CONFLICT,
            json!({"error": {"code": "not_stuck", "message": "the claim is not in flight past its lease (or does not exist): nothing was written"},
                   "claim": r.map(|r| claim_json(&r, now.0))}),
        ),
    })
}

pub async fn reconcile<P: Parts>(
    State(app): State<AppState<P>>,
    caller: Caller,
    Path(key): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.require(OPERATE_CAPABILITY)?;
    let key = parse_key(&key)?;
    let reported = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let req: ReconcileRequest = strict_body(&body, app.settings().body_limit)?;
        let text = serde_json::to_string(&req.detail)
            .map_err(|e| ApiError::invalid_request("invalid_result", e.to_string()))?;
        let text = JsonText::result(text)
            .map_err(|e| ApiError::invalid_request("invalid_result", e.to_string()))?;
        Some(if req.applied {
            ReconcileOutcome::Applied { receipt: text }
        } else {
            ReconcileOutcome::NotApplied { detail: text }
        })
    };
    let (status, body) = reconcile_claim(&app, caller.principal.id(), &key, reported).await?;
    Ok((status, Json(body)))
}
