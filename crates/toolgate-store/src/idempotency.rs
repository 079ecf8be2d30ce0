//! [`IdempotencyStore`] on the claim database (migration 0006): the
//! `Idempotency-Key` memory as rows, so every replica sees a key's first
//! request and its answer survives restarts.
//!
//! Beginning needs no transaction: the primary key makes the insert of a
//! running row the race's only winner, a takeover is one conditional UPDATE
//! on the old runner and its lapsed lease, and forgetting names the runner.
//! Finishing is one transaction (migration 0008): the answer, the
//! principal's running totals (`toolgate_idempotency_totals`, one row per
//! principal, locked by the upsert, so a principal's finishes judge their
//! quota one at a time), and the removal of that principal's oldest
//! answers while it is over its quota. Nothing counts or sums the table:
//! a request's work is bounded by [`PURGE_BATCH`] whatever the table
//! holds. The purge removes a batch of rows past the retention, each with
//! its totals in a transaction of its own. PostgreSQL and MySQL share one
//! implementation, generic over the driver ([`Pooled`]); SQLite runs each
//! call as one unit of its writer.

#![cfg_attr(
    not(all(feature = "sqlite", feature = "postgres", feature = "mysql")),
    allow(dead_code, unused_imports)
)]

use toolgate::claim::{StoreError, StoreErrorKind, UnixMillis};
use toolgate::idempotency::{Begun, Bounds, IdempotencyStore, PURGE_BATCH, Remembered, cost};

#[cfg(any(feature = "postgres", feature = "mysql"))]
use crate::common::map_err;
#[cfg(feature = "mysql")]
use crate::mysql::MySqlClaimStore;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use crate::pooled::Dialect;
#[cfg(feature = "postgres")]
use crate::postgres::PgClaimStore;
#[cfg(feature = "sqlite")]
use crate::sqlite::{SqliteClaimStore, rusqlite};

/// How many times a begin re-reads after losing a race.
const ATTEMPTS: u32 = 8;

/// A row as `SELECT` names it.
struct Row {
    payload: Vec<u8>,
    runner: String,
    state: String,
    lease_until: i64,
    status: Option<i64>,
    content_type: Option<String>,
    outcome: Option<String>,
    body: Option<Vec<u8>>,
}

/// A row as sqlx reads it, in `SELECT` order.
type SqlRow = (
    Vec<u8>,
    String,
    String,
    i64,
    Option<i32>,
    Option<String>,
    Option<String>,
    Option<Vec<u8>>,
);

/// What a begin does after reading the row that stopped its insert.
enum Next {
    Answer(Begun),
    /// Take over from this runner.
    TakeOver(String),
}

fn judge(row: Row, payload: &[u8; 32], now: UnixMillis) -> Result<Next, StoreError> {
    if row.payload.as_slice() != payload {
        return Ok(Next::Answer(Begun::Mismatch));
    }
    match row.state.as_str() {
        "done" => {
            let bad = || StoreError::new(StoreErrorKind::Corrupt, "idempotency row: no answer");
            let status = row
                .status
                .and_then(|s| u16::try_from(s).ok())
                .ok_or_else(bad)?;
            Ok(Next::Answer(Begun::Replay(Remembered {
                status,
                content_type: row.content_type.ok_or_else(bad)?,
                outcome: row.outcome,
                body: row.body.ok_or_else(bad)?,
            })))
        }
        "running" if row.lease_until > now.0 => Ok(Next::Answer(Begun::InFlight)),
        "running" => Ok(Next::TakeOver(row.runner)),
        other => Err(StoreError::new(
            StoreErrorKind::Corrupt,
            format!("idempotency row: unknown state {other:?}"),
        )),
    }
}

fn lost_races() -> StoreError {
    StoreError::new(
        StoreErrorKind::Contention,
        "an Idempotency-Key begin kept losing races",
    )
}

