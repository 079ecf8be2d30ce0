//! SQLite: the embedded default. One file in WAL mode, created on first
//! use; nothing to install or run.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use toolgate::claim::{StoreError, StoreErrorKind};

use crate::StoreOptions;
use crate::common::{Step, Write, WriteFail, map_err, sql_claim_store};
use crate::group_commit::{GroupCommit, WriteError, is_busy};

/// The claims and audit tables on SQLite. Reads use the pool; every write
/// goes through one writer connection with group commit (see
/// [`crate::group_commit`]).
pub struct SqliteClaimStore {
    pool: SqlitePool,
    writer: GroupCommit,
    readers: Arc<Readers>,
    #[cfg(feature = "fault-injection")]
    hook: Option<crate::fault::FaultHook>,
}

/// The SQL, with the bind order the shared implementation uses.
mod sql {
    pub(super) use crate::common::qmark::{
        APPEND_AUDIT, AUDIT_TRAIL, COMPLETE, LIST_STUCK, RECONCILE, SELECT_CLAIM,
    };
    pub(super) const INSERT_CLAIM: &str = "INSERT INTO toolgate_claims \
        (operation_key, fingerprint, tool, arguments, scope, version_seen, proposer, \
         status, holder, lease_expires_at, claimed_at, executor) \
        VALUES (?, ?, ?, ?, ?, ?, ?, 'in_flight', ?, ?, ?, ?) \
        ON CONFLICT (operation_key) DO NOTHING";
}

// Every write goes through the group-commit writer, whose lost-race test
// is `group_commit::is_busy` (re-exported here as `is_lost_race`).
sql_claim_store!(SqliteClaimStore, sqlx::Sqlite, sql, is_busy, batched);

/// SQLite's lost-race errors: `SQLITE_BUSY` and `SQLITE_LOCKED`, with any
/// extended code. A claim rolls back and runs again on these.
pub use crate::group_commit::is_busy as is_lost_race;

/// Idle read connections kept for reuse.
const MAX_IDLE_READERS: usize = 8;

