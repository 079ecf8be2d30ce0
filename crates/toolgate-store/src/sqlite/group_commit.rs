//! Group commit for SQLite: one writer connection, many callers.
//!
//! SQLite has one writer at a time and, with `synchronous = FULL`, an fsync
//! per `COMMIT`. Committing every claim, application write, completion and
//! audit entry on its own caps a server at the disk's fsync rate, and makes
//! every caller queue on the file's write lock. Instead, every write goes to one
//! task that owns a connection. It takes whatever units are waiting (up to
//! [`MAX_BATCH`]), runs them one after another in one `BEGIN IMMEDIATE`
//! transaction, `COMMIT`s once, and only then answers.
//!
//! An application whose tables share the file (an executor's conditional
//! write, an example's seed) sends its own statements through the same
//! writer with [`GroupCommit::write`], reached from
//! [`SqliteClaimStore::writer`](crate::sqlite::SqliteClaimStore::writer):
//! its unit joins the store's batches and gets exactly the guarantees below.
//!
//! What a caller can rely on:
//! - **Nothing is acknowledged before it is durable.** A unit's result is
//!   sent after the `COMMIT` of its batch returned.
//! - **Units run in arrival order on one connection**, so a later unit in
//!   the same batch sees an earlier one's writes (two claims on one key in
//!   one batch: the second reads the first's row, exactly as if the first
//!   had committed before it).
//! - **All or nothing per batch.** A unit whose statement fails rolls the
//!   whole batch back: it gets its own error, every other unit
//!   [`WriteError::NotApplied`] (nothing written; safe to run again). The
//!   units toolgate sends fail only when the database does (disk full,
//!   I/O error), and SQLite may then have rolled the transaction back by
//!   itself, after which later statements would commit one by one. (The
//!   claim store's own units run inside a savepoint each, so that a unit
//!   can end in a rollback of its own writes without failing; see
//!   `claims.rs`.)
//! - **A failed `COMMIT` fails the whole batch** with
//!   [`WriteError::Unknown`]: the caller must read back before deciding, as
//!   after any failed commit. If the transaction could not begin, every
//!   unit gets [`WriteError::NotApplied`].
//!
//! Other processes on the same file (an operator's `toolgate claims
//! reconcile`) still take the lock in the ordinary way; `BEGIN IMMEDIATE`
//! waits for them up to the busy timeout.
//!
//! The writer is a plain thread with its own `rusqlite` connection, not a
//! task on an sqlx connection: sqlx runs each SQLite statement on the
//! connection's worker thread and answers over a channel, two thread
//! wake-ups per statement. Every write of every decision passes through
//! this one writer, so those hand-offs were its main cost; here a unit's
//! statements run where the batch runs, and only the unit's arrival and its
//! answer cross threads. Reads do not go through the writer. A unit that panics
//! is caught and fails like a unit whose statement failed, so the writer
//! outlives it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The driver the units run on, for naming `Connection` and its errors.
pub use rusqlite;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::{mpsc, oneshot};

use super::error::is_busy;

/// Most units in one transaction: bounds how long the first caller in a
/// batch waits behind the others.
pub const MAX_BATCH: usize = 256;

/// Units that may wait for the writer; past this, callers wait for room
/// (backpressure instead of unbounded memory).
const QUEUE: usize = 4096;

/// How long `BEGIN IMMEDIATE` waits for another process's write lock.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a unit's write did not take effect, or may not have.
#[derive(Debug)]
pub enum WriteError {
    /// The unit's own statement failed and the batch rolled back: nothing
    /// it wrote remains.
    Unit(rusqlite::Error),
    /// The batch was rolled back before its `COMMIT` (the transaction could
    /// not begin, or broke): nothing any unit wrote remains. `lost_race`:
    /// another process held the write lock past the busy timeout.
    NotApplied {
        /// Another process held the write lock past the busy timeout.
        lost_race: bool,
        /// What SQLite said.
        message: String,
    },
    /// The batch's `COMMIT` failed: the unit's writes may or may not be
    /// durable. Read back before deciding.
    Unknown(String),
    /// The writer has stopped (its connection could not be reopened).
    Stopped,
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unit(e) => write!(f, "{e}"),
            Self::NotApplied { message, .. } => {
                write!(f, "the write batch was rolled back: {message}")
            }
            Self::Unknown(m) => write!(f, "COMMIT failed, outcome unknown: {m}"),
            Self::Stopped => f.write_str("the SQLite writer has stopped"),
        }
    }
}

impl std::error::Error for WriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Unit(e) => Some(e),
            // SQLite's own words are in the message; the error they came
            // from was answered to the batch's other units too.
            Self::NotApplied { .. } | Self::Unknown(_) | Self::Stopped => None,
        }
    }
}

/// Why the writer could not start.
#[derive(Debug)]
pub enum StartError {
    /// Its connection to the file could not be opened or set up.
    Open(rusqlite::Error),
    /// Its thread could not be started.
    Thread(std::io::Error),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Open(e) => write!(f, "{e}"),
            Self::Thread(e) => write!(f, "starting the writer thread: {e}"),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Open(e) => Some(e),
            Self::Thread(e) => Some(e),
        }
    }
}

/// How a batch ended, as each unit hears it.
#[derive(Clone)]
enum BatchEnd {
    Committed,
    NotApplied(String),
    Unknown(String),
}

