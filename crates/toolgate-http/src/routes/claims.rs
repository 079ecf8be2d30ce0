//! Claim operations: the client's ownership-checked completion, the stuck
//! listing and reconciliation.

use std::str::FromStr;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use toolgate::claim::{
    AuditEntry, ClaimRecord, ClaimStore, Completion, HolderToken, JsonText, OperationKey,
    ReconcileOutcome,
};
use toolgate::pipeline::ReconcileReport;
use utoipa::IntoParams;
use utoipa::openapi::path::{Parameter, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};

use toolgate_service::OPERATE_CAPABILITY;

use super::decisions::strict_body;
use crate::auth::Caller;
use crate::dto::{
    ClaimKeyPath, ClaimList, ClaimView, CompleteRequest, CompleteResponse, CompletedStatus,
    ListedClaim, ReconcileRequest, ReconcileResponse, ReconciledStatus, param,
};
use crate::error::{ApiError, Problem, ProblemCode};
use crate::state::AppState;

fn parse_key(text: &str) -> Result<OperationKey, ApiError> {
    OperationKey::from_str(text).map_err(|e| {
        ApiError::new(
            ProblemCode::InvalidOperationKey,
            format!("operation key: {e}"),
        )
    })
}

/// The claim a problem is about, as a path relative to the sidecar.
/// Refuses a result over the service's cap before anything is recorded:
/// `413 result_too_large`.
fn check_result(app: &AppState, text: &str) -> Result<(), ApiError> {
    toolgate_service::cap::check_result(text, app.service().settings().max_result_bytes)
        .map_err(|e| ApiError::new(ProblemCode::ResultTooLarge, e.to_string()))
}

fn claim_path(key: &OperationKey) -> String {
    format!("/v1/claims/{}", key.to_hex())
}

fn store_error(e: impl std::fmt::Display) -> ApiError {
    ApiError::unavailable(e.to_string())
}

/// `POST /v1/claims/{key}/complete`: the client performed the write of a
/// `permitted` decision and records its result. Ownership-checked: only the
/// holder token of the permit, only while the claim is in flight and its
/// lease has not ended; anything else is 409 and nothing is written.
#[utoipa::path(post, path = "/v1/claims/{key}/complete", tag = "claims",
    request_body(content = CompleteRequest, content_type = "application/json"),
    params(ClaimKeyPath),
    responses(
        (status = 200, description = "the result is recorded; retries replay it", body = CompleteResponse),
        (status = 400, description = "`invalid_operation_key`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`stale_holder`: the caller does not hold an in-flight claim on this key (no such claim, another holder or principal, already closed; one answer for all, so it tells nothing about other callers' claims); `lease_expired`: the holder's lease has ended. Nothing was written", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "`body_too_large`: the request body is over the limit; `result_too_large`: the result is over the server's result cap; nothing was written", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_body`, `invalid_holder`, `invalid_result`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store_unavailable`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn complete(
    State(app): State<AppState>,
    caller: Caller,
    Path(key): Path<String>,
    body: Bytes,
) -> Result<Json<CompleteResponse>, ApiError> {
    let key = parse_key(&key)?;
    let req: CompleteRequest = strict_body(&body, app.settings().body_limit)?;
    let holder = HolderToken::from_str(&req.holder)
        .map_err(|e| ApiError::new(ProblemCode::InvalidHolder, format!("holder: {e}")))?;
    let text = serde_json::to_string(&req.result)
        .map_err(|e| ApiError::new(ProblemCode::InvalidResult, e.to_string()))?;
    check_result(&app, &text)?;
    let result = JsonText::result(text)
        .map_err(|e| ApiError::new(ProblemCode::InvalidResult, e.to_string()))?;
    let claims = app.service().store();
    let now = toolgate_service::clock::now_millis();
    // Whoever does not hold the claim (no claim, another holder token,
    // another principal) gets one answer: an operation key is computable
    // from a resource's ids, so anything else would tell who acts on what.
    let record = claims
        .fetch(&key)
        .await
        .map_err(store_error)?
        .ok_or_else(|| not_holder(&key))?;
    // A key that acts for users received the permits of the actors it
    // named, whose ids are the claims' proposers (docs/design.md §13).
    let delegated = record.proposal.proposer() != caller.principal.id();
    if !same_holder(&record.holder, &holder) || (delegated && !caller.act_for_users) {
        return Err(not_holder(&key));
    }
    if record.is_stuck(now) {
        // Invariant 8: past its lease the claim's outcome is unknown to the
        // gate; an operator reconciles it.
        return Err(ApiError::new(
            ProblemCode::LeaseExpired,
            "the permit's lease has ended: nothing was written; reconcile the claim",
        )
        .at(claim_path(&key)));
    }
    // The entry is written with the completion, in its transaction; a
    // retry of this completion after a lost answer is recorded again and
    // writes no second entry.
    let via = delegated.then(|| caller.principal.id());
    let entry = audit_entry(
        record.proposal.proposer(),
        via,
        &record,
        "client_completed",
        now,
    )
    .map_err(|e| store_error(toolgate::claim::StoreError::corrupt(&e)))?;
    let done = toolgate::claim::CompleteRequest {
        key,
        holder,
        result,
        now,
        audit: entry,
    };
    match claims.complete(done).await.map_err(store_error)? {
        Completion::Recorded => {
            app.service().metrics().permit_closed();
            Ok(Json(CompleteResponse {
                status: CompletedStatus::Completed,
                operation_key: key.to_hex(),
            }))
        }
        Completion::Reconcile => Err(not_holder(&key)),
    }
}

/// The one answer to a completion by anyone but the claim's holder.
fn not_holder(key: &OperationKey) -> ApiError {
    ApiError::new(
        ProblemCode::StaleHolder,
        "this holder token does not own an in-flight claim on this key (stale, wrong, or already completed): nothing was written",
    )
    .at(claim_path(key))
}

/// Compares holder tokens without an early exit, so the time taken does
/// not tell how much of a guessed token was right.
fn same_holder(a: &HolderToken, b: &HolderToken) -> bool {
    a.as_bytes()
        .iter()
        .zip(b.as_bytes())
        .fold(0u8, |d, (x, y)| d | (x ^ y))
        == 0
}

/// The audit entry of an action on `record` by `actor` (and, for a
/// delegated actor, the key that named it as `via`).
fn audit_entry(
    actor: &str,
    via: Option<&str>,
    record: &ClaimRecord,
    outcome: &str,
    now: toolgate::claim::UnixMillis,
) -> Result<AuditEntry, toolgate::claim::CorruptRecord> {
    AuditEntry::new(
        now,
        actor.to_owned(),
        Some(record.proposal.tool().to_owned()),
        outcome.to_owned(),
        None,
        Some(record.key),
        Some(record.fingerprint),
    )
    .and_then(|e| e.with_via(via.map(str::to_owned)))
}

/// `stuck`: required, and `true` is its one value.
fn stuck_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Boolean)
        .enum_values(Some([true]))
}