/// The hot reads (a claim; an application's resource version or
/// directory lookup, through [`SqliteClaimStore::readers`]) on the
/// backend's own `rusqlite` connections, run on the caller's thread.
///
/// sqlx hands every SQLite statement to the connection's worker thread and
/// waits for the answer over a channel; for a read of a few cached pages
/// the two thread switches cost more than the read. A read here is a local
/// file read in WAL mode, which does not wait for the writer, so running
/// it inline on an async worker is as short as the other work done there.
/// Colder reads (listings, the audit trail, migrations) stay on the sqlx
/// pool.
pub struct Readers {
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
    pub fn read<T>(
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

/// A connection that only reads (`query_only`), with the pool's busy
/// timeout.
fn open_reader(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(crate::group_commit::BUSY_TIMEOUT)?;
    conn.execute_batch("PRAGMA query_only = ON;")?;
    Ok(conn)
}

/// A failed statement on a `rusqlite` connection: busy is contention,
/// anything else the database's. Public for an application whose own
/// statements run on [`SqliteClaimStore::writer`] or
/// [`SqliteClaimStore::readers`], so its errors read like the store's.
pub fn rusqlite_error(what: &str, e: &rusqlite::Error) -> StoreError {
    let kind = if is_busy(e) {
        StoreErrorKind::Contention
    } else {
        StoreErrorKind::Database
    };
    StoreError::new(kind, format!("{what}: {e}"))
}

impl SqliteClaimStore {
    /// The group-commit writer, for an application's own writes to its
    /// tables in the same file (an executor's conditional write): each
    /// becomes a unit of the store's batches, with the same guarantees as
    /// the store's own units (see [`crate::group_commit`]), instead of
    /// fighting the writer for the file's write lock.
    pub fn writer(&self) -> &GroupCommit {
        &self.writer
    }

    /// The read connections, for the downstream tables' hot reads.
    pub fn readers(&self) -> &Arc<Readers> {
        &self.readers
    }

    /// Readiness beyond the claim lookup: the writer thread every write
    /// goes through is alive, and the pool the listings and the audit
    /// trail use answers.
    async fn backend_ready(&self) -> Result<(), StoreError> {
        if !self.writer.is_running() {
            return Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "the SQLite writer thread has stopped",
            ));
        }
        sqlx::query("SELECT 1 FROM toolgate_claims WHERE 1 = 0")
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map_err("checking the SQLite pool", e))?;
        Ok(())
    }

    /// One claim, read on a reader connection.
    async fn read_row(
        &self,
        key: &toolgate::claim::OperationKey,
    ) -> Result<Option<toolgate::claim::ClaimRecord>, StoreError> {
        let row = self
            .readers
            .read(|conn| {
                let mut select = conn.prepare_cached(sql::SELECT_CLAIM)?;
                let mut rows = select.query([key.as_bytes().as_slice()])?;
                Ok(rows.next()?.map(rusqlite_row::record))
            })
            .map_err(|e| rusqlite_error("reading a claim", &e))?;
        row.transpose().map_err(|p| StoreError::corrupt(&p))
    }

    /// One pass of the claim: the conditional insert and the read-back as
    /// one unit of a group commit. The verdict is taken only after the
    /// batch committed; the unit writes nothing when the row is someone
    /// else's, so there is nothing to undo, and if either statement fails
    /// the whole batch rolls back.
    async fn claim_once(&self, req: &toolgate::claim::ClaimRequest) -> Step {
        use toolgate::claim::{RawClaim, ReadBack, StoreError, StoreErrorKind};

        let unit = req.clone();
        let written = self
            .writer
            .write(move |conn| {
                let p = unit.proposal();
                // INVARIANT: no read before this insert (crate docs).
                conn.prepare_cached(sql::INSERT_CLAIM)?
                    .execute(rusqlite::params![
                        unit.key().as_bytes().as_slice(),
                        unit.fingerprint().as_bytes().as_slice(),
                        p.tool(),
                        p.arguments(),
                        p.scope(),
                        p.version_seen(),
                        p.proposer(),
                        unit.holder().as_bytes().as_slice(),
                        unit.lease_expires_at().0,
                        unit.now().0,
                        unit.executor().as_str(),
                    ])?;
                let mut read_back = conn.prepare_cached(sql::SELECT_CLAIM)?;
                let mut rows = read_back.query([unit.key().as_bytes().as_slice()])?;
                Ok(rows.next()?.map(rusqlite_row::record))
            })
            .await;
        match written {
            // The single writer saw its own insert or the winner's row, so
            // "no row" cannot happen; if it ever does, it is never a win.
            Ok(None) => Step::Retry,
            Ok(Some(Err(p))) => Step::Fail(StoreError::corrupt(&p)),
            Ok(Some(Ok(row))) => match req.judge(row) {
                ReadBack::Theirs(raw) => Step::Done(raw),
                ReadBack::Ours(_) if self.fault_after_commit().await => {
                    self.after_failed_commit(req, "injected: commit acknowledgement lost")
                        .await
                }
                ReadBack::Ours(lease) => Step::Done(RawClaim::Acquired(lease)),
            },
            Err(WriteError::Unit(e)) if is_busy(&e) => Step::Retry,
            Err(WriteError::Unit(e)) => Step::Fail(rusqlite_error("claiming", &e)),
            // The batch rolled back (another process held the lock, or
            // another unit broke it): nothing was written, so try again; a
            // lasting cause ends as a contention error after the attempts.
            Err(WriteError::NotApplied { .. }) => Step::Retry,
            Err(e @ WriteError::Unknown(_)) => self.after_failed_commit(req, e).await,
            Err(e @ WriteError::Stopped) => Step::Fail(StoreError::new(
                StoreErrorKind::Unavailable,
                format!("claiming: {e}"),
            )),
        }
    }

    /// One single-statement write as a unit of a group commit.
    async fn write_one(&self, w: &Write<'_>) -> Result<u64, WriteFail> {
        use rusqlite::params;
        use toolgate::claim::{StoreError, StoreErrorKind};

        let bytes = |b: &[u8]| b.to_vec();
        let run: RowsUnit = match *w {
            Write::Complete {
                key,
                holder,
                result,
                now,
                audit,
            } => complete_unit(key, holder, result, now, audit.cloned()),
            Write::Reconcile {
                key,
                resolution,
                result,
                now,
            } => {
                let (key, resolution, result) = (
                    bytes(key.as_bytes()),
                    resolution.as_str(),
                    result.as_str().to_owned(),
                );
                Box::new(move |conn| {
                    conn.prepare_cached(sql::RECONCILE)?
                        .execute(params![now.0, resolution, result, key, now.0])
                })
            }
            Write::Audit(entry) => {
                let entry = entry.clone();
                Box::new(move |conn| append_audit(conn, &entry))
            }
        };
        let written = self.writer.write(run).await;
        let what = w.what();
        written.map(|n| n as u64).map_err(|e| match e {
            WriteError::Unit(e) if is_busy(&e) => WriteFail::LostRace,
            WriteError::Unit(e) => WriteFail::Failed(rusqlite_error(what, &e)),
            WriteError::NotApplied {
                lost_race: true, ..
            } => WriteFail::LostRace,
            e => WriteFail::Failed(StoreError::new(
                StoreErrorKind::Unavailable,
                format!("{what}: {e}"),
            )),
        })
    }
}

