//! SQLite: the embedded default. One file in WAL mode, created on first
//! use; nothing to install or run.

mod floor;
mod group_commit;
mod idempotency;
mod review;
pub(crate) mod sql;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use toolgate::claim::{
    Attempt, AuditEntry, BudgetReservation, ClaimRecord, ClaimRequest, ClaimStore, CompleteRequest,
    Completion, CorruptRecord, GrantUse, HolderToken, JsonText, OperationKey, RawClaim,
    ReconcileRequest, Reconciled, Resolution, StoreError, StoreErrorKind, StuckEntry, UnixMillis,
};

use rusqlite::types::ToSqlOutput;

use crate::StoreOptions;
use crate::common::{ClaimTxPoint, map_err};
use crate::dialect::{Dialect, Reads};
use crate::protocol::{
    self, Answer, ClaimBackend, Clock, End, Held, Statements, TxFail, Unit, unit_what,
};
use crate::rows::{self, RusqliteRow};
use crate::sql::Sql;
use crate::write::StoreWrite;
use group_commit::{GroupCommit, is_busy};
use sql::SQL;

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

    /// `SQLITE_BUSY` or `SQLITE_LOCKED`, with any extended code.
    fn is_lost_race(e: &sqlx::Error) -> bool {
        e.as_database_error()
            .and_then(|db| db.code())
            .and_then(|code| code.parse::<i32>().ok())
            .is_some_and(|code| matches!(code & 0xff, 5 | 6))
    }

    fn rows_affected(done: &Self::QueryResult) -> u64 {
        done.rows_affected()
    }
}

/// SQLite's lost-race errors: `SQLITE_BUSY` and `SQLITE_LOCKED`, with any
/// extended code. A claim rolls back and runs again on these.
pub use group_commit::is_busy as is_lost_race;

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

/// A failed statement on a `rusqlite` connection: busy is contention,
/// anything else the database's. Public for an application whose own
/// statements run on [`SqliteClaimStore::writer`], so its errors read like
/// the store's.
pub fn rusqlite_error(what: &str, e: rusqlite::Error) -> StoreError {
    let kind = if is_busy(&e) {
        StoreErrorKind::Contention
    } else {
        StoreErrorKind::Database
    };
    StoreError::with_source(kind, format!("{what}: {e}"), e)
}

/// An attempt's columns, in the order the claim's insert and its
/// reopening both name them: fingerprint, tool, arguments, scope,
/// version_seen, proposer, holder, lease end, claim time, executor.
fn attempt_params<'a>(req: &'a ClaimRequest, attempt: &Attempt) -> [ToSqlOutput<'a>; 10] {
    let p = req.proposal();
    [
        req.fingerprint().as_bytes().as_slice().into(),
        p.tool().into(),
        p.arguments().into(),
        p.scope().into(),
        p.version_seen().into(),
        p.proposer().into(),
        req.holder().as_bytes().as_slice().into(),
        attempt.lease_expires_at.0.into(),
        attempt.now.0.into(),
        req.executor().as_str().into(),
    ]
}

/// The protocol's statements on the writer's connection, inside the
/// batch's transaction. rusqlite is synchronous: every future here is
/// ready at its first poll (see [`run_now`]).
struct WriterTx<'c>(&'c rusqlite::Connection);

