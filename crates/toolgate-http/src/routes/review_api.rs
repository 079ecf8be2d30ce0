//! The reviewer queue over JSON, and the approve/deny actions shared with
//! the reviewer page.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};
use toolgate::pipeline::Outcome;

use super::decisions;
use crate::auth::{Caller, REVIEW_CAPABILITY};
use crate::error::ApiError;
use crate::review::{ApproveError, Item, Status};
use crate::state::{AppState, Parts};

pub fn item_json(i: &Item) -> Value {
    let (status, by, after) = match &i.status {
        Status::Open => ("open", None, None),
        Status::Deciding => ("deciding", None, None),
        Status::Approved { by, decision } => ("approved", Some(by.clone()), Some(decision.clone())),
        Status::Denied { by } => ("denied", Some(by.clone()), None),
    };
    json!({
        "id": i.id,
        "at": i.at.0,
        "kind": i.kind.as_str(),
        "proposer": i.proposer,
        "status": status,
        "by": by,
        "decision": i.decision,
        "decision_after_approval": after,
    })
}

pub async fn list<P: Parts>(
    State(app): State<AppState<P>>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    caller.require(REVIEW_CAPABILITY)?;
    let items: Vec<Value> = app.inner.review.list().iter().map(item_json).collect();
    Ok(Json(json!({"items": items})))
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
) -> Result<Value, ApiError> {
    let replay = app.inner.review.begin_approval(id).map_err(not_pending)?;
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
            let shown = serde_json::to_value(&response).unwrap_or(Value::Null);
            let status = if decision.outcome == Outcome::PendingApproval {
                // Cannot match its own approval only if the proposal changed
                // under us; leave it open rather than claim it was approved.
                Status::Open
            } else {
                Status::Approved {
                    by: reviewer.to_owned(),
                    decision: shown.clone(),
                }
            };
            app.inner.review.set_status(id, status);
            tracing::info!(
                item = id,
                reviewer,
                outcome = decision.outcome.as_str(),
                "approved"
            );
            Ok(shown)
        }
        Err(e) => {
            app.inner.review.set_status(id, Status::Open);
            Err(e)
        }
    }
}

pub fn deny_item<P: Parts>(app: &AppState<P>, id: u64, reviewer: &str) -> Result<(), ApiError> {
    app.inner.review.begin_approval(id).map_err(not_pending)?;
    app.inner.review.set_status(
        id,
        Status::Denied {
            by: reviewer.to_owned(),
        },
    );
    tracing::info!(item = id, reviewer, "denied");
    Ok(())
}

fn not_pending(e: ApproveError) -> ApiError {
    match e {
        ApproveError::NotFound => ApiError::not_found("no reviewer item has this id"),
        ApproveError::NotPending => ApiError::new(
            StatusCode::CONFLICT,
            "not_pending",
            "this item is not a pending approval that is still open",
        ),
    }
}

pub async fn approve<P: Parts>(
    State(app): State<AppState<P>>,
    caller: Caller,
    Path(id): Path<u64>,
) -> Result<Json<Value>, ApiError> {
    caller.require(REVIEW_CAPABILITY)?;
    let decision = approve_item(&app, id, caller.principal.id()).await?;
    Ok(Json(json!({"status": "approved", "decision": decision})))
}

pub async fn deny<P: Parts>(
    State(app): State<AppState<P>>,
    caller: Caller,
    Path(id): Path<u64>,
) -> Result<Json<Value>, ApiError> {
    caller.require(REVIEW_CAPABILITY)?;
    deny_item(&app, id, caller.principal.id())?;
    Ok(Json(json!({"status": "denied"})))
}