/// `limit`: any `u32`; above [`MAX_STUCK_PAGE`] it counts as that.
fn stuck_limit_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(0))
        .maximum(Some(u32::MAX))
}

/// The most stuck claims one listing returns.
const MAX_STUCK_PAGE: u32 = 1000;

/// The stuck listing's query string.
#[derive(Deserialize)]
pub struct ListQuery {
    /// Must be `true`: only stuck claims are listed.
    stuck: Option<bool>,
    /// At most this many (default 100, at most 1000).
    limit: Option<u32>,
}

impl IntoParams for ListQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            param(
                "stuck",
                ParameterIn::Query,
                true,
                "`true`: only stuck claims are listed (anything else is `unsupported_listing`)",
                stuck_schema(),
            ),
            param(
                "limit",
                ParameterIn::Query,
                false,
                "at most this many (default 100; a larger number than 1000 lists 1000)",
                stuck_limit_schema(),
            ),
        ]
    }
}

/// `GET /v1/claims?stuck=true[&limit=N]`: claims in flight past their
/// lease, oldest first. Needs `toolgate:operate`. Holder tokens are never
/// listed.
#[utoipa::path(get, path = "/v1/claims", tag = "claims",
    params(ListQuery),
    responses(
        (status = 200, description = "stuck claims; a row that fails validation is listed as `corrupt`", body = ClaimList),
        (status = 400, description = "`unsupported_listing`, `invalid_query`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`missing_capability`: the key lacks `toolgate:operate`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store_unavailable`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<ClaimList>, ApiError> {
    caller.require(OPERATE_CAPABILITY)?;
    let Query(q) = query.map_err(|e| ApiError::new(ProblemCode::InvalidQuery, e.body_text()))?;
    if q.stuck != Some(true) {
        return Err(ApiError::new(
            ProblemCode::UnsupportedListing,
            "only stuck claims are listed: GET /v1/claims?stuck=true",
        ));
    }
    let now = toolgate_service::clock::now_millis();
    let limit = q.limit.unwrap_or(100).min(MAX_STUCK_PAGE);
    let entries = app
        .service()
        .store()
        .list_stuck(now, limit)
        .await
        .map_err(store_error)?;
    // A corrupt row is reported by its raw key, never shown.
    let claims = entries.iter().map(|e| ListedClaim::new(e, now.0)).collect();
    Ok(Json(ClaimList { claims }))
}

/// Closes a stuck claim with what the downstream system says: `answer`
/// (the application's or an operator's), or, without it, the answer of the
/// server's executor, which is asked only about a claim recorded with its
/// kind (a client-executed claim needs an explicit answer; invariant 13).
/// Never executes (invariant 8).
pub(super) async fn reconcile_claim(
    app: &AppState,
    actor: &str,
    key: &OperationKey,
    answer: Option<ReconcileOutcome>,
) -> Result<ReconcileResponse, ApiError> {
    let now = toolgate_service::clock::now_millis();
    let claims = app.service().store();
    let executor = app.service().components().executor().as_ref();
    let executor =
        toolgate_service::Capped::new(&executor, app.service().settings().max_result_bytes);
    let report = match answer {
        // Shaped by the claim's own executor, as an execution would have
        // recorded it (an MCP tool's CallToolResult, its output schema
        // checked).
        Some(o) => {
            toolgate::pipeline::reconcile_answered_for(claims, &executor, o, key, actor, now).await
        }
        None => toolgate::pipeline::reconcile(claims, &executor, key, actor, now).await,
    }
    .map_err(store_error)?;
    match report {
        ReconcileReport::Recorded(o) => {
            let (status, detail) = match &o {
                ReconcileOutcome::Applied { receipt } => {
                    (ReconciledStatus::ReconciledApplied, receipt)
                }
                ReconcileOutcome::NotApplied { detail } => {
                    (ReconciledStatus::ReconciledNotApplied, detail)
                }
            };
            Ok(ReconcileResponse {
                status,
                operation_key: key.to_hex(),
                result: detail.value().ok(),
            })
        }
        ReconcileReport::NotStuck(r) => Err(ApiError::new(
            ProblemCode::NotStuck,
            "the claim is not in flight past its lease (or does not exist): nothing was written",
        )
        .at(claim_path(key))
        .with_claim(r.map(|r| ClaimView::new(&r, now.0)))),
        ReconcileReport::ExplicitAnswerRequired(r) => Err(ApiError::new(
            ProblemCode::ExplicitAnswerRequired,
            format!(
                "the claim's write is owned by the {} executor, which this server does not ask: \
                 send {{\"applied\": true, \"result\": …}} or {{\"applied\": false, \"detail\": …}} \
                 after checking the downstream system; nothing was asked or written",
                r.executor
            ),
        )
        .at(claim_path(key))
        .with_claim(Some(ClaimView::new(&r, now.0)))),
        ReconcileReport::AnswerRefused { claim, message } => Err(ApiError::new(
            ProblemCode::AnswerRefused,
            format!("{message}; nothing was written"),
        )
        .at(claim_path(key))
        .with_claim(Some(ClaimView::new(&claim, now.0)))),
    }
}

/// `POST /v1/claims/{key}/reconcile`: closes a stuck claim. Needs
/// `toolgate:operate`. With `{"applied": true, "result": …}` or
/// `{"applied": false, "detail": …}` that answer (the application's or an
/// operator's) is recorded. With an empty body the executor that owns the
/// claim's write is asked, if it is the server's own (`in_process`,
/// `webhook`); a `client` claim is refused with `explicit_answer_required`
/// and no executor is asked (invariant 13). Never executes.
#[utoipa::path(post, path = "/v1/claims/{key}/reconcile", tag = "claims",
    request_body(content = Option<ReconcileRequest>, content_type = "application/json",
        description = "the downstream system's answer; empty to ask the executor that owns the claim's write"),
    params(ClaimKeyPath),
    responses(
        (status = 200, description = "the claim is closed with the downstream answer", body = ReconcileResponse),
        (status = 400, description = "`invalid_operation_key`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`missing_capability`: the key lacks `toolgate:operate`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`not_stuck`: nothing was written; `claim` is the claim as it is. `explicit_answer_required`: an empty body for a claim whose write the server's executor does not own (`client`); nothing was asked or written", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "`body_too_large`: the request body is over the limit; `result_too_large`: the answer is over the server's result cap; nothing was written", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_body`, `invalid_result`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store_unavailable`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn reconcile(
    State(app): State<AppState>,
    caller: Caller,
    Path(key): Path<String>,
    body: Bytes,
) -> Result<Json<ReconcileResponse>, ApiError> {
    caller.require(OPERATE_CAPABILITY)?;
    let key = parse_key(&key)?;
    // An empty body and `null` both ask the executor (the document's
    // optional body).
    let req: Option<ReconcileRequest> = if body.is_empty() {
        None
    } else {
        strict_body(&body, app.settings().body_limit)?
    };
    let reported = if let Some(req) = req {
        let answer = match (req.result, req.detail) {
            (Some(_), Some(_)) => {
                return Err(ApiError::new(
                    ProblemCode::InvalidBody,
                    "send `result` (applied) or `detail`, not both",
                ));
            }
            (Some(_), None) if !req.applied => {
                return Err(ApiError::new(
                    ProblemCode::InvalidBody,
                    "`result` is the receipt of an applied write; a write that did not happen has a `detail`",
                ));
            }
            (Some(v), None) | (None, Some(v)) => v,
            (None, None) => serde_json::Value::Null,
        };
        let text = serde_json::to_string(&answer)
            .map_err(|e| ApiError::new(ProblemCode::InvalidResult, e.to_string()))?;
        check_result(&app, &text)?;
        let text = JsonText::result(text)
            .map_err(|e| ApiError::new(ProblemCode::InvalidResult, e.to_string()))?;
        Some(if req.applied {
            ReconcileOutcome::Applied { receipt: text }
        } else {
            ReconcileOutcome::NotApplied { detail: text }
        })
    } else {
        None
    };
    let answer = reconcile_claim(&app, caller.principal.id(), &key, reported).await?;
    Ok(Json(answer))
}
