//! [`ReviewStore`] on SQLite: each call one unit of the group-commit
//! writer, whose units run one at a time (see `crate::review` for what the
//! backends share).

use toolgate::claim::{AuditEntry, StoreError, StoreErrorKind, UnixMillis};
use toolgate::review::{
    Closed, Closing, ItemStatus, ListQuery, NewItem, Opened, QueueLimits, Requested, ReviewItem,
    ReviewSession, ReviewStore, ReviewerAct, Verdict, Vote, Voted,
};

use super::sql::SQL;
use super::{SqliteClaimStore, rusqlite};
use crate::review::{
    Insert, ItemRow, Live, VotePlan, after_vote, ask, audit_entry, insert_of, invalid, judge_live,
    limit_of, plan_vote, vote_row,
};

fn sqlite_item_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ItemRow> {
    Ok(ItemRow {
        id: r.get(0)?,
        created_at: r.get(1)?,
        kind: r.get(2)?,
        reason: r.get(3)?,
        tool: r.get(4)?,
        proposer: r.get(5)?,
        proposer_via: r.get(6)?,
        key: r.get(7)?,
        fingerprint: r.get(8)?,
        version_seen: r.get(9)?,
        policy_digest: r.get(10)?,
        scope: r.get(11)?,
        decision: r.get(12)?,
        status: r.get(13)?,
        approvals_needed: r.get(14)?,
        expires_at: r.get(15)?,
        consumed_at: r.get(16)?,
        closed_at: r.get(17)?,
        closed_by: r.get(18)?,
        note: r.get(19)?,
        consumed_by: r.get(20)?,
    })
}

/// A row and its votes, read on `conn`; a corrupt row is `Err(StoreError)`
/// inside `Ok`, so that the writer's batch is not rolled back for it.
fn sqlite_item(
    conn: &rusqlite::Connection,
    sql: &str,
    bind: impl rusqlite::Params,
) -> rusqlite::Result<Option<Result<ReviewItem, StoreError>>> {
    use rusqlite::OptionalExtension;
    let Some(row) = conn.query_row(sql, bind, sqlite_item_row).optional()? else {
        return Ok(None);
    };
    let votes = sqlite_votes(conn, row.id)?;
    Ok(Some(votes.and_then(|v| row.item(v))))
}

