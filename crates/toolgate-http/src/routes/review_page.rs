//! `/review`: the reviewer page, server-rendered HTML and CSS, no script.
//!
//! A browser cannot send a bearer header from a link, so the page has a
//! login form: the reviewer pastes their API key once, the server checks it
//! (it must carry `toolgate:review`) and sets a session cookie (`HttpOnly`,
//! `SameSite=Strict`, path `/review`) holding a random session id, never the
//! key. Approve and deny are form posts carrying the session's CSRF token.

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::Value;
use toolgate::review::{Closing, Verdict};

use super::review_api::{Action, ListParams, act, list_page, list_query};
use crate::auth::REVIEW_CAPABILITY;
use crate::dto::{ReviewItemView, ReviewStatus};
use crate::review::{SESSION_MS, Session};
use crate::state::{AppState, Parts};

const COOKIE: &str = "toolgate_review";

fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn session_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// Headers on every answer of the reviewer page: nothing cached (a page
/// lists proposals and holds a CSRF token), never framed (clickjacking on
/// the approve button), no script or remote resource at all, forms posted
/// only here, no referrer leaving it.
pub async fn page_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// `Secure` on the session cookie, except for a page opened on a loopback
/// host (the demo on http://127.0.0.1): behind TLS the cookie must never
/// travel over plain HTTP.
fn secure_attribute(headers: &HeaderMap) -> &'static str {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let name = match host.rsplit_once(':') {
        Some((n, port)) if port.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => host,
    };
    let loopback = name == "localhost"
        || name == "[::1]"
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback());
    if loopback { "" } else { "; Secure" }
}

/// Compares two tokens in time that does not depend on where they differ.
fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The reviewer's id and CSRF token, if the cookie names a live session.
fn reviewer<P: Parts>(app: &AppState<P>, headers: &HeaderMap) -> Option<(String, String)> {
    let token = session_token(headers)?;
    app.inner.review.session(&token, crate::clock::now_millis())
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2rem;max-width:72rem;color:#222}\
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem;border-bottom:1px solid #ccc}\
.item{border:1px solid #ccc;border-radius:6px;padding:.8rem;margin:.8rem 0}\
.cols{display:grid;grid-template-columns:1fr 1fr;gap:1rem}\
.code{font-family:ui-monospace,monospace;font-size:.85rem;background:#f5f5f5;padding:.3rem;white-space:pre-wrap;word-break:break-all}\
.status{font-weight:bold}.approved{color:#060}.denied{color:#900}\
button{margin-right:.5rem;padding:.3rem .9rem}form.inline{display:inline}";

fn page_shell(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>{body}</body></html>",
        esc(title)
    )
}

fn login_page(message: Option<&str>) -> String {
    let note = message.map_or(String::new(), |m| {
        format!("<p class=\"status denied\">{}</p>", esc(m))
    });
    page_shell(
        "toolgate review: sign in",
        &format!(
            "<h1>toolgate review</h1>{note}<form method=\"post\" action=\"/review/login\">\
             <label>Reviewer API key <input type=\"password\" name=\"key\" id=\"key\" autocomplete=\"off\"></label> \
             <button type=\"submit\" id=\"login\">Sign in</button></form>"
        ),
    )
}

fn json_text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "—".to_owned(),
        Some(v) => esc(&v.to_string()),
    }
}

/// A string field as plain (escaped) text, without JSON quotes.
fn plain(d: &Value, k: &str) -> String {
    esc(d.get(k).and_then(Value::as_str).unwrap_or("—"))
}

fn field<'a>(d: &'a Value, k: &str) -> Option<&'a Value> {
    d.get(k).filter(|v| !v.is_null())
}

fn button(id: u64, csrf: &str, action: &str, label: &str, with_note: bool) -> String {
    let note = if with_note {
        "<input type=\"text\" name=\"note\" maxlength=\"2000\" placeholder=\"note (optional)\">"
    } else {
        ""
    };
    format!(
        "<form class=\"inline\" method=\"post\" action=\"/review/items/{id}/{action}\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">{note}<button type=\"submit\" class=\"{action}\" id=\"{action}-{id}\">{label}</button></form>",
        csrf = esc(csrf),
    )
}

