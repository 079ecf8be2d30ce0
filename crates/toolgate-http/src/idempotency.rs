//! The `Idempotency-Key` header (IETF httpapi draft): a client may attach a
//! key to a `POST /v1/decisions`. The first request with a key is processed
//! and its response remembered; a repeat with the same payload gets the same
//! response; a repeat while the first is still running gets 409; a repeat
//! with a different payload gets 422.
//!
//! This sits on top of the gate's own idempotency (the operation key), which
//! holds across processes; the header's memory is per process and bounded,
//! because it only saves a client from re-sending work it already sent.
//!
//! It is not an authority (docs/design.md invariant 12): only final answers
//! are remembered, and an answer that carries a recorded result, a prior
//! proposal or a permit is served again only after the pipeline has run for
//! the caller asking now (`routes/decisions.rs`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::StatusCode;
use sha2::{Digest, Sha256};

/// A remembered response.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The decision's outcome; `None` for a request error.
    pub outcome: Option<toolgate::pipeline::Outcome>,
    pub status: StatusCode,
    /// `application/json` for a decision, `application/problem+json` for
    /// a request error: a repeat gets the same answer, media type included.
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

#[derive(Debug)]
enum Entry {
    Running { payload: [u8; 32] },
    Done { payload: [u8; 32], response: Stored },
}

#[derive(Debug, Default)]
struct Map {
    entries: HashMap<(String, String), Entry>,
    order: VecDeque<(String, String)>,
}

/// What a request with a key should do.
pub enum Begin {
    /// First use: process it, then [`Guard::finish`].
    Fresh(Guard),
    /// Same key, same payload, finished: send this again.
    Replay(Stored),
    /// Same key, still running.
    InFlight,
    /// Same key, different payload.
    Mismatch,
}

/// The per-process memory of idempotency keys.
#[derive(Debug, Clone)]
pub struct IdempotencyCache {
    map: Arc<Mutex<Map>>,
    capacity: usize,
}

/// A key being processed. Dropped without [`Guard::finish`] (the request
/// failed before a response existed), the key is forgotten so a retry can
/// run.
pub struct Guard {
    map: Arc<Mutex<Map>>,
    id: Option<(String, String)>,
    payload: [u8; 32],
}

impl IdempotencyCache {
    pub fn new(capacity: usize) -> Self {
        Self {
            map: Arc::default(),
            capacity: capacity.max(1),
        }
    }

    /// Keys are scoped to the principal: two callers never share one.
    pub fn begin(&self, principal: &str, key: &str, body: &[u8]) -> Begin {
        let payload: [u8; 32] = Sha256::digest(body).into();
        let id = (principal.to_owned(), key.to_owned());
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        match map.entries.get(&id) {
            Some(Entry::Running { payload: p }) | Some(Entry::Done { payload: p, .. })
                if *p != payload =>
            {
                return Begin::Mismatch;
            }
            Some(Entry::Running { .. }) => return Begin::InFlight,
            Some(Entry::Done { response, .. }) => return Begin::Replay(response.clone()),
            None => {}
        }
        // Make room: forget the oldest finished keys first; running ones
        // are never evicted (their guard would then re-insert nothing).
        while map.entries.len() >= self.capacity {
            let Some(pos) = map
                .order
                .iter()
                .position(|k| matches!(map.entries.get(k), Some(Entry::Done { .. })))
            else {
                break;
            };
            if let Some(old) = map.order.remove(pos) {
                map.entries.remove(&old);
            }
        }
        map.entries.insert(id.clone(), Entry::Running { payload });
        map.order.push_back(id.clone());
        Begin::Fresh(Guard {
            map: Arc::clone(&self.map),
            id: Some(id),
            payload,
        })
    }
}

impl Guard {
    /// Remembers the response for repeats.
    pub fn finish(mut self, response: Stored) {
        if let Some(id) = self.id.take() {
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            map.entries.insert(
                id,
                Entry::Done {
                    payload: self.payload,
                    response,
                },
            );
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            map.entries.remove(&id);
            if let Some(pos) = map.order.iter().position(|k| *k == id) {
                map.order.remove(pos);
            }
        }
    }
}
