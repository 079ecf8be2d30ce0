//! The reviewer queue over JSON, and the actions shared with the reviewer
//! page. Items are rows in the claim database (docs/design.md §14): any
//! replica lists and acts on any item. Approving records a vote and never
//! runs the proposal: the proposer's own retry does, once.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::Deserialize;
use toolgate::pipeline::Outcome;
use toolgate::review::{
    Closed, Closing, ItemStatus, ListQuery, ReviewItem, ReviewStore, ReviewerAct, Verdict, Voted,
};
use utoipa::IntoParams;
use utoipa::openapi::path::{Parameter, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};

use super::decisions::strict_body;
use super::item_id::ItemId;
use crate::auth::Reviewer;
use crate::dto::{
    ReviewActionRequest, ReviewActionResponse, ReviewItemResponse, ReviewItemView, ReviewItems,
    ReviewVote, param,
};
use crate::error::{ApiError, Problem, ProblemCode};
use crate::state::AppState;

/// Default page size of a listing.
pub const DEFAULT_PAGE: u32 = 50;

/// Item `i` as sent. Its kind is the outcome that opened it (the store
/// refuses a row whose kind names none, as corrupt).
pub fn item_view(i: &ReviewItem) -> Result<ReviewItemView, ApiError> {
    let kind = i.kind;
    let decision = i.decision.to_value();
    Ok(ReviewItemView {
        id: u64::try_from(i.id).unwrap_or(0),
        at: i.created_at.0,
        kind,
        tool: i.tool.clone(),
        proposer: i.proposer.clone(),
        proposer_via: i.proposer_via.clone(),
        status: i.status,
        operation_key: i.key.map(|k| k.to_hex()),
        approvals_needed: i.approvals_needed,
        expires_at: i.expires_at.map(|t| t.0),
        consumed_at: i.consumed_at.map(|t| t.0),
        consumed_by: i.consumed_by.clone(),
        votes: i
            .votes
            .iter()
            .map(|v| ReviewVote {
                reviewer: v.reviewer.clone(),
                verdict: v.verdict,
                at: v.at.0,
                note: v.note.clone(),
            })
            .collect(),
        by: i.closed_by.clone(),
        closed_at: i.closed_at.map(|t| t.0),
        note: i.note.clone(),
        decision,
    })
}

/// The outcomes whose decisions open a reviewer item: the `kind` a
/// listing may ask for.
pub const ITEM_KINDS: [Outcome; 5] = [
    Outcome::PendingApproval,
    Outcome::Conflict,
    Outcome::StateChanged,
    Outcome::Rejected,
    Outcome::NeedsReconciliation,
];

/// A string query parameter that is one of `names`.
fn one_of(names: impl IntoIterator<Item = &'static str>) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(names))
}

fn status_schema() -> ObjectBuilder {
    one_of(ItemStatus::ALL.map(ItemStatus::as_str))
}

fn kind_schema() -> ObjectBuilder {
    one_of(ITEM_KINDS.map(Outcome::as_str))
}

fn limit_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(1))
        .maximum(Some(toolgate::review::MAX_PAGE))
}

/// `GET /v1/review/items` parameters.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Only items with an id below this (the previous page's `next_before`).
    pub before: Option<u64>,
    /// At most this many, 1 to 200 (default 50).
    pub limit: Option<u32>,
    /// Only this status.
    pub status: Option<String>,
    /// Only this kind (the outcome that opened the item).
    pub kind: Option<String>,
}

impl IntoParams for ListParams {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            param(
                "before",
                ParameterIn::Query,
                false,
                "only items with an id below this (the previous page's `next_before`)",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(0))
                    .maximum(Some(u64::MAX)),
            ),
            param(
                "limit",
                ParameterIn::Query,
                false,
                "at most this many (default 50)",
                limit_schema(),
            ),
            param(
                "status",
                ParameterIn::Query,
                false,
                "only items of this status",
                status_schema(),
            ),
            param(
                "kind",
                ParameterIn::Query,
                false,
                "only items of this kind (the outcome that opened them)",
                kind_schema(),
            ),
        ]
    }
}

