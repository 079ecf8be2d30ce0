//! The store on an sqlx pool, generic over the driver: PostgreSQL and
//! MySQL/MariaDB are one implementation, [`PooledStore`], of the claim
//! protocol ([`ClaimStore`](toolgate::claim::ClaimStore)), the review queue
//! and the `Idempotency-Key` memory, over a [`Pooled`] driver whose
//! statements its folder writes. Each unit of the protocol runs on a
//! transaction of its own.
//!
//! The files are named as in the backend folders: `claims.rs` (the claim
//! protocol's statements and transactions), `review.rs`,
//! `idempotency.rs`, `floor.rs`; the drivers' own `sql.rs`, `migrate.rs`
//! and `error.rs` are in `postgres/` and `mysql/`.
//!
//! A store keeps its server's pool as one node ([`nodes`]); a MySQL URL
//! listing several hosts (a Galera cluster) gives a node per host, one in
//! use at a time, with failover between them.

mod claims;
mod floor;
mod idempotency;
pub(crate) mod nodes;
mod review;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use toolgate::claim::{StoreError, UnixMillis};

use crate::common::map_err;
use crate::dialect::Dialect;
use crate::protocol::Clock;
use crate::write::{StoreWrite, WriteFuture};
use nodes::{FailoverCounts, Nodes};

pub(crate) use claims::{claim_on, write_and_complete_on};

/// A driver [`PooledStore`] runs on: PostgreSQL and MySQL/MariaDB.
pub(crate) trait Pooled: Dialect {
    /// Runs an application's `write` ([`StoreWrite`]'s method for this
    /// driver) on `conn`, inside the completion's transaction.
    fn app_write<'c>(write: &'c dyn StoreWrite, conn: &'c mut Self::Connection) -> WriteFuture<'c>;

    /// Runs a review item insert: the new id, or `None` when a clash
    /// inserted nothing (PostgreSQL reads it from `RETURNING`, MySQL from
    /// the insert's last id).
    fn insert_id(
        pool: &sqlx::Pool<Self>,
        q: sqlx::query::Query<'static, Self, Self::Arguments>,
    ) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;
}

/// `impl … where …` with the bounds every [`Pooled`] driver meets (the
/// types it binds, decodes and reads rows as), written once for the
/// impls of this module.
///
/// A macro, not a trait with a blanket impl (`trait PooledDb where …`):
/// Rust carries only a trait's bounds on `Self` to where it is used, not
/// bounds on other types (`String: Encode<DB>`, `&mut DB::Connection:
/// Executor`), so every `where DB: PooledDb` would still fail to prove
/// them (rust-lang/rust#20671).
macro_rules! with_pooled_bounds {
    ([$($head:tt)*] { $($body:tt)* }) => {
        $($head)*
        where
            DB: $crate::pooled::Pooled,
            for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
            for<'a> &'a [u8]: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
            for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB> + sqlx::ColumnIndex<DB::Row>,
            for<'a> Option<&'a [u8]>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
            for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
            String: for<'a> sqlx::Encode<'a, DB> + for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
            Option<String>: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
            Vec<u8>: for<'a> sqlx::Encode<'a, DB> + for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
            Option<Vec<u8>>: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
            i64: for<'a> sqlx::Encode<'a, DB> + for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
            Option<i64>: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
            i32: for<'a> sqlx::Encode<'a, DB> + for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
            usize: sqlx::ColumnIndex<DB::Row>,
            for<'r> (String, String, i64, Option<String>): sqlx::FromRow<'r, DB::Row>,
            for<'r> (String, String, i64): sqlx::FromRow<'r, DB::Row>,
            for<'r> (i64, Option<String>): sqlx::FromRow<'r, DB::Row>,
            for<'r> crate::idempotency::SqlRow: sqlx::FromRow<'r, DB::Row>,
            for<'r> (i64, i64): sqlx::FromRow<'r, DB::Row>,
            for<'r> (String, i64): sqlx::FromRow<'r, DB::Row>,
            for<'r> (String, String): sqlx::FromRow<'r, DB::Row>,
            for<'r> (i64,): sqlx::FromRow<'r, DB::Row>,
            DB::Arguments: sqlx::IntoArguments<DB>,
        {
            $($body)*
        }
    };
}
pub(crate) use with_pooled_bounds;

/// The claims, review queue and `Idempotency-Key` memory on PostgreSQL
/// ([`crate::postgres::PgClaimStore`]) or MySQL/MariaDB
/// ([`crate::mysql::MySqlClaimStore`]): one server, or the nodes of a
/// Galera cluster with failover between them.
///
/// Cloning gives another handle to the same connections.
pub struct PooledStore<DB: sqlx::Database> {
    nodes: Arc<Nodes<DB>>,
    clock: Clock,
    #[cfg(feature = "fault-injection")]
    hook: Option<crate::fault::FaultHook>,
}

