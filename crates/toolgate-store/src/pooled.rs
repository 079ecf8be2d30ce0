//! The protocol's statements on an sqlx pool, generic over the driver:
//! PostgreSQL and MySQL/MariaDB run every unit here, each on a transaction
//! of its own; SQLite uses the reads (listings, the audit trail).

use toolgate::claim::{
    Attempt, AuditEntry, BudgetReservation, ClaimRecord, ClaimRequest, CorruptRecord, CorruptRow,
    GrantUse, HolderToken, JsonText, OperationKey, Resolution, StoreError, StuckEntry, UnixMillis,
};

use crate::common::{ClaimTxPoint, map_err};
use crate::protocol::{Answer, End, Held, Statements, TxFail, Unit, run_unit};
use crate::rows::{self, SqlxRow};
use crate::write::{StoreWrite, WriteFuture};

/// A driver's SQL (every statement binds in the same order on every
/// backend) and its lost-race test.
pub(crate) trait Dialect: sqlx::Database {
    /// The conditional insert (a no-op on a duplicate key).
    const INSERT_CLAIM: &'static str;
    /// One claim row by key.
    const SELECT_CLAIM: &'static str;
    /// The next attempt over a row reconciled as not applied.
    const REOPEN_CLAIM: &'static str;
    /// The ownership- and lease-checked completion.
    const COMPLETE: &'static str;
    /// Closing a stuck claim.
    const RECONCILE: &'static str;
    /// Using an approval up.
    const CONSUME_GRANT: &'static str;
    /// Budget counters and the reservations ledger.
    const BUDGET: crate::budget::BudgetSql;
    /// Stuck claims, oldest lease first.
    const LIST_STUCK: &'static str;
    /// One audit entry.
    const APPEND_AUDIT: &'static str;
    /// A key's audit entries, in order.
    const AUDIT_TRAIL: &'static str;
    /// The server's id for the connection as column `id`, for the fault
    /// hooks.
    #[cfg_attr(
        not(feature = "fault-injection"),
        expect(dead_code, reason = "fault hooks only")
    )]
    const CONNECTION_ID: &'static str;

    /// Whether `e` means a lost race: roll back and run the unit again.
    fn is_lost_race(e: &sqlx::Error) -> bool;

    /// Rows a statement changed (matched, on MySQL).
    fn rows_affected(done: &Self::QueryResult) -> u64;
    /// Whether `DELETE … RETURNING` reads the deleted row (PostgreSQL);
    /// MySQL reads it first under a row lock.
    const HAS_RETURNING: bool;
}

/// One unit's transaction on a pooled connection.
pub(crate) struct PooledTx<'h, DB: sqlx::Database> {
    tx: sqlx::Transaction<'h, DB>,
    #[cfg_attr(
        not(feature = "fault-injection"),
        expect(dead_code, reason = "fault hooks only")
    )]
    hook: Option<&'h crate::common::Hook>,
}

/// A driver an application's write ([`StoreWrite`]) runs on: PostgreSQL
/// and MySQL (SQLite runs every unit on its writer, `sqlite.rs`).
pub(crate) trait WriteDialect: Dialect {
    /// Runs `write`'s method for this driver on `conn`.
    fn app_write<'c>(write: &'c dyn StoreWrite, conn: &'c mut Self::Connection) -> WriteFuture<'c>;
}