/// The statements of the memory, per backend.
struct IdemSql {
    insert: &'static str,
    select: &'static str,
    take_over: &'static str,
    finish: &'static str,
    forget: &'static str,
    /// Adds one answer of `bytes` to a principal's totals (binds:
    /// principal, bytes).
    totals_add: &'static str,
    /// A principal's totals (binds: principal).
    totals_of: &'static str,
    /// Takes `answers` and `bytes` off a principal's totals, never below
    /// zero (binds: answers, bytes, principal).
    totals_sub: &'static str,
    /// A principal's oldest finished answers (binds: principal, limit).
    oldest_of: &'static str,
    /// Finished answers past the retention, oldest first (binds: cutoff,
    /// limit).
    expired: &'static str,
    /// Running rows whose lease has passed (binds: now, limit).
    lapsed: &'static str,
    /// One finished answer (binds: principal, key).
    delete_done: &'static str,
    /// One running row whose lease has passed (binds: principal, key, now).
    delete_lapsed: &'static str,
}

#[cfg(feature = "postgres")]
/// PostgreSQL.
const PG: IdemSql = IdemSql {
    insert: "INSERT INTO toolgate_idempotency \
        (principal, idem_key, payload, runner, state, lease_until) VALUES ($1, $2, $3, $4, 'running', $5)",
    select: "SELECT payload, runner, state, lease_until, status, content_type, \
        outcome, body FROM toolgate_idempotency WHERE principal = $1 AND idem_key = $2",
    take_over: "UPDATE toolgate_idempotency SET runner = $1, lease_until = $2 \
        WHERE principal = $3 AND idem_key = $4 AND state = 'running' AND runner = $5 AND lease_until <= $6",
    finish: "UPDATE toolgate_idempotency SET state = 'done', finished_at = $1, \
        status = $2, content_type = $3, outcome = $4, body = $5, bytes = $6 \
        WHERE principal = $7 AND idem_key = $8 AND state = 'running' AND runner = $9",
    forget: "DELETE FROM toolgate_idempotency \
        WHERE principal = $1 AND idem_key = $2 AND state = 'running' AND runner = $3",
    totals_add: "INSERT INTO toolgate_idempotency_totals (principal, answers, bytes) \
        VALUES ($1, 1, $2) ON CONFLICT (principal) DO UPDATE SET \
        answers = toolgate_idempotency_totals.answers + 1, \
        bytes = toolgate_idempotency_totals.bytes + EXCLUDED.bytes",
    totals_of: "SELECT answers, bytes FROM toolgate_idempotency_totals WHERE principal = $1",
    totals_sub: "UPDATE toolgate_idempotency_totals SET answers = GREATEST(answers - $1, 0), \
        bytes = GREATEST(bytes - $2, 0) WHERE principal = $3",
    oldest_of: "SELECT idem_key, bytes FROM toolgate_idempotency \
        WHERE principal = $1 AND state = 'done' ORDER BY finished_at LIMIT $2",
    expired: "SELECT principal, idem_key FROM toolgate_idempotency \
        WHERE state = 'done' AND finished_at <= $1 ORDER BY finished_at LIMIT $2",
    lapsed: "SELECT principal, idem_key FROM toolgate_idempotency \
        WHERE state = 'running' AND lease_until <= $1 LIMIT $2",
    delete_done: "DELETE FROM toolgate_idempotency \
        WHERE principal = $1 AND idem_key = $2 AND state = 'done' RETURNING bytes",
    delete_lapsed: "DELETE FROM toolgate_idempotency \
        WHERE principal = $1 AND idem_key = $2 AND state = 'running' AND lease_until <= $3",
};