fn render_item(i: &ReviewItemView, csrf: &str) -> String {
    let d = &i.decision;
    let head = format!(
        "<div class=\"item {kind}\" id=\"item-{id}\" data-kind=\"{kind}\" data-status=\"{status}\"><div><b>#{id}</b> {kind} · tool <b>{tool}</b> · proposed by {proposer} · reason <code>{reason}</code></div>",
        id = i.id,
        kind = esc(&i.kind),
        status = status_name(i.status),
        tool = esc(i.tool.as_deref().unwrap_or("—")),
        proposer = esc(&i.proposer),
        reason = json_text(field(d, "reason")),
    );
    let body = match i.kind.as_str() {
        "conflict" => {
            let prior = field(d, "prior");
            format!(
                "<div class=\"cols\"><div><h3>Prior proposal</h3><div>arguments</div><div class=\"code prior-arguments\">{}</div><div>version seen {}, by {}</div><div>recorded result</div><div class=\"code prior-result\">{}</div></div>\
                 <div><h3>New proposal</h3><div>arguments</div><div class=\"code new-arguments\">{}</div><div>version seen {}</div></div></div>",
                json_text(prior.and_then(|p| p.get("arguments"))),
                json_text(prior.and_then(|p| p.get("version_seen"))),
                json_text(prior.and_then(|p| p.get("proposer"))),
                json_text(field(d, "result")),
                json_text(field(d, "arguments")),
                json_text(field(d, "version_seen")),
            )
        }
        "state_changed" => format!(
            "<div>the model read version <b class=\"version-seen\">{}</b>; the current version is <b class=\"current-version\">{}</b></div><div class=\"code\">{}</div>",
            json_text(field(d, "version_seen")),
            json_text(field(d, "current_version")),
            json_text(field(d, "arguments")),
        ),
        "rejected" => format!("<div>{}</div>", json_text(field(d, "message"))),
        "needs_reconciliation" => format!(
            "<div>{}</div><div>prior proposal</div><div class=\"code\">{}</div><div>Reconcile: <code>POST /v1/claims/{}/reconcile</code> (never execute again).</div>",
            json_text(field(d, "message")),
            json_text(field(d, "prior")),
            plain(d, "operation_key"),
        ),
        _ => format!(
            "<div>arguments</div><div class=\"code arguments\">{}</div><div>version seen {} · operation key <code>{}</code> · approvals {}/{}</div>",
            json_text(field(d, "arguments")),
            json_text(field(d, "version_seen")),
            plain(d, "operation_key"),
            i.votes.iter().filter(|v| v.verdict == "approve").count(),
            i.approvals_needed,
        ),
    };
    let by = esc(i.by.as_deref().unwrap_or("—"));
    let note = i
        .note
        .as_deref()
        .map(|n| format!(" · note: {}", esc(n)))
        .unwrap_or_default();
    let status = match i.status {
        ReviewStatus::Open if i.approvals_needed > 0 => format!(
            "{}{}",
            button(i.id, csrf, "approve", "Approve", false),
            button(i.id, csrf, "deny", "Deny", false)
        ),
        ReviewStatus::Open => format!(
            "{}{}",
            button(i.id, csrf, "resolve", "Resolve", true),
            button(i.id, csrf, "dismiss", "Dismiss", true)
        ),
        ReviewStatus::Approved => format!(
            "<div class=\"status approved\">approved by {by}; {}{note}</div>",
            if i.consumed_at.is_some() {
                "the proposer's retry used it"
            } else {
                "waiting for the proposer's retry"
            }
        ),
        ReviewStatus::Denied => format!("<div class=\"status denied\">denied by {by}{note}</div>"),
        ReviewStatus::Expired => {
            "<div class=\"status denied\">expired (counts as denied)</div>".to_owned()
        }
        ReviewStatus::Resolved => {
            format!("<div class=\"status approved\">resolved by {by}{note}</div>")
        }
        ReviewStatus::Dismissed => format!("<div class=\"status\">dismissed by {by}{note}</div>"),
    };
    format!("{head}{body}{status}</div>")
}

fn status_name(s: ReviewStatus) -> &'static str {
    match s {
        ReviewStatus::Open => "open",
        ReviewStatus::Approved => "approved",
        ReviewStatus::Denied => "denied",
        ReviewStatus::Expired => "expired",
        ReviewStatus::Resolved => "resolved",
        ReviewStatus::Dismissed => "dismissed",
    }
}