/// The listing a page of the queue asks for.
pub fn list_query(p: &ListParams) -> Result<ListQuery, ApiError> {
    let bad = |m: &str| ApiError::new(ProblemCode::InvalidQuery, m.to_owned());
    let limit = p.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=toolgate::review::MAX_PAGE).contains(&limit) {
        return Err(bad("limit must be 1 to 200"));
    }
    let status = match p.status.as_deref() {
        None => None,
        Some(s) => Some(ItemStatus::parse(s).ok_or_else(|| {
            bad("status must be open, approved, denied, expired, resolved or dismissed")
        })?),
    };
    let kind = match p.kind.as_deref() {
        None => None,
        Some(k) if ITEM_KINDS.iter().any(|o| o.as_str() == k) => Some(k.to_owned()),
        Some(_) => {
            return Err(bad(
                "kind must be pending_approval, conflict, state_changed, rejected or needs_reconciliation",
            ));
        }
    };
    // Every id is below i64::MAX: a larger `before` asks for every item,
    // as the largest does.
    let before = p.before.map(|b| i64::try_from(b).unwrap_or(i64::MAX));
    Ok(ListQuery {
        before,
        limit,
        status,
        kind,
    })
}

/// A page of the queue.
pub async fn list_page(app: &AppState, query: &ListQuery) -> Result<ReviewItems, ApiError> {
    let items = app
        .service()
        .store()
        .list_items(query, toolgate_service::clock::now_millis())
        .await
        .map_err(store_error)?;
    let full = items.len() == usize::try_from(query.limit).unwrap_or(usize::MAX);
    let next_before = if full {
        items.last().and_then(|i| u64::try_from(i.id).ok())
    } else {
        None
    };
    Ok(ReviewItems {
        items: items.iter().map(item_view).collect::<Result<_, _>>()?,
        next_before,
    })
}

pub(super) fn store_error(e: toolgate::claim::StoreError) -> ApiError {
    if e.kind() == toolgate::claim::StoreErrorKind::Corrupt {
        ApiError::new(ProblemCode::CorruptRecord, e.to_string())
    } else {
        ApiError::unavailable(e)
    }
}