/// A write unit answering with the rows it changed.
type RowsUnit = Box<dyn FnOnce(&rusqlite::Connection) -> rusqlite::Result<usize> + Send>;

/// The completion's UPDATE and, if it changed the row, `audit`.
fn complete_unit(
    key: &toolgate::claim::OperationKey,
    holder: &toolgate::claim::HolderToken,
    result: &toolgate::claim::JsonText,
    now: toolgate::claim::UnixMillis,
    audit: Option<toolgate::claim::AuditEntry>,
) -> RowsUnit {
    let (key, holder, result) = (
        key.as_bytes().to_vec(),
        holder.as_bytes().to_vec(),
        result.as_str().to_owned(),
    );
    Box::new(move |conn| {
        let n = conn
            .prepare_cached(sql::COMPLETE)?
            .execute(rusqlite::params![now.0, result, key, holder])?;
        if n == 1
            && let Some(audit) = &audit
        {
            append_audit(conn, audit)?;
        }
        Ok(n)
    })
}

/// The audit insert on the writer's connection.
pub(crate) fn append_audit(
    conn: &rusqlite::Connection,
    entry: &toolgate::claim::AuditEntry,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql::APPEND_AUDIT)?
        .execute(rusqlite::params![
            entry.at().0,
            entry.actor(),
            entry.tool(),
            entry.outcome(),
            entry.reason(),
            entry.key().map(|k| k.as_bytes().as_slice()),
            entry.fingerprint().map(|f| f.as_bytes().as_slice()),
            entry.via(),
        ])
}

/// A claim row read on a `rusqlite` connection (the writer's read-back, the
/// readers), decoded by the same rules as the pool's rows: bytes from BLOB
/// or TEXT, text that must be UTF-8, integers that must be integers.
mod rusqlite_row {
    use rusqlite::Row;
    use rusqlite::types::ValueRef;
    use toolgate::claim::{ClaimRecord, CorruptRecord};

    use crate::common::{ClaimColumns, stored_claim};

