//! The reviewer page's session: the cookie, the page's headers and the
//! session a cookie names.

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use toolgate::review::{ReviewStore, session_digest};

use super::COOKIE;
use crate::routes::review_api::store_error;
use crate::state::AppState;

pub(super) fn session_token(headers: &HeaderMap) -> Option<String> {
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

/// `Secure` on the session cookie unless the configured public URL is
/// plain `http://` (the demo on loopback): chosen by the operator's
/// configuration, never by the request's `Host`, which a proxy on the same
/// host may forward as `127.0.0.1` while the browser speaks TLS.
pub(super) fn secure_attribute(public_url: Option<&str>) -> &'static str {
    let plain = public_url.is_some_and(|u| {
        u.get(..7)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"))
    });
    if plain { "" } else { "; Secure" }
}

/// Compares two tokens in time that does not depend on where they differ.
pub(super) fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The reviewer's id and CSRF token, if the cookie names a live session
/// (looked up by the token's digest in the claim database, so any replica
/// knows it); a store failure is the store's error page.
pub(super) async fn reviewer(
    app: &AppState,
    headers: &HeaderMap,
) -> Result<Option<(String, String)>, Box<Response>> {
    let Some(token) = session_token(headers) else {
        return Ok(None);
    };
    match app
        .service()
        .store()
        .session(
            session_digest(&token),
            toolgate_service::clock::now_millis(),
        )
        .await
    {
        Ok(s) => Ok(s.map(|s| (s.principal, s.csrf))),
        Err(e) => Err(Box::new(store_error(e).into_response())),
    }
}
