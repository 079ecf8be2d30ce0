//! A decision's read lends its pooled connection to the same decision's
//! claim (PostgreSQL and MySQL/MariaDB).
//!
//! sqlx's pool pings a connection when it hands it out and again when it
//! takes it back, so a read on a connection of its own costs three round
//! trips where its statement costs one. A decision that reads its entities
//! or state from the claim store's database and then claims can make that
//! read on the connection its claim will use:
//!
//! 1. [`AnyClaimStore::lend`] makes a [`Lent`] for the decision's holder
//!    token (fresh and unpredictable per decision, docs/design.md §8).
//! 2. The read borrows the connection ([`Lent::connection`], acquired on
//!    first use) and, once its statement has succeeded, keeps it
//!    ([`Borrowed::keep`]).
//! 3. The claim whose request carries that holder token begins its first
//!    transaction on the kept connection instead of acquiring one
//!    (`take_for`, in each backend's `transaction`).
//!
//! The connection goes back to the pool when that transaction ends, before
//! execution (which may wait on the world and must not hold a connection
//! meanwhile), or, for a decision that ends without a claim, when its
//! [`Lent`] is dropped.
//!
//! **A decision never waits on the pool while it holds a connection of the
//! pool.** With every connection kept by a decision that waits for another
//! (the audit entry of a forbidden proposal, the claim lookup of a stale
//! one), nothing would move. So between the read and the claim the decision
//! reaches the claim store only through [`Lent::claims`], whose every call
//! but the claim gives the kept connection back first, and a state read
//! that needs the pool calls [`Lent::give_back`] before it.
//!
//! Nothing about the claim changes. A kept connection is idle, outside any
//! transaction (its read ran in autocommit), and the claim's statements,
//! retries and read-back are the protocol's own. A read that failed keeps
//! nothing: its connection goes back to the pool, whose return ping tests
//! it. SQLite has nothing to lend: its claims run on the group-commit
//! writer, and [`Lent::connection`] says so.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, PoisonError};

use sqlx::pool::PoolConnection;
use toolgate::claim::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStore, Completion, HolderToken, JsonText,
    OperationKey, RawClaim, ReconcileOutcome, Reconciled, StoreError, StuckEntry, UnixMillis,
};

use crate::AnyClaimStore;
use crate::common::map_err;
use crate::protocol::Unit;

/// The connections kept for claims, by the deciding holder's token: one
/// per store (its clones share it).
pub(crate) struct Parking<DB: sqlx::Database> {
    /// Each with the index of the node whose pool it came from (always 0
    /// on PostgreSQL).
    kept: Mutex<HashMap<HolderToken, (usize, PoolConnection<DB>)>>,
}

impl<DB: sqlx::Database> Default for Parking<DB> {
    fn default() -> Self {
        Self {
            kept: Mutex::new(HashMap::new()),
        }
    }
}

impl<DB: sqlx::Database> Parking<DB> {
    fn slots(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<HolderToken, (usize, PoolConnection<DB>)>> {
        // Inserts and removals cannot panic halfway: a poisoned map is whole.
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn take(&self, holder: &HolderToken) -> Option<(usize, PoolConnection<DB>)> {
        self.slots().remove(holder)
    }

    fn keep(&self, holder: HolderToken, node: usize, conn: PoolConnection<DB>) {
        // A second read of the same decision replaces the first's
        // connection, which goes back to the pool as it drops.
        let _ = self.slots().insert(holder, (node, conn));
    }

    /// The connection `holder` kept, or else the one `acquire` gives (with
    /// its node), lent to one read.
    async fn borrow(
        &self,
        holder: HolderToken,
        acquire: impl Future<Output = Result<(usize, PoolConnection<DB>), StoreError>>,
    ) -> Result<Borrowed<'_, DB>, StoreError> {
        let (node, conn) = match self.take(&holder) {
            Some(kept) => kept,
            None => acquire.await?,
        };
        Ok(Borrowed {
            parking: self,
            holder,
            node,
            conn,
        })
    }

    /// The connection kept for `unit`'s claim, if it is a claim and one
    /// was kept: taken, so a retry of the claim acquires as usual.
    pub(crate) fn take_for(&self, unit: &Unit) -> Option<(usize, PoolConnection<DB>)> {
        match unit {
            Unit::Claim { request, .. } => self.take(request.holder()),
            _ => None,
        }
    }
}

/// One decision's connection on loan: reads borrow it, the decision's claim
/// takes it. Dropping it returns a connection no claim took to the pool.
#[must_use = "the claim finds the connection only while the Lent lives"]
pub struct Lent<'s> {
    store: &'s AnyClaimStore,
    holder: HolderToken,
}

/// The connection a read borrows, by backend.
pub enum LentConnection<'a> {
    /// SQLite lends nothing: read as usual.
    #[cfg(feature = "sqlite")]
    Sqlite,
    /// A PostgreSQL connection.
    #[cfg(feature = "postgres")]
    Postgres(Borrowed<'a, sqlx::Postgres>),
    /// A MySQL or MariaDB connection.
    #[cfg(feature = "mysql")]
    MySql(Borrowed<'a, sqlx::MySql>),
}

/// A borrowed connection. Unless [`Borrowed::keep`] is called, it goes
/// back to the pool when dropped.
pub struct Borrowed<'a, DB: sqlx::Database> {
    parking: &'a Parking<DB>,
    holder: HolderToken,
    node: usize,
    conn: PoolConnection<DB>,
}

