//! One decision's connection, from its read to its claim (PostgreSQL and
//! MySQL/MariaDB).
//!
//! Every pool use costs a round trip beyond its statements (sqlx pings a
//! connection as it takes it back). A decision that reads its entities or
//! state from the claim store's database and then claims can make that
//! read on the connection its claim then begins on:
//!
//! 1. [`AnyClaimStore::hold`] makes a [`Held`], owned by the decision (a
//!    local of the function that decides, dropped with it).
//! 2. A read borrows the connection ([`Held::connection`], acquired on
//!    first use) and, once its statement has succeeded, keeps it
//!    ([`Borrowed::keep`]).
//! 3. The decision claims through the [`Held`] (it is the decision's
//!    [`ClaimStore`]): the claim's first transaction runs on the kept
//!    connection, which is passed to it by value
//!    (`pooled::claim_on`), and goes back to the pool when that
//!    transaction ends, before execution (which may wait on the world and
//!    must not hold a connection meanwhile).
//! 4. Unless the executor's write is itself a transaction of this
//!    database ([`crate::StoreWrite`]): then nothing waits on the world
//!    between claim and completion, and a [`Held`] made by
//!    [`AnyClaimStore::hold_through_completion`] keeps the connection its
//!    won claim committed on, for [`Held::write_and_complete`]. The
//!    decision then uses the pool once, not twice. The claim commits with
//!    `COMMIT AND CHAIN`, so the write's transaction is already open and
//!    costs no `BEGIN`; the claim is won and visible as before, and an
//!    empty chained transaction holds no lock. Dropped unused (the
//!    decision ended another way), it is rolled back before the
//!    connection serves anyone else, as sqlx does for any transaction.
//!
//! **A decision never waits on the pool while it holds a connection of the
//! pool.** With every connection kept by a decision that waits for another
//! (the audit entry of a forbidden proposal, the claim lookup of a stale
//! one), nothing would move. So every call of [`Held`]'s but the claim and
//! [`Held::write_and_complete`] gives the kept connection back first, and a
//! read or an executor that needs the pool for anything else calls
//! [`Held::give_back`] before it.
//!
//! Nothing about the claim changes. A connection kept for the claim is
//! idle, outside any transaction (its read ran in autocommit), and the
//! claim's statements, retries and read-back are the protocol's own. A read that failed keeps
//! nothing: its connection goes back to the pool, whose return ping tests
//! it. SQLite holds nothing: its claims run on the group-commit writer, and
//! [`Held::connection`] says so.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use toolgate::claim::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStore, CompleteRequest, Completion, JsonText,
    OperationKey, RawClaim, ReconcileRequest, Reconciled, StoreError, StuckEntry, UnixMillis,
};
use toolgate::pipeline::{AppliedCompletion, ExecError};

use crate::AnyClaimStore;
use crate::pooled::Kept;
use crate::write::{StoreWrite, WriteCompleted};

/// The connection a decision keeps, by backend.
enum HeldConn {
    #[cfg(feature = "postgres")]
    Postgres(Kept<sqlx::Postgres>),
    #[cfg(feature = "mysql")]
    MySql(Kept<sqlx::MySql>),
}

impl HeldConn {
    #[cfg(feature = "postgres")]
    fn postgres(self) -> Option<Kept<sqlx::Postgres>> {
        match self {
            Self::Postgres(c) => Some(c),
            #[cfg(feature = "mysql")]
            Self::MySql(_) => None,
        }
    }

    #[cfg(feature = "mysql")]
    fn mysql(self) -> Option<Kept<sqlx::MySql>> {
        match self {
            Self::MySql(c) => Some(c),
            #[cfg(feature = "postgres")]
            Self::Postgres(_) => None,
        }
    }
}

/// One decision's connection to the claim store's database, and the claim
/// store as that decision sees it (the module's documentation). Dropping it
/// gives a connection no claim took back to the pool.
#[must_use = "the claim begins on the kept connection only through the Held"]
pub struct Held<'s> {
    store: &'s AnyClaimStore,
    kept: Mutex<Option<HeldConn>>,
    /// Whether a won claim's connection stays for the write and completion.
    through_completion: bool,
}

