//! The reviewer page's login sessions, per process, and which decisions go
//! to a person.
//!
//! Review items and approvals themselves are durable rows in the claim
//! database ([`toolgate::review::ReviewStore`], docs/design.md §14): every
//! replica lists and acts on the same items, and they survive restarts.
//! Only a reviewer's page login lives here: after a restart, or on another
//! replica, the reviewer signs in again.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use toolgate::claim::UnixMillis;
use toolgate::pipeline::{Outcome, Reason};

#[derive(Debug)]
pub struct Session {
    pub principal: String,
    pub csrf: String,
    pub expires: UnixMillis,
}

/// The reviewer page's sessions, at most `capacity` of them (the oldest
/// expiring first out).
pub struct ReviewQueue {
    sessions: Mutex<HashMap<String, Session>>,
    capacity: usize,
}

/// Whether a person can act on decisions with this outcome. A denial's
/// own rejection is not: a person already decided it.
pub fn reviewable(outcome: Outcome, reason: Option<Reason>) -> bool {
    matches!(
        outcome,
        Outcome::Conflict
            | Outcome::StateChanged
            | Outcome::Rejected
            | Outcome::PendingApproval
            | Outcome::NeedsReconciliation
    ) && reason != Some(Reason::ApprovalDenied)
}

impl ReviewQueue {
    pub fn new(capacity: usize) -> Self {
        Self {
            sessions: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn open_session(&self, token: String, session: Session) {
        let mut sessions = self.lock();
        let now = session.expires.0 - SESSION_MS;
        sessions.retain(|_, s| s.expires.0 > now);
        while sessions.len() >= self.capacity {
            let oldest = sessions
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(t, _)| t.clone());
            match oldest {
                Some(t) => sessions.remove(&t),
                None => break,
            };
        }
        sessions.insert(token, session);
    }

    pub fn session(&self, token: &str, now: UnixMillis) -> Option<(String, String)> {
        self.lock()
            .get(token)
            .filter(|s| s.expires > now)
            .map(|s| (s.principal.clone(), s.csrf.clone()))
    }

    pub fn close_session(&self, token: &str) {
        self.lock().remove(token);
    }
}

/// How long a reviewer login lasts.
pub const SESSION_MS: i64 = 8 * 60 * 60 * 1000;