/// MySQL/MariaDB (and the statements SQLite shares).
const QMARK: IdemSql = IdemSql {
    insert: "INSERT INTO toolgate_idempotency \
        (principal, idem_key, payload, runner, state, lease_until) VALUES (?, ?, ?, ?, 'running', ?)",
    select: "SELECT payload, runner, state, lease_until, status, content_type, \
        outcome, body FROM toolgate_idempotency WHERE principal = ? AND idem_key = ?",
    take_over: "UPDATE toolgate_idempotency SET runner = ?, lease_until = ? \
        WHERE principal = ? AND idem_key = ? AND state = 'running' AND runner = ? AND lease_until <= ?",
    finish: "UPDATE toolgate_idempotency SET state = 'done', finished_at = ?, \
        status = ?, content_type = ?, outcome = ?, body = ?, bytes = ? \
        WHERE principal = ? AND idem_key = ? AND state = 'running' AND runner = ?",
    forget: "DELETE FROM toolgate_idempotency \
        WHERE principal = ? AND idem_key = ? AND state = 'running' AND runner = ?",
    totals_add: "INSERT INTO toolgate_idempotency_totals (principal, answers, bytes) \
        VALUES (?, 1, ?) ON DUPLICATE KEY UPDATE answers = answers + 1, \
        bytes = bytes + VALUES(bytes)",
    totals_of: "SELECT answers, bytes FROM toolgate_idempotency_totals WHERE principal = ?",
    totals_sub: "UPDATE toolgate_idempotency_totals SET answers = GREATEST(answers - ?, 0), \
        bytes = GREATEST(bytes - ?, 0) WHERE principal = ?",
    oldest_of: "SELECT idem_key, bytes FROM toolgate_idempotency \
        WHERE principal = ? AND state = 'done' ORDER BY finished_at LIMIT ?",
    expired: "SELECT principal, idem_key FROM toolgate_idempotency \
        WHERE state = 'done' AND finished_at <= ? ORDER BY finished_at LIMIT ?",
    lapsed: "SELECT principal, idem_key FROM toolgate_idempotency \
        WHERE state = 'running' AND lease_until <= ? LIMIT ?",
    // MySQL has no DELETE … RETURNING: the bytes are read first, in the
    // same transaction, with the row locked.
    delete_done: "DELETE FROM toolgate_idempotency \
        WHERE principal = ? AND idem_key = ? AND state = 'done'",
    delete_lapsed: "DELETE FROM toolgate_idempotency \
        WHERE principal = ? AND idem_key = ? AND state = 'running' AND lease_until <= ?",
};

/// MySQL: a finished row's bytes, locked for its delete (binds: principal,
/// key).
const BYTES_FOR_UPDATE_MYSQL: &str = "SELECT bytes FROM toolgate_idempotency \
    WHERE principal = ? AND idem_key = ? AND state = 'done' FOR UPDATE";

/// SQLite's insert: a duplicate changes nothing (its writer runs the
/// insert and the read as one unit; the pooled backends see the duplicate
/// as an error).
const INSERT_SQLITE: &str = "INSERT INTO toolgate_idempotency \
        (principal, idem_key, payload, runner, state, lease_until) VALUES (?, ?, ?, ?, 'running', ?) \
        ON CONFLICT (principal, idem_key) DO NOTHING";
/// SQLite's statements that differ from MySQL's.
const TOTALS_ADD_SQLITE: &str = "INSERT INTO toolgate_idempotency_totals (principal, answers, bytes) \
        VALUES (?, 1, ?) ON CONFLICT (principal) DO UPDATE SET answers = answers + 1, \
        bytes = bytes + excluded.bytes";
const TOTALS_SUB_SQLITE: &str = "UPDATE toolgate_idempotency_totals SET answers = MAX(answers - ?, 0), \
        bytes = MAX(bytes - ?, 0) WHERE principal = ?";
const DELETE_DONE_SQLITE: &str = "DELETE FROM toolgate_idempotency \
        WHERE principal = ? AND idem_key = ? AND state = 'done' RETURNING bytes";

/// Which of a principal's oldest answers must go for its totals to fit
/// `bounds`, and what they free.
fn over_quota(
    oldest: Vec<(String, i64)>,
    mut count: u64,
    mut bytes: u64,
    bounds: Bounds,
) -> Vec<String> {
    let mut out = Vec::new();
    for (key, b) in oldest {
        if count <= bounds.capacity && bytes <= bounds.max_bytes {
            break;
        }
        count = count.saturating_sub(1);
        bytes = bytes.saturating_sub(u64::try_from(b).unwrap_or(0));
        out.push(key);
    }
    out
}