/// The connection a read borrows, by backend.
pub enum HeldConnection<'h> {
    /// SQLite holds nothing: read as usual.
    #[cfg(feature = "sqlite")]
    Sqlite,
    /// A PostgreSQL connection.
    #[cfg(feature = "postgres")]
    Postgres(Borrowed<'h, sqlx::Postgres>),
    /// A MySQL or MariaDB connection.
    #[cfg(feature = "mysql")]
    MySql(Borrowed<'h, sqlx::MySql>),
}

/// A connection borrowed for one read. Unless [`Borrowed::keep`] is
/// called, it goes back to the pool when dropped.
pub struct Borrowed<'h, DB: sqlx::Database> {
    slot: &'h Mutex<Option<HeldConn>>,
    conn: Kept<DB>,
}

macro_rules! keep {
    ($($feature:literal => $db:ty, $variant:ident;)+) => {$(
        #[cfg(feature = $feature)]
        impl Borrowed<'_, $db> {
            /// Keeps the connection for the decision's claim (or its next
            /// read). Call it only after the read succeeded.
            pub fn keep(self) {
                *lock(self.slot) = Some(HeldConn::$variant(self.conn));
            }
        }
    )+};
}

keep! {
    "postgres" => sqlx::Postgres, Postgres;
    "mysql" => sqlx::MySql, MySql;
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

fn lock(slot: &Mutex<Option<HeldConn>>) -> MutexGuard<'_, Option<HeldConn>> {
    // Taking and putting back cannot panic halfway: a poisoned slot is whole.
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

impl AnyClaimStore {
    /// A connection for one decision: its reads borrow it
    /// ([`Held::connection`]) and its claim, made through the [`Held`],
    /// begins on it. Keep the value until the decision has claimed or ended.
    pub fn hold(&self) -> Held<'_> {
        Held {
            store: self,
            kept: Mutex::new(None),
            through_completion: false,
        }
    }

    /// [`AnyClaimStore::hold`] for a decision whose executor writes in this
    /// store's database, in the completion's transaction
    /// ([`Held::write_and_complete`]): a won claim's connection stays with
    /// the decision for that transaction. Only for such an executor: any
    /// other would hold a connection while its write waits on the world.
    pub fn hold_through_completion(&self) -> Held<'_> {
        Held {
            through_completion: true,
            ..self.hold()
        }
    }
}

impl Held<'_> {
    /// The decision's connection for one read: the one an earlier read
    /// kept, or a new one from the transaction pool of the node a claim
    /// would use now.
    pub async fn connection(&self) -> Result<HeldConnection<'_>, StoreError> {
        let kept = lock(&self.kept).take();
        match (self.store, kept) {
            #[cfg(feature = "sqlite")]
            (AnyClaimStore::Sqlite(_), _) => Ok(HeldConnection::Sqlite),
            #[cfg(feature = "postgres")]
            (AnyClaimStore::Postgres(s), kept) => {
                let conn = match kept.and_then(HeldConn::postgres).and_then(Kept::idle) {
                    Some(conn) => conn,
                    None => s.acquire().await?,
                };
                Ok(HeldConnection::Postgres(Borrowed {
                    slot: &self.kept,
                    conn,
                }))
            }
            #[cfg(feature = "mysql")]
            (AnyClaimStore::MySql(s), kept) => {
                let conn = match kept.and_then(HeldConn::mysql).and_then(Kept::idle) {
                    Some(conn) => conn,
                    None => s.acquire().await?,
                };
                Ok(HeldConnection::MySql(Borrowed {
                    slot: &self.kept,
                    conn,
                }))
            }
        }
    }

    /// Whether this decision's connections are `store`'s (a handle to the
    /// same pool): a read meant to run on the connection the claim begins
    /// on must ask, or it reads another database than it claims on.
    pub fn is_of(&self, store: &AnyClaimStore) -> bool {
        match (self.store, store) {
            #[cfg(feature = "postgres")]
            (AnyClaimStore::Postgres(a), AnyClaimStore::Postgres(b)) => a.same_as(b),
            #[cfg(feature = "mysql")]
            (AnyClaimStore::MySql(a), AnyClaimStore::MySql(b)) => a.same_as(b),
            // SQLite holds nothing to share.
            _ => false,
        }
    }

    /// Gives a kept connection back to the pool (the claim then acquires
    /// its own). Call it before anything else of the decision waits on the
    /// pool.
    pub fn give_back(&self) {
        drop(lock(&self.kept).take());
    }
}