/// The reviewer queue from the claim database, newest first, a page at a
/// time. Needs `toolgate:review`.
#[utoipa::path(get, path = "/v1/review/items", tag = "review",
    params(ListParams),
    responses(
        (status = 200, description = "a page of the queue (durable, the same on every replica)", body = ReviewItems),
        (status = 400, description = "`invalid_query`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`missing_capability`: the key lacks `toolgate:review`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store_unavailable`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn list(
    State(app): State<AppState>,
    _reviewer: Reviewer,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<ReviewItems>, ApiError> {
    let Query(params) =
        params.map_err(|e| ApiError::new(ProblemCode::InvalidQuery, e.body_text()))?;
    let query = list_query(&params)?;
    Ok(Json(list_page(&app, &query).await?))
}

/// One item of the queue with its whole decision (a listing carries
/// summaries). Needs `toolgate:review`.
#[utoipa::path(get, path = "/v1/review/items/{id}", tag = "review",
    params(("id" = u64, Path, description = "the reviewer item id")),
    responses(
        (status = 200, description = "the item, its whole decision included", body = ReviewItemResponse),
        (status = 400, description = "`invalid_path`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`missing_capability`: the key lacks `toolgate:review`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: no such item", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store_unavailable`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn get_item(
    State(app): State<AppState>,
    _reviewer: Reviewer,
    ItemId(id): ItemId,
) -> Result<Json<ReviewItemResponse>, ApiError> {
    let not_found = || ApiError::not_found("no reviewer item has this id").at(item_path(id));
    let Ok(n) = i64::try_from(id) else {
        return Err(not_found());
    };
    let item = app
        .service()
        .store()
        .item(n, toolgate_service::clock::now_millis())
        .await
        .map_err(store_error)?
        .ok_or_else(not_found)?;
    Ok(Json(ReviewItemResponse {
        item: item_view(&item)?,
    }))
}

/// The reviewer item a problem is about.
fn item_path(id: u64) -> String {
    format!("/v1/review/items/{id}")
}

/// What a reviewer can do to an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Vote(Verdict),
    Close(Closing),
}

/// Runs a reviewer's action on item `id` and returns the item after it.
/// Every action is one transaction with its audit entry naming the
/// reviewer; none runs a proposal.
pub async fn act(
    app: &AppState,
    id: u64,
    reviewer: &str,
    action: Action,
    note: Option<&str>,
) -> Result<ReviewItemView, ApiError> {
    let not_found = || ApiError::not_found("no reviewer item has this id").at(item_path(id));
    let Ok(item) = i64::try_from(id) else {
        return Err(not_found());
    };
    if note.is_some_and(|n| n.len() > toolgate::review::MAX_NOTE_BYTES) {
        return Err(ApiError::new(
            ProblemCode::InvalidBody,
            "note must be at most 2000 bytes",
        ));
    }
    let store = app.service().store();
    let now = toolgate_service::clock::now_millis();
    let conflict = |code, m: String| Err(ApiError::new(code, m).at(item_path(id)));
    match action {
        Action::Vote(verdict) => match store
            .vote(ReviewerAct {
                id: item,
                reviewer,
                choice: verdict,
                note,
                now,
            })
            .await
            .map_err(store_error)?
        {
            Voted::Recorded(status) => {
                tracing::info!(item, reviewer, verdict = verdict.as_str(), %status, "review vote");
            }
            Voted::NotFound => return Err(not_found()),
            Voted::NotApproval => {
                return conflict(
                    ProblemCode::NotPending,
                    "this item is not a pending approval: resolve or dismiss it".into(),
                );
            }
            Voted::NotOpen(s) => {
                return conflict(
                    ProblemCode::NotPending,
                    format!("this approval is {s}, no longer open"),
                );
            }
            Voted::SelfApproval => {
                return conflict(
                    ProblemCode::SelfApproval,
                    "whoever proposed an action cannot approve or deny it".into(),
                );
            }
            Voted::AlreadyVoted => {
                return conflict(
                    ProblemCode::AlreadyVoted,
                    "this reviewer has voted on this item already".into(),
                );
            }
        },
        Action::Close(closing) => match store
            .close(ReviewerAct {
                id: item,
                reviewer,
                choice: closing,
                note,
                now,
            })
            .await
            .map_err(store_error)?
        {
            Closed::Done => {
                tracing::info!(item, reviewer, status = %closing.status(), "review item closed");
            }
            Closed::NotFound => return Err(not_found()),
            Closed::IsApproval => {
                return conflict(
                    ProblemCode::NotPending,
                    "a pending approval is approved or denied, not resolved or dismissed".into(),
                );
            }
            Closed::NotOpen(s) => {
                return conflict(
                    ProblemCode::NotPending,
                    format!("this item is {s}, no longer open"),
                );
            }
        },
    }
    let item = store
        .item(item, now)
        .await
        .map_err(store_error)?
        .ok_or_else(not_found)?;
    item_view(&item)
}

/// An optional `{"note": …}` body.
fn note_of(app: &AppState, body: &[u8]) -> Result<Option<String>, ApiError> {
    if body.is_empty() {
        return Ok(None);
    }
    // `null` is no body, as the document's optional body allows.
    let req: Option<ReviewActionRequest> = strict_body(body, app.settings().body_limit)?;
    Ok(req.and_then(|r| r.note))
}

async fn handle(
    app: AppState,
    Reviewer(caller): Reviewer,
    ItemId(id): ItemId,
    body: Bytes,
    action: Action,
) -> Result<Json<ReviewActionResponse>, ApiError> {
    let note = note_of(&app, &body)?;
    let item = act(&app, id, caller.principal.id(), action, note.as_deref()).await?;
    Ok(Json(ReviewActionResponse { item }))
}

/// Approves a pending action: a vote, and at the tool's `approvers`-th
/// distinct approver the item is `approved`. Nothing runs and no permit is
/// handed out: the proposer's own retry of the same proposal proceeds, once.
/// Needs `toolgate:review`; the proposer cannot approve their own proposal.
#[utoipa::path(post, path = "/v1/review/items/{id}/approve", tag = "review",
    params(("id" = u64, Path, description = "the reviewer item id")),
    request_body(content = Option<ReviewActionRequest>, content_type = "application/json"),
    responses(
        (status = 200, description = "the vote is recorded: the item, `approved` or still `open` for more approvers", body = ReviewActionResponse),
        (status = 400, description = "`invalid_path`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`missing_capability`: the key lacks `toolgate:review`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: no such item", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`not_pending`, `self_approval`, `already_voted`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_body`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store_unavailable`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn approve(
    State(app): State<AppState>,
    reviewer: Reviewer,
    id: ItemId,
    body: Bytes,
) -> Result<Json<ReviewActionResponse>, ApiError> {
    handle(app, reviewer, id, body, Action::Vote(Verdict::Approve)).await
}

/// Denies a pending action: nothing runs, and the proposer's retry of the
/// same proposal is `rejected` (`approval_denied`). Needs `toolgate:review`.
#[utoipa::path(post, path = "/v1/review/items/{id}/deny", tag = "review",
    params(("id" = u64, Path, description = "the reviewer item id")),
    request_body(content = Option<ReviewActionRequest>, content_type = "application/json"),
    responses(
        (status = 200, description = "denied", body = ReviewActionResponse),
        (status = 400, description = "`invalid_path`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`missing_capability`: the key lacks `toolgate:review`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: no such item", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`not_pending`, `self_approval`, `already_voted`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_body`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store_unavailable`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn deny(
    State(app): State<AppState>,
    reviewer: Reviewer,
    id: ItemId,
    body: Bytes,
) -> Result<Json<ReviewActionResponse>, ApiError> {
    handle(app, reviewer, id, body, Action::Vote(Verdict::Deny)).await
}

/// Marks a conflict, stale version, rejection or stuck claim as dealt
/// with, with an optional note. Needs `toolgate:review`. (A stuck claim is
/// closed by reconciling it: `POST /v1/claims/{key}/reconcile`.)
#[utoipa::path(post, path = "/v1/review/items/{id}/resolve", tag = "review",
    params(("id" = u64, Path, description = "the reviewer item id")),
    request_body(content = Option<ReviewActionRequest>, content_type = "application/json"),
    responses(
        (status = 200, description = "resolved", body = ReviewActionResponse),
        (status = 400, description = "`invalid_path`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`missing_capability`: the key lacks `toolgate:review`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: no such item", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`not_pending`: closed already, or a pending approval", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_body`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store_unavailable`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn resolve(
    State(app): State<AppState>,
    reviewer: Reviewer,
    id: ItemId,
    body: Bytes,
) -> Result<Json<ReviewActionResponse>, ApiError> {
    handle(app, reviewer, id, body, Action::Close(Closing::Resolved)).await
}

/// Dismisses a conflict, stale version, rejection or stuck-claim item,
/// with an optional note. Needs `toolgate:review`.
#[utoipa::path(post, path = "/v1/review/items/{id}/dismiss", tag = "review",
    params(("id" = u64, Path, description = "the reviewer item id")),
    request_body(content = Option<ReviewActionRequest>, content_type = "application/json"),
    responses(
        (status = 200, description = "dismissed", body = ReviewActionResponse),
        (status = 400, description = "`invalid_path`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "`missing_capability`: the key lacks `toolgate:review`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: no such item", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`not_pending`: closed already, or a pending approval", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_body`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store_unavailable`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn dismiss(
    State(app): State<AppState>,
    reviewer: Reviewer,
    id: ItemId,
    body: Bytes,
) -> Result<Json<ReviewActionResponse>, ApiError> {
    handle(app, reviewer, id, body, Action::Close(Closing::Dismissed)).await
}