impl<DB: sqlx::Database> Borrowed<'_, DB> {
    /// Keeps the connection for this decision's claim (or its next read).
    /// Call it only after the read succeeded.
    pub fn keep(self) {
        self.parking.keep(self.holder, self.node, self.conn);
    }
}

impl<DB: sqlx::Database> Deref for Borrowed<'_, DB> {
    type Target = DB::Connection;
    fn deref(&self) -> &DB::Connection {
        &self.conn
    }
}

impl<DB: sqlx::Database> DerefMut for Borrowed<'_, DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        &mut self.conn
    }
}

impl AnyClaimStore {
    /// A connection on loan to the decision whose holder token is
    /// `holder`: its reads borrow it ([`Lent::connection`]) and its claim
    /// begins on it (the module's documentation). Keep the value until the
    /// decision has claimed or ended.
    pub fn lend(&self, holder: HolderToken) -> Lent<'_> {
        Lent {
            store: self,
            holder,
        }
    }
}

impl<'s> Lent<'s> {
    /// The decision's connection for one read: the one an earlier read
    /// kept, or a new one from the pool.
    pub async fn connection(&self) -> Result<LentConnection<'s>, StoreError> {
        match self.store {
            #[cfg(feature = "sqlite")]
            AnyClaimStore::Sqlite(_) => Ok(LentConnection::Sqlite),
            #[cfg(feature = "postgres")]
            AnyClaimStore::Postgres(s) => s
                .parking()
                .borrow(self.holder, s.acquire_for_read())
                .await
                .map(LentConnection::Postgres),
            #[cfg(feature = "mysql")]
            AnyClaimStore::MySql(s) => s
                .parking()
                .borrow(self.holder, s.acquire_for_read())
                .await
                .map(LentConnection::MySql),
        }
    }

    /// Gives a kept connection back to the pool (the claim then acquires
    /// its own). Call it before anything else of the decision waits on the
    /// pool.
    pub fn give_back(&self) {
        match self.store {
            #[cfg(feature = "sqlite")]
            AnyClaimStore::Sqlite(_) => {}
            #[cfg(feature = "postgres")]
            AnyClaimStore::Postgres(s) => drop(s.parking().take(&self.holder)),
            #[cfg(feature = "mysql")]
            AnyClaimStore::MySql(s) => drop(s.parking().take(&self.holder)),
        }
    }

    /// `claims` as this decision uses it: its claim begins on the kept
    /// connection, and every other call gives the connection back first.
    /// `claims` is the store this `Lent` came from, or a wrapper of it.
    pub fn claims<'a, C: ClaimStore>(&'a self, claims: &'a C) -> LentClaims<'a, 's, C> {
        LentClaims { lent: self, claims }
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        // A connection no claim took (the decision ended before claiming,
        // or its read was its last use) goes back to the pool here.
        self.give_back();
    }
}

/// A claim store seen by a decision that holds a connection on loan
/// ([`Lent::claims`]).
pub struct LentClaims<'a, 's, C> {
    lent: &'a Lent<'s>,
    claims: &'a C,
}

impl<C: ClaimStore> ClaimStore for LentClaims<'_, '_, C> {
    async fn claim(&self, request: ClaimRequest) -> Result<RawClaim, StoreError> {
        let raw = self.claims.claim(request).await;
        // Taken by the claim's first transaction, unless that never began.
        self.lent.give_back();
        raw
    }

    fn complete(
        &self,
        key: &OperationKey,
        holder: &HolderToken,
        result: &JsonText,
        now: UnixMillis,
        audit: &AuditEntry,
    ) -> impl Future<Output = Result<Completion, StoreError>> + Send {
        self.lent.give_back();
        self.claims.complete(key, holder, result, now, audit)
    }

    fn fetch(
        &self,
        key: &OperationKey,
    ) -> impl Future<Output = Result<Option<ClaimRecord>, StoreError>> + Send {
        self.lent.give_back();
        self.claims.fetch(key)
    }

    fn list_stuck(
        &self,
        now: UnixMillis,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<StuckEntry>, StoreError>> + Send {
        self.lent.give_back();
        self.claims.list_stuck(now, limit)
    }

    fn record_reconciliation(
        &self,
        key: &OperationKey,
        outcome: &ReconcileOutcome,
        now: UnixMillis,
    ) -> impl Future<Output = Result<Reconciled, StoreError>> + Send {
        self.lent.give_back();
        self.claims.record_reconciliation(key, outcome, now)
    }

    fn append_audit(
        &self,
        entry: &AuditEntry,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.lent.give_back();
        self.claims.append_audit(entry)
    }

    fn audit_trail(
        &self,
        key: &OperationKey,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<AuditEntry>, StoreError>> + Send {
        self.lent.give_back();
        self.claims.audit_trail(key, limit)
    }

    fn budget_reserved(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, i64)>, StoreError>> + Send {
        self.lent.give_back();
        self.claims.budget_reserved()
    }

    fn ready(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.lent.give_back();
        self.claims.ready()
    }
}

/// A connection from `pool`, for a read.
pub(crate) async fn acquire<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    what: &str,
) -> Result<PoolConnection<DB>, StoreError> {
    pool.acquire().await.map_err(|e| map_err(what, e))
}
