//! What the generic code needs of any sqlx driver ([`Dialect`]: its
//! statements and its lost-race test), and the reads outside a transaction
//! on an sqlx pool, generic over the driver ([`Reads`]).

use toolgate::claim::{
    AuditEntry, ClaimRecord, CorruptRow, OperationKey, StoreError, StuckEntry, UnixMillis,
};

use crate::common::map_err;
use crate::rows::{self, SqlxRow};
use crate::sql::Sql;

/// A driver's statements (every statement binds in the same order on every
/// backend) and how it reports a lost race: what the generic code needs of
/// any sqlx driver, SQLite's included.
pub(crate) trait Dialect: sqlx::Database {
    /// Every statement, from the backend's folder.
    const SQL: Sql;

    /// Whether `e` means a lost race: roll back and run the unit again.
    fn is_lost_race(e: &sqlx::Error) -> bool;

    /// Rows a statement changed (matched, on MySQL).
    fn rows_affected(done: &Self::QueryResult) -> u64;
}

/// The reads outside a transaction on an sqlx pool: the pooled stores'
/// claim lookups, listings and audit trail, and SQLite's listings and
/// audit trail.
pub(crate) struct Reads<'p, DB: sqlx::Database>(pub(crate) &'p sqlx::Pool<DB>);

impl<DB> Reads<'_, DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'a> &'a [u8]: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> &'a str: sqlx::ColumnIndex<DB::Row>,
    i64: for<'a> sqlx::Encode<'a, DB> + for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    Vec<u8>: for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    String: for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    /// One claim, on a pooled connection.
    pub(crate) async fn claim(
        &self,
        key: &OperationKey,
    ) -> Result<Option<ClaimRecord>, StoreError> {
        let mut conn = self
            .0
            .acquire()
            .await
            .map_err(|e| map_err("reading a claim", e))?;
        let row = sqlx::query(DB::SQL.claims.select)
            .bind(key.as_bytes().as_slice())
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| map_err("reading a claim", e))?;
        row.map(|row| rows::claim(&SqlxRow(&row)))
            .transpose()
            .map_err(|p| StoreError::corrupt(&p))
    }

    /// Held budget amounts per budget (`ClaimStore::budget_reserved`).
    pub(crate) async fn budget_reserved(&self) -> Result<Vec<(String, i64)>, StoreError> {
        use sqlx::Row as _;
        let what = "reading budget reservations";
        let mut conn = self.0.acquire().await.map_err(|e| map_err(what, e))?;
        let rows = sqlx::query(DB::SQL.budget.reserved)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| map_err(what, e))?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get::<String, _>("budget")?,
                    row.try_get::<i64, _>("reserved")?,
                ))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(|e| map_err(what, e))
    }

    /// In-flight claims whose lease ended at or before `now`.
    pub(crate) async fn list_stuck(
        &self,
        now: UnixMillis,
        limit: u32,
    ) -> Result<Vec<StuckEntry>, StoreError> {
        let mut conn = self
            .0
            .acquire()
            .await
            .map_err(|e| map_err("listing stuck claims", e))?;
        let found = sqlx::query(DB::SQL.claims.list_stuck)
            .bind(now.0)
            .bind(i64::from(limit))
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| map_err("listing stuck claims", e))?;
        Ok(found
            .iter()
            .map(|row| {
                let row = SqlxRow(row);
                rows::claim(&row).map_err(|problem| CorruptRow {
                    raw_key: rows::Columns::bytes(&row, "operation_key").unwrap_or_default(),
                    problem,
                })
            })
            .collect())
    }

    /// The audit entries for `key`, in the order they were appended.
    pub(crate) async fn audit_trail(
        &self,
        key: &OperationKey,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let mut conn = self
            .0
            .acquire()
            .await
            .map_err(|e| map_err("reading the audit log", e))?;
        let found = sqlx::query(DB::SQL.claims.audit_trail)
            .bind(key.as_bytes().as_slice())
            .bind(i64::from(limit))
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| map_err("reading the audit log", e))?;
        found
            .iter()
            .map(|row| rows::audit(&SqlxRow(row)).map_err(|p| StoreError::corrupt(&p)))
            .collect()
    }
}
