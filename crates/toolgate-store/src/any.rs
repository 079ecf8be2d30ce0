//! Picking a backend at run time from a URL.
//!
//! [`ClaimStore`]'s methods return `impl Future`, so the trait is not
//! dyn-compatible; an enum that delegates (after sqlx's `Any`) is the
//! run-time choice.

use std::sync::Arc;

use toolgate::claim::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStore, Completion, HolderToken, JsonText,
    OperationKey, RawClaim, ReconcileOutcome, Reconciled, StoreError, StoreErrorKind, StuckEntry,
    UnixMillis,
};

use toolgate::pipeline::{AppliedCompletion, ExecError};

use crate::StoreOptions;
#[cfg(feature = "mysql")]
use crate::mysql::MySqlClaimStore;
#[cfg(feature = "postgres")]
use crate::postgres::PgClaimStore;
use crate::protocol;
#[cfg(feature = "sqlite")]
use crate::sqlite::SqliteClaimStore;
use crate::write::{StoreWrite, WriteCompleted};

#[cfg(not(all(feature = "sqlite", feature = "postgres", feature = "mysql")))]
fn unsupported(what: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Config,
        format!("{what} support is not compiled in"),
    )
}

/// Which backend a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite://PATH`
    Sqlite,
    /// `postgres://…` or `postgresql://…`
    Postgres,
    /// `mysql://…` or `mariadb://…`
    MySql,
}

impl Backend {
    /// The backend a URL's scheme names, if any.
    pub fn from_url(url: &str) -> Option<Self> {
        let scheme = url.split_once(':')?.0.to_ascii_lowercase();
        match scheme.as_str() {
            "sqlite" => Some(Self::Sqlite),
            "postgres" | "postgresql" => Some(Self::Postgres),
            "mysql" | "mariadb" => Some(Self::MySql),
            _ => None,
        }
    }
}

/// A claim store on whichever backend a URL names.
///
/// Cloning gives another handle to the same connections.
#[derive(Clone)]
pub enum AnyClaimStore {
    /// SQLite.
    #[cfg(feature = "sqlite")]
    Sqlite(SqliteClaimStore),
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(PgClaimStore),
    /// MySQL or MariaDB.
    #[cfg(feature = "mysql")]
    MySql(MySqlClaimStore),
}

