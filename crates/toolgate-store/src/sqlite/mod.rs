//! SQLite: the embedded default. One file in WAL mode, created on first
//! use; nothing to install or run.
//!
//! This file opens the store; the rest has the backend folders' common
//! layout: `sql.rs` holds the statements, `migrate.rs` applies the
//! migrations, `error.rs` reads SQLite's result codes, and `claims.rs`,
//! `review.rs`, `idempotency.rs` and `floor.rs` run the claim protocol,
//! the review queue, the `Idempotency-Key` memory and the floor
//! measurement. Only SQLite has `group_commit.rs`, the one writer every
//! write goes through.

mod claims;
mod error;
mod floor;
mod group_commit;
mod idempotency;
mod migrate;
mod review;
pub(crate) mod sql;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use toolgate::claim::{StoreError, StoreErrorKind, UnixMillis};

use crate::StoreOptions;
use crate::common::map_err;
use crate::dialect::Dialect;
use crate::protocol::Clock;
use crate::sql::Sql;
use group_commit::GroupCommit;

/// The writer an application's own writes to its tables in the same file
/// go through ([`SqliteClaimStore::writer`]), what it answers, and the
/// driver its units run on.
pub use group_commit::{GroupCommit as Writer, StartError, WriteError, rusqlite};

/// The claims and audit tables on SQLite. Every write goes through one
/// writer connection with group commit (`group_commit.rs`); the claim
/// lookups run on the store's own reader connections, the listings on the
/// pool. Cloning gives another handle to the same connections and writer.
#[derive(Clone)]
pub struct SqliteClaimStore {
    pool: SqlitePool,
    writer: GroupCommit,
    readers: Arc<Readers>,
    clock: Clock,
    #[cfg(feature = "fault-injection")]
    hook: Option<crate::fault::FaultHook>,
}

impl Dialect for sqlx::Sqlite {
    const SQL: Sql = sql::SQL;

    fn is_lost_race(e: &sqlx::Error) -> bool {
        error::is_sqlx_busy(e)
    }

    fn rows_affected(done: &Self::QueryResult) -> u64 {
        done.rows_affected()
    }
}

/// SQLite's lost-race errors: `SQLITE_BUSY` and `SQLITE_LOCKED`, with any
/// extended code. A claim rolls back and runs again on these.
pub use error::is_busy as is_lost_race;
pub use error::rusqlite_error;

/// Idle read connections kept for reuse.
const MAX_IDLE_READERS: usize = 8;

/// The claim lookups on the backend's own `rusqlite` connections, run on
/// the caller's thread: sqlx hands every SQLite statement to the
/// connection's worker thread and waits for the answer over a channel, and
/// for a read of a few cached pages the two thread switches cost more than
/// the read. A read here is a local file read in WAL mode, which does not
/// wait for the writer. Colder reads (listings, the audit trail,
/// migrations) stay on the sqlx pool.
struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<rusqlite::Connection>>,
}

impl Readers {
    fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Runs `read` on an idle connection, or a new one.
    fn read<T>(
        &self,
        read: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let conn = match idle {
            Some(conn) => conn,
            None => open_reader(&self.path)?,
        };
        let answer = read(&conn);
        // A connection whose read failed is dropped rather than reused.
        if answer.is_ok()
            && let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE_READERS
        {
            idle.push(conn);
        }
        answer
    }
}

/// A connection that only reads (`query_only`), with the writer's busy
/// timeout.
fn open_reader(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(group_commit::BUSY_TIMEOUT)?;
    conn.execute_batch("PRAGMA query_only = ON;")?;
    Ok(conn)
}

impl SqliteClaimStore {
    /// The pool, for operations outside the claim protocol.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The writer, for an application's own writes to its tables in the
    /// same file (an executor's conditional write): each becomes a unit of
    /// the store's batches, with the same guarantees as the store's own
    /// units, instead of fighting the writer for the file's write lock. A
    /// unit runs statements only (no `BEGIN`/`COMMIT`), and its answer comes
    /// once its batch has committed; if it fails, its batch rolls back.
    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    /// Runs `work` as one unit of the writer's batches, with its failure
    /// named by `what`: the review and `Idempotency-Key` stores' writes, and
    /// their reads too, since their traffic is light and a unit sees every
    /// write committed before it.
    pub(crate) async fn write_unit<T: Send + 'static>(
        &self,
        what: &'static str,
        work: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<Result<T, StoreError>>
        + Send
        + 'static,
    ) -> Result<T, StoreError> {
        match self.writer.write(work).await {
            Ok(answer) => answer,
            Err(WriteError::Unit(e)) => Err(rusqlite_error(what, e)),
            Err(e) => Err(StoreError::with_source(
                StoreErrorKind::Unavailable,
                format!("{what}: {e}"),
                e,
            )),
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
}

impl SqliteClaimStore {
    /// Checks `url` as [`Self::connect`] reads it, without opening it.
    pub fn check_url(url: &str) -> Result<(), StoreError> {
        SqliteConnectOptions::from_str(url)
            .map(drop)
            .map_err(|e| crate::common::bad_url(url, e))
    }
    /// Opens the database at `url` (`sqlite://PATH`), creating the file if
    /// [`StoreOptions::create_if_missing`] says so, and runs the migrations.
    ///
    /// WAL mode lets readers proceed while one writer commits; claims
    /// serialise on the write lock and wait up to the busy timeout for it.
    /// `synchronous = FULL`: a claim acknowledged and then lost to a power
    /// cut would let the operation execute twice.
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        let connect = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::with_source(StoreErrorKind::Config, format!("{url}: {e}"), e))?
            .create_if_missing(options.create_if_missing)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10));
        // No ping before each acquire: the database is a local file with
        // no link to drop, and every ping is a round trip to the
        // connection's worker thread on every read.
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .test_before_acquire(false)
            .connect_with(connect.clone())
            .await
            .map_err(|e| map_err("opening the SQLite database", e))?;
        migrate::run(&pool).await?;
        // The writer opens the same file itself, so an in-memory database
        // (which each connection would see as its own) cannot work.
        if !connect.get_filename().is_file() {
            return Err(StoreError::new(
                StoreErrorKind::Config,
                format!("{url}: toolgate needs a SQLite database file, not an in-memory database"),
            ));
        }
        let writer = GroupCommit::start(connect.get_filename()).map_err(|e| {
            StoreError::with_source(
                StoreErrorKind::Unavailable,
                format!("opening the SQLite writer connection: {e}"),
                e,
            )
        })?;
        let readers = Arc::new(Readers::new(connect.get_filename()));
        Ok(Self {
            pool,
            writer,
            readers,
            clock: crate::now_millis,
            #[cfg(feature = "fault-injection")]
            hook: None,
        })
    }
}