fn batch() -> i64 {
    i64::from(PURGE_BATCH)
}

fn is_duplicate(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

/// The `Idempotency-Key` calls on a pooled backend (PostgreSQL, MySQL):
/// one generic implementation over the driver, with its statements.
struct Pooled<'a, DB: sqlx::Database> {
    pool: &'a sqlx::Pool<DB>,
    sql: &'static IdemSql,
}

impl<DB> Pooled<'_, DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    String: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Option<String>: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Vec<u8>: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i32: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'r> SqlRow: sqlx::FromRow<'r, DB::Row>,
    for<'r> (i64, i64): sqlx::FromRow<'r, DB::Row>,
    for<'r> (String, i64): sqlx::FromRow<'r, DB::Row>,
    for<'r> (String, String): sqlx::FromRow<'r, DB::Row>,
    for<'r> (i64,): sqlx::FromRow<'r, DB::Row>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    async fn begin(
        &self,
        principal: &str,
        key: &str,
        payload: [u8; 32],
        runner: &str,
        now: UnixMillis,
        lease_until: UnixMillis,
    ) -> Result<Begun, StoreError> {
        let what = "beginning an Idempotency-Key";
        for _ in 0..ATTEMPTS {
            let inserted = sqlx::query(self.sql.insert)
                .bind(principal)
                .bind(key)
                .bind(payload.to_vec())
                .bind(runner)
                .bind(lease_until.0)
                .execute(self.pool)
                .await;
            match inserted {
                Ok(_) => return Ok(Begun::Fresh),
                Err(e) if is_duplicate(&e) => {}
                Err(e) => return Err(map_err(what, e)),
            }
            let row: Option<SqlRow> = sqlx::query_as(self.sql.select)
                .bind(principal)
                .bind(key)
                .fetch_optional(self.pool)
                .await
                .map_err(|e| map_err(what, e))?;
            // Gone since the insert failed (finished and purged, or
            // forgotten): insert again.
            let Some(r) = row else { continue };
            let row = Row {
                payload: r.0,
                runner: r.1,
                state: r.2,
                lease_until: r.3,
                status: r.4.map(i64::from),
                content_type: r.5,
                outcome: r.6,
                body: r.7,
            };
            match judge(row, &payload, now)? {
                Next::Answer(a) => return Ok(a),
                Next::TakeOver(old) => {
                    let taken = sqlx::query(self.sql.take_over)
                        .bind(runner)
                        .bind(lease_until.0)
                        .bind(principal)
                        .bind(key)
                        .bind(old)
                        .bind(now.0)
                        .execute(self.pool)
                        .await
                        .map_err(|e| map_err(what, e))?;
                    if DB::rows_affected(&taken) == 1 {
                        return Ok(Begun::Fresh);
                    }
                }
            }
        }
        Err(lost_races())
    }

    async fn finish(
        &self,
        principal: &str,
        key: &str,
        runner: &str,
        answer: Remembered,
        now: UnixMillis,
        bounds: Bounds,
    ) -> Result<(), StoreError> {
        let what = "remembering an Idempotency-Key answer";
        let bytes = cost(principal, key, answer.body.len());
        let mut tx = self.pool.begin().await.map_err(|e| map_err(what, e))?;
        let done = sqlx::query(self.sql.finish)
            .bind(now.0)
            .bind(i32::from(answer.status))
            .bind(answer.content_type)
            .bind(answer.outcome)
            .bind(answer.body)
            .bind(i64::try_from(bytes).unwrap_or(i64::MAX))
            .bind(principal)
            .bind(key)
            .bind(runner)
            .execute(&mut *tx)
            .await
            .map_err(|e| map_err(what, e))?;
        // The row was taken over (or forgotten): nothing of ours to count.
        if DB::rows_affected(&done) != 1 {
            return Ok(());
        }
        sqlx::query(self.sql.totals_add)
            .bind(principal)
            .bind(i64::try_from(bytes).unwrap_or(i64::MAX))
            .execute(&mut *tx)
            .await
            .map_err(|e| map_err(what, e))?;
        let (count, total): (i64, i64) = sqlx::query_as(self.sql.totals_of)
            .bind(principal)
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| map_err(what, e))?;
        let (count, total) = (
            u64::try_from(count).unwrap_or(0),
            u64::try_from(total).unwrap_or(0),
        );
        if count > bounds.capacity || total > bounds.max_bytes {
            let oldest: Vec<(String, i64)> = sqlx::query_as(self.sql.oldest_of)
                .bind(principal)
                .bind(batch())
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| map_err(what, e))?;
            let (mut gone, mut freed) = (0i64, 0i64);
            for old in over_quota(oldest, count, total, bounds) {
                if let Some(b) = Self::delete_done(&mut tx, self.sql, principal, &old).await? {
                    gone += 1;
                    freed += b;
                }
            }
            if gone > 0 {
                sqlx::query(self.sql.totals_sub)
                    .bind(gone)
                    .bind(freed)
                    .bind(principal)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| map_err(what, e))?;
            }
        }
        tx.commit().await.map_err(|e| map_err(what, e))
    }

    /// Deletes one finished answer inside `tx`: its bytes if it was there.
    async fn delete_done(
        tx: &mut sqlx::Transaction<'_, DB>,
        sql: &IdemSql,
        principal: &str,
        key: &str,
    ) -> Result<Option<i64>, StoreError> {
        let what = "removing an Idempotency-Key answer";
        // PostgreSQL returns the deleted row's bytes; MySQL reads them
        // first under a row lock.
        let bytes: Option<(i64,)> = if DB::HAS_RETURNING {
            sqlx::query_as(sql.delete_done)
                .bind(principal)
                .bind(key)
                .fetch_optional(&mut **tx)
                .await
                .map_err(|e| map_err(what, e))?
        } else {
            let found: Option<(i64,)> = sqlx::query_as(BYTES_FOR_UPDATE_MYSQL)
                .bind(principal)
                .bind(key)
                .fetch_optional(&mut **tx)
                .await
                .map_err(|e| map_err(what, e))?;
            if found.is_some() {
                sqlx::query(sql.delete_done)
                    .bind(principal)
                    .bind(key)
                    .execute(&mut **tx)
                    .await
                    .map_err(|e| map_err(what, e))?;
            }
            found
        };
        Ok(bytes.map(|b| b.0))
    }

    async fn forget(&self, principal: &str, key: &str, runner: &str) -> Result<(), StoreError> {
        sqlx::query(self.sql.forget)
            .bind(principal)
            .bind(key)
            .bind(runner)
            .execute(self.pool)
            .await
            .map_err(|e| map_err("forgetting an Idempotency-Key", e))?;
        Ok(())
    }

    async fn purge(&self, now: UnixMillis, bounds: Bounds) -> Result<(), StoreError> {
        let what = "purging Idempotency-Key answers";
        let cutoff = now.0.saturating_sub(bounds.retention_ms);
        let expired: Vec<(String, String)> = sqlx::query_as(self.sql.expired)
            .bind(cutoff)
            .bind(batch())
            .fetch_all(self.pool)
            .await
            .map_err(|e| map_err(what, e))?;
        // One transaction per row: a purge never holds two principals'
        // totals at once, so it cannot deadlock with their finishes.
        for (principal, key) in expired {
            let mut tx = self.pool.begin().await.map_err(|e| map_err(what, e))?;
            if let Some(b) = Self::delete_done(&mut tx, self.sql, &principal, &key).await? {
                sqlx::query(self.sql.totals_sub)
                    .bind(1i64)
                    .bind(b)
                    .bind(&principal)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| map_err(what, e))?;
            }
            tx.commit().await.map_err(|e| map_err(what, e))?;
        }
        let lapsed: Vec<(String, String)> = sqlx::query_as(self.sql.lapsed)
            .bind(now.0)
            .bind(batch())
            .fetch_all(self.pool)
            .await
            .map_err(|e| map_err(what, e))?;
        for (principal, key) in lapsed {
            sqlx::query(self.sql.delete_lapsed)
                .bind(principal)
                .bind(key)
                .bind(now.0)
                .execute(self.pool)
                .await
                .map_err(|e| map_err(what, e))?;
        }
        Ok(())
    }
}

