//! The `Idempotency-Key` memory as rows in the claim database
//! (docs/http-api.md): the first request with a key takes a running row
//! with a lease, its final answer is kept on the row, and a repeat on any
//! process finds it. This only spares a client from sending the same work
//! twice; the operation key is what makes retries safe, so a lost or
//! forgotten row only costs a re-run. It is never an authority (design
//! invariant 12): the HTTP layer decides what may be remembered and when a
//! remembered answer may be served.
//!
//! The rules every implementation keeps:
//!
//! - one row per (principal, key); [`IdempotencyStore::idem_begin`] inserts
//!   it if absent, so two processes racing one key get one runner and one
//!   [`Begun::InFlight`];
//! - a running row whose lease has passed may be taken over by the next
//!   request with the same payload (its runner died or hung up);
//! - finishing or forgetting names the runner, so a runner whose row was
//!   taken over changes nothing;
//! - each principal has its own quota ([`Bounds`]): finishing a key adds
//!   its answer to that principal's running totals (a row per principal,
//!   updated in the same transaction) and removes that principal's oldest
//!   answers beyond its count and byte caps, never another principal's;
//!   nothing counts or sums the table per request;
//! - [`IdempotencyStore::idem_purge`] removes at most a batch of finished
//!   rows past the retention and of dead running rows, adjusting the
//!   totals.
//!
//! Time is passed in; nothing here reads a clock.

use std::future::Future;

use crate::claim::{StoreError, UnixMillis};

/// How long a finished answer is kept.
pub const RETENTION_MS: i64 = 24 * 60 * 60 * 1000;

/// A remembered answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remembered {
    /// The HTTP status.
    pub status: u16,
    /// Its media type.
    pub content_type: String,
    /// The decision's outcome code, if the answer was a decision.
    pub outcome: Option<String>,
    /// The body, as sent.
    pub body: Vec<u8>,
}

/// What [`IdempotencyStore::idem_begin`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begun {
    /// This request runs (a new row, or a lapsed one taken over).
    Fresh,
    /// Finished with the same payload: this answer.
    Replay(Remembered),
    /// Running elsewhere, lease not passed.
    InFlight,
    /// The key was used with another payload.
    Mismatch,
}

/// The bounds of the memory: the retention, and each principal's quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Finished answers older than this are removed.
    pub retention_ms: i64,
    /// Most finished answers kept per principal.
    pub capacity: u64,
    /// Most bytes of finished answers (bodies and keys, [`cost`]) kept per
    /// principal.
    pub max_bytes: u64,
}

/// Most rows one [`IdempotencyStore::idem_purge`] removes, and most of a
/// principal's oldest answers one finish removes: the work of a request
/// is bounded whatever the table holds.
pub const PURGE_BATCH: u32 = 64;

/// What a finished row costs against [`Bounds::max_bytes`]: its body and
/// key texts and a fixed overhead, so tiny answers are not free.
pub fn cost(principal: &str, key: &str, body_len: usize) -> u64 {
    (principal.len() + key.len() + body_len + 160) as u64
}

/// One request's [`IdempotencyStore::idem_begin`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdemBegin<'a> {
    /// Who sent the request: keys are scoped to the principal.
    pub principal: &'a str,
    /// The `Idempotency-Key`.
    pub key: &'a str,
    /// SHA-256 of the request body.
    pub payload: [u8; 32],
    /// This request's runner token.
    pub runner: &'a str,
    /// The request's time.
    pub now: UnixMillis,
    /// When a running row this request takes stops holding the key.
    pub lease_until: UnixMillis,
}

/// The running row one request holds, to forget
/// ([`IdempotencyStore::idem_forget`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdemRun<'a> {
    /// Who sent the request.
    pub principal: &'a str,
    /// The `Idempotency-Key`.
    pub key: &'a str,
    /// The runner that began it.
    pub runner: &'a str,
}