impl Held<'_> {
    /// Runs `write` and the claim's completion with `receipt` in one
    /// transaction, as [`AnyClaimStore::write_and_complete`] does, on the
    /// connection the decision's claim committed on when it kept one
    /// ([`AnyClaimStore::hold_through_completion`]); it then goes back to
    /// the pool.
    pub async fn write_and_complete(
        &self,
        write: Arc<dyn StoreWrite>,
        receipt: &JsonText,
        completion: &AppliedCompletion,
    ) -> Result<WriteCompleted, ExecError> {
        let kept = lock(&self.kept).take();
        let done = match (self.store, kept) {
            #[cfg(feature = "postgres")]
            (AnyClaimStore::Postgres(s), Some(HeldConn::Postgres(conn))) => {
                completion.accepts(receipt)?;
                crate::pooled::write_and_complete_on(s, conn, write, receipt, completion).await
            }
            #[cfg(feature = "mysql")]
            (AnyClaimStore::MySql(s), Some(HeldConn::MySql(conn))) => {
                completion.accepts(receipt)?;
                crate::pooled::write_and_complete_on(s, conn, write, receipt, completion).await
            }
            // Nothing kept (SQLite, or a claim that kept none).
            (store, _) => return store.write_and_complete(write, receipt, completion).await,
        };
        done.map_err(|e| ExecError::new(e.to_string()))
    }
}

impl ClaimStore for Held<'_> {
    async fn claim(&self, request: ClaimRequest) -> Result<RawClaim, StoreError> {
        let kept = lock(&self.kept).take();
        let keep = self.through_completion;
        let (claimed, kept) = match (self.store, kept) {
            #[cfg(feature = "postgres")]
            (AnyClaimStore::Postgres(s), conn) => {
                let first = conn.and_then(HeldConn::postgres);
                let (claimed, kept) = crate::pooled::claim_on(s, first, keep, request).await;
                (claimed, kept.map(HeldConn::Postgres))
            }
            #[cfg(feature = "mysql")]
            (AnyClaimStore::MySql(s), conn) => {
                let first = conn.and_then(HeldConn::mysql);
                let (claimed, kept) = crate::pooled::claim_on(s, first, keep, request).await;
                (claimed, kept.map(HeldConn::MySql))
            }
            // SQLite holds nothing.
            #[cfg(feature = "sqlite")]
            (store @ AnyClaimStore::Sqlite(_), _) => (store.claim(request).await, None),
        };
        *lock(&self.kept) = kept;
        claimed
    }

    async fn complete(&self, request: CompleteRequest) -> Result<Completion, StoreError> {
        self.give_back();
        self.store.complete(request).await
    }

    async fn fetch(&self, key: &OperationKey) -> Result<Option<ClaimRecord>, StoreError> {
        self.give_back();
        self.store.fetch(key).await
    }

    async fn list_stuck(&self, now: UnixMillis, limit: u32) -> Result<Vec<StuckEntry>, StoreError> {
        self.give_back();
        self.store.list_stuck(now, limit).await
    }

    async fn budget_reserved(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.give_back();
        self.store.budget_reserved().await
    }

    async fn record_reconciliation(
        &self,
        request: ReconcileRequest<'_>,
    ) -> Result<Reconciled, StoreError> {
        self.give_back();
        self.store.record_reconciliation(request).await
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        self.give_back();
        self.store.append_audit(entry).await
    }

    async fn audit_trail(
        &self,
        key: &OperationKey,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.give_back();
        self.store.audit_trail(key, limit).await
    }

    async fn ready(&self) -> Result<(), StoreError> {
        self.give_back();
        self.store.ready().await
    }
}
