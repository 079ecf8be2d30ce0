//! [`IdempotencyStore`] on SQLite: each call one unit of the group-commit
//! writer (see `crate::idempotency` for what the backends share).

use toolgate::claim::{StoreError, UnixMillis};
use toolgate::idempotency::{Begun, Bounds, IdemBegin, IdemFinish, IdemRun, IdempotencyStore};

use super::sql::SQL;
use super::{SqliteClaimStore, rusqlite};
use crate::idempotency::{Next, Row, batch, judge, lost_races, over_quota};

impl IdempotencyStore for SqliteClaimStore {
    async fn idem_begin(&self, begin: IdemBegin<'_>) -> Result<Begun, StoreError> {
        use rusqlite::OptionalExtension as _;
        let (payload, now, lease_until) = (begin.payload, begin.now, begin.lease_until);
        let principal = begin.principal.to_owned();
        let (key, runner) = (begin.key.to_owned(), begin.runner.to_owned());
        // One unit of the writer: nothing else writes meanwhile.
        self.write_unit("beginning an Idempotency-Key", move |conn| {
            let n = conn.execute(
                SQL.idempotency.insert,
                rusqlite::params![principal, key, payload.as_slice(), runner, lease_until.0],
            )?;
            if n == 1 {
                return Ok(Ok(Begun::Fresh));
            }
            let row = conn
                .query_row(
                    SQL.idempotency.select,
                    rusqlite::params![principal, key],
                    |r| {
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
                    },
                )
                .optional()?;
            let Some(row) = row else {
                return Ok(Err(lost_races()));
            };
            match judge(row, &payload, now) {
                Ok(Next::Answer(a)) => Ok(Ok(a)),
                Ok(Next::TakeOver(old)) => {
                    conn.execute(
                        SQL.idempotency.take_over,
                        rusqlite::params![runner, lease_until.0, principal, key, old, now.0],
                    )?;
                    Ok(Ok(Begun::Fresh))
                }
                Err(e) => Ok(Err(e)),
            }
        })
        .await
    }

    async fn idem_finish(&self, finish: IdemFinish<'_>) -> Result<(), StoreError> {
        let bytes = i64::try_from(finish.cost()).unwrap_or(i64::MAX);
        let (answer, now, bounds) = (finish.answer, finish.now, finish.bounds);
        let principal = finish.principal.to_owned();
        let (key, runner) = (finish.key.to_owned(), finish.runner.to_owned());
        self.write_unit("remembering an Idempotency-Key answer", move |conn| {
            let done = conn.execute(
                SQL.idempotency.finish,
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
            conn.execute(
                SQL.idempotency.totals_add,
                rusqlite::params![principal, bytes],
            )?;
            let (count, total): (i64, i64) =
                conn.query_row(SQL.idempotency.totals_of, [&principal], |r| {
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
                let mut stmt = conn.prepare_cached(SQL.idempotency.oldest_of)?;
                stmt.query_map(rusqlite::params![principal, batch()], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect::<rusqlite::Result<Vec<(String, i64)>>>()?
            };
            let (mut gone, mut freed) = (0i64, 0i64);
            for old in over_quota(oldest, count, total, bounds) {
                use rusqlite::OptionalExtension as _;
                let b: Option<i64> = conn
                    .query_row(
                        SQL.idempotency.delete_done,
                        rusqlite::params![principal, old],
                        |r| r.get(0),
                    )
                    .optional()?;
                if let Some(b) = b {
                    gone += 1;
                    freed += b;
                }
            }
            conn.execute(
                SQL.idempotency.totals_sub,
                rusqlite::params![gone, freed, principal],
            )?;
            Ok(Ok(()))
        })
        .await
    }

    async fn idem_forget(&self, run: IdemRun<'_>) -> Result<(), StoreError> {
        let principal = run.principal.to_owned();
        let (key, runner) = (run.key.to_owned(), run.runner.to_owned());
        self.write_unit("forgetting an Idempotency-Key", move |conn| {
            conn.execute(
                SQL.idempotency.forget,
                rusqlite::params![principal, key, runner],
            )?;
            Ok(Ok(()))
        })
        .await
    }

    async fn idem_purge(&self, now: UnixMillis, bounds: Bounds) -> Result<(), StoreError> {
        self.write_unit("purging Idempotency-Key answers", move |conn| {
            use rusqlite::OptionalExtension as _;
            let cutoff = now.0.saturating_sub(bounds.retention_ms);
            let expired = {
                let mut stmt = conn.prepare_cached(SQL.idempotency.expired)?;
                stmt.query_map(rusqlite::params![cutoff, batch()], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect::<rusqlite::Result<Vec<(String, String)>>>()?
            };
            for (principal, key) in expired {
                let b: Option<i64> = conn
                    .query_row(
                        SQL.idempotency.delete_done,
                        rusqlite::params![principal, key],
                        |r| r.get(0),
                    )
                    .optional()?;
                if let Some(b) = b {
                    conn.execute(
                        SQL.idempotency.totals_sub,
                        rusqlite::params![1i64, b, principal],
                    )?;
                }
            }
            let lapsed = {
                let mut stmt = conn.prepare_cached(SQL.idempotency.lapsed)?;
                stmt.query_map(rusqlite::params![now.0, batch()], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect::<rusqlite::Result<Vec<(String, String)>>>()?
            };
            for (principal, key) in lapsed {
                conn.execute(
                    SQL.idempotency.delete_lapsed,
                    rusqlite::params![principal, key, now.0],
                )?;
            }
            Ok(Ok(()))
        })
        .await
    }
}