impl Statements for WriterTx<'_> {
    type Error = rusqlite::Error;

    async fn insert_claim(
        &mut self,
        req: &ClaimRequest,
        attempt: &Attempt,
    ) -> Result<(), rusqlite::Error> {
        let key = ToSqlOutput::from(req.key().as_bytes().as_slice());
        self.0
            .prepare_cached(SQL.claims.insert)?
            .execute(rusqlite::params_from_iter(
                std::iter::once(key).chain(attempt_params(req, attempt)),
            ))
            .map(drop)
    }

    async fn reopen_claim(
        &mut self,
        req: &ClaimRequest,
        attempt: &Attempt,
        closed: u32,
    ) -> Result<u64, rusqlite::Error> {
        let tail: [ToSqlOutput<'_>; 3] = [
            (i64::from(closed) + 1).into(),
            req.key().as_bytes().as_slice().into(),
            i64::from(closed).into(),
        ];
        let n = self
            .0
            .prepare_cached(SQL.claims.reopen)?
            .execute(rusqlite::params_from_iter(
                attempt_params(req, attempt).into_iter().chain(tail),
            ))?;
        Ok(n as u64)
    }

    async fn budget_forget_released(&mut self, key: &OperationKey) -> Result<(), rusqlite::Error> {
        self.0
            .prepare_cached(SQL.budget.forget_released)?
            .execute([key.as_bytes().as_slice()])
            .map(drop)
    }

    async fn read_claim(
        &mut self,
        key: &OperationKey,
    ) -> Result<Option<Result<ClaimRecord, CorruptRecord>>, rusqlite::Error> {
        select_claim(self.0, key)
    }

    async fn consume_grant(
        &mut self,
        req: &ClaimRequest,
        grant: &GrantUse,
        now: UnixMillis,
    ) -> Result<u64, rusqlite::Error> {
        let n = self
            .0
            .prepare_cached(SQL.claims.consume_grant)?
            .execute(rusqlite::params![
                now.0,
                req.proposal().proposer(),
                grant.item,
                now.0,
                req.key().as_bytes().as_slice(),
                req.fingerprint().as_bytes().as_slice(),
                req.proposal().version_seen(),
                grant.policy_digest.as_str(),
                req.proposal().proposer(),
                req.via().unwrap_or(""),
                grant.item,
                req.proposal().proposer(),
                req.via().unwrap_or(""),
            ])?;
        Ok(n as u64)
    }

    async fn complete(
        &mut self,
        key: &OperationKey,
        holder: &HolderToken,
        result: &JsonText,
        now: UnixMillis,
    ) -> Result<u64, rusqlite::Error> {
        let n = self
            .0
            .prepare_cached(SQL.claims.complete)?
            .execute(rusqlite::params![
                now.0,
                result.as_str(),
                key.as_bytes().as_slice(),
                holder.as_bytes().as_slice(),
                now.0,
            ])?;
        Ok(n as u64)
    }

    async fn reconcile(
        &mut self,
        key: &OperationKey,
        resolution: Resolution,
        result: &JsonText,
        now: UnixMillis,
    ) -> Result<u64, rusqlite::Error> {
        let n = self
            .0
            .prepare_cached(SQL.claims.reconcile)?
            .execute(rusqlite::params![
                now.0,
                resolution.as_str(),
                result.as_str(),
                key.as_bytes().as_slice(),
                now.0,
            ])?;
        Ok(n as u64)
    }

    async fn budget_reserve(
        &mut self,
        key: &OperationKey,
        r: &BudgetReservation,
    ) -> Result<bool, rusqlite::Error> {
        self.0
            .prepare_cached(sql::BUDGET_ADD)?
            .execute(rusqlite::params![
                r.budget,
                r.scope,
                r.window_start.0,
                r.amount,
                r.amount
            ])?;
        let n = self
            .0
            .prepare_cached(crate::sql::shared::BUDGET_RECORD)?
            .execute(rusqlite::params![
                key.as_bytes().as_slice(),
                r.amount,
                r.budget,
                r.scope,
                r.window_start.0,
                r.limit
            ])?;
        Ok(n == 1)
    }

    async fn budget_used(&mut self, r: &BudgetReservation) -> Result<i64, rusqlite::Error> {
        self.0.prepare_cached(SQL.budget.used)?.query_row(
            rusqlite::params![r.budget, r.scope, r.window_start.0],
            |row| row.get(0),
        )
    }

    async fn budget_ledger_insert(
        &mut self,
        key: &OperationKey,
        r: &BudgetReservation,
        state: &str,
    ) -> Result<(), rusqlite::Error> {
        self.0
            .prepare_cached(SQL.budget.ledger_insert)?
            .execute(rusqlite::params![
                key.as_bytes().as_slice(),
                r.budget,
                r.scope,
                r.window_start.0,
                r.amount,
                state
            ])
            .map(drop)
    }

    async fn budget_held(&mut self, key: &OperationKey) -> Result<Vec<Held>, rusqlite::Error> {
        let mut stmt = self.0.prepare_cached(SQL.budget.held)?;
        let rows = stmt.query_map(rusqlite::params![key.as_bytes().as_slice()], |row| {
            Ok(Held {
                budget: row.get(0)?,
                scope: row.get(1)?,
                window_start: row.get(2)?,
                amount: row.get(3)?,
            })
        })?;
        rows.collect()
    }

    async fn budget_ledger_release(
        &mut self,
        key: &OperationKey,
        budget: &str,
    ) -> Result<u64, rusqlite::Error> {
        let n = self
            .0
            .prepare_cached(SQL.budget.release)?
            .execute(rusqlite::params![key.as_bytes().as_slice(), budget])?;
        Ok(n as u64)
    }

    async fn budget_subtract(&mut self, held: &Held) -> Result<(), rusqlite::Error> {
        self.0
            .prepare_cached(SQL.budget.subtract)?
            .execute(rusqlite::params![
                held.amount,
                held.budget,
                held.scope,
                held.window_start
            ])
            .map(drop)
    }

    async fn append_audit(&mut self, entry: &AuditEntry) -> Result<(), rusqlite::Error> {
        self.0
            .prepare_cached(SQL.claims.append_audit)?
            .execute(rusqlite::params![
                entry.at().0,
                entry.actor(),
                entry.tool(),
                entry.outcome(),
                entry.reason(),
                entry.key().map(|k| k.as_bytes().as_slice()),
                entry.fingerprint().map(|f| f.as_bytes().as_slice()),
                entry.via(),
                entry.attempt(),
            ])
            .map(drop)
    }

    async fn app_write(&mut self, write: &dyn StoreWrite) -> Result<bool, rusqlite::Error> {
        write.sqlite(self.0)
    }

    // SQLite's claims share one writer connection: nothing to kill per
    // claim, so only `AfterCommit` is offered (`fault_after_commit`).
    async fn fault(&mut self, _point: ClaimTxPoint) {}
}

