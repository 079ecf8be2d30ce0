//! [`IdempotencyStore`] on the claim database (migration 0006): the
//! `Idempotency-Key` memory as rows, so every replica sees a key's first
//! request and its answer survives restarts.
//!
//! No statement needs a transaction: the primary key makes the insert of a
//! running row the race's only winner, a takeover is one conditional UPDATE
//! on the old runner and its lapsed lease, and finishing or forgetting
//! names the runner. PostgreSQL and MySQL share one implementation, generic
//! over the driver ([`Pooled`]); SQLite runs each call as one unit of its
//! writer.

#![cfg_attr(
    not(all(feature = "sqlite", feature = "postgres", feature = "mysql")),
    allow(dead_code, unused_imports)
)]

use toolgate::claim::{StoreError, StoreErrorKind, UnixMillis};
use toolgate::idempotency::{Begun, Bounds, IdempotencyStore, Remembered, cost};

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
/// Most finished rows one purge reads to find the oldest.
const PURGE_BATCH: i64 = 500;

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

/// The statements of the pooled backends, which run outside transactions.
struct IdemSql {
    insert: &'static str,
    select: &'static str,
    take_over: &'static str,
    finish: &'static str,
    forget: &'static str,
    purge: &'static str,
    totals: &'static str,
    oldest: &'static str,
    delete_done: &'static str,
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
    purge: "DELETE FROM toolgate_idempotency \
        WHERE (state = 'done' AND finished_at <= $1) OR (state = 'running' AND lease_until <= $2)",
    totals: "SELECT COUNT(*), CAST(COALESCE(SUM(bytes), 0) AS BIGINT) \
        FROM toolgate_idempotency WHERE state = 'done'",
    oldest: "SELECT principal, idem_key, bytes FROM toolgate_idempotency \
        WHERE state = 'done' ORDER BY finished_at LIMIT $1",
    delete_done: "DELETE FROM toolgate_idempotency \
        WHERE principal = $1 AND idem_key = $2 AND state = 'done'",
};

/// MySQL/MariaDB, and SQLite's statements that are the same.
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
    purge: "DELETE FROM toolgate_idempotency \
        WHERE (state = 'done' AND finished_at <= ?) OR (state = 'running' AND lease_until <= ?)",
    totals: "SELECT COUNT(*), CAST(COALESCE(SUM(bytes), 0) AS SIGNED) \
        FROM toolgate_idempotency WHERE state = 'done'",
    oldest: "SELECT principal, idem_key, bytes FROM toolgate_idempotency \
        WHERE state = 'done' ORDER BY finished_at LIMIT ?",
    delete_done: "DELETE FROM toolgate_idempotency \
        WHERE principal = ? AND idem_key = ? AND state = 'done'",
};

/// SQLite's insert: a duplicate changes nothing (its writer runs the
/// insert and the read as one unit; the pooled backends see the duplicate
/// as an error).
const INSERT_SQLITE: &str = "INSERT INTO toolgate_idempotency \
        (principal, idem_key, payload, runner, state, lease_until) VALUES (?, ?, ?, ?, 'running', ?) \
        ON CONFLICT (principal, idem_key) DO NOTHING";
/// SQLite's totals (its integers need no cast).
const TOTALS_SQLITE: &str = "SELECT COUNT(*), COALESCE(SUM(bytes), 0) \
        FROM toolgate_idempotency WHERE state = 'done'";

/// Which of the oldest finished rows must go for the totals to fit.
fn over_caps(
    oldest: Vec<(String, String, i64)>,
    mut count: u64,
    mut bytes: u64,
    bounds: Bounds,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (principal, key, b) in oldest {
        if count <= bounds.capacity && bytes <= bounds.max_bytes {
            break;
        }
        count = count.saturating_sub(1);
        bytes = bytes.saturating_sub(u64::try_from(b).unwrap_or(0));
        out.push((principal, key));
    }
    out
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
    for<'r> (String, String, i64): sqlx::FromRow<'r, DB::Row>,
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
    ) -> Result<(), StoreError> {
        let bytes = cost(principal, key, answer.body.len());
        sqlx::query(self.sql.finish)
            .bind(now.0)
            .bind(i32::from(answer.status))
            .bind(answer.content_type)
            .bind(answer.outcome)
            .bind(answer.body)
            .bind(i64::try_from(bytes).unwrap_or(i64::MAX))
            .bind(principal)
            .bind(key)
            .bind(runner)
            .execute(self.pool)
            .await
            .map_err(|e| map_err("remembering an Idempotency-Key answer", e))?;
        Ok(())
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
        sqlx::query(self.sql.purge)
            .bind(now.0.saturating_sub(bounds.retention_ms))
            .bind(now.0)
            .execute(self.pool)
            .await
            .map_err(|e| map_err(what, e))?;
        let (count, bytes): (i64, i64) = sqlx::query_as(self.sql.totals)
            .fetch_one(self.pool)
            .await
            .map_err(|e| map_err(what, e))?;
        let (count, bytes) = (
            u64::try_from(count).unwrap_or(0),
            u64::try_from(bytes).unwrap_or(0),
        );
        if count <= bounds.capacity && bytes <= bounds.max_bytes {
            return Ok(());
        }
        let oldest: Vec<(String, String, i64)> = sqlx::query_as(self.sql.oldest)
            .bind(PURGE_BATCH)
            .fetch_all(self.pool)
            .await
            .map_err(|e| map_err(what, e))?;
        for (principal, key) in over_caps(oldest, count, bytes, bounds) {
            sqlx::query(self.sql.delete_done)
                .bind(principal)
                .bind(key)
                .execute(self.pool)
                .await
                .map_err(|e| map_err(what, e))?;
        }
        Ok(())
    }
}

#[cfg(feature = "postgres")]
impl IdempotencyStore for PgClaimStore {
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
    ) -> Result<(), StoreError> {
        self.idem()
            .finish(principal, key, runner, answer, now)
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
impl IdempotencyStore for MySqlClaimStore {
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
    ) -> Result<(), StoreError> {
        self.idem()
            .finish(principal, key, runner, answer, now)
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
    ) -> Result<(), StoreError> {
        let bytes = i64::try_from(cost(principal, key, answer.body.len())).unwrap_or(i64::MAX);
        let (principal, key, runner) = (principal.to_owned(), key.to_owned(), runner.to_owned());
        self.write_unit("remembering an Idempotency-Key answer", move |conn| {
            conn.execute(
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
            conn.execute(
                QMARK.purge,
                rusqlite::params![now.0.saturating_sub(bounds.retention_ms), now.0],
            )?;
            let (count, bytes): (i64, i64) =
                conn.query_row(TOTALS_SQLITE, [], |r| Ok((r.get(0)?, r.get(1)?)))?;
            let (count, bytes) = (
                u64::try_from(count).unwrap_or(0),
                u64::try_from(bytes).unwrap_or(0),
            );
            if count <= bounds.capacity && bytes <= bounds.max_bytes {
                return Ok(Ok(()));
            }
            let mut stmt = conn.prepare(QMARK.oldest)?;
            let oldest = stmt
                .query_map([PURGE_BATCH], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<Vec<(String, String, i64)>>>()?;
            for (principal, key) in over_caps(oldest, count, bytes, bounds) {
                conn.execute(QMARK.delete_done, rusqlite::params![principal, key])?;
            }
            Ok(Ok(()))
        })
        .await
    }
}
