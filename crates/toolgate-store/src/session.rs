//! One decision's session with the claim store's database (PostgreSQL and
//! MySQL/MariaDB): the connection its read, its claim and its write share.
//!
//! Every pool use costs a round trip beyond its statements (sqlx pings a
//! connection as it takes it back). A decision that reads its entities or
//! state from the claim store's database and then claims can make that
//! read on the connection its claim then begins on:
//!
//! 1. [`AnyClaimStore::session`] makes a [`Session`], owned by the decision
//!    (a local of the function that decides, dropped with it) and passed
//!    by `&mut` to each of its calls (`toolgate::pipeline::DecisionParts`).
//! 2. A read borrows the connection ([`Session::connection`], acquired on
//!    first use) and, once its statement has succeeded, keeps it
//!    ([`Borrowed::keep`]).
//! 3. The claim ([`Session::claim`]) begins its first transaction on the
//!    kept connection, which is passed to it by value (`pooled::claim_on`),
//!    and goes back to the pool when that transaction ends, before
//!    execution (which may wait on the world and must not hold a
//!    connection meanwhile).
//! 4. Unless the executor's write is itself a transaction of this
//!    database ([`crate::StoreWrite`]): then nothing waits on the world
//!    between claim and completion, and a [`Session`] made by
//!    [`AnyClaimStore::session_through_completion`] keeps the connection
//!    its won claim committed on, for [`Session::write_and_complete`]. The
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
//! one), nothing would move. So a decision's other store calls go through
//! [`Session::store`], which gives the kept connection back first, and a
//! read or an executor that needs the pool for anything else calls
//! [`Session::give_back`] before it.
//!
//! Nothing about the claim changes. A connection kept for the claim is
//! idle, outside any transaction (its read ran in autocommit), and the
//! claim's statements, retries and read-back are the protocol's own. A read
//! that failed keeps nothing: its connection goes back to the pool, whose
//! return ping tests it. SQLite holds nothing: its claims run on the
//! group-commit writer, and [`Session::connection`] says so.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use toolgate::claim::{ClaimRequest, ClaimStore, JsonText, RawClaim, StoreError};
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

/// One decision's session with the claim store's database (the module's
/// documentation). Dropping it gives a connection no claim took back to the
/// pool.
#[must_use = "the claim begins on the kept connection only through the Session"]
pub struct Session<'s> {
    store: &'s AnyClaimStore,
    kept: Option<HeldConn>,
    /// Whether a won claim's connection stays for the write and completion.
    through_completion: bool,
}

/// The connection a read borrows, by backend.
pub enum SessionConnection<'h> {
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
    slot: &'h mut Option<HeldConn>,
    conn: Kept<DB>,
}

macro_rules! keep {
    ($($feature:literal => $db:ty, $variant:ident;)+) => {$(
        #[cfg(feature = $feature)]
        impl Borrowed<'_, $db> {
            /// Keeps the connection for the decision's claim (or its next
            /// read). Call it only after the read succeeded.
            pub fn keep(self) {
                *self.slot = Some(HeldConn::$variant(self.conn));
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

impl AnyClaimStore {
    /// A session for one decision: its reads borrow the connection
    /// ([`Session::connection`]) and its claim ([`Session::claim`]) begins
    /// on it. Keep the value until the decision has claimed or ended.
    pub fn session(&self) -> Session<'_> {
        Session {
            store: self,
            kept: None,
            through_completion: false,
        }
    }

    /// [`AnyClaimStore::session`] for a decision whose executor writes in
    /// this store's database, in the completion's transaction
    /// ([`Session::write_and_complete`]): a won claim's connection stays
    /// with the decision for that transaction. Only for such an executor:
    /// any other would hold a connection while its write waits on the
    /// world.
    pub fn session_through_completion(&self) -> Session<'_> {
        Session {
            through_completion: true,
            ..self.session()
        }
    }
}

impl<'s> Session<'s> {
    /// The decision's connection for one read: the one an earlier read
    /// kept, or a new one from the transaction pool of the node a claim
    /// would use now.
    pub async fn connection(&mut self) -> Result<SessionConnection<'_>, StoreError> {
        let kept = self.kept.take();
        match (self.store, kept) {
            #[cfg(feature = "sqlite")]
            (AnyClaimStore::Sqlite(_), _) => Ok(SessionConnection::Sqlite),
            #[cfg(feature = "postgres")]
            (AnyClaimStore::Postgres(s), kept) => {
                let conn = match kept.and_then(HeldConn::postgres).and_then(Kept::idle) {
                    Some(conn) => conn,
                    None => s.acquire().await?,
                };
                Ok(SessionConnection::Postgres(Borrowed {
                    slot: &mut self.kept,
                    conn,
                }))
            }
            #[cfg(feature = "mysql")]
            (AnyClaimStore::MySql(s), kept) => {
                let conn = match kept.and_then(HeldConn::mysql).and_then(Kept::idle) {
                    Some(conn) => conn,
                    None => s.acquire().await?,
                };
                Ok(SessionConnection::MySql(Borrowed {
                    slot: &mut self.kept,
                    conn,
                }))
            }
        }
    }

    /// Whether this session's connections are `store`'s (a handle to the
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
    pub fn give_back(&mut self) {
        drop(self.kept.take());
    }

    /// The claim store, for any call but the claim and the write: the kept
    /// connection goes back to the pool first, so the call cannot wait on
    /// a pool this decision holds a connection of.
    pub fn store(&mut self) -> &'s AnyClaimStore {
        self.give_back();
        self.store
    }

    /// Claims `request` as [`ClaimStore::claim`] does, its first
    /// transaction on the kept connection. A won claim's connection stays
    /// for the write when the session was made through completion.
    pub async fn claim(&mut self, request: ClaimRequest) -> Result<RawClaim, StoreError> {
        let kept = self.kept.take();
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
        self.kept = kept;
        claimed
    }

    /// Runs `write` and the claim's completion with `receipt` in one
    /// transaction, as [`AnyClaimStore::write_and_complete`] does, on the
    /// connection the decision's claim committed on when it kept one
    /// ([`AnyClaimStore::session_through_completion`]); it then goes back
    /// to the pool.
    pub async fn write_and_complete(
        &mut self,
        write: Arc<dyn StoreWrite>,
        receipt: &JsonText,
        completion: &AppliedCompletion,
    ) -> Result<WriteCompleted, ExecError> {
        let kept = self.kept.take();
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