impl AnyClaimStore {
    /// Connects to `url` with default options and runs the migrations.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, StoreOptions::default()).await
    }

    /// Connects to `url` and runs the migrations.
    pub async fn connect_with(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        match Backend::from_url(url) {
            None => Err(StoreError::new(
                StoreErrorKind::Config,
                "the database URL must start with sqlite://, postgres:// or mysql://",
            )),
            Some(Backend::Sqlite) => {
                #[cfg(feature = "sqlite")]
                return SqliteClaimStore::connect(url, options)
                    .await
                    .map(Self::Sqlite);
                #[cfg(not(feature = "sqlite"))]
                return Err(unsupported("SQLite"));
            }
            Some(Backend::Postgres) => {
                #[cfg(feature = "postgres")]
                return PgClaimStore::connect(url, options)
                    .await
                    .map(Self::Postgres);
                #[cfg(not(feature = "postgres"))]
                return Err(unsupported("PostgreSQL"));
            }
            Some(Backend::MySql) => {
                #[cfg(feature = "mysql")]
                {
                    // sqlx knows only the mysql scheme; MariaDB speaks it.
                    let url = match url.split_once(':') {
                        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("mariadb") => {
                            format!("mysql:{rest}")
                        }
                        _ => url.to_owned(),
                    };
                    MySqlClaimStore::connect(&url, options)
                        .await
                        .map(Self::MySql)
                }
                #[cfg(not(feature = "mysql"))]
                return Err(unsupported("MySQL"));
            }
        }
    }

    /// Checks `url` the way [`Self::connect`] reads it, without connecting:
    /// the scheme names a compiled-in backend and the driver accepts the
    /// rest (host, port, `sslmode`, ...). For `toolgate config check`.
    /// Errors never repeat a password ([`crate::redact_url`]).
    pub fn check_url(url: &str) -> Result<Backend, StoreError> {
        let bad = |e: sqlx::Error| {
            StoreError::new(
                StoreErrorKind::Config,
                format!("{}: {e}", crate::redact_url(url)),
            )
        };
        let backend = Backend::from_url(url).ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::Config,
                "the database URL must start with sqlite://, postgres:// or mysql://",
            )
        })?;
        match backend {
            Backend::Sqlite => {
                #[cfg(feature = "sqlite")]
                <sqlx::sqlite::SqliteConnectOptions as std::str::FromStr>::from_str(url)
                    .map_err(bad)?;
                #[cfg(not(feature = "sqlite"))]
                return Err(unsupported("SQLite"));
            }
            Backend::Postgres => {
                #[cfg(feature = "postgres")]
                <sqlx::postgres::PgConnectOptions as std::str::FromStr>::from_str(url)
                    .map_err(bad)?;
                #[cfg(not(feature = "postgres"))]
                return Err(unsupported("PostgreSQL"));
            }
            Backend::MySql => {
                #[cfg(feature = "mysql")]
                {
                    let url = match url.split_once(':') {
                        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("mariadb") => {
                            format!("mysql:{rest}")
                        }
                        _ => url.to_owned(),
                    };
                    // Several hosts (a Galera cluster's nodes): each must parse.
                    for url in crate::mysql::split_hosts(&url)? {
                        <sqlx::mysql::MySqlConnectOptions as std::str::FromStr>::from_str(&url)
                            .map_err(bad)?;
                    }
                }
                #[cfg(not(feature = "mysql"))]
                return Err(unsupported("MySQL"));
            }
        }
        Ok(backend)
    }

    /// The store with `clock` as its time source for claim attempts (the
    /// default is the wall clock, [`crate::now_millis`]).
    #[must_use]
    pub fn with_clock(self, clock: fn() -> UnixMillis) -> Self {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => Self::Sqlite(s.with_clock(clock)),
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => Self::Postgres(s.with_clock(clock)),
            #[cfg(feature = "mysql")]
            Self::MySql(s) => Self::MySql(s.with_clock(clock)),
        }
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(_) => Backend::Sqlite,
            #[cfg(feature = "postgres")]
            Self::Postgres(_) => Backend::Postgres,
            #[cfg(feature = "mysql")]
            Self::MySql(_) => Backend::MySql,
        }
    }
}

/// Delegates one method call to whichever backend `self` holds.
macro_rules! delegate {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            #[cfg(feature = "sqlite")]
            AnyClaimStore::Sqlite($s) => $call,
            #[cfg(feature = "postgres")]
            AnyClaimStore::Postgres($s) => $call,
            #[cfg(feature = "mysql")]
            AnyClaimStore::MySql($s) => $call,
        }
    };
}

impl AnyClaimStore {
    /// Runs an application's `write` and the claim's completion with
    /// `receipt` in one transaction, for an executor whose writes live in
    /// this store's database ([`toolgate::pipeline::Executor::execute_and_complete`],
    /// [`crate::StoreWrite`]). A receipt `completion` does not accept is
    /// refused before anything is written.
    pub async fn write_and_complete(
        &self,
        write: Arc<dyn StoreWrite>,
        receipt: &JsonText,
        completion: &AppliedCompletion,
    ) -> Result<WriteCompleted, ExecError> {
        completion.accepts(receipt)?;
        let done =
            delegate!(self, s => protocol::write_and_complete(s, write, receipt, completion).await);
        done.map_err(|e| ExecError::new(e.to_string()))
    }
}

impl ClaimStore for AnyClaimStore {
    async fn claim(&self, request: ClaimRequest) -> Result<RawClaim, StoreError> {
        delegate!(self, s => s.claim(request).await)
    }

    async fn complete(
        &self,
        key: &OperationKey,
        holder: &HolderToken,
        result: &JsonText,
        now: UnixMillis,
        audit: &AuditEntry,
    ) -> Result<Completion, StoreError> {
        delegate!(self, s => s.complete(key, holder, result, now, audit).await)
    }

    async fn fetch(&self, key: &OperationKey) -> Result<Option<ClaimRecord>, StoreError> {
        delegate!(self, s => s.fetch(key).await)
    }

    async fn list_stuck(&self, now: UnixMillis, limit: u32) -> Result<Vec<StuckEntry>, StoreError> {
        delegate!(self, s => s.list_stuck(now, limit).await)
    }

    async fn budget_reserved(&self) -> Result<Vec<(String, i64)>, StoreError> {
        delegate!(self, s => s.budget_reserved().await)
    }

