//! `/review`: the reviewer page, server-rendered HTML and CSS, no script.
//!
//! A browser cannot send a bearer header from a link, so the page has a
//! login form: the reviewer pastes their API key once, the server checks it
//! (it must carry `toolgate:review`) and sets a session cookie (`HttpOnly`,
//! `SameSite=Strict`, path `/review`) holding a random session id, never the
//! key. Every action (approve, deny, resolve, dismiss, and closing a stuck
//! claim as applied or not applied) is a form post carrying the session's
//! CSRF token, audited under the reviewer's id.

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;
use toolgate::claim::{JsonText, ReconcileOutcome};
use toolgate::pipeline::Outcome;
use toolgate::review::{Closing, ItemStatus, ReviewSession, ReviewStore, Verdict, session_digest};

use super::item_id::ItemId;
use super::review_api::{Action, ListParams, act, item_view, list_query, store_error};
use crate::dto::ReviewItemView;
use crate::error::ApiError;
use crate::review::SESSION_MS;
use crate::state::AppState;
use toolgate_service::REVIEW_CAPABILITY;

mod render;
mod session;

use render::*;
pub use session::page_headers;
use session::*;

const COOKIE: &str = "toolgate_review";

pub async fn page(
    State(app): State<AppState>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let (who, csrf) = match reviewer(&app, &headers).await {
        Ok(Some(r)) => r,
        Ok(None) => return (StatusCode::UNAUTHORIZED, Html(login_page(None))).into_response(),
        Err(r) => return *r,
    };
    let mut params = match params {
        Ok(Query(p)) => p,
        Err(e) => {
            return ApiError::new(crate::error::ProblemCode::InvalidQuery, e.body_text())
                .into_response();
        }
    };
    // The filter form sends an empty value for "any".
    params.kind = params.kind.filter(|k| !k.is_empty());
    params.status = params.status.filter(|s| !s.is_empty());
    let query = match list_query(&params) {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    let now = toolgate_service::clock::now_millis();
    let items = match app.service().store().list_items(&query, now).await {
        Ok(items) => items,
        Err(e) => return store_error(e).into_response(),
    };
    let full = items.len() == usize::try_from(query.limit).unwrap_or(usize::MAX);
    let next_before = if full {
        items.last().and_then(|i| u64::try_from(i.id).ok())
    } else {
        None
    };
    let policy = app.policy();
    let cards: Result<Vec<(ReviewItemView, Card<'_>)>, ApiError> = items
        .iter()
        .map(|i| {
            let schema = i
                .tool
                .as_deref()
                .and_then(|t| policy.tool(t))
                .map(|t| t.schema().source());
            Ok((
                item_view(i)?,
                Card {
                    scope: i.scope.as_deref(),
                    schema,
                    now: now.0,
                },
            ))
        })
        .collect();
    let cards = match cards {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    Html(review_page(&cards, next_before, &query, &who, &csrf)).into_response()
}

/// `/review/items/{id}`: one item with its whole decision (a listing
/// carries summaries only), and its actions.
pub async fn item_page(
    State(app): State<AppState>,
    headers: HeaderMap,
    // Taken as a result: a page without a session answers with the login
    // page before the id is looked at.
    id: Result<ItemId, ApiError>,
) -> Response {
    let (who_am_i, csrf) = match reviewer(&app, &headers).await {
        Ok(Some(r)) => r,
        Ok(None) => return (StatusCode::UNAUTHORIZED, Html(login_page(None))).into_response(),
        Err(r) => return *r,
    };
    let id = match id {
        Ok(ItemId(id)) => id,
        Err(e) => return e.into_response(),
    };
    let now = toolgate_service::clock::now_millis();
    let found = match i64::try_from(id) {
        Ok(n) => app.service().store().item(n, now).await,
        Err(_) => Ok(None),
    };
    let item = match found {
        Ok(Some(item)) => item,
        Ok(None) => {
            return (
                StatusCode::NOT_FOUND,
                Html(page_shell(
                    "toolgate review",
                    "<p>No item has this id. <a href=\"/review\">Back to the queue</a>.</p>",
                )),
            )
                .into_response();
        }
        Err(e) => return store_error(e).into_response(),
    };
    let view = match item_view(&item) {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let policy = app.policy();
    let schema = item
        .tool
        .as_deref()
        .and_then(|t| policy.tool(t))
        .map(|t| t.schema().source());
    let card = Card {
        scope: item.scope.as_deref(),
        schema,
        now: now.0,
    };
    let body = format!(
        "<h1>toolgate review</h1><p>Signed in as <b>{}</b>. <a href=\"/review\">Back to the queue</a></p>{}",
        esc(&who_am_i),
        render_item(&view, &card, &csrf)
    );
    Html(page_shell(&format!("toolgate review: item {id}"), &body)).into_response()
}

#[derive(Deserialize)]
pub struct LoginForm {
    key: String,
}

pub async fn login(State(app): State<AppState>, Form(form): Form<LoginForm>) -> Response {
    let Some(key) = app.service().authenticate(form.key.trim()) else {
        return (
            StatusCode::UNAUTHORIZED,
            Html(login_page(Some("Unknown key."))),
        )
            .into_response();
    };
    if !key.principal.has_capability(REVIEW_CAPABILITY) {
        return (
            StatusCode::FORBIDDEN,
            Html(login_page(Some("This key may not review."))),
        )
            .into_response();
    }
    let (Ok(token), Ok(csrf)) = (
        toolgate_service::clock::fresh_holder(),
        toolgate_service::clock::fresh_holder(),
    ) else {
        return ApiError::unavailable("the random number generator failed").into_response();
    };
    let token = token.to_hex();
    let now = toolgate_service::clock::now_millis();
    let session = ReviewSession {
        principal: key.principal.id().to_owned(),
        csrf: csrf.to_hex(),
        expires_at: now.plus_millis(SESSION_MS),
    };
    if let Err(e) = app
        .service()
        .store()
        .open_session(session_digest(&token), session, now)
        .await
    {
        return store_error(e).into_response();
    }
    let mut r = Redirect::to("/review").into_response();
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/review; Max-Age={}{}",
        SESSION_MS / 1000,
        secure_attribute(app.service().settings().public_url.as_deref())
    )) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

pub async fn logout(State(app): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(t) = session_token(&headers)
        && let Err(e) = app
            .service()
            .store()
            .close_session(session_digest(&t))
            .await
    {
        return store_error(e).into_response();
    }
    let mut r = Redirect::to("/review").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "toolgate_review=; HttpOnly; SameSite=Strict; Path=/review; Max-Age=0",
        ),
    );
    r
}

#[derive(Deserialize)]
pub struct ActionForm {
    csrf: String,
    note: Option<String>,
}

async fn checked(
    app: &AppState,
    headers: &HeaderMap,
    form_csrf: &str,
) -> Result<String, Box<Response>> {
    match reviewer(app, headers).await? {
        Some((who, csrf)) if same_token(&csrf, form_csrf) => Ok(who),
        Some(_) => Err(Box::new(
            (
                StatusCode::FORBIDDEN,
                Html(page_shell(
                    "toolgate review",
                    "<p class=\"status denied\">This form is stale. <a href=\"/review\">Reload the page</a>.</p>",
                )),
            )
                .into_response(),
        )),
        None => Err(Box::new(
            (StatusCode::UNAUTHORIZED, Html(login_page(None))).into_response(),
        )),
    }
}

async fn page_action(
    app: AppState,
    headers: HeaderMap,
    id: u64,
    form: ActionForm,
    action: Action,
) -> Response {
    let who = match checked(&app, &headers, &form.csrf).await {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let note = form
        .note
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty());
    match act(&app, id, &who, action, note).await {
        Ok(_) => Redirect::to(&format!("/review#item-{id}")).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn approve(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(form): Form<ActionForm>,
) -> Response {
    page_action(app, headers, id, form, Action::Vote(Verdict::Approve)).await
}

pub async fn deny(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(form): Form<ActionForm>,
) -> Response {
    page_action(app, headers, id, form, Action::Vote(Verdict::Deny)).await
}

pub async fn resolve(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(form): Form<ActionForm>,
) -> Response {
    page_action(app, headers, id, form, Action::Close(Closing::Resolved)).await
}

pub async fn dismiss(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(form): Form<ActionForm>,
) -> Response {
    page_action(app, headers, id, form, Action::Close(Closing::Dismissed)).await
}

#[derive(Deserialize)]
pub struct ReconcileForm {
    csrf: String,
    note: Option<String>,
    applied: String,
}

/// Room kept in the closing note for "reconciled as not applied: ".
const NOTE_PREFIX_BYTES: usize = 64;

/// Closes a stuck claim from its `needs_reconciliation` card, as applied or
/// not applied, through the same reconciliation as
/// `POST /v1/claims/{key}/reconcile` with an explicit answer (a
/// client-executed claim needs one; these buttons are one), audited under
/// the reviewer's id; then resolves the item with a note saying which.
pub async fn reconcile(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(form): Form<ReconcileForm>,
) -> Response {
    use crate::error::{ApiError, ProblemCode};
    let who = match checked(&app, &headers, &form.csrf).await {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let applied = match form.applied.as_str() {
        "true" => true,
        "false" => false,
        _ => {
            return ApiError::new(ProblemCode::InvalidBody, "applied must be true or false")
                .into_response();
        }
    };
    let note = form
        .note
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty());
    if note.is_some_and(|n| n.len() > toolgate::review::MAX_NOTE_BYTES - NOTE_PREFIX_BYTES) {
        return ApiError::new(ProblemCode::InvalidBody, "note must be at most 1936 bytes")
            .into_response();
    }
    let now = toolgate_service::clock::now_millis();
    let path = format!("/v1/review/items/{id}");
    let item = match i64::try_from(id) {
        Ok(n) => app.service().store().item(n, now).await,
        Err(_) => Ok(None),
    };
    let item = match item {
        Ok(Some(i)) => i,
        Ok(None) => {
            return ApiError::not_found("no reviewer item has this id")
                .at(path)
                .into_response();
        }
        Err(e) => return store_error(e).into_response(),
    };
    let key = match item.key {
        Some(k) if item.kind == Outcome::NeedsReconciliation && item.status == ItemStatus::Open => {
            k
        }
        _ => {
            return ApiError::new(
                ProblemCode::NotPending,
                "only an open needs_reconciliation item closes a claim as applied or not applied",
            )
            .at(path)
            .into_response();
        }
    };
    // The answer recorded with the claim: who said so, from where, and why.
    let answer = serde_json::json!({"reconciled_by": who, "via": "review page", "note": note});
    let text = match JsonText::result(answer.to_string()) {
        Ok(t) => t,
        Err(e) => {
            return ApiError::new(ProblemCode::InvalidResult, e.to_string()).into_response();
        }
    };
    let outcome = if applied {
        ReconcileOutcome::Applied { receipt: text }
    } else {
        ReconcileOutcome::NotApplied { detail: text }
    };
    if let Err(e) = super::claims::reconcile_claim(&app, &who, &key, Some(outcome)).await {
        return e.into_response();
    }
    let said = if applied { "applied" } else { "not applied" };
    let closing = match note {
        Some(n) => format!("reconciled as {said}: {n}"),
        None => format!("reconciled as {said}"),
    };
    match act(
        &app,
        id,
        &who,
        Action::Close(Closing::Resolved),
        Some(&closing),
    )
    .await
    {
        Ok(_) => Redirect::to(&format!("/review#item-{id}")).into_response(),
        Err(e) => e.into_response(),
    }
}