/// The idempotency store of a pooled backend: every method is its
/// [`Pooled`]'s, so PostgreSQL and MySQL share one body.
#[cfg(any(feature = "postgres", feature = "mysql"))]
macro_rules! pooled_idempotency_store {
    ($store:ty) => {
        impl IdempotencyStore for $store {
            async fn idem_begin(
                &self,
                principal: &str,
                key: &str,
                payload: [u8; 32],
                runner: &str,
                now: UnixMillis,
                lease_until: UnixMillis,
            ) -> Result<Begun, StoreError> {
                self.idem()
                    .begin(principal, key, payload, runner, now, lease_until)
                    .await
            }

            async fn idem_finish(
                &self,
                principal: &str,
                key: &str,
                runner: &str,
                answer: Remembered,
                now: UnixMillis,
                bounds: Bounds,
            ) -> Result<(), StoreError> {
                self.idem()
                    .finish(principal, key, runner, answer, now, bounds)
                    .await
            }

            async fn idem_forget(
                &self,
                principal: &str,
                key: &str,
                runner: &str,
            ) -> Result<(), StoreError> {
                self.idem().forget(principal, key, runner).await
            }

            async fn idem_purge(&self, now: UnixMillis, bounds: Bounds) -> Result<(), StoreError> {
                self.idem().purge(now, bounds).await
            }
        }
    };
}

