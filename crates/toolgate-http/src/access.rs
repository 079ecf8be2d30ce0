//! Request ids, trace context and the access log: one INFO line and two
//! metrics per request.
//!
//! The layer sits outside every other one, so the status it logs is the one
//! the client received, including the 408 of the deadline and the 413 of the
//! body limit. Routes are logged and labelled by their template
//! (`/v1/claims/{key}/complete`), never the raw path: a path carries
//! operation keys, and raw paths would give the metrics unbounded labels.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use crate::state::AppState;

/// The header a request id travels in, both ways.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// The W3C Trace Context header.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// The route label of a request that matched no route (a 404).
const UNMATCHED: &str = "unmatched";

/// The id of one request: the caller's `x-request-id` when it is a sane
/// token, otherwise a fresh one. Handlers read it from the request's
/// extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

/// The trace a request belongs to, from a valid `traceparent` header. Kept in
/// the request's extensions so that outgoing calls can carry it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// The caller's span: 16 lowercase hex digits.
    pub parent_id: String,
    /// The trace flags byte (bit 0: sampled).
    pub flags: u8,
}

impl TraceContext {
    /// Parses a version-00 `traceparent`. Anything malformed, and the
    /// all-zero ids the specification forbids, is ignored rather than
    /// refused: a bad trace header must never cost a decision.
    pub fn parse(header: &str) -> Option<Self> {
        let mut parts = header.trim().split('-');
        let (version, trace_id, parent_id, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || version != "00" {
            return None;
        }
        let lower_hex = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        let all_zero = |s: &str| s.bytes().all(|b| b == b'0');
        if !lower_hex(trace_id, 32)
            || !lower_hex(parent_id, 16)
            || !lower_hex(flags, 2)
            || all_zero(trace_id)
            || all_zero(parent_id)
        {
            return None;
        }
        Some(Self {
            trace_id: trace_id.to_owned(),
            parent_id: parent_id.to_owned(),
            flags: u8::from_str_radix(flags, 16).ok()?,
        })
    }
}

/// A caller's request id is kept when it is 1 to 128 characters of letters,
/// digits and `-_.:@/+=`: enough for UUIDs, ULIDs and most gateways' ids,
/// and nothing that could break a log line or a header.
fn acceptable_request_id(value: &HeaderValue) -> Option<String> {
    let s = value.to_str().ok()?;
    let ok = (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:@/+=".contains(&b));
    ok.then(|| s.to_owned())
}

/// 128 bits from the operating system, as hex. Falls back to a time-based id
/// if the generator fails: a request id is for correlation, not security.
fn fresh_request_id() -> String {
    let mut bytes = [0u8; 16];
    match getrandom::fill(&mut bytes) {
        Ok(()) => hex::encode(bytes),
        Err(_) => format!("t{}", toolgate_service::clock::now_millis().0),
    }
}

/// The middleware: assigns the request id, reads the trace context, runs
/// the request inside a span carrying both, then writes the access-log line
/// and the HTTP metrics, and echoes the request id on the response.
pub async fn layer(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let request_id = req
        .headers()
        .get(&REQUEST_ID)
        .and_then(acceptable_request_id)
        .unwrap_or_else(fresh_request_id);
    let trace = req
        .headers()
        .get(&TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(TraceContext::parse);
    let method = req.method().clone();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED.to_owned(), |m| m.as_str().to_owned());
    let trace_id = trace.as_ref().map(|t| t.trace_id.clone());

    req.extensions_mut().insert(RequestId(request_id.clone()));
    if let Some(t) = trace {
        req.extensions_mut().insert(t);
    }

    let span = tracing::info_span!(
        "request",
        request_id = %request_id,
        trace_id = trace_id.as_deref().unwrap_or(""),
    );
    let mut response = next.run(req).instrument(span).await;

    let elapsed = started.elapsed();
    let status = response.status();
    tracing::info!(
        target: "toolgate::access",
        method = %method,
        route = %route,
        status = status.as_u16(),
        latency_ms = elapsed.as_secs_f64() * 1000.0,
        request_id = %request_id,
        trace_id = trace_id.as_deref().unwrap_or(""),
        "request"
    );
    app.service().metrics().http_request(
        method.as_str(),
        &route,
        status.as_u16(),
        elapsed.as_secs_f64(),
    );
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID, v);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_accepts_the_specifications_example() {
        let t = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("valid");
        assert_eq!(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.parent_id, "00f067aa0ba902b7");
        assert_eq!(t.flags, 1);
    }

    #[test]
    fn traceparent_ignores_what_the_specification_forbids() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn request_ids_from_callers_are_kept_only_when_sane() {
        let keep = |s: &str| acceptable_request_id(&HeaderValue::from_str(s).unwrap());
        assert_eq!(keep("3f1c-9a"), Some("3f1c-9a".to_owned()));
        assert_eq!(
            keep("01HZX3Q5W8ZJ6V0M2N4P7R9T1B"),
            Some("01HZX3Q5W8ZJ6V0M2N4P7R9T1B".to_owned())
        );
        assert_eq!(keep("a b"), None);
        assert_eq!(keep("a\"b"), None);
        assert_eq!(keep(&"x".repeat(129)), None);
        assert_eq!(keep(""), None);
    }

    #[test]
    fn fresh_request_ids_differ() {
        let a = fresh_request_id();
        let b = fresh_request_id();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
