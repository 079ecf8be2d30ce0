//! SQLite: the embedded default. One file in WAL mode, created on first
//! use; nothing to install or run.

use std::str::FromStr;
use std::time::Duration;

use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use toolgate::claim::{StoreError, StoreErrorKind};

use crate::StoreOptions;
use crate::common::{Step, Write, WriteFail, map_err, sql_claim_store};
use crate::group_commit::{GroupCommit, WriteError};

/// The claims and audit tables on SQLite. Reads use the pool; every write
/// goes through one writer connection with group commit (see
/// [`crate::group_commit`]).
pub struct SqliteClaimStore {
    pool: SqlitePool,
    writer: GroupCommit,
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
         status, holder, lease_expires_at, claimed_at) \
        VALUES (?, ?, ?, ?, ?, ?, ?, 'in_flight', ?, ?, ?) \
        ON CONFLICT (operation_key) DO NOTHING";
}

/// SQLite's lost-race errors: `SQLITE_BUSY` and `SQLITE_LOCKED`, with any
/// extended code (the primary code is the low byte). The claim rolls back
/// and runs again on these.
pub fn is_lost_race(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|db| db.code())
        .and_then(|code| code.parse::<i64>().ok())
        .is_some_and(|code| matches!(code & 0xff, 5 | 6))
}

sql_claim_store!(SqliteClaimStore, sqlx::Sqlite, sql, is_lost_race, batched);

impl SqliteClaimStore {
    /// The group-commit writer, for the downstream tables' writes on the
    /// same file (the support desk's credits): they then share its batches
    /// instead of fighting it for the write lock.
    pub fn writer(&self) -> &GroupCommit {
        &self.writer
    }

    /// One pass of the claim: the conditional insert and the read-back as
    /// one unit of a group commit. The verdict is taken only after the
    /// batch committed; the unit writes nothing when the row is someone
    /// else's, so there is nothing to undo, and if either statement fails
    /// the whole batch rolls back.
    async fn claim_once(&self, req: &toolgate::claim::ClaimRequest) -> Step {
        use toolgate::claim::{RawClaim, ReadBack, StoreError, StoreErrorKind};

        let insert = claim_insert(req);
        let read_back = sqlx::query(sql::SELECT_CLAIM).bind(req.key().as_bytes().as_slice());
        let written = self
            .writer
            .write(move |conn| {
                Box::pin(async move {
                    // INVARIANT: no read before this insert (crate docs).
                    insert.execute(&mut *conn).await?;
                    let row = read_back.fetch_optional(&mut *conn).await?;
                    Ok(row.map(|row| record(&row)))
                })
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
            Err(WriteError::Unit(e)) if is_lost_race(&e) => Step::Retry,
            Err(WriteError::Unit(e)) => Step::Fail(map_err("claiming", e)),
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
        use toolgate::claim::{StoreError, StoreErrorKind};

        let query = write_query(w);
        let written = self
            .writer
            .write(move |conn| {
                Box::pin(async move { Ok(query.execute(&mut *conn).await?.rows_affected()) })
            })
            .await;
        let what = w.what();
        written.map_err(|e| match e {
            WriteError::Unit(e) if is_lost_race(&e) => WriteFail::LostRace,
            WriteError::Unit(e) => WriteFail::Failed(map_err(what, e)),
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

fn migrator() -> Migrator {
    let mut m = Migrator::with_migrations(vec![Migration::new(
        1,
        "claims and audit log".into(),
        MigrationType::Simple,
        include_str!("../migrations/sqlite/0001_claims.sql").into_sql_str(),
        false,
    )]);
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
        let writer = GroupCommit::start(connect)
            .await
            .map_err(|e| map_err("opening the SQLite writer connection", e))?;
        Ok(Self {
            pool,
            writer,
            #[cfg(feature = "fault-injection")]
            hook: None,
        })
    }
}
