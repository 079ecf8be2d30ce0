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

/// What one remembered entry costs beyond its body and key texts: the
/// map's and queue's slots, the digest and the `Stored` header. An
/// estimate; it keeps many tiny answers from passing as free.
const ENTRY_OVERHEAD: usize = 160;

#[derive(Debug, Default)]
struct Map {
    entries: HashMap<(String, String), Entry>,
    order: VecDeque<(String, String)>,
    /// Bytes held by finished entries (`cost`), kept within `max_bytes`.
    bytes: usize,
    capacity: usize,
    max_bytes: usize,
}

/// The bytes a finished entry holds.
fn cost(id: &(String, String), response: &Stored) -> usize {
    id.0.len() + id.1.len() + response.body.len() + ENTRY_OVERHEAD
}

impl Map {
    fn remove(&mut self, id: &(String, String)) {
        if let Some(Entry::Done { response, .. }) = self.entries.remove(id) {
            self.bytes -= cost(id, &response);
        }
        if let Some(pos) = self.order.iter().position(|k| k == id) {
            self.order.remove(pos);
        }
    }

    /// Forgets the oldest finished keys until `more` entries and
    /// `more_bytes` bytes fit; running ones are never evicted (their guard
    /// would then re-insert nothing). Returns whether they fit.
    fn make_room(&mut self, more: usize, more_bytes: usize) -> bool {
        while self.entries.len() + more > self.capacity || self.bytes + more_bytes > self.max_bytes
        {
            let Some(pos) = self
                .order
                .iter()
                .position(|k| matches!(self.entries.get(k), Some(Entry::Done { .. })))
            else {
                return false;
            };
            if let Some(old) = self.order.get(pos).cloned() {
                self.remove(&old);
            }
        }
        true
    }
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
    /// Remembers at most `capacity` keys holding at most `max_bytes`
    /// bytes of answers and keys together.
    pub fn new(capacity: usize, max_bytes: usize) -> Self {
        Self {
            map: Arc::new(Mutex::new(Map {
                capacity: capacity.max(1),
                max_bytes,
                ..Map::default()
            })),
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
        // Make room by count; the bytes are counted when the answer is
        // known (`finish`). Running keys are bounded by the requests in
        // progress, so one is admitted even when all others are running.
        map.make_room(1, 0);
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
    /// Remembers the response for repeats, if it fits the byte budget
    /// once older answers are forgotten. One that cannot fit is not
    /// remembered: a repeat then runs again, which the operation key makes
    /// safe (the header's memory only saves work).
    pub fn finish(mut self, response: Stored) {
        let Some(id) = self.id.take() else { return };
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let bytes = cost(&id, &response);
        // Out of the way first, so it is not its own eviction candidate.
        map.remove(&id);
        if bytes > map.max_bytes || !map.make_room(1, bytes) {
            return;
        }
        map.bytes += bytes;
        map.entries.insert(
            id.clone(),
            Entry::Done {
                payload: self.payload,
                response,
            },
        );
        map.order.push_back(id);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            map.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(len: usize) -> Stored {
        Stored {
            outcome: None,
            status: StatusCode::OK,
            content_type: "application/json",
            body: vec![b' '; len],
        }
    }

    fn remember(cache: &IdempotencyCache, key: &str, len: usize) {
        match cache.begin("p", key, key.as_bytes()) {
            Begin::Fresh(g) => g.finish(answer(len)),
            _ => panic!("{key} was not fresh"),
        }
    }

    fn held(cache: &IdempotencyCache) -> (usize, usize) {
        let map = cache.map.lock().unwrap();
        (map.entries.len(), map.bytes)
    }

    #[test]
    fn the_answers_bytes_stay_within_the_budget_oldest_out_first() {
        let cache = IdempotencyCache::new(10_000, 100_000);
        for i in 0..50 {
            remember(&cache, &format!("k{i}"), 10_000);
        }
        let (count, bytes) = held(&cache);
        assert!(bytes <= 100_000, "{bytes}");
        assert_eq!(
            count, 9,
            "ten bodies of 10 kB and their overhead exceed 100 kB"
        );
        // The newest are kept, the oldest gone.
        assert!(matches!(cache.begin("p", "k49", b"k49"), Begin::Replay(_)));
        assert!(matches!(cache.begin("p", "k0", b"k0"), Begin::Fresh(_)));
    }

    #[test]
    fn an_answer_larger_than_the_budget_is_not_remembered_and_evicts_nothing() {
        let cache = IdempotencyCache::new(100, 50_000);
        remember(&cache, "small", 100);
        remember(&cache, "huge", 60_000);
        assert!(matches!(
            cache.begin("p", "small", b"small"),
            Begin::Replay(_)
        ));
        // Forgotten, so the repeat runs again (its guard, dropped at once,
        // forgets it again).
        assert!(matches!(cache.begin("p", "huge", b"huge"), Begin::Fresh(_)));
        let (count, bytes) = held(&cache);
        assert_eq!(count, 1);
        assert_eq!(bytes, cost(&("p".into(), "small".into()), &answer(100)));
    }

    #[test]
    fn the_count_still_bounds_tiny_answers() {
        let cache = IdempotencyCache::new(5, usize::MAX);
        for i in 0..20 {
            remember(&cache, &format!("k{i}"), 1);
        }
        assert_eq!(held(&cache).0, 5);
    }

    #[test]
    fn a_dropped_guard_forgets_the_key_and_its_bytes() {
        let cache = IdempotencyCache::new(10, 10_000);
        remember(&cache, "a", 100);
        drop(cache.begin("p", "b", b"b"));
        let (count, bytes) = held(&cache);
        assert_eq!(count, 1);
        assert_eq!(bytes, cost(&("p".into(), "a".into()), &answer(100)));
    }
}