    fn value<'r>(row: &'r Row<'_>, col: &'static str) -> Result<ValueRef<'r>, CorruptRecord> {
        row.get_ref(col)
            .map_err(|e| CorruptRecord::new(col, format!("cannot be read: {e}")))
    }

    fn opt_bytes(row: &Row<'_>, col: &'static str) -> Result<Option<Vec<u8>>, CorruptRecord> {
        match value(row, col)? {
            ValueRef::Null => Ok(None),
            ValueRef::Blob(b) | ValueRef::Text(b) => Ok(Some(b.to_vec())),
            _ => Err(CorruptRecord::new(col, "is not bytes")),
        }
    }

    fn opt_text(row: &Row<'_>, col: &'static str) -> Result<Option<String>, CorruptRecord> {
        opt_bytes(row, col)?
            .map(|b| String::from_utf8(b).map_err(|_| CorruptRecord::new(col, "is not UTF-8")))
            .transpose()
    }

    fn opt_int(row: &Row<'_>, col: &'static str) -> Result<Option<i64>, CorruptRecord> {
        match value(row, col)? {
            ValueRef::Null => Ok(None),
            ValueRef::Integer(i) => Ok(Some(i)),
            _ => Err(CorruptRecord::new(col, "is not an integer")),
        }
    }

    struct Columns<'a, 'r>(&'a Row<'r>);

    impl ClaimColumns for Columns<'_, '_> {
        fn bytes(&self, col: &'static str) -> Result<Vec<u8>, CorruptRecord> {
            opt_bytes(self.0, col)?.ok_or_else(|| CorruptRecord::new(col, "is NULL"))
        }
        fn opt_text(&self, col: &'static str) -> Result<Option<String>, CorruptRecord> {
            opt_text(self.0, col)
        }
        fn opt_int(&self, col: &'static str) -> Result<Option<i64>, CorruptRecord> {
            opt_int(self.0, col)
        }
    }

    /// Validates a claim row (core rules, strict JSON).
    pub(super) fn record(row: &Row<'_>) -> Result<ClaimRecord, CorruptRecord> {
        ClaimRecord::from_stored(stored_claim(&Columns(row))?)
    }
}

fn migrator() -> Migrator {
    let mut m = Migrator::with_migrations(vec![
        Migration::new(
            1,
            "claims and audit log".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0001_claims.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            2,
            "executor kind on claims, via on audit entries".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0002_executor_and_via.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            3,
            "review items and approvals".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0003_review.sql").into_sql_str(),
            false,
        ),
    ]);
    m.dangerous_set_table_name("toolgate_migrations");
    m
}

impl SqliteClaimStore {
    /// Opens the database at `url` (`sqlite://PATH`), creating the file if
    /// [`StoreOptions::create_if_missing`] says so, and runs the migrations.
    ///
    /// WAL mode lets readers proceed while one writer commits; claims
    /// serialise on the write lock and wait up to the busy timeout for it.
    /// `synchronous = FULL`: a claim acknowledged and then lost to a power
    /// cut would let the operation execute twice.
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        let connect = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::new(StoreErrorKind::Config, format!("{url}: {e}")))?
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
        migrator().run(&pool).await.map_err(|e| {
            StoreError::new(StoreErrorKind::Migration, format!("SQLite migrations: {e}"))
        })?;
        // The writer opens the same file itself, so an in-memory database
        // (which each connection would see as its own) cannot work.
        if !connect.get_filename().is_file() {
            return Err(StoreError::new(
                StoreErrorKind::Config,
                format!("{url}: toolgate needs a SQLite database file, not an in-memory database"),
            ));
        }
        let writer = GroupCommit::start(connect.get_filename()).map_err(|e| {
            StoreError::new(
                StoreErrorKind::Unavailable,
                format!("opening the SQLite writer connection: {e}"),
            )
        })?;
        let readers = Arc::new(Readers::new(connect.get_filename()));
        Ok(Self {
            pool,
            writer,
            readers,
            #[cfg(feature = "fault-injection")]
            hook: None,
        })
    }
}