fn sqlite_votes(
    conn: &rusqlite::Connection,
    id: i64,
) -> rusqlite::Result<Result<Vec<Vote>, StoreError>> {
    let mut stmt = conn.prepare_cached(SQL.review.votes)?;
    let rows = stmt
        .query_map([id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows
        .into_iter()
        .map(|(r, v, at, note)| vote_row(r, &v, at, note))
        .collect())
}

fn sqlite_insert(
    conn: &rusqlite::Connection,
    sql: &str,
    v: &Insert,
) -> rusqlite::Result<Option<i64>> {
    let changed = conn.execute(
        sql,
        rusqlite::params![
            v.created_at,
            v.kind,
            v.reason,
            v.tool,
            v.proposer,
            v.proposer_via,
            v.key,
            v.fingerprint,
            v.version_seen,
            v.policy_digest,
            v.scope,
            v.decision,
            v.approvals_needed,
            v.expires_at,
            v.open_grant,
            v.queue_principal,
            v.dedup,
            v.summary,
        ],
    )?;
    // The writer runs one unit at a time: the row count and the last id
    // are this statement's.
    Ok((changed == 1).then(|| conn.last_insert_rowid()))
}

/// Whether one more open item for `principal` stays within `limits`, on
/// the writer's connection (each count stops at its cap).
fn sqlite_room(
    conn: &rusqlite::Connection,
    principal: &str,
    limits: &QueueLimits,
    now: UnixMillis,
) -> rusqlite::Result<bool> {
    let cap = |c: u64| i64::try_from(c).unwrap_or(i64::MAX);
    let theirs: i64 = conn.query_row(
        SQL.review.open_of,
        rusqlite::params![principal, now.0, cap(limits.per_principal)],
        |r| r.get(0),
    )?;
    if theirs >= cap(limits.per_principal) {
        return Ok(false);
    }
    let all: i64 = conn.query_row(
        SQL.review.open_all,
        rusqlite::params![now.0, cap(limits.total)],
        |r| r.get(0),
    )?;
    Ok(all < cap(limits.total))
}

fn sqlite_audit(conn: &rusqlite::Connection, e: &AuditEntry) -> rusqlite::Result<()> {
    conn.execute(
        SQL.review.audit,
        rusqlite::params![
            e.at().0,
            e.actor(),
            e.tool(),
            e.outcome(),
            e.reason(),
            e.key().map(|k| k.as_bytes().to_vec()),
            e.fingerprint().map(|f| f.as_bytes().to_vec()),
            e.via(),
        ],
    )
    .map(drop)
}

impl ReviewStore for SqliteClaimStore {
    async fn open_session(
        &self,
        digest: [u8; 32],
        session: ReviewSession,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        self.write_unit("opening a reviewer session", move |conn| {
            conn.execute(SQL.review.session_purge, [now.0])?;
            conn.execute(
                SQL.review.session_insert,
                rusqlite::params![
                    digest.as_slice(),
                    session.principal,
                    session.csrf,
                    session.expires_at.0
                ],
            )?;
            Ok(Ok(()))
        })
        .await
    }

    async fn session(
        &self,
        digest: [u8; 32],
        now: UnixMillis,
    ) -> Result<Option<ReviewSession>, StoreError> {
        use rusqlite::OptionalExtension as _;
        self.write_unit("reading a reviewer session", move |conn| {
            let row = conn
                .query_row(
                    SQL.review.session_get,
                    rusqlite::params![digest.as_slice(), now.0],
                    |r| {
                        Ok(ReviewSession {
                            principal: r.get(0)?,
                            csrf: r.get(1)?,
                            expires_at: UnixMillis(r.get(2)?),
                        })
                    },
                )
                .optional()?;
            Ok(Ok(row))
        })
        .await
    }

    async fn close_session(&self, digest: [u8; 32]) -> Result<(), StoreError> {
        self.write_unit("closing a reviewer session", move |conn| {
            conn.execute(SQL.review.session_delete, [digest.as_slice()])?;
            Ok(Ok(()))
        })
        .await
    }

    async fn open_item(&self, item: NewItem, limits: &QueueLimits) -> Result<Opened, StoreError> {
        let dedup = item.dedup(limits.rejection_window_ms);
        let now = item.at;
        let limits = *limits;
        let v = insert_of(item, None, dedup);
        // One unit of the writer: the dedup read, the caps and the insert
        // see no other write in between.
        self.write_unit("opening a review item", move |conn| {
            use rusqlite::OptionalExtension;
            if let Some(d) = dedup {
                let found: Option<i64> = conn
                    .query_row(SQL.review.by_dedup, [d.as_slice()], |r| r.get(0))
                    .optional()?;
                if let Some(id) = found {
                    return Ok(Ok(Opened::Existing(id)));
                }
            }
            if !sqlite_room(conn, &v.queue_principal, &limits, now)? {
                return Ok(Ok(Opened::Full));
            }
            Ok(match sqlite_insert(conn, SQL.review.insert, &v)? {
                Some(id) => Ok(Opened::Created(id)),
                None => Err(StoreError::new(
                    StoreErrorKind::Database,
                    "no id for a new review item",
                )),
            })
        })
        .await
    }

    async fn request_approval(
        &self,
        item: NewItem,
        now: UnixMillis,
        limits: &QueueLimits,
    ) -> Result<Requested, StoreError> {
        let a = ask(&item)?;
        let (digest, key, fingerprint) = (a.digest, *a.key, *a.fingerprint);
        let (version, policy_digest) = (a.version.to_owned(), a.policy_digest.to_owned());
        let limits = *limits;
        let v = insert_of(item, Some(digest), None);
        // One unit of the writer: nothing else writes meanwhile.
        self.write_unit("requesting approval", move |conn| {
            if let Some(live) = sqlite_item(conn, SQL.review.by_grant, [digest.to_vec()])? {
                let live = match live {
                    Ok(i) => i,
                    Err(e) => return Ok(Err(e)),
                };
                match judge_live(&live, &policy_digest, now) {
                    Live::Answer(r) => return Ok(Ok(r)),
                    Live::Expire(id) => {
                        conn.execute(SQL.review.expire_one, rusqlite::params![id, now.0])?;
                    }
                }
            }
            use rusqlite::OptionalExtension;
            let denied: Option<(i64, Option<String>)> = conn
                .query_row(
                    SQL.review.denied,
                    rusqlite::params![
                        key.as_bytes().to_vec(),
                        fingerprint.as_bytes().to_vec(),
                        version,
                        policy_digest
                    ],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            if let Some((item, by)) = denied {
                return Ok(Ok(Requested::Denied { item, by }));
            }
            if !sqlite_room(conn, &v.queue_principal, &limits, now)? {
                return Ok(Ok(Requested::QueueFull));
            }
            Ok(match sqlite_insert(conn, SQL.review.insert, &v)? {
                Some(id) => Ok(Requested::Pending {
                    item: id,
                    created: true,
                }),
                None => Err(StoreError::new(
                    StoreErrorKind::Invariant,
                    "a live approval item appeared inside the writer's unit",
                )),
            })
        })
        .await
    }

    async fn item(&self, id: i64, now: UnixMillis) -> Result<Option<ReviewItem>, StoreError> {
        self.write_unit("expiring a review item", move |conn| {
            conn.execute(SQL.review.expire_one, rusqlite::params![id, now.0])
                .map(|_| Ok(()))
        })
        .await?;
        self.write_unit("reading a review item", move |conn| {
            Ok(sqlite_item(conn, SQL.review.by_id, [id])?.transpose())
        })
        .await
    }

    async fn list_items(
        &self,
        query: &ListQuery,
        now: UnixMillis,
    ) -> Result<Vec<ReviewItem>, StoreError> {
        self.write_unit("expiring review items", move |conn| {
            conn.execute(SQL.review.expire_all, [now.0]).map(|_| Ok(()))
        })
        .await?;
        let status = query.status.map(ItemStatus::as_str);
        let kind = query.kind.clone();
        let limit = limit_of(query);
        let before = query.before;
        self.write_unit("listing review items", move |conn| {
            let mut stmt = conn.prepare_cached(SQL.review.list)?;
            let rows = stmt
                .query_map(
                    rusqlite::params![before, before, status, status, kind, kind, limit],
                    sqlite_item_row,
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut items = Vec::with_capacity(rows.len());
            for row in rows {
                let votes = if row.approvals_needed > 0 {
                    match sqlite_votes(conn, row.id)? {
                        Ok(v) => v,
                        Err(e) => return Ok(Err(e)),
                    }
                } else {
                    Vec::new()
                };
                match row.item(votes) {
                    Ok(i) => items.push(i),
                    Err(e) => return Ok(Err(e)),
                }
            }
            Ok(Ok(items))
        })
        .await
    }

    async fn open_items(&self, now: UnixMillis) -> Result<u64, StoreError> {
        self.write_unit("counting open review items", move |conn| {
            let n: i64 = conn.query_row(SQL.review.open_count, [now.0], |r| r.get(0))?;
            Ok(Ok(u64::try_from(n).unwrap_or(0)))
        })
        .await
    }

    async fn vote(&self, vote: ReviewerAct<'_, Verdict>) -> Result<Voted, StoreError> {
        vote.check().map_err(invalid)?;
        let (id, verdict, now) = (vote.id, vote.choice, vote.now);
        let (reviewer, note) = (vote.reviewer.to_owned(), vote.note.map(str::to_owned));
        self.write_unit("recording a review vote", move |conn| {
            let item = match sqlite_item(conn, SQL.review.by_id, [id])? {
                None => return Ok(Ok(Voted::NotFound)),
                Some(Err(e)) => return Ok(Err(e)),
                Some(Ok(i)) => i,
            };
            if let VotePlan::Answer(a) = plan_vote(&item, &reviewer, now) {
                if a == Voted::NotOpen(ItemStatus::Expired) {
                    conn.execute(SQL.review.expire_one, rusqlite::params![id, now.0])?;
                }
                return Ok(Ok(a));
            }
            let entry = match audit_entry(&item, &reviewer, verdict.audit_outcome(), now) {
                Ok(e) => e,
                Err(e) => return Ok(Err(e)),
            };
            conn.execute(
                SQL.review.insert_vote,
                rusqlite::params![id, reviewer, verdict.as_str(), now.0, note],
            )?;
            let approvals: i64 = conn.query_row(SQL.review.count_approvals, [id], |r| r.get(0))?;
            let status = after_vote(verdict, approvals, item.approvals_needed);
            if status != ItemStatus::Open {
                conn.execute(
                    SQL.review.close,
                    rusqlite::params![status.as_str(), now.0, reviewer, note, status.as_str(), id],
                )?;
            }
            sqlite_audit(conn, &entry)?;
            Ok(Ok(Voted::Recorded(status)))
        })
        .await
    }

    async fn close(&self, closing: ReviewerAct<'_, Closing>) -> Result<Closed, StoreError> {
        closing.check().map_err(invalid)?;
        let (id, status, now) = (closing.id, closing.choice.status(), closing.now);
        let (reviewer, note) = (closing.reviewer.to_owned(), closing.note.map(str::to_owned));
        self.write_unit("closing a review item", move |conn| {
            let item = match sqlite_item(conn, SQL.review.by_id, [id])? {
                None => return Ok(Ok(Closed::NotFound)),
                Some(Err(e)) => return Ok(Err(e)),
                Some(Ok(i)) => i,
            };
            if item.is_approval() {
                return Ok(Ok(Closed::IsApproval));
            }
            if item.status != ItemStatus::Open {
                return Ok(Ok(Closed::NotOpen(item.status)));
            }
            let entry = match audit_entry(&item, &reviewer, status.as_str(), now) {
                Ok(e) => e,
                Err(e) => return Ok(Err(e)),
            };
            conn.execute(
                SQL.review.close,
                rusqlite::params![status.as_str(), now.0, reviewer, note, status.as_str(), id],
            )?;
            sqlite_audit(conn, &entry)?;
            Ok(Ok(Closed::Done))
        })
        .await
    }
}