/// The claim row on `key`, on any `rusqlite` connection.
fn select_claim(
    conn: &rusqlite::Connection,
    key: &OperationKey,
) -> Result<Option<Result<ClaimRecord, CorruptRecord>>, rusqlite::Error> {
    let mut select = conn.prepare_cached(SQL.claims.select)?;
    let mut found = select.query([key.as_bytes().as_slice()])?;
    Ok(found.next()?.map(|row| rows::claim(&RusqliteRow(row))))
}

/// Runs a future that never waits: the protocol's body over [`WriterTx`],
/// whose statements are synchronous. A unit that did wait would be a bug;
/// it panics, and the writer fails that unit as it does any panicking one.
fn run_now<F: Future>(work: F) -> F::Output {
    let mut work = std::pin::pin!(work);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match work.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("a SQLite unit waited for something"),
    }
}

impl ClaimBackend for SqliteClaimStore {
    /// The unit runs on the writer's thread as one unit of a group commit,
    /// inside a savepoint of its own, so that a unit ending in a rollback
    /// (a grant no longer usable) undoes only itself. Its answer comes
    /// after the batch's `COMMIT`.
    async fn transaction(&self, unit: Unit) -> Result<Answer, TxFail> {
        let what = unit_what(&unit);
        let written = self
            .writer
            .write(move |conn| {
                conn.execute_batch("SAVEPOINT toolgate_unit")?;
                let (answer, end) = run_now(protocol::run_unit(&mut WriterTx(conn), &unit))?;
                match end {
                    End::Commit => conn.execute_batch("RELEASE toolgate_unit")?,
                    End::Rollback => {
                        conn.execute_batch("ROLLBACK TO toolgate_unit; RELEASE toolgate_unit")?
                    }
                }
                Ok(answer)
            })
            .await;
        written.map_err(|e| match e {
            WriteError::Unit(e) if is_busy(&e) => TxFail::LostRace,
            WriteError::Unit(e) => TxFail::Failed(rusqlite_error(what, e)),
            // The batch rolled back (another process held the lock, or
            // another unit broke it): nothing was written, so run it
            // again; a lasting cause ends as a contention error.
            WriteError::NotApplied { .. } => TxFail::LostRace,
            e @ WriteError::Unknown(_) => TxFail::Unknown(StoreError::with_source(
                StoreErrorKind::Unavailable,
                format!("{what}: {e}"),
                e,
            )),
            e @ WriteError::Stopped => TxFail::Failed(StoreError::with_source(
                StoreErrorKind::Unavailable,
                format!("{what}: {e}"),
                e,
            )),
        })
    }

    async fn read_claim(&self, key: &OperationKey) -> Result<Option<ClaimRecord>, StoreError> {
        let row = self
            .readers
            .read(|conn| select_claim(conn, key))
            .map_err(|e| rusqlite_error("reading a claim", e))?;
        row.transpose().map_err(|p| StoreError::corrupt(&p))
    }

    fn clock(&self) -> Clock {
        self.clock
    }

    #[cfg(feature = "fault-injection")]
    async fn fault_after_commit(&self) -> bool {
        match &self.hook {
            Some(hook) => hook(ClaimTxPoint::AfterCommit.into(), -1).await,
            None => false,
        }
    }
}

impl ClaimStore for SqliteClaimStore {
    async fn claim(&self, request: ClaimRequest) -> Result<RawClaim, StoreError> {
        protocol::claim(self, request).await
    }

    async fn complete(&self, request: CompleteRequest) -> Result<Completion, StoreError> {
        protocol::complete(self, request).await
    }

    async fn fetch(&self, key: &OperationKey) -> Result<Option<ClaimRecord>, StoreError> {
        ClaimBackend::read_claim(self, key).await
    }

    async fn list_stuck(&self, now: UnixMillis, limit: u32) -> Result<Vec<StuckEntry>, StoreError> {
        Reads(&self.pool).list_stuck(now, limit).await
    }

    async fn budget_reserved(&self) -> Result<Vec<(String, i64)>, StoreError> {
        Reads(&self.pool).budget_reserved().await
    }

    async fn record_reconciliation(
        &self,
        request: ReconcileRequest<'_>,
    ) -> Result<Reconciled, StoreError> {
        protocol::reconcile(self, request.key, request.outcome, request.now).await
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        protocol::append_audit(self, entry).await
    }

    async fn audit_trail(
        &self,
        key: &OperationKey,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        Reads(&self.pool).audit_trail(key, limit).await
    }

    /// The claim lookup a stale version or a missing approval makes (a key that cannot
    /// exist), the writer thread every write goes through, and the pool
    /// the listings and the audit trail use.
    async fn ready(&self) -> Result<(), StoreError> {
        ClaimBackend::read_claim(self, &OperationKey::from_bytes([0; OperationKey::LEN])).await?;
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

fn migrator() -> Migrator {
    crate::common::migrator(crate::common::migrations!("sqlite"))
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
        migrator().run(&pool).await.map_err(|e| {
            StoreError::with_source(
                StoreErrorKind::Migration,
                format!("SQLite migrations: {e}"),
                e,
            )
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