impl<DB> Statements for PooledTx<'_, DB>
where
    DB: WriteDialect,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'a> &'a [u8]: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB> + sqlx::ColumnIndex<DB::Row>,
    for<'a> Option<&'a [u8]>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Option<i64>: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: for<'a> sqlx::Encode<'a, DB> + for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    Vec<u8>: for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    String: for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    type Error = sqlx::Error;

    async fn insert_claim(
        &mut self,
        req: &ClaimRequest,
        attempt: &Attempt,
    ) -> Result<(), sqlx::Error> {
        let p = req.proposal();
        sqlx::query(DB::INSERT_CLAIM)
            .bind(req.key().as_bytes().as_slice())
            .bind(req.fingerprint().as_bytes().as_slice())
            .bind(p.tool())
            .bind(p.arguments())
            .bind(p.scope())
            .bind(p.version_seen())
            .bind(p.proposer())
            .bind(req.holder().as_bytes().as_slice())
            .bind(attempt.lease_expires_at.0)
            .bind(attempt.now.0)
            .bind(req.executor().as_str())
            .execute(&mut *self.tx)
            .await
            .map(drop)
    }

    async fn reopen_claim(
        &mut self,
        req: &ClaimRequest,
        attempt: &Attempt,
        closed: u32,
    ) -> Result<u64, sqlx::Error> {
        let p = req.proposal();
        let done = sqlx::query(DB::REOPEN_CLAIM)
            .bind(req.fingerprint().as_bytes().as_slice())
            .bind(p.tool())
            .bind(p.arguments())
            .bind(p.scope())
            .bind(p.version_seen())
            .bind(p.proposer())
            .bind(req.holder().as_bytes().as_slice())
            .bind(attempt.lease_expires_at.0)
            .bind(attempt.now.0)
            .bind(req.executor().as_str())
            .bind(i64::from(closed) + 1)
            .bind(req.key().as_bytes().as_slice())
            .bind(i64::from(closed))
            .execute(&mut *self.tx)
            .await?;
        Ok(DB::rows_affected(&done))
    }

    async fn budget_forget_released(&mut self, key: &OperationKey) -> Result<(), sqlx::Error> {
        sqlx::query(DB::BUDGET.forget_released)
            .bind(key.as_bytes().as_slice())
            .execute(&mut *self.tx)
            .await
            .map(drop)
    }

    async fn read_claim(
        &mut self,
        key: &OperationKey,
    ) -> Result<Option<Result<ClaimRecord, CorruptRecord>>, sqlx::Error> {
        let row = sqlx::query(DB::SELECT_CLAIM)
            .bind(key.as_bytes().as_slice())
            .fetch_optional(&mut *self.tx)
            .await?;
        Ok(row.map(|row| rows::claim(&SqlxRow(&row))))
    }

    async fn consume_grant(
        &mut self,
        req: &ClaimRequest,
        grant: &GrantUse,
        now: UnixMillis,
    ) -> Result<u64, sqlx::Error> {
        let proposer = req.proposal().proposer();
        let via = req.via().unwrap_or("");
        let done = sqlx::query(DB::CONSUME_GRANT)
            .bind(now.0)
            .bind(proposer)
            .bind(grant.item)
            .bind(now.0)
            .bind(req.key().as_bytes().as_slice())
            .bind(req.fingerprint().as_bytes().as_slice())
            .bind(req.proposal().version_seen())
            .bind(grant.policy_digest.as_str())
            .bind(proposer)
            .bind(via)
            .bind(grant.item)
            .bind(proposer)
            .bind(via)
            .execute(&mut *self.tx)
            .await?;
        Ok(DB::rows_affected(&done))
    }

    async fn budget_reserve(
        &mut self,
        key: &OperationKey,
        r: &BudgetReservation,
    ) -> Result<bool, sqlx::Error> {
        use crate::budget::Reserve;
        let recorded = match DB::BUDGET.reserve {
            #[cfg(feature = "postgres")]
            Reserve::Once(sql) => {
                sqlx::query(sql)
                    .bind(key.as_bytes().as_slice())
                    .bind(r.budget.as_str())
                    .bind(r.scope.as_str())
                    .bind(r.window_start.0)
                    .bind(r.amount)
                    .bind(r.limit)
                    .execute(&mut *self.tx)
                    .await?
            }
            #[cfg(any(feature = "sqlite", feature = "mysql"))]
            Reserve::AddThenRecord { add, record } => {
                sqlx::query(add)
                    .bind(r.budget.as_str())
                    .bind(r.scope.as_str())
                    .bind(r.window_start.0)
                    .bind(r.amount)
                    .bind(r.amount)
                    .execute(&mut *self.tx)
                    .await?;
                sqlx::query(record)
                    .bind(key.as_bytes().as_slice())
                    .bind(r.amount)
                    .bind(r.budget.as_str())
                    .bind(r.scope.as_str())
                    .bind(r.window_start.0)
                    .bind(r.limit)
                    .execute(&mut *self.tx)
                    .await?
            }
        };
        Ok(DB::rows_affected(&recorded) == 1)
    }

    async fn budget_used(&mut self, r: &BudgetReservation) -> Result<i64, sqlx::Error> {
        use sqlx::Row as _;
        let row = sqlx::query(DB::BUDGET.used)
            .bind(r.budget.as_str())
            .bind(r.scope.as_str())
            .bind(r.window_start.0)
            .fetch_one(&mut *self.tx)
            .await?;
        row.try_get::<i64, _>("used")
    }

    async fn budget_ledger_insert(
        &mut self,
        key: &OperationKey,
        r: &BudgetReservation,
        state: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(DB::BUDGET.ledger_insert)
            .bind(key.as_bytes().as_slice())
            .bind(r.budget.as_str())
            .bind(r.scope.as_str())
            .bind(r.window_start.0)
            .bind(r.amount)
            .bind(state)
            .execute(&mut *self.tx)
            .await
            .map(drop)
    }

    async fn budget_held(&mut self, key: &OperationKey) -> Result<Vec<Held>, sqlx::Error> {
        use sqlx::Row as _;
        let rows = sqlx::query(DB::BUDGET.held)
            .bind(key.as_bytes().as_slice())
            .fetch_all(&mut *self.tx)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(Held {
                    budget: row.try_get::<String, _>("budget")?,
                    scope: row.try_get::<String, _>("scope")?,
                    window_start: row.try_get::<i64, _>("window_start")?,
                    amount: row.try_get::<i64, _>("amount")?,
                })
            })
            .collect()
    }

    async fn budget_ledger_release(
        &mut self,
        key: &OperationKey,
        budget: &str,
    ) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(DB::BUDGET.release)
            .bind(key.as_bytes().as_slice())
            .bind(budget)
            .execute(&mut *self.tx)
            .await?;
        Ok(DB::rows_affected(&done))
    }

    async fn budget_subtract(&mut self, held: &Held) -> Result<(), sqlx::Error> {
        sqlx::query(DB::BUDGET.subtract)
            .bind(held.amount)
            .bind(held.budget.as_str())
            .bind(held.scope.as_str())
            .bind(held.window_start)
            .execute(&mut *self.tx)
            .await
            .map(drop)
    }

    async fn complete(
        &mut self,
        key: &OperationKey,
        holder: &HolderToken,
        result: &JsonText,
        now: UnixMillis,
    ) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(DB::COMPLETE)
            .bind(now.0)
            .bind(result.as_str())
            .bind(key.as_bytes().as_slice())
            .bind(holder.as_bytes().as_slice())
            .bind(now.0)
            .execute(&mut *self.tx)
            .await?;
        Ok(DB::rows_affected(&done))
    }

    async fn reconcile(
        &mut self,
        key: &OperationKey,
        resolution: Resolution,
        result: &JsonText,
        now: UnixMillis,
    ) -> Result<u64, sqlx::Error> {
        let done = sqlx::query(DB::RECONCILE)
            .bind(now.0)
            .bind(resolution.as_str())
            .bind(result.as_str())
            .bind(key.as_bytes().as_slice())
            .bind(now.0)
            .execute(&mut *self.tx)
            .await?;
        Ok(DB::rows_affected(&done))
    }

    async fn append_audit(&mut self, entry: &AuditEntry) -> Result<(), sqlx::Error> {
        sqlx::query(DB::APPEND_AUDIT)
            .bind(entry.at().0)
            .bind(entry.actor())
            .bind(entry.tool())
            .bind(entry.outcome())
            .bind(entry.reason())
            .bind(entry.key().map(|k| k.as_bytes().as_slice()))
            .bind(entry.fingerprint().map(|f| f.as_bytes().as_slice()))
            .bind(entry.via())
            .bind(entry.attempt().map(i64::from))
            .execute(&mut *self.tx)
            .await
            .map(drop)
    }

    async fn app_write(&mut self, write: &dyn StoreWrite) -> Result<bool, sqlx::Error> {
        DB::app_write(write, &mut *self.tx).await
    }

    async fn fault(&mut self, point: ClaimTxPoint) {
        #[cfg(feature = "fault-injection")]
        if let Some(hook) = self.hook {
            let row = sqlx::query(DB::CONNECTION_ID)
                .fetch_one(&mut *self.tx)
                .await;
            let id = row
                .ok()
                .and_then(|row| rows::Columns::int(&SqlxRow(&row), "id").ok())
                .unwrap_or(-1);
            hook(point.into(), id).await;
        }
        #[cfg(not(feature = "fault-injection"))]
        let _ = point;
    }
}