#[cfg(feature = "postgres")]
pooled_idempotency_store!(PgClaimStore);

#[cfg(feature = "postgres")]
impl PgClaimStore {
    fn idem(&self) -> Pooled<'_, sqlx::Postgres> {
        Pooled {
            pool: self.pool(),
            sql: &PG,
        }
    }
}

#[cfg(feature = "mysql")]
pooled_idempotency_store!(MySqlClaimStore);

#[cfg(feature = "mysql")]
impl MySqlClaimStore {
    fn idem(&self) -> Pooled<'_, sqlx::MySql> {
        Pooled {
            pool: self.pool(),
            sql: &QMARK,
        }
    }
}

#[cfg(feature = "sqlite")]
impl IdempotencyStore for SqliteClaimStore {
    async fn idem_begin(
        &self,
        principal: &str,
        key: &str,
        payload: [u8; 32],
        runner: &str,
        now: UnixMillis,
        lease_until: UnixMillis,
    ) -> Result<Begun, StoreError> {
        use rusqlite::OptionalExtension as _;
        let (principal, key, runner) = (principal.to_owned(), key.to_owned(), runner.to_owned());
        // One unit of the writer: nothing else writes meanwhile.
        self.write_unit("beginning an Idempotency-Key", move |conn| {
            let n = conn.execute(
                INSERT_SQLITE,
                rusqlite::params![principal, key, payload.as_slice(), runner, lease_until.0],
            )?;
            if n == 1 {
                return Ok(Ok(Begun::Fresh));
            }
            let row = conn
                .query_row(QMARK.select, rusqlite::params![principal, key], |r| {
                    Ok(Row {
                        payload: r.get(0)?,
                        runner: r.get(1)?,
                        state: r.get(2)?,
                        lease_until: r.get(3)?,
                        status: r.get(4)?,
                        content_type: r.get(5)?,
                        outcome: r.get(6)?,
                        body: r.get(7)?,
                    })
                })
                .optional()?;
            let Some(row) = row else {
                return Ok(Err(lost_races()));
            };
            match judge(row, &payload, now) {
                Ok(Next::Answer(a)) => Ok(Ok(a)),
                Ok(Next::TakeOver(old)) => {
                    conn.execute(
                        QMARK.take_over,
                        rusqlite::params![runner, lease_until.0, principal, key, old, now.0],
                    )?;
                    Ok(Ok(Begun::Fresh))
                }
                Err(e) => Ok(Err(e)),
            }
        })
        .await
    }

