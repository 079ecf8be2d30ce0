//! A Galera cluster's nodes: a pool per node, one in use at a time, and a
//! failed node left alone for a while (see the parent module).

use super::*;

/// How long a failed node is left alone before the store tries it again.
/// A node outside the primary component (1047) answers nothing useful
/// until it rejoins, which takes seconds; a dead one is refused at once.
pub const NODE_RETRY_AFTER: Duration = Duration::from_secs(2);

/// How long a caller waits for a connection to one node of several.
pub(super) const NODE_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// The node the next multi-node store of this process starts on, so that
/// several stores (a benchmark's workers) spread over the nodes.
pub(super) static NEXT_START: AtomicUsize = AtomicUsize::new(0);

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
pub(super) struct Counters {
    pub(super) failovers: AtomicU64,
    pub(super) unknown_commits: AtomicU64,
    pub(super) settled: AtomicU64,
    pub(super) unsettled: AtomicU64,
}

/// One server or cluster node.
pub(super) struct Node {
    /// Its URL with the password hidden, for messages.
    pub(super) name: String,
    /// Transactions (the protocol's units).
    pub(super) pool: MySqlPool,
    /// Reads outside a transaction: causal on a Galera node.
    pub(super) reads: MySqlPool,
    /// Until when (the wall clock, ms) the node is left alone.
    pub(super) down_until: AtomicI64,
}

impl Node {
    /// `e` with the node named, so an operator sees which one failed.
    pub(super) fn named(&self, e: StoreError) -> StoreError {
        if self.name.is_empty() {
            return e;
        }
        StoreError::new(e.kind(), format!("{} (node {})", e.message(), self.name))
    }
}

pub(super) struct Nodes {
    pub(super) list: Vec<Node>,
    pub(super) current: AtomicUsize,
    pub(super) counts: Counters,
}

impl Nodes {
    /// The node to use: the current one unless it is left alone, else the
    /// next one that is not; when every node is, the one whose wait ends
    /// first (it is tried anyway: a store with nowhere to go keeps trying).
    pub(super) fn pick(&self) -> usize {
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
    pub(super) fn node_failed(&self, i: usize, e: &StoreError) {
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
            tracing_failover(&self.list[i].name, e);
        }
    }

    /// Runs a read on the node in use, moving to the next one when the
    /// node fails.
    pub(super) async fn read<'a, T, F, Fut>(&'a self, f: F) -> Result<T, StoreError>
    where
        F: Fn(MySqlPool) -> Fut,
        Fut: Future<Output = Result<T, StoreError>> + 'a,
    {
        self.on(false, f).await
    }

    /// Runs `f` on the node in use's transaction pool (`writes`) or its
    /// causal read pool, moving to the next node when the node fails.
    pub(super) async fn on<'a, T, F, Fut>(&'a self, writes: bool, f: F) -> Result<T, StoreError>
    where
        F: Fn(MySqlPool) -> Fut,
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
        Err(last.unwrap_or_else(no_node))
    }
}

/// Says on stderr that the store left a node, once per move (the crate
/// logs nothing else, and an operator needs to see a failover).
pub(super) fn tracing_failover(node: &str, e: &StoreError) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "toolgate-store: leaving MySQL node {node} for {} s: {e}",
        NODE_RETRY_AFTER.as_secs()
    );
}

pub(super) fn no_node() -> StoreError {
    StoreError::new(StoreErrorKind::Unavailable, "no MySQL node was tried")
}

/// Whether an error means the node, not the request, failed: the
/// connection lost (2013, 2006, and sqlx's I/O errors), a node outside the
/// primary component (1047, SQLSTATE 08S01), a pool that could not reach
/// it. `map_err` classes all of these as unavailable.
pub(super) fn node_lost(e: &StoreError) -> bool {
    e.kind() == StoreErrorKind::Unavailable
}

/// On a Galera node, makes the connection's reads causal: each waits until
/// the node has applied every write set the cluster committed before it.
/// Asked per connection, so one URL list may mix servers.
pub(super) async fn causal_reads(conn: &mut sqlx::MySqlConnection) -> Result<(), sqlx::Error> {
    use sqlx::Executor;
    let on: Option<(String, String)> = sqlx::query_as("SHOW VARIABLES LIKE 'wsrep_on'")
        .fetch_optional(&mut *conn)
        .await?;
    if on.is_some_and(|(_, v)| v.eq_ignore_ascii_case("ON")) {
        conn.execute("SET SESSION wsrep_sync_wait = 1").await?;
    }
    Ok(())
}

/// One URL per host of `url`: `mysql://u:p@h1:1,h2:2/db?x` gives
/// `mysql://u:p@h1:1/db?x` and `mysql://u:p@h2:2/db?x`. A URL with one host
/// comes back as it is. Errors never repeat a password.
pub fn split_hosts(url: &str) -> Result<Vec<String>, StoreError> {
    let bad = |why: &str| {
        StoreError::new(
            StoreErrorKind::Config,
            format!("{}: {why}", crate::redact_url(url)),
        )
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(vec![url.to_owned()]);
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    // The user part ends at the last `@` of the authority (a password may
    // hold an unencoded `@`, never an unencoded `/`).
    let (authority, tail) = rest.split_at(end);
    let (user, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    if !hosts.contains(',') {
        return Ok(vec![url.to_owned()]);
    }
    let list: Vec<&str> = hosts.split(',').map(str::trim).collect();
    if list.iter().any(|h| h.is_empty()) {
        return Err(bad("an empty host in the host list"));
    }
    Ok(list
        .iter()
        .map(|h| format!("{scheme}://{user}{h}{tail}"))
        .collect())
}
