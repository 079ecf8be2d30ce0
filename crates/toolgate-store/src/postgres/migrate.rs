//! PostgreSQL's migrations: the embedded files (`migrations/postgres/`),
//! applied on connect. sqlx serialises concurrent runs with an advisory
//! lock, which PostgreSQL honours as it should.

use sqlx::PgPool;
use sqlx::migrate::Migrator;
use toolgate::claim::{StoreError, StoreErrorKind};

fn migrator() -> Migrator {
    crate::common::migrator(crate::common::migrations!("postgres"))
}

/// Applies the migrations that `pool`'s database lacks.
pub(super) async fn run(pool: &PgPool) -> Result<(), StoreError> {
    migrator().run(pool).await.map_err(|e| {
        StoreError::with_source(
            StoreErrorKind::Migration,
            format!("PostgreSQL migrations: {e}"),
            e,
        )
    })
}