/// One caller's unit of work, type-erased for the queue.
trait Job: Send {
    /// Runs the unit; returns how to answer once the batch has ended, and
    /// whether it failed (which rolls the batch back).
    fn run(self: Box<Self>, conn: &Connection) -> Ran;
    /// Answers without running (the batch could not begin, or broke).
    fn abort(self: Box<Self>, lost_race: bool, why: String);
}

/// What running a unit left behind.
struct Ran {
    answer: Box<dyn FnOnce(BatchEnd) + Send>,
    /// The unit failed: the batch must roll back.
    failed: Option<String>,
}

struct Unit<T, F> {
    work: F,
    reply: oneshot::Sender<Result<T, WriteError>>,
}

impl<T, F> Job for Unit<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T, rusqlite::Error> + Send + 'static,
{
    fn run(self: Box<Self>, conn: &Connection) -> Ran {
        let Unit { work, reply } = *self;
        // A panicking unit must not take the writer (and every later write)
        // down with it: it fails, and its batch rolls back.
        let outcome = catch_unwind(AssertUnwindSafe(|| work(conn)))
            .unwrap_or(Err(rusqlite::Error::UnwindingPanic));
        let failed = outcome.as_ref().err().map(ToString::to_string);
        Ran {
            answer: Box::new(move |end| {
                let answer = match (outcome, end) {
                    (Err(e), _) => Err(WriteError::Unit(e)),
                    (Ok(v), BatchEnd::Committed) => Ok(v),
                    (Ok(_), BatchEnd::NotApplied(message)) => Err(WriteError::NotApplied {
                        lost_race: false,
                        message,
                    }),
                    (Ok(_), BatchEnd::Unknown(m)) => Err(WriteError::Unknown(m)),
                };
                let _ = reply.send(answer);
            }),
            failed,
        }
    }

    fn abort(self: Box<Self>, lost_race: bool, message: String) {
        let _ = self
            .reply
            .send(Err(WriteError::NotApplied { lost_race, message }));
    }
}

/// The handle callers write through. Cheap to clone; the writer thread
/// ends when the last handle is dropped.
#[derive(Clone)]
pub struct GroupCommit {
    jobs: mpsc::Sender<Box<dyn Job>>,
}

impl GroupCommit {
    /// Opens the writer's own connection to the database file at `path`
    /// (which must exist, with its schema) and starts the writer thread.
    pub fn start(path: &Path) -> Result<Self, StartError> {
        let path = path.to_path_buf();
        let conn = open(&path).map_err(StartError::Open)?;
        let (jobs, queue) = mpsc::channel(QUEUE);
        std::thread::Builder::new()
            .name("sqlite-writer".to_owned())
            .spawn(move || writer(conn, &path, queue))
            .map_err(StartError::Thread)?;
        Ok(Self { jobs })
    }

    /// Whether the writer thread is still running. It stops only when its
    /// connection could not be reopened after a failure; from then on
    /// every write fails with [`WriteError::Stopped`].
    pub fn is_running(&self) -> bool {
        !self.jobs.is_closed()
    }

    /// Runs `work` in the next batch and returns its value once the batch
    /// has committed. `work` must not start or end transactions itself,
    /// and runs on the writer thread: it should only run statements. If it
    /// fails, the whole batch rolls back (the other units get
    /// [`WriteError::NotApplied`]).
    pub async fn write<T, F>(&self, work: F) -> Result<T, WriteError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Box::new(Unit { work, reply }))
            .await
            .map_err(|_| WriteError::Stopped)?;
        answer.await.unwrap_or(Err(WriteError::Stopped))
    }
}

/// The writer's connection: the same settings as the pool's (WAL,
/// `synchronous = FULL`, foreign keys, the busy timeout).
fn open(path: &PathBuf) -> Result<Connection, rusqlite::Error> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;",
    )?;
    Ok(conn)
}

fn writer(mut conn: Connection, path: &PathBuf, mut queue: mpsc::Receiver<Box<dyn Job>>) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_BATCH);
    let mut answers = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = queue.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
            let (lost_race, why) = (is_busy(&e), e.to_string());
            for job in batch.drain(..) {
                job.abort(lost_race, why.clone());
            }
            conn = match reopen(conn, path) {
                Some(c) => c,
                None => return,
            };
            continue;
        }
        let mut broken = None;
        for job in batch.drain(..) {
            if let Some(why) = &broken {
                job.abort(false, format!("another unit in the batch failed: {why}"));
                continue;
            }
            let ran = job.run(&conn);
            broken = ran.failed;
            answers.push(ran.answer);
        }
        let end = match broken {
            Some(why) => {
                let _ = conn.execute_batch("ROLLBACK");
                BatchEnd::NotApplied(why)
            }
            None => match conn.execute_batch("COMMIT") {
                Ok(()) => BatchEnd::Committed,
                Err(e) => {
                    // SQLite may have kept the transaction open (or not);
                    // either way this connection starts the next batch clean.
                    let _ = conn.execute_batch("ROLLBACK");
                    BatchEnd::Unknown(e.to_string())
                }
            },
        };
        let failed = !matches!(end, BatchEnd::Committed);
        for answer in answers.drain(..) {
            answer(end.clone());
        }
        if failed {
            conn = match reopen(conn, path) {
                Some(c) => c,
                None => return,
            };
        }
    }
}

/// After a failure, keeps the connection if it still answers outside a
/// transaction, or opens a new one; `None` stops the writer (callers then
/// get `Stopped`).
fn reopen(conn: Connection, path: &PathBuf) -> Option<Connection> {
    if conn.is_autocommit() && conn.execute_batch("SELECT 1").is_ok() {
        return Some(conn);
    }
    drop(conn);
    open(path).ok()
}