/// Runs `unit` in a transaction of its own on a connection from `pool`,
/// which goes back to the pool when the transaction has ended.
pub(crate) async fn transaction<DB>(
    pool: &sqlx::Pool<DB>,
    hook: Option<&crate::common::Hook>,
    unit: &Unit,
) -> Result<Answer, TxFail>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'t> PooledTx<'t, DB>: Statements<Error = sqlx::Error>,
{
    let failed = |what: &str, e: sqlx::Error| {
        if DB::is_lost_race(&e) {
            TxFail::LostRace
        } else {
            TxFail::Failed(map_err(what, e))
        }
    };
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| failed("beginning a transaction", e))?;
    let tx = sqlx::Connection::begin(&mut *conn)
        .await
        .map_err(|e| failed("beginning a transaction", e))?;
    let mut tx = PooledTx { tx, hook };
    let (answer, end) = run_unit(&mut tx, unit)
        .await
        .map_err(|e| failed(unit_what(unit), e))?;
    match end {
        End::Rollback => {
            // Nothing worth keeping; a failed rollback closes the
            // connection, which rolls back too.
            let _ = tx.tx.rollback().await;
            Ok(answer)
        }
        End::Commit => match tx.tx.commit().await {
            Ok(()) => Ok(answer),
            Err(e) if DB::is_lost_race(&e) => Err(TxFail::LostRace),
            Err(e) => Err(TxFail::Unknown(map_err("COMMIT", e))),
        },
    }
}

