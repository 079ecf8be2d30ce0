//! Picking a backend at run time from a URL.
//!
//! [`ClaimStore`]'s methods return `impl Future`, so the trait is not
//! dyn-compatible; an enum that delegates (after sqlx's `Any`) is the
//! run-time choice. The list of backends below is the only place that
//! names them all: each line gives the variant, its Cargo feature, its
//! name in messages, its URL schemes and its store type, whose folder
//! provides `connect`, `check_url`, `with_clock` and the store traits.

use std::sync::Arc;

use toolgate::claim::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStore, CompleteRequest, Completion, JsonText,
    OperationKey, RawClaim, ReconcileRequest, Reconciled, StoreError, StoreErrorKind, StuckEntry,
    UnixMillis,
};
use toolgate::pipeline::{AppliedCompletion, ExecError};

use crate::StoreOptions;
use crate::protocol;
use crate::write::{StoreWrite, WriteCompleted};

/// Declares [`Backend`], [`AnyClaimStore`] and what dispatches between
/// them from one line per backend. `$d` is a `$`, for the `delegate!`
/// macro it defines.
// An enum rather than a boxed trait object: a decision's `Session`, an
// application's own SQL and the floor reach each backend's own pool and
// connection type, which a `Box<dyn …>` would hide. The macro writes the
// one match per call that the enum then needs, for the backends compiled
// in.
macro_rules! backends {
    ($d:tt $(
        $(#[$doc:meta])*
        $variant:ident($feature:literal, $name:literal, [$first:literal $(, $more:literal)*]) => $store:ty;
    )+) => {
        /// Which backend a URL names.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Backend {
            $( $(#[$doc])* $variant, )+
        }

        /// Each backend's first scheme, for messages.
        const SCHEMES: &[&str] = &[$($first),+];

        impl Backend {
            /// The backend a URL's scheme names, if any.
            pub fn from_url(url: &str) -> Option<Self> {
                let scheme = url.split_once(':')?.0.to_ascii_lowercase();
                $(
                    if [$first $(, $more)*].contains(&scheme.as_str()) {
                        return Some(Self::$variant);
                    }
                )+
                None
            }
        }

        /// A claim store on whichever backend a URL names.
        ///
        /// Cloning gives another handle to the same connections.
        #[derive(Clone)]
        pub enum AnyClaimStore {
            $(
                #[doc = $name]
                #[cfg(feature = $feature)]
                $variant($store),
            )+
        }

        /// Runs `call` on whichever backend `self` holds, as `s`.
        macro_rules! delegate {
            ($d this:ident, $d s:ident => $d call:expr) => {
                match $d this {
                    $( #[cfg(feature = $feature)] AnyClaimStore::$variant($d s) => $d call, )+
                }
            };
        }

        impl AnyClaimStore {
            /// Connects to `url` and runs the migrations.
            pub async fn connect_with(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
                match Backend::from_url(url).ok_or_else(unknown_scheme)? {
                    $(
                        Backend::$variant => {
                            #[cfg(feature = $feature)]
                            return <$store>::connect(url, options).await.map(Self::$variant);
                            #[cfg(not(feature = $feature))]
                            return Err(StoreError::new(
                                StoreErrorKind::Config,
                                concat!($name, " support is not compiled in"),
                            ));
                        }
                    )+
                }
            }

            /// Checks `url` the way [`Self::connect`] reads it, without
            /// connecting: the scheme names a compiled-in backend and the
            /// driver accepts the rest (host, port, `sslmode`, ...). For
            /// `toolgate config check`. Errors never repeat a password
            /// ([`crate::redact_url`]).
            pub fn check_url(url: &str) -> Result<Backend, StoreError> {
                let backend = Backend::from_url(url).ok_or_else(unknown_scheme)?;
                match backend {
                    $(
                        Backend::$variant => {
                            #[cfg(feature = $feature)]
                            <$store>::check_url(url)?;
                            #[cfg(not(feature = $feature))]
                            return Err(StoreError::new(
                                StoreErrorKind::Config,
                                concat!($name, " support is not compiled in"),
                            ));
                        }
                    )+
                }
                Ok(backend)
            }

            /// The store with `clock` as its time source for claim attempts
            /// (the default is the wall clock, [`crate::now_millis`]).
            #[must_use]
            pub fn with_clock(self, clock: fn() -> UnixMillis) -> Self {
                match self {
                    $( #[cfg(feature = $feature)] Self::$variant(s) => Self::$variant(s.with_clock(clock)), )+
                }
            }

            /// Which backend this is.
            pub fn backend(&self) -> Backend {
                match self {
                    $( #[cfg(feature = $feature)] Self::$variant(_) => Backend::$variant, )+
                }
            }
        }
    };
}

backends! {$
    /// `sqlite://PATH`
    Sqlite("sqlite", "SQLite", ["sqlite"]) => crate::sqlite::SqliteClaimStore;
    /// `postgres://…` or `postgresql://…`
    Postgres("postgres", "PostgreSQL", ["postgres", "postgresql"]) => crate::postgres::PgClaimStore;
    /// `mysql://…` or `mariadb://…`
    MySql("mysql", "MySQL", ["mysql", "mariadb"]) => crate::mysql::MySqlClaimStore;
}

fn unknown_scheme() -> StoreError {
    let schemes: Vec<String> = SCHEMES.iter().map(|s| format!("{s}://")).collect();
    let listed = match schemes.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    StoreError::new(
        StoreErrorKind::Config,
        format!("the database URL must start with {listed}"),
    )
}

impl AnyClaimStore {
    /// Connects to `url` with default options and runs the migrations.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, StoreOptions::default()).await
    }

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
        let done = delegate!(self, s => protocol::write_and_complete(&mut { s }, write, receipt, completion).await);
        done.map_err(|e| ExecError::new(e.to_string()))
    }

    /// One claim and completion pair of the floor (`crate::floor`), bare.
    pub(crate) async fn floor_pair(&self, pair: &crate::floor::Pair) -> Result<(), StoreError> {
        delegate!(self, s => s.floor_pair(pair).await)
    }
}

impl ClaimStore for AnyClaimStore {
    async fn claim(&self, request: ClaimRequest) -> Result<RawClaim, StoreError> {
        delegate!(self, s => s.claim(request).await)
    }

    async fn complete(&self, request: CompleteRequest) -> Result<Completion, StoreError> {
        delegate!(self, s => s.complete(request).await)
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
        request: ReconcileRequest<'_>,
    ) -> Result<Reconciled, StoreError> {
        delegate!(self, s => s.record_reconciliation(request).await)
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
        begin: toolgate::idempotency::IdemBegin<'_>,
    ) -> Result<toolgate::idempotency::Begun, StoreError> {
        delegate!(self, s => s.idem_begin(begin).await)
    }

    async fn idem_finish(
        &self,
        finish: toolgate::idempotency::IdemFinish<'_>,
    ) -> Result<(), StoreError> {
        delegate!(self, s => s.idem_finish(finish).await)
    }

    async fn idem_forget(&self, run: toolgate::idempotency::IdemRun<'_>) -> Result<(), StoreError> {
        delegate!(self, s => s.idem_forget(run).await)
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
        vote: toolgate::review::ReviewerAct<'_, toolgate::review::Verdict>,
    ) -> Result<toolgate::review::Voted, StoreError> {
        delegate!(self, s => s.vote(vote).await)
    }

    async fn close(
        &self,
        closing: toolgate::review::ReviewerAct<'_, toolgate::review::Closing>,
    ) -> Result<toolgate::review::Closed, StoreError> {
        delegate!(self, s => s.close(closing).await)
    }
}
