//! PostgreSQL: its driver's place in the pooled store, and connecting.
//! The backend folders share one layout: `sql.rs` holds its statements,
//! `migrate.rs` applies its migrations, `error.rs` reads its driver's error
//! codes; the claims, review queue and `Idempotency-Key` memory are the
//! pooled store's (`pooled/`), shared with MySQL.

mod error;
mod migrate;
mod sql;

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use toolgate::claim::StoreError;

use crate::StoreOptions;
use crate::common::{bad_url, map_err};
use crate::dialect::Dialect;
use crate::pooled::nodes::{Node, Nodes};
use crate::pooled::{Pooled, PooledStore};
use crate::sql::Sql;
use crate::write::{StoreWrite, WriteFuture};

pub use error::is_lost_race;

/// The claims and audit tables, the review queue and the
/// `Idempotency-Key` memory on PostgreSQL.
///
/// Cloning gives another handle to the same connections.
pub type PgClaimStore = PooledStore<sqlx::Postgres>;

impl Dialect for sqlx::Postgres {
    const SQL: Sql = sql::SQL;

    fn is_lost_race(e: &sqlx::Error) -> bool {
        error::is_lost_race(e)
    }

    fn rows_affected(done: &Self::QueryResult) -> u64 {
        done.rows_affected()
    }
}

impl Pooled for sqlx::Postgres {
    fn app_write<'c>(
        write: &'c dyn StoreWrite,
        conn: &'c mut sqlx::PgConnection,
    ) -> WriteFuture<'c> {
        write.postgres(conn)
    }

    async fn insert_id(
        pool: &sqlx::PgPool,
        q: sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Option<i64>, StoreError> {
        use sqlx::Row;
        // The statement's RETURNING answers no row on a clash.
        let row = q
            .fetch_optional(pool)
            .await
            .map_err(|e| map_err("opening a review item", e))?;
        row.map(|r| r.try_get::<i64, _>(0))
            .transpose()
            .map_err(|e| map_err("opening a review item", e))
    }
}

impl PooledStore<sqlx::Postgres> {
    /// Connects to `url` (`postgres://…`) and runs the migrations. The
    /// tables go in the connection's current schema (`search_path`).
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        let connect = PgConnectOptions::from_str(url).map_err(|e| bad_url(url, e))?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            // Tested as it came back to the pool (the crate's docs).
            .test_before_acquire(false)
            .connect_with(connect)
            .await
            .map_err(|e| map_err("connecting to PostgreSQL", e))?;
        migrate::run(&pool).await?;
        Ok(Self::on(Nodes::new(vec![Node::one(pool)], 0)))
    }

    /// Checks `url` as [`Self::connect`] reads it, without connecting.
    pub fn check_url(url: &str) -> Result<(), StoreError> {
        PgConnectOptions::from_str(url)
            .map(drop)
            .map_err(|e| bad_url(url, e))
    }
}