impl<DB: sqlx::Database> Clone for PooledStore<DB> {
    fn clone(&self) -> Self {
        Self {
            nodes: Arc::clone(&self.nodes),
            clock: self.clock,
            #[cfg(feature = "fault-injection")]
            hook: self.hook.clone(),
        }
    }
}

impl<DB: sqlx::Database> PooledStore<DB> {
    /// A store on `nodes`, with the wall clock.
    pub(crate) fn on(nodes: Nodes<DB>) -> Self {
        Self {
            nodes: Arc::new(nodes),
            clock: crate::now_millis,
            #[cfg(feature = "fault-injection")]
            hook: None,
        }
    }

    /// The pool of the node in use, for operations outside the claim
    /// protocol. With several nodes this follows the failover: ask again
    /// rather than keep it.
    pub fn pool(&self) -> &sqlx::Pool<DB> {
        &self.nodes.list[self.nodes.current.load(Ordering::Relaxed)].pool
    }

    /// Which of the URL's hosts (from 0) the store uses now.
    pub fn node_in_use(&self) -> usize {
        self.nodes.current.load(Ordering::Relaxed)
    }

    /// How many nodes the store knows.
    pub fn node_count(&self) -> usize {
        self.nodes.list.len()
    }

    /// The failover counters since the store connected.
    pub fn failover_counts(&self) -> FailoverCounts {
        let c = &self.nodes.counts;
        FailoverCounts {
            failovers: c.failovers.load(Ordering::Relaxed),
            unknown_commits: c.unknown_commits.load(Ordering::Relaxed),
            settled_by_read_back: c.settled.load(Ordering::Relaxed),
            unsettled: c.unsettled.load(Ordering::Relaxed),
        }
    }

    /// The store with `clock` as its time source for claim attempts (the
    /// default is the wall clock, [`crate::now_millis`]). An attempt's time
    /// is the clock's reading, never earlier than the request's own time.
    #[must_use]
    pub fn with_clock(mut self, clock: fn() -> UnixMillis) -> Self {
        self.clock = clock;
        self
    }

    /// Installs a fault hook (tests only).
    #[cfg(feature = "fault-injection")]
    #[must_use]
    pub fn with_fault_hook(mut self, hook: crate::fault::FaultHook) -> Self {
        self.hook = Some(hook);
        self
    }

    fn hook(&self) -> Option<&crate::common::Hook> {
        #[cfg(feature = "fault-injection")]
        return self.hook.as_ref();
        #[cfg(not(feature = "fault-injection"))]
        None
    }
}

/// A connection of one node's transaction pool, kept by one decision
/// (`crate::session`): idle between its read and its claim, or in the
/// transaction its won claim chained for its write.
pub(crate) struct Kept<DB: sqlx::Database> {
    /// The node whose pool it came from: after a failover it serves no
    /// transaction and goes back.
    node: usize,
    conn: KeptConn<DB>,
}

/// What a kept connection is doing.
pub(crate) enum KeptConn<DB: sqlx::Database> {
    /// Outside any transaction: its read ran in autocommit.
    Idle(sqlx::pool::PoolConnection<DB>),
    /// In the empty transaction a won claim's `COMMIT AND CHAIN` began, so
    /// the write and completion that follow skip their `BEGIN` round trip.
    /// Dropped unused, sqlx queues its `ROLLBACK`, sent before the
    /// connection serves anyone else.
    Chained(sqlx::Transaction<'static, DB>),
}

impl<DB: sqlx::Database> Kept<DB> {
    /// The connection if it is idle: a read must not run inside a
    /// chained transaction, which then goes back to the pool.
    pub(crate) fn idle(self) -> Option<Self> {
        matches!(self.conn, KeptConn::Idle(_)).then_some(self)
    }
}

impl<DB: sqlx::Database> std::ops::Deref for Kept<DB> {
    type Target = DB::Connection;
    fn deref(&self) -> &DB::Connection {
        match &self.conn {
            KeptConn::Idle(c) => c,
            KeptConn::Chained(tx) => tx,
        }
    }
}

impl<DB: sqlx::Database> std::ops::DerefMut for Kept<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        match &mut self.conn {
            KeptConn::Idle(c) => c,
            KeptConn::Chained(tx) => tx,
        }
    }
}

impl<DB: sqlx::Database> PooledStore<DB> {
    /// A connection from the transaction pool of the node a claim would
    /// use now, for a decision to keep (`crate::session`).
    pub(crate) async fn acquire(&self) -> Result<Kept<DB>, StoreError> {
        let i = self.nodes.pick();
        let node = &self.nodes.list[i];
        let what = format!("connecting to {}", <DB as sqlx::Database>::NAME);
        match node.pool.acquire().await {
            Ok(conn) => Ok(Kept {
                node: i,
                conn: KeptConn::Idle(conn),
            }),
            Err(e) => Err(node.named(map_err(&what, e))),
        }
    }

    /// Whether `other` is a handle to this store's connections.
    pub(crate) fn same_as(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.nodes, &other.nodes)
    }
}