/// One runner's [`IdempotencyStore::idem_finish`]: the answer to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdemFinish<'a> {
    /// Who sent the request.
    pub principal: &'a str,
    /// The `Idempotency-Key`.
    pub key: &'a str,
    /// The runner that began it.
    pub runner: &'a str,
    /// The final answer.
    pub answer: Remembered,
    /// When it finished.
    pub now: UnixMillis,
    /// The memory's bounds, for the principal's quota.
    pub bounds: Bounds,
}

impl IdemFinish<'_> {
    /// What the finished row costs against [`Bounds::max_bytes`] ([`cost`]).
    pub fn cost(&self) -> u64 {
        cost(self.principal, self.key, self.answer.body.len())
    }
}

/// Where the `Idempotency-Key` memory lives.
pub trait IdempotencyStore: Send + Sync {
    /// Inserts a running row for (`principal`, `key`) held by `runner`
    /// until `lease_until`, unless one exists: then a finished row with the
    /// same payload is a replay, another payload a mismatch, a running one
    /// in flight, unless its lease has passed at `now`, when `runner`
    /// takes it over.
    fn idem_begin(
        &self,
        begin: IdemBegin<'_>,
    ) -> impl Future<Output = Result<Begun, StoreError>> + Send;

    /// Keeps `answer` on the row `runner` still holds, finished at `now`,
    /// adds it to `principal`'s running totals, and removes that
    /// principal's oldest finished answers (at most [`PURGE_BATCH`]) while
    /// its totals are over `bounds`' per-principal caps: one transaction.
    fn idem_finish(
        &self,
        finish: IdemFinish<'_>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Removes the running row `runner` still holds (nothing final to keep).
    fn idem_forget(&self, run: IdemRun<'_>) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Removes at most [`PURGE_BATCH`] finished rows past the retention
    /// (adjusting their principals' totals) and at most as many running
    /// rows whose lease has passed.
    fn idem_purge(
        &self,
        now: UnixMillis,
        bounds: Bounds,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claim::MemoryClaimStore;

    /// The memory store's futures are ready at once.
    fn now_of<T>(f: impl Future<Output = T>) -> T {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("the memory store never waits"),
        }
    }

    fn answer(len: usize) -> Remembered {
        Remembered {
            status: 200,
            content_type: "application/json".into(),
            outcome: Some("answer".into()),
            body: vec![b' '; len],
        }
    }

    /// `runner`'s finish of key `key` of principal `p` with `answer` at `at`.
    fn finish<'a>(
        (principal, key, runner): (&'a str, &'a str, &'a str),
        answer: Remembered,
        now: UnixMillis,
        bounds: Bounds,
    ) -> IdemFinish<'a> {
        IdemFinish {
            principal,
            key,
            runner,
            answer,
            now,
            bounds,
        }
    }

    fn bounds(capacity: u64, max_bytes: u64) -> Bounds {
        Bounds {
            retention_ms: 1_000,
            capacity,
            max_bytes,
        }
    }

    /// `runner`'s begin of key `key` of principal `p` with `payload` at `at`.
    fn begin_with(
        store: &MemoryClaimStore,
        (p, key, runner): (&str, &str, &str),
        payload: [u8; 32],
        at: i64,
    ) -> Result<Begun, StoreError> {
        now_of(store.idem_begin(IdemBegin {
            principal: p,
            key,
            payload,
            runner,
            now: UnixMillis(at),
            lease_until: UnixMillis(at + 10),
        }))
    }

    /// Key `key` of principal `p` begun and finished at `at` under `b`.
    fn remember_as(store: &MemoryClaimStore, p: &str, key: &str, len: usize, at: i64, b: Bounds) {
        let begun = begin_with(store, (p, key, "r"), [1; 32], at);
        assert_eq!(begun.unwrap(), Begun::Fresh, "{key}");
        now_of(store.idem_finish(finish((p, key, "r"), answer(len), UnixMillis(at), b))).unwrap();
    }

    fn remember(store: &MemoryClaimStore, key: &str, len: usize, at: i64, b: Bounds) {
        remember_as(store, "p", key, len, at, b);
    }

    fn begin_as(store: &MemoryClaimStore, p: &str, key: &str, at: i64) -> Begun {
        begin_with(store, (p, key, "r2"), [1; 32], at).unwrap()
    }

    fn begin(store: &MemoryClaimStore, key: &str, at: i64) -> Begun {
        begin_as(store, "p", key, at)
    }

    #[test]
    fn a_finish_keeps_the_bytes_within_the_quota_oldest_out_first() {
        let store = MemoryClaimStore::new();
        for i in 0..50 {
            remember(&store, &format!("k{i}"), 10_000, i, bounds(10_000, 100_000));
        }
        // Ten bodies of 10 kB and their overhead exceed 100 kB: nine stay,
        // the newest.
        assert!(matches!(begin(&store, "k49", 51), Begun::Replay(_)));
        assert!(matches!(begin(&store, "k41", 51), Begun::Replay(_)));
        assert_eq!(begin(&store, "k40", 51), Begun::Fresh);
    }

    #[test]
    fn a_finish_keeps_the_count_and_the_purge_the_retention() {
        let store = MemoryClaimStore::new();
        for i in 0..20 {
            remember(&store, &format!("k{i}"), 1, i, bounds(5, u64::MAX));
        }
        assert!(matches!(begin(&store, "k15", 21), Begun::Replay(_)));
        assert_eq!(begin(&store, "k14", 21), Begun::Fresh);
        // 1 s later every answer is past the retention, and the running
        // row k14 past its lease.
        now_of(store.idem_purge(UnixMillis(1_100), bounds(5, u64::MAX))).unwrap();
        assert_eq!(begin(&store, "k19", 1_101), Begun::Fresh);
        assert_eq!(begin(&store, "k14", 1_101), Begun::Fresh);
    }

    /// 400 keys from one principal evicted another's remembered answers:
    /// each principal's quota is its own.
    #[test]
    fn one_principal_never_evicts_anothers_answers() {
        let store = MemoryClaimStore::new();
        let b = bounds(100, u64::MAX);
        remember_as(&store, "quiet", "mine", 10, 0, b);
        for i in 0..400 {
            remember_as(&store, "loud", &format!("k{i}"), 10, 1 + i, b);
        }
        assert!(matches!(
            begin_as(&store, "quiet", "mine", 500),
            Begun::Replay(_)
        ));
        assert!(matches!(
            begin_as(&store, "loud", "k399", 500),
            Begun::Replay(_)
        ));
        assert_eq!(begin_as(&store, "loud", "k299", 500), Begun::Fresh);
    }

    #[test]
    fn only_the_runner_finishes_or_forgets_and_a_lapsed_lease_is_taken_over() {
        let store = MemoryClaimStore::new();
        let b = |key, runner, at: i64| begin_with(&store, ("p", key, runner), [1; 32], at).unwrap();
        assert_eq!(b("k", "r1", 0), Begun::Fresh);
        assert_eq!(b("k", "r2", 5), Begun::InFlight);
        let run = IdemRun {
            principal: "p",
            key: "k",
            runner: "r2",
        };
        now_of(store.idem_forget(run)).unwrap();
        let q = bounds(10, u64::MAX);
        now_of(store.idem_finish(finish(("p", "k", "r2"), answer(1), UnixMillis(5), q))).unwrap();
        assert_eq!(b("k", "r2", 9), Begun::InFlight);
        // Another payload is a mismatch, running or not.
        let other = begin_with(&store, ("p", "k", "r3"), [2; 32], 9);
        assert_eq!(other.unwrap(), Begun::Mismatch);
        // Lease passed: r2 takes over, and r1 can no longer finish.
        assert_eq!(b("k", "r2", 10), Begun::Fresh);
        now_of(store.idem_finish(finish(("p", "k", "r1"), answer(1), UnixMillis(11), q))).unwrap();
        assert_eq!(b("k", "r3", 12), Begun::InFlight);
        now_of(store.idem_finish(finish(("p", "k", "r2"), answer(3), UnixMillis(12), q))).unwrap();
        assert_eq!(b("k", "r3", 13), Begun::Replay(answer(3)));
        // Another principal's same key is its own.
        let theirs = begin_with(&store, ("q", "k", "r"), [2; 32], 13);
        assert_eq!(theirs.unwrap(), Begun::Fresh);
    }
}
