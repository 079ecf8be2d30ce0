//! The reviewer queue: decisions a person can act on, kept in memory per
//! process (bounded; the oldest closed items go first), and the reviewer
//! page's login sessions.
//!
//! What must survive a restart is in the claim store already: the prior
//! proposal and result of a conflict, and stuck claims (listed from the
//! store, never from here). A pending approval lost with a restart is not
//! lost work: the client's retry of the same proposal opens it again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use toolgate::claim::UnixMillis;
use toolgate::contract::CheckOptions;
use toolgate::pipeline::{Approval, Outcome, Principal};
use toolgate::provider::Provider;

use crate::auth::ExecutionMode;

/// Everything needed to run a proposal through the pipeline again, with an
/// approval: the original body and the server-fixed facts of its request.
#[derive(Debug)]
pub struct Prepared {
    pub provider: Provider,
    pub body: Vec<u8>,
    pub opts: CheckOptions,
    pub scope: serde_json::Map<String, Value>,
    /// Application-sent entities, checked for shape (not yet against the
    /// tool: that needs the proposal).
    pub entities: serde_json::Map<String, Value>,
}

#[derive(Debug)]
pub struct Replay {
    pub prepared: Arc<Prepared>,
    pub principal: Principal,
    pub mode: ExecutionMode,
    pub approval: Approval,
}

#[derive(Debug, Clone)]
pub enum Status {
    Open,
    /// An approval is running the proposal now.
    Deciding,
    Approved {
        by: String,
        decision: Value,
    },
    Denied {
        by: String,
    },
}

#[derive(Debug, Clone)]
pub struct Item {
    pub id: u64,
    pub at: UnixMillis,
    pub proposer: String,
    pub kind: Outcome,
    pub decision: Value,
    pub status: Status,
    replay: Option<Arc<Replay>>,
}

impl Item {
    pub fn is_closed(&self) -> bool {
        matches!(self.status, Status::Approved { .. } | Status::Denied { .. })
    }
}

/// Why an approval could not start.
pub enum ApproveError {
    NotFound,
    NotPending,
}

#[derive(Debug)]
pub struct Session {
    pub principal: String,
    pub csrf: String,
    pub expires: UnixMillis,
}

#[derive(Default)]
struct Queue {
    next: u64,
    items: Vec<Item>,
    sessions: HashMap<String, Session>,
}

pub struct ReviewQueue {
    queue: Mutex<Queue>,
    capacity: usize,
}

/// Whether a person can act on decisions with this outcome.
pub fn reviewable(outcome: Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Conflict
            | Outcome::StateChanged
            | Outcome::Rejected
            | Outcome::PendingApproval
            | Outcome::NeedsReconciliation
    )
}

impl ReviewQueue {
    pub fn new(capacity: usize) -> Self {
        Self {
            queue: Mutex::new(Queue {
                next: 1,
                ..Queue::default()
            }),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds an item; a pending approval already open for the same (key,
    /// fingerprint, version) is not added twice.
    pub fn record(
        &self,
        at: UnixMillis,
        proposer: &str,
        kind: Outcome,
        decision: Value,
        replay: Option<Replay>,
    ) -> u64 {
        let mut q = self.lock();
        if let Some(r) = &replay
            && let Some(open) = q.items.iter().find(|i| {
                matches!(i.status, Status::Open | Status::Deciding)
                    && i.replay.as_ref().is_some_and(|o| o.approval == r.approval)
            })
        {
            return open.id;
        }
        while q.items.len() >= self.capacity {
            // Closed or informational items go first; an open approval is
            // dropped only when nothing else is left.
            let pos = q
                .items
                .iter()
                .position(|i| i.replay.is_none() || i.is_closed())
                .unwrap_or(0);
            q.items.remove(pos);
        }
        let id = q.next;
        q.next += 1;
        q.items.push(Item {
            id,
            at,
            proposer: proposer.to_owned(),
            kind,
            decision,
            status: Status::Open,
            replay: replay.map(Arc::new),
        });
        id
    }

    /// Newest first.
    pub fn list(&self) -> Vec<Item> {
        let q = self.lock();
        q.items.iter().rev().cloned().collect()
    }

    /// Items a person has not closed yet: the reviewer queue's depth.
    pub fn depth(&self) -> usize {
        self.lock().items.iter().filter(|i| !i.is_closed()).count()
    }

    /// Marks a pending item as being decided and hands out its replay.
    pub fn begin_approval(&self, id: u64) -> Result<Arc<Replay>, ApproveError> {
        let mut q = self.lock();
        let item = q
            .items
            .iter_mut()
            .find(|i| i.id == id)
            .ok_or(ApproveError::NotFound)?;
        match (&item.status, &item.replay) {
            (Status::Open, Some(r)) => {
                let r = Arc::clone(r);
                item.status = Status::Deciding;
                Ok(r)
            }
            _ => Err(ApproveError::NotPending),
        }
    }

    pub fn set_status(&self, id: u64, status: Status) {
        let mut q = self.lock();
        if let Some(item) = q.items.iter_mut().find(|i| i.id == id) {
            item.status = status;
        }
    }

    pub fn open_session(&self, token: String, session: Session) {
        let mut q = self.lock();
        let now = session.expires;
        q.sessions.retain(|_, s| s.expires.0 > now.0 - SESSION_MS);
        q.sessions.insert(token, session);
    }

    pub fn session(&self, token: &str, now: UnixMillis) -> Option<(String, String)> {
        let q = self.lock();
        q.sessions
            .get(token)
            .filter(|s| s.expires > now)
            .map(|s| (s.principal.clone(), s.csrf.clone()))
    }

    pub fn close_session(&self, token: &str) {
        self.lock().sessions.remove(token);
    }
}

/// How long a reviewer login lasts.
pub const SESSION_MS: i64 = 8 * 60 * 60 * 1000;
