//! SQLite's migrations: the embedded files (`migrations/sqlite/`), applied
//! on open through the sqlx pool, before the writer thread opens the file.

use sqlx::SqlitePool;
use sqlx::migrate::Migrator;
use toolgate::claim::{StoreError, StoreErrorKind};

fn migrator() -> Migrator {
    crate::common::migrator(crate::common::migrations!("sqlite"))
}

/// Applies the migrations that `pool`'s database lacks.
pub(super) async fn run(pool: &SqlitePool) -> Result<(), StoreError> {
    migrator().run(pool).await.map_err(|e| {
        StoreError::with_source(
            StoreErrorKind::Migration,
            format!("SQLite migrations: {e}"),
            e,
        )
    })
}