/// What a unit does, for error messages.
pub(crate) fn unit_what(unit: &Unit) -> &'static str {
    match unit {
        Unit::Claim { .. } => "claiming",
        Unit::Complete { .. } => "completing the claim",
        Unit::WriteComplete { .. } => "writing and completing the claim",
        Unit::Reconcile { .. } => "recording a reconciliation",
        Unit::Audit(_) => "appending to the audit log",
    }
}

/// One claim, on a pooled connection.
pub(crate) async fn read_claim<DB>(
    pool: &sqlx::Pool<DB>,
    key: &OperationKey,
) -> Result<Option<ClaimRecord>, StoreError>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'a> &'a [u8]: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> &'a str: sqlx::ColumnIndex<DB::Row>,
    i64: for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    Vec<u8>: for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    String: for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| map_err("reading a claim", e))?;
    let row = sqlx::query(DB::SELECT_CLAIM)
        .bind(key.as_bytes().as_slice())
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| map_err("reading a claim", e))?;
    row.map(|row| rows::claim(&SqlxRow(&row)))
        .transpose()
        .map_err(|p| StoreError::corrupt(&p))
}

/// In-flight claims whose lease ended at or before `now`.
/// Held budget amounts per budget (`ClaimStore::budget_reserved`).
pub(crate) async fn budget_reserved<DB>(
    pool: &sqlx::Pool<DB>,
) -> Result<Vec<(String, i64)>, StoreError>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'a> &'a str: sqlx::ColumnIndex<DB::Row>,
    i64: for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    String: for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    use sqlx::Row as _;
    let what = "reading budget reservations";
    let mut conn = pool.acquire().await.map_err(|e| map_err(what, e))?;
    let rows = sqlx::query(DB::BUDGET.reserved)
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

pub(crate) async fn list_stuck<DB>(
    pool: &sqlx::Pool<DB>,
    now: UnixMillis,
    limit: u32,
) -> Result<Vec<StuckEntry>, StoreError>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'a> &'a str: sqlx::ColumnIndex<DB::Row>,
    i64: for<'a> sqlx::Encode<'a, DB> + for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    Vec<u8>: for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    String: for<'d> sqlx::Decode<'d, DB> + sqlx::Type<DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| map_err("listing stuck claims", e))?;
    let found = sqlx::query(DB::LIST_STUCK)
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
pub(crate) async fn audit_trail<DB>(
    pool: &sqlx::Pool<DB>,
    key: &OperationKey,
    limit: u32,
) -> Result<Vec<AuditEntry>, StoreError>
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
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| map_err("reading the audit log", e))?;
    let found = sqlx::query(DB::AUDIT_TRAIL)
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
