//! A pooled store's nodes: one server (PostgreSQL, a single MySQL or
//! MariaDB), or the nodes of a Galera cluster with a pool per node, one in
//! use at a time and a failed node left alone for a while (see the `mysql`
//! module).

use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use toolgate::claim::{StoreError, StoreErrorKind};

/// How long a failed node is left alone before the store tries it again.
/// A node outside the primary component (1047) answers nothing useful
/// until it rejoins, which takes seconds; a dead one is refused at once.
pub const NODE_RETRY_AFTER: Duration = Duration::from_secs(2);

/// How long a caller waits for a connection to one node of several.
pub(crate) const NODE_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// The node the next multi-node store of this process starts on, so that
/// several stores (a benchmark's workers) spread over the nodes.
pub(crate) static NEXT_START: AtomicUsize = AtomicUsize::new(0);

/// What failover has done since a store connected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FailoverCounts {
    /// Times the store left a node for another.
    pub failovers: u64,
    /// COMMITs that failed with the outcome unknown.
    pub unknown_commits: u64,
    /// Unknown claim commits settled by reading the row back.
    pub settled_by_read_back: u64,
    /// Unknown claim commits whose read-back failed too (answered
    /// `outcome_unknown`).
    pub unsettled: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) failovers: AtomicU64,
    pub(crate) unknown_commits: AtomicU64,
    pub(crate) settled: AtomicU64,
    pub(crate) unsettled: AtomicU64,
}

/// One server or cluster node.
pub(crate) struct Node<DB: sqlx::Database> {
    /// Its URL with the password hidden, for messages; empty for a store
    /// of one server, whose errors read unnamed.
    pub(crate) name: String,
    /// Transactions (the protocol's units).
    pub(crate) pool: sqlx::Pool<DB>,
    /// Reads outside a transaction: causal on a Galera node; the same pool
    /// where reads need nothing of their own.
    pub(crate) reads: sqlx::Pool<DB>,
    /// Until when (the wall clock, ms) the node is left alone.
    pub(crate) down_until: AtomicI64,
}

impl<DB: sqlx::Database> Node<DB> {
    /// A node whose transactions and reads share `pool`.
    pub(crate) fn one(pool: sqlx::Pool<DB>) -> Self {
        Self {
            name: String::new(),
            reads: pool.clone(),
            pool,
            down_until: AtomicI64::new(0),
        }
    }

    /// `e` with the node named, so an operator sees which one failed.
    pub(crate) fn named(&self, e: StoreError) -> StoreError {
        if self.name.is_empty() {
            return e;
        }
        let message = format!("{} (node {})", e.message(), self.name);
        e.with_message(message)
    }
}

pub(crate) struct Nodes<DB: sqlx::Database> {
    pub(crate) list: Vec<Node<DB>>,
    pub(crate) current: AtomicUsize,
    pub(crate) counts: Counters,
}

impl<DB: sqlx::Database> Nodes<DB> {
    /// Nodes from `list`, starting on node `start`.
    pub(crate) fn new(list: Vec<Node<DB>>, start: usize) -> Self {
        Self {
            list,
            current: AtomicUsize::new(start),
            counts: Counters::default(),
        }
    }

    /// The node to use: the current one unless it is left alone, else the
    /// next one that is not; when every node is, the one whose wait ends
    /// first (it is tried anyway: a store with nowhere to go keeps trying).
    pub(crate) fn pick(&self) -> usize {
        let now = crate::now_millis().0;
        let n = self.list.len();
        let start = self.current.load(Ordering::Relaxed);
        for k in 0..n {
            let i = (start + k) % n;
            if self.list[i].down_until.load(Ordering::Relaxed) <= now {
                if k > 0 {
                    self.current.store(i, Ordering::Relaxed);
                }
                return i;
            }
        }
        (0..n)
            .min_by_key(|&i| self.list[i].down_until.load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    /// Node `i` failed with `e`: leave it alone for [`NODE_RETRY_AFTER`]
    /// and move on (nothing to move to with one node).
    pub(crate) fn node_failed(&self, i: usize, e: &StoreError) {
        let n = self.list.len();
        if n < 2 {
            return;
        }
        let until = crate::now_millis().0 + NODE_RETRY_AFTER.as_millis() as i64;
        self.list[i].down_until.store(until, Ordering::Relaxed);
        if self
            .current
            .compare_exchange(i, (i + 1) % n, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.counts.failovers.fetch_add(1, Ordering::Relaxed);
            tracing_failover::<DB>(&self.list[i].name, e);
        }
    }

    /// Runs a read on the node in use, moving to the next one when the
    /// node fails.
    pub(crate) async fn read<'a, T, F, Fut>(&'a self, f: F) -> Result<T, StoreError>
    where
        F: Fn(sqlx::Pool<DB>) -> Fut,
        Fut: Future<Output = Result<T, StoreError>> + 'a,
    {
        self.on(false, f).await
    }

    /// Runs `f` on the node in use's transaction pool (`writes`) or its
    /// causal read pool, moving to the next node when the node fails.
    pub(crate) async fn on<'a, T, F, Fut>(&'a self, writes: bool, f: F) -> Result<T, StoreError>
    where
        F: Fn(sqlx::Pool<DB>) -> Fut,
        Fut: Future<Output = Result<T, StoreError>> + 'a,
    {
        let mut last = None;
        for _ in 0..self.list.len() {
            let i = self.pick();
            let node = &self.list[i];
            let pool = if writes { &node.pool } else { &node.reads };
            match f(pool.clone()).await {
                Err(e) if node_lost(&e) => {
                    self.node_failed(i, &e);
                    last = Some(node.named(e));
                }
                Err(e) => return Err(node.named(e)),
                ok => return ok,
            }
        }
        Err(last.unwrap_or_else(no_node::<DB>))
    }
}

/// Says on stderr that the store left a node, once per move (the crate
/// logs nothing else, and an operator needs to see a failover).
fn tracing_failover<DB: sqlx::Database>(node: &str, e: &StoreError) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "toolgate-store: leaving {} node {node} for {} s: {e}",
        DB::NAME,
        NODE_RETRY_AFTER.as_secs()
    );
}

pub(crate) fn no_node<DB: sqlx::Database>() -> StoreError {
    StoreError::new(
        StoreErrorKind::Unavailable,
        format!("no {} node was tried", DB::NAME),
    )
}

/// Whether an error means the node, not the request, failed: the
/// connection lost (2013, 2006, and sqlx's I/O errors), a node outside the
/// primary component (1047, SQLSTATE 08S01), a pool that could not reach
/// it. `map_err` classes all of these as unavailable.
pub(crate) fn node_lost(e: &StoreError) -> bool {
    e.kind() == StoreErrorKind::Unavailable
}
