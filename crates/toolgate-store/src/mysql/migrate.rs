//! MySQL's and MariaDB's migrations: the embedded files
//! (`migrations/mysql/`), applied on connect under a lock of our own.
//!
//! sqlx serialises migrations with `GET_LOCK(name, -1)` and ignores the
//! result. MySQL reads `-1` as "wait forever"; MariaDB does not accept a
//! negative timeout and returns NULL at once. On MariaDB two processes
//! starting together on a fresh database (two `toolgate serve` replicas)
//! both apply the migrations, and one fails with `Duplicate entry '1'` in
//! the migrations table. `run_migrations` takes a lock of its own, with a
//! positive timeout, and checks that it was granted.

use sqlx::MySqlPool;
use sqlx::migrate::Migrator;
use toolgate::claim::{StoreError, StoreErrorKind};

fn migrator() -> Migrator {
    crate::common::migrator(crate::common::migrations!("mysql"))
}

/// Applies the store's migrations that `pool`'s database lacks.
pub(super) async fn run(pool: &MySqlPool) -> Result<(), StoreError> {
    run_migrations(pool, &migrator(), "MySQL migrations").await
}

/// How long a process waits for another one's migrations.
const MIGRATION_LOCK_WAIT_SECS: i64 = 120;

/// The lock's name: per database (lock names are server-wide), at most
/// the 64 characters MySQL accepts.
macro_rules! migration_lock {
    () => {
        "LEFT(CONCAT('toolgate_migrate_', COALESCE(DATABASE(), '')), 64)"
    };
}

/// Runs `migrator` on one connection that holds a named lock for the whole
/// run, so that processes sharing the database migrate one at a time:
/// sqlx's own lock, `GET_LOCK(name, -1)`, is no lock on MariaDB, which
/// answers a negative timeout with NULL at once (and sqlx ignores it). The connection runs the migrations itself:
/// a pool of one connection must not wait for a second. Public for an
/// application migrating its own tables in the store's database with its
/// own [`Migrator`] (and its own migrations table).
pub async fn run_migrations(
    pool: &MySqlPool,
    migrator: &Migrator,
    what: &str,
) -> Result<(), StoreError> {
    let failed = |e: &dyn std::fmt::Display| {
        StoreError::new(StoreErrorKind::Migration, format!("{what}: {e}"))
    };
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| migration_failed(what, e))?;
    let granted: Option<i64> = sqlx::query_scalar(concat!(
        "SELECT CAST(GET_LOCK(",
        migration_lock!(),
        ", ?) AS SIGNED)"
    ))
    .bind(MIGRATION_LOCK_WAIT_SECS)
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| migration_failed(what, e))?;
    if granted != Some(1) {
        return Err(failed(&format!(
            "the migration lock was not granted within {MIGRATION_LOCK_WAIT_SECS} s \
             (GET_LOCK returned {granted:?}): another process may be migrating"
        )));
    }
    let run = migrator.run(&mut *conn).await;
    // Released at once rather than when the pooled connection closes.
    let released = sqlx::query(concat!("SELECT RELEASE_LOCK(", migration_lock!(), ")"))
        .execute(&mut *conn)
        .await;
    run.map_err(|e| migration_failed(what, e))?;
    released.map(drop).map_err(|e| migration_failed(what, e))
}

/// `what` failed because of `e`, which the error keeps as its source.
fn migration_failed(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::with_source(StoreErrorKind::Migration, format!("{what}: {e}"), e)
}