    async fn record_reconciliation(
        &self,
        key: &OperationKey,
        outcome: &ReconcileOutcome,
        now: UnixMillis,
    ) -> Result<Reconciled, StoreError> {
        delegate!(self, s => s.record_reconciliation(key, outcome, now).await)
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        delegate!(self, s => s.append_audit(entry).await)
    }

    async fn audit_trail(
        &self,
        key: &OperationKey,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        delegate!(self, s => s.audit_trail(key, limit).await)
    }

    async fn ready(&self) -> Result<(), StoreError> {
        delegate!(self, s => s.ready().await)
    }
}

impl toolgate::idempotency::IdempotencyStore for AnyClaimStore {
    async fn idem_begin(
        &self,
        principal: &str,
        key: &str,
        payload: [u8; 32],
        runner: &str,
        now: UnixMillis,
        lease_until: UnixMillis,
    ) -> Result<toolgate::idempotency::Begun, StoreError> {
        delegate!(self, s => s.idem_begin(principal, key, payload, runner, now, lease_until).await)
    }

    async fn idem_finish(
        &self,
        principal: &str,
        key: &str,
        runner: &str,
        answer: toolgate::idempotency::Remembered,
        now: UnixMillis,
        bounds: toolgate::idempotency::Bounds,
    ) -> Result<(), StoreError> {
        delegate!(self, s => s.idem_finish(principal, key, runner, answer, now, bounds).await)
    }

    async fn idem_forget(
        &self,
        principal: &str,
        key: &str,
        runner: &str,
    ) -> Result<(), StoreError> {
        delegate!(self, s => s.idem_forget(principal, key, runner).await)
    }

    async fn idem_purge(
        &self,
        now: UnixMillis,
        bounds: toolgate::idempotency::Bounds,
    ) -> Result<(), StoreError> {
        delegate!(self, s => s.idem_purge(now, bounds).await)
    }
}

impl toolgate::review::ReviewStore for AnyClaimStore {
    async fn open_session(
        &self,
        digest: [u8; 32],
        session: toolgate::review::ReviewSession,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        delegate!(self, s => s.open_session(digest, session, now).await)
    }

    async fn session(
        &self,
        digest: [u8; 32],
        now: UnixMillis,
    ) -> Result<Option<toolgate::review::ReviewSession>, StoreError> {
        delegate!(self, s => s.session(digest, now).await)
    }

    async fn close_session(&self, digest: [u8; 32]) -> Result<(), StoreError> {
        delegate!(self, s => s.close_session(digest).await)
    }

    async fn open_item(
        &self,
        item: toolgate::review::NewItem,
        limits: &toolgate::review::QueueLimits,
    ) -> Result<toolgate::review::Opened, StoreError> {
        delegate!(self, s => s.open_item(item, limits).await)
    }

    async fn request_approval(
        &self,
        item: toolgate::review::NewItem,
        now: UnixMillis,
        limits: &toolgate::review::QueueLimits,
    ) -> Result<toolgate::review::Requested, StoreError> {
        delegate!(self, s => s.request_approval(item, now, limits).await)
    }

    async fn item(
        &self,
        id: i64,
        now: UnixMillis,
    ) -> Result<Option<toolgate::review::ReviewItem>, StoreError> {
        delegate!(self, s => s.item(id, now).await)
    }

    async fn list_items(
        &self,
        query: &toolgate::review::ListQuery,
        now: UnixMillis,
    ) -> Result<Vec<toolgate::review::ReviewItem>, StoreError> {
        delegate!(self, s => s.list_items(query, now).await)
    }

    async fn open_items(&self, now: UnixMillis) -> Result<u64, StoreError> {
        delegate!(self, s => s.open_items(now).await)
    }

    async fn vote(
        &self,
        id: i64,
        reviewer: &str,
        verdict: toolgate::review::Verdict,
        note: Option<&str>,
        now: UnixMillis,
    ) -> Result<toolgate::review::Voted, StoreError> {
        delegate!(self, s => s.vote(id, reviewer, verdict, note, now).await)
    }

    async fn close(
        &self,
        id: i64,
        reviewer: &str,
        closing: toolgate::review::Closing,
        note: Option<&str>,
        now: UnixMillis,
    ) -> Result<toolgate::review::Closed, StoreError> {
        delegate!(self, s => s.close(id, reviewer, closing, note, now).await)
    }
}
