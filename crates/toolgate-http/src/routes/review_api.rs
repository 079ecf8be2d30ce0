//! The reviewer queue over JSON, and the approve/deny actions shared with
//! the reviewer page.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use toolgate::pipeline::Outcome;

use super::decisions;
use crate::auth::{Caller, REVIEW_CAPABILITY};
use crate::dto::{
    ApproveResponse, ApprovedStatus, DecisionResponse, DeniedStatus, DenyResponse, ReviewItemView,
    ReviewItems, ReviewStatus,
};
use crate::error::{ApiError, Problem, ProblemCode};
use crate::review::{ApproveError, Item, Status};
use crate::state::{AppState, Parts};

pub fn item_view(i: &Item) -> ReviewItemView {
    let (status, by, after) = match &i.status {
        Status::Open => (ReviewStatus::Open, None, None),
        Status::Deciding => (ReviewStatus::Deciding, None, None),
        Status::Approved { by, decision } => (
            ReviewStatus::Approved,
            Some(by.clone()),
            Some(decision.clone()),
        ),
        Status::Denied { by } => (ReviewStatus::Denied, Some(by.clone()), None),
    };
    ReviewItemView {
        id: i.id,
        at: i.at.0,
        kind: i.kind.into(),
        proposer: i.proposer.clone(),
        status,
        by,
        decision: i.decision.clone(),
        decision_after_approval: after,
    }
}

/// The reviewer queue, newest first. Needs `toolgate:review`.
#[utoipa::path(get, path = "/v1/review/items", tag = "review",
    responses(
        (status = 200, description = "the queue (per process, in memory)", body = ReviewItems),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`missing_capability`: the key lacks `toolgate:review`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn list<P: Parts>(
    State(app): State<AppState<P>>,
    caller: Caller,
) -> Result<Json<ReviewItems>, ApiError> {
    caller.require(REVIEW_CAPABILITY)?;
    let items = app.inner.review.list().iter().map(item_view).collect();
    Ok(Json(ReviewItems { items }))
}

/// The reviewer item a problem is about.
fn item_path(id: u64) -> String {
    format!("/v1/review/items/{id}")
}

/// Approves pending item `id`: the stored proposal runs through the whole
/// pipeline again — capability and live authorisation of its proposer,
/// claim lookup, state read — with an approval bound to its operation key,
/// fingerprint and version, so a moved version ends in `state_changed` and
/// nothing else can use the approval.
pub async fn approve_item<P: Parts>(
    app: &AppState<P>,
    id: u64,
    reviewer: &str,
) -> Result<DecisionResponse, ApiError> {
    let replay = app
        .inner
        .review
        .begin_approval(id)
        .map_err(|e| not_pending(e, id))?;
    let out = decisions::run(
        app,
        replay.principal.clone(),
        replay.mode,
        replay.prepared.clone(),
        Some(replay.approval.clone()),
    )
    .await;
    match out {
        Ok((decision, response)) => {
            let status = if decision.outcome == Outcome::PendingApproval {
                // Cannot match its own approval only if the proposal changed
                // under us; leave it open rather than claim it was approved.
                Status::Open
            } else {
                Status::Approved {
                    by: reviewer.to_owned(),
                    decision: serde_json::to_value(&response).unwrap_or_default(),
                }
            };
            app.inner.review.set_status(id, status);
            tracing::info!(
                item = id,
                reviewer,
                outcome = decision.outcome.as_str(),
                "approved"
            );
            Ok(response)
        }
        Err(e) => {
            app.inner.review.set_status(id, Status::Open);
            Err(e)
        }
    }
}

pub fn deny_item<P: Parts>(app: &AppState<P>, id: u64, reviewer: &str) -> Result<(), ApiError> {
    app.inner
        .review
        .begin_approval(id)
        .map_err(|e| not_pending(e, id))?;
    app.inner.review.set_status(
        id,
        Status::Denied {
            by: reviewer.to_owned(),
        },
    );
    tracing::info!(item = id, reviewer, "denied");
    Ok(())
}

fn not_pending(e: ApproveError, id: u64) -> ApiError {
    match e {
        ApproveError::NotFound => ApiError::not_found("no reviewer item has this id"),
        ApproveError::NotPending => ApiError::new(
            ProblemCode::NotPending,
            "this item is not a pending approval that is still open",
        ),
    }
    .at(item_path(id))
}

/// The item id from the path; a non-number is `invalid_path`.
fn item_id(id: Result<Path<u64>, PathRejection>) -> Result<u64, ApiError> {
    id.map(|Path(id)| id)
        .map_err(|e| ApiError::new(ProblemCode::InvalidPath, e.body_text()))
}

/// Approves a pending action. Needs `toolgate:review`.
#[utoipa::path(post, path = "/v1/review/items/{id}/approve", tag = "review",
    params(("id" = u64, Path, description = "the reviewer item id")),
    responses(
        (status = 200, description = "approved: the decision of the proposal's run with the approval (`state_changed` if its version moved)", body = ApproveResponse),
        (status = 400, description = "`invalid_path`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`missing_capability`: the key lacks `toolgate:review`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: no such item", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`not_pending`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store_unavailable`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn approve<P: Parts>(
    State(app): State<AppState<P>>,
    caller: Caller,
    id: Result<Path<u64>, PathRejection>,
) -> Result<Json<ApproveResponse>, ApiError> {
    caller.require(REVIEW_CAPABILITY)?;
    let id = item_id(id)?;
    let decision = approve_item(&app, id, caller.principal.id()).await?;
    Ok(Json(ApproveResponse {
        status: ApprovedStatus::Approved,
        decision,
    }))
}

/// Denies a pending action: nothing runs. Needs `toolgate:review`.
#[utoipa::path(post, path = "/v1/review/items/{id}/deny", tag = "review",
    params(("id" = u64, Path, description = "the reviewer item id")),
    responses(
        (status = 200, description = "denied", body = DenyResponse),
        (status = 400, description = "`invalid_path`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`missing_capability`: the key lacks `toolgate:review`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: no such item", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`not_pending`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn deny<P: Parts>(
    State(app): State<AppState<P>>,
    caller: Caller,
    id: Result<Path<u64>, PathRejection>,
) -> Result<Json<DenyResponse>, ApiError> {
    caller.require(REVIEW_CAPABILITY)?;
    let id = item_id(id)?;
    deny_item(&app, id, caller.principal.id())?;
    Ok(Json(DenyResponse {
        status: DeniedStatus::Denied,
    }))
}
