//! Sessions of 2025-11-25 clients, each bound to the caller that opened it
//! and capped per caller and in total.
//!
//! rmcp keeps a session for whoever presents its id. Here a session belongs
//! to the caller that opened it (an API key's principal, or a token's
//! person): another caller's request on that id (a POST, the GET of its
//! stream, a DELETE) is `404`, exactly as for an id that never existed, so
//! an id seen in a log or a proxy cannot be used to read a result stream,
//! cancel a call or end the session. An id this layer does not know is
//! `404` too, whatever rmcp still holds.
//!
//! A caller may hold [`SessionLimits::per_caller`] sessions and all callers
//! [`SessionLimits::total`]; a session unused for
//! [`SessionLimits::idle`] is closed (in rmcp too, which frees what it
//! held). A new session past a cap is refused with a JSON-RPC error
//! (`429` per caller, `503` in total) before rmcp creates it. Stateless
//! 2026-07-28 requests open no session and are not counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

/// The session header of the Streamable HTTP transport.
const SESSION_HEADER: &str = "mcp-session-id";

/// How many sessions, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sessions one caller may hold at once.
    pub per_caller: usize,
    /// Sessions all callers may hold at once.
    pub total: usize,
    /// A session unused this long is closed.
    pub idle: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            per_caller: 64,
            total: 4_096,
            idle: Duration::from_secs(300),
        }
    }
}

/// Who a request is, for its sessions: set by the authentication layer.
/// Keys and people are told apart, so a key's principal and a person of
/// the same name are two callers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SessionOwner(pub(crate) String);

/// The JSON-RPC method of a POST body, set by the strict-decoding layer:
/// only an `initialize` opens a session.
#[derive(Debug, Clone)]
pub(crate) struct RpcMethod(pub(crate) Option<String>);

struct Open {
    owner: SessionOwner,
    last: Instant,
}

/// The sessions `/mcp` has opened, with their owners.
pub(crate) struct Sessions {
    limits: SessionLimits,
    open: Mutex<HashMap<String, Open>>,
    rmcp: Arc<LocalSessionManager>,
    reservations: std::sync::atomic::AtomicU64,
}

enum Check {
    /// The caller's own session.
    Owned,
    /// Another caller's, or none this layer knows.
    NotFound,
}

impl Sessions {
    pub(crate) fn new(limits: SessionLimits, rmcp: Arc<LocalSessionManager>) -> Self {
        Self {
            limits,
            open: Mutex::new(HashMap::new()),
            rmcp,
            reservations: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<String, Open>> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn check(&self, id: &str, caller: &SessionOwner) -> Check {
        let mut open = self.open();
        match open.get_mut(id) {
            Some(s) if s.owner == *caller && s.last.elapsed() < self.limits.idle => {
                s.last = Instant::now();
                Check::Owned
            }
            _ => Check::NotFound,
        }
    }

    /// Closes the sessions idle past the limit, here and in rmcp.
    fn expire(&self, open: &mut HashMap<String, Open>) {
        let idle = self.limits.idle;
        let gone: Vec<String> = open
            .iter()
            .filter(|(_, s)| s.last.elapsed() >= idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            open.remove(&id);
            self.close_in_rmcp(id);
        }
    }

    fn close_in_rmcp(&self, id: String) {
        let rmcp = Arc::clone(&self.rmcp);
        tokio::spawn(async move {
            let _ = rmcp.close_session(&Arc::from(id.as_str())).await;
        });
    }

    /// A slot for one more session of `caller`, held under the same lock
    /// as the count (so parallel `initialize`s cannot all pass a count
    /// taken before any of them opened), or the refusal.
    fn reserve(&self, caller: &SessionOwner) -> Result<String, Box<Response>> {
        let mut open = self.open();
        let mine = open.values().filter(|s| s.owner == *caller).count();
        if mine >= self.limits.per_caller || open.len() >= self.limits.total {
            self.expire(&mut open);
        }
        let mine = open.values().filter(|s| s.owner == *caller).count();
        if mine >= self.limits.per_caller {
            return Err(Box::new(refusal(
                StatusCode::TOO_MANY_REQUESTS,
                &format!(
                    "this caller holds {} sessions, the most it may: end one (DELETE) or reuse it",
                    self.limits.per_caller
                ),
            )));
        }
        if open.len() >= self.limits.total {
            return Err(Box::new(refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "the gateway holds as many sessions as it may; retry later",
            )));
        }
        // No session id rmcp makes has this form.
        let slot = format!(
            "\u{0}reserved {}",
            self.reservations
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        open.insert(
            slot.clone(),
            Open {
                owner: caller.clone(),
                last: Instant::now(),
            },
        );
        Ok(slot)
    }

    /// The reserved `slot` becomes session `id`, or is given back.
    fn settle(&self, slot: &str, id: Option<&str>) {
        let mut open = self.open();
        if let (Some(reserved), Some(id)) = (open.remove(slot), id) {
            open.insert(
                id.to_owned(),
                Open {
                    owner: reserved.owner,
                    last: Instant::now(),
                },
            );
        }
    }

    fn ended(&self, id: &str) {
        self.open().remove(id);
    }
}

/// A reserved slot, given back if the request ends without a session (rmcp
/// refused it, or the client went away and the handler was dropped).
struct Reserved<'a> {
    sessions: &'a Sessions,
    slot: String,
}

impl Reserved<'_> {
    fn settle(&mut self, id: Option<&str>) {
        self.sessions.settle(&self.slot, id);
        self.slot.clear();
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        if !self.slot.is_empty() {
            self.sessions.settle(&self.slot, None);
        }
    }
}

/// A JSON-RPC error answer with `status`: the transport's own errors are
/// JSON-RPC too.
fn refusal(status: StatusCode, message: &str) -> Response {
    crate::http::json_rpc_error(status, -32001, message, None)
}

/// The layer: binds each session to its owner, and counts them.
pub(crate) async fn guard(
    State(sessions): State<Arc<Sessions>>,
    req: Request,
    next: Next,
) -> Response {
    // The authentication layer runs first and always sets an owner; a
    // request without one is not let through unchecked.
    let Some(owner) = req.extensions().get::<SessionOwner>().cloned() else {
        return refusal(StatusCode::UNAUTHORIZED, "no caller");
    };
    let id = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match id {
        Some(id) => {
            if let Check::NotFound = sessions.check(&id, &owner) {
                return refusal(StatusCode::NOT_FOUND, "Session not found");
            }
            let ending = req.method() == Method::DELETE;
            let response = next.run(req).await;
            if ending && response.status().is_success() {
                sessions.ended(&id);
            }
            response
        }
        None => {
            let initialize = req
                .extensions()
                .get::<RpcMethod>()
                .is_some_and(|m| m.0.as_deref() == Some("initialize"));
            let slot = if req.method() == Method::POST && initialize {
                match sessions.reserve(&owner) {
                    Ok(slot) => Some(Reserved {
                        sessions: &sessions,
                        slot,
                    }),
                    Err(refused) => return *refused,
                }
            } else {
                None
            };
            let response = next.run(req).await;
            let new = response
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok());
            match slot {
                Some(mut r) => r.settle(new),
                // rmcp opens sessions on `initialize` only; one it opened
                // otherwise is still counted.
                None => {
                    if let Some(new) = new {
                        let slot = sessions.reserve(&owner);
                        if let Ok(slot) = slot {
                            sessions.settle(&slot, Some(new));
                        }
                    }
                }
            }
            response
        }
    }
}