    async fn idem_finish(
        &self,
        principal: &str,
        key: &str,
        runner: &str,
        answer: Remembered,
        now: UnixMillis,
        bounds: Bounds,
    ) -> Result<(), StoreError> {
        let bytes = i64::try_from(cost(principal, key, answer.body.len())).unwrap_or(i64::MAX);
        let (principal, key, runner) = (principal.to_owned(), key.to_owned(), runner.to_owned());
        self.write_unit("remembering an Idempotency-Key answer", move |conn| {
            let done = conn.execute(
                QMARK.finish,
                rusqlite::params![
                    now.0,
                    i64::from(answer.status),
                    answer.content_type,
                    answer.outcome,
                    answer.body,
                    bytes,
                    principal,
                    key,
                    runner
                ],
            )?;
            if done != 1 {
                return Ok(Ok(()));
            }
            conn.execute(TOTALS_ADD_SQLITE, rusqlite::params![principal, bytes])?;
            let (count, total): (i64, i64) =
                conn.query_row(QMARK.totals_of, [&principal], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
            let (count, total) = (
                u64::try_from(count).unwrap_or(0),
                u64::try_from(total).unwrap_or(0),
            );
            if count <= bounds.capacity && total <= bounds.max_bytes {
                return Ok(Ok(()));
            }
            let oldest = {
                let mut stmt = conn.prepare_cached(QMARK.oldest_of)?;
                stmt.query_map(rusqlite::params![principal, batch()], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect::<rusqlite::Result<Vec<(String, i64)>>>()?
            };
            let (mut gone, mut freed) = (0i64, 0i64);
            for old in over_quota(oldest, count, total, bounds) {
                use rusqlite::OptionalExtension as _;
                let b: Option<i64> = conn
                    .query_row(DELETE_DONE_SQLITE, rusqlite::params![principal, old], |r| {
                        r.get(0)
                    })
                    .optional()?;
                if let Some(b) = b {
                    gone += 1;
                    freed += b;
                }
            }
            conn.execute(TOTALS_SUB_SQLITE, rusqlite::params![gone, freed, principal])?;
            Ok(Ok(()))
        })
        .await
    }

    async fn idem_forget(
        &self,
        principal: &str,
        key: &str,
        runner: &str,
    ) -> Result<(), StoreError> {
        let (principal, key, runner) = (principal.to_owned(), key.to_owned(), runner.to_owned());
        self.write_unit("forgetting an Idempotency-Key", move |conn| {
            conn.execute(QMARK.forget, rusqlite::params![principal, key, runner])?;
            Ok(Ok(()))
        })
        .await
    }

    async fn idem_purge(&self, now: UnixMillis, bounds: Bounds) -> Result<(), StoreError> {
        self.write_unit("purging Idempotency-Key answers", move |conn| {
            use rusqlite::OptionalExtension as _;
            let cutoff = now.0.saturating_sub(bounds.retention_ms);
            let expired = {
                let mut stmt = conn.prepare_cached(QMARK.expired)?;
                stmt.query_map(rusqlite::params![cutoff, batch()], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect::<rusqlite::Result<Vec<(String, String)>>>()?
            };
            for (principal, key) in expired {
                let b: Option<i64> = conn
                    .query_row(DELETE_DONE_SQLITE, rusqlite::params![principal, key], |r| {
                        r.get(0)
                    })
                    .optional()?;
                if let Some(b) = b {
                    conn.execute(TOTALS_SUB_SQLITE, rusqlite::params![1i64, b, principal])?;
                }
            }
            let lapsed = {
                let mut stmt = conn.prepare_cached(QMARK.lapsed)?;
                stmt.query_map(rusqlite::params![now.0, batch()], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect::<rusqlite::Result<Vec<(String, String)>>>()?
            };
            for (principal, key) in lapsed {
                conn.execute(
                    QMARK.delete_lapsed,
                    rusqlite::params![principal, key, now.0],
                )?;
            }
            Ok(Ok(()))
        })
        .await
    }
}