fn review_page(
    items: &[ReviewItemView],
    next_before: Option<u64>,
    filter: &str,
    reviewer: &str,
    csrf: &str,
) -> String {
    let sections = [
        ("pending_approval", "Pending approval"),
        ("conflict", "Conflicts"),
        ("state_changed", "State changed"),
        ("needs_reconciliation", "Needs reconciliation"),
        ("rejected", "Rejected"),
    ];
    let mut body = format!(
        "<h1>toolgate review</h1><p>Signed in as <b>{}</b>. <form class=\"inline\" method=\"post\" action=\"/review/logout\"><button type=\"submit\">Sign out</button></form></p>\
         <p>Show: <a href=\"/review\">all</a> · <a href=\"/review?status=open\">open</a> · <a href=\"/review?kind=pending_approval\">pending approval</a></p>",
        esc(reviewer)
    );
    for (kind, title) in sections {
        let listed: Vec<String> = items
            .iter()
            .filter(|i| i.kind == kind)
            .map(|i| render_item(i, csrf))
            .collect();
        body.push_str(&format!(
            "<h2 id=\"{kind}\">{title} ({})</h2>",
            listed.len()
        ));
        if listed.is_empty() {
            body.push_str("<p>None.</p>");
        }
        for l in listed {
            body.push_str(&l);
        }
    }
    if let Some(b) = next_before {
        body.push_str(&format!(
            "<p><a id=\"next-page\" href=\"/review?before={b}{}\">Older items</a></p>",
            esc(filter)
        ));
    }
    page_shell("toolgate review", &body)
}

pub async fn page<P: Parts>(
    State(app): State<AppState<P>>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Some((who, csrf)) = reviewer(&app, &headers) else {
        return (StatusCode::UNAUTHORIZED, Html(login_page(None))).into_response();
    };
    let params = match params {
        Ok(Query(p)) => p,
        Err(e) => {
            return crate::error::ApiError::new(
                crate::error::ProblemCode::InvalidQuery,
                e.body_text(),
            )
            .into_response();
        }
    };
    let query = match list_query(&params) {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    // The filters, kept on the next page's link.
    let mut filter = String::new();
    if let Some(s) = &params.status {
        filter.push_str(&format!("&status={s}"));
    }
    if let Some(k) = &params.kind {
        filter.push_str(&format!("&kind={k}"));
    }
    match list_page(&app, &query).await {
        Ok(page) => Html(review_page(
            &page.items,
            page.next_before,
            &filter,
            &who,
            &csrf,
        ))
        .into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
pub struct LoginForm {
    key: String,
}

pub async fn login<P: Parts>(
    State(app): State<AppState<P>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let Some(key) = app.keys().lookup(form.key.trim()) else {
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
    let (Ok(token), Ok(csrf)) = (crate::clock::fresh_holder(), crate::clock::fresh_holder()) else {
        return crate::error::ApiError::unavailable("the random number generator failed")
            .into_response();
    };
    let token = token.to_hex();
    app.inner.review.open_session(
        token.clone(),
        Session {
            principal: key.principal.id().to_owned(),
            csrf: csrf.to_hex(),
            expires: crate::clock::now_millis().plus_millis(SESSION_MS),
        },
    );
    let mut r = Redirect::to("/review").into_response();
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/review; Max-Age={}{}",
        SESSION_MS / 1000,
        secure_attribute(&headers)
    )) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

pub async fn logout<P: Parts>(State(app): State<AppState<P>>, headers: HeaderMap) -> Response {
    if let Some(t) = session_token(&headers) {
        app.inner.review.close_session(&t);
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

fn checked<P: Parts>(
    app: &AppState<P>,
    headers: &HeaderMap,
    form: &ActionForm,
) -> Result<String, Box<Response>> {
    match reviewer(app, headers) {
        Some((who, csrf)) if same_token(&csrf, &form.csrf) => Ok(who),
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

async fn page_action<P: Parts>(
    app: AppState<P>,
    headers: HeaderMap,
    id: u64,
    form: ActionForm,
    action: Action,
) -> Response {
    let who = match checked(&app, &headers, &form) {
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

pub async fn approve<P: Parts>(
    State(app): State<AppState<P>>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(form): Form<ActionForm>,
) -> Response {
    page_action(app, headers, id, form, Action::Vote(Verdict::Approve)).await
}

pub async fn deny<P: Parts>(
    State(app): State<AppState<P>>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(form): Form<ActionForm>,
) -> Response {
    page_action(app, headers, id, form, Action::Vote(Verdict::Deny)).await
}

pub async fn resolve<P: Parts>(
    State(app): State<AppState<P>>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(form): Form<ActionForm>,
) -> Response {
    page_action(app, headers, id, form, Action::Close(Closing::Resolved)).await
}

pub async fn dismiss<P: Parts>(
    State(app): State<AppState<P>>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(form): Form<ActionForm>,
) -> Response {
    page_action(app, headers, id, form, Action::Close(Closing::Dismissed)).await
}
