//! [`ReviewStore`] on a pooled driver: one implementation for PostgreSQL
//! and MySQL/MariaDB (see `crate::review` for what the backends share).

use toolgate::claim::{AuditEntry, StoreError, StoreErrorKind, UnixMillis};
use toolgate::review::{
    Closed, Closing, ItemStatus, ListQuery, NewItem, Opened, QueueLimits, Requested, ReviewItem,
    ReviewSession, ReviewStore, ReviewerAct, Verdict, Vote, Voted,
};

use super::{PooledStore, with_pooled_bounds};
use crate::common::map_err;
use crate::review::{
    Insert, ItemRow, Live, REQUEST_ATTEMPTS, VotePlan, after_vote, ask, audit_entry, insert_of,
    invalid, judge_live, limit_of, plan_vote, vote_row,
};

/// An item row from an sqlx driver, in `SELECT` order: the one decoder
/// PostgreSQL and MySQL share.
fn sqlx_item_row<R>(r: &R) -> Result<ItemRow, StoreError>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    i64: for<'d> sqlx::Decode<'d, R::Database> + sqlx::Type<R::Database>,
    i32: for<'d> sqlx::Decode<'d, R::Database> + sqlx::Type<R::Database>,
    String: for<'d> sqlx::Decode<'d, R::Database> + sqlx::Type<R::Database>,
    Vec<u8>: for<'d> sqlx::Decode<'d, R::Database> + sqlx::Type<R::Database>,
{
    (|| -> Result<ItemRow, sqlx::Error> {
        Ok(ItemRow {
            id: r.try_get(0)?,
            created_at: r.try_get(1)?,
            kind: r.try_get(2)?,
            reason: r.try_get(3)?,
            tool: r.try_get(4)?,
            proposer: r.try_get(5)?,
            proposer_via: r.try_get(6)?,
            key: r.try_get(7)?,
            fingerprint: r.try_get(8)?,
            version_seen: r.try_get(9)?,
            policy_digest: r.try_get(10)?,
            scope: r.try_get(11)?,
            decision: r.try_get(12)?,
            status: r.try_get(13)?,
            approvals_needed: i64::from(r.try_get::<i32, _>(14)?),
            expires_at: r.try_get(15)?,
            consumed_at: r.try_get(16)?,
            closed_at: r.try_get(17)?,
            closed_by: r.try_get(18)?,
            note: r.try_get(19)?,
            consumed_by: r.try_get(20)?,
        })
    })()
    .map_err(|e| map_err("reading a review item", e))
}

with_pooled_bounds! {
[#[expect(private_bounds, reason = "private helpers over the crate's own drivers")]
impl<DB> PooledStore<DB>]
{
    async fn review_row<'e, E>(
        exec: E,
        sql: &'static str,
        bind: impl FnOnce(
            sqlx::query::Query<'static, DB, <DB as sqlx::Database>::Arguments>,
        ) -> sqlx::query::Query<'static, DB, <DB as sqlx::Database>::Arguments>,
    ) -> Result<Option<ItemRow>, StoreError>
    where
        E: sqlx::Executor<'e, Database = DB>,
    {
        let row = bind(sqlx::query(sql))
            .fetch_optional(exec)
            .await
            .map_err(|e| map_err("reading a review item", e))?;
        row.as_ref().map(sqlx_item_row).transpose()
    }

    async fn review_votes<'e, E>(exec: E, id: i64) -> Result<Vec<Vote>, StoreError>
    where
        E: sqlx::Executor<'e, Database = DB>,
    {
        let rows: Vec<(String, String, i64, Option<String>)> = sqlx::query_as(DB::SQL.review.votes)
            .bind(id)
            .fetch_all(exec)
            .await
            .map_err(|e| map_err("reading review votes", e))?;
        rows.into_iter()
            .map(|(r, v, at, note)| vote_row(r, &v, at, note))
            .collect()
    }

    async fn review_full(&self, row: ItemRow) -> Result<ReviewItem, StoreError> {
        let votes = if row.approvals_needed > 0 {
            Self::review_votes(self.pool(), row.id).await?
        } else {
            Vec::new()
        };
        row.item(votes)
    }

    async fn review_insert(&self, v: Insert) -> Result<Option<i64>, StoreError> {
        let q = sqlx::query(DB::SQL.review.insert)
            .bind(v.created_at)
            .bind(v.kind)
            .bind(v.reason)
            .bind(v.tool)
            .bind(v.proposer)
            .bind(v.proposer_via)
            .bind(v.key)
            .bind(v.fingerprint)
            .bind(v.version_seen)
            .bind(v.policy_digest)
            .bind(v.scope)
            .bind(v.decision)
            .bind(v.approvals_needed)
            .bind(v.expires_at)
            .bind(v.open_grant)
            .bind(v.queue_principal)
            .bind(v.dedup)
            .bind(v.summary);
        DB::insert_id(self.pool(), q).await
    }

    /// Whether one more open item for `principal` stays within `limits`:
    /// each count stops at its cap, so the work is bounded by the caps
    /// whatever the table holds. Not atomic with the insert that follows:
    /// concurrent openings on several connections may pass a cap by at most
    /// their number (docs/http-api.md).
    async fn room(
        &self,
        principal: &str,
        limits: &QueueLimits,
        now: UnixMillis,
    ) -> Result<bool, StoreError> {
        let what = "counting open review items";
        let cap = |c: u64| i64::try_from(c).unwrap_or(i64::MAX);
        let theirs: i64 = sqlx::query_scalar(DB::SQL.review.open_of)
            .bind(principal)
            .bind(now.0)
            .bind(cap(limits.per_principal))
            .fetch_one(self.pool())
            .await
            .map_err(|e| map_err(what, e))?;
        if theirs >= cap(limits.per_principal) {
            return Ok(false);
        }
        let all: i64 = sqlx::query_scalar(DB::SQL.review.open_all)
            .bind(now.0)
            .bind(cap(limits.total))
            .fetch_one(self.pool())
            .await
            .map_err(|e| map_err(what, e))?;
        Ok(all < cap(limits.total))
    }

    /// Marks item `id` expired if its time has passed.
    async fn expire_one(&self, id: i64, now: UnixMillis) -> Result<(), StoreError> {
        sqlx::query(DB::SQL.review.expire_one)
            .bind(id)
            .bind(now.0)
            .execute(self.pool())
            .await
            .map_err(|e| map_err("expiring a review item", e))?;
        Ok(())
    }

    async fn by_dedup(&self, dedup: &[u8; 32]) -> Result<Option<i64>, StoreError> {
        sqlx::query_scalar(DB::SQL.review.by_dedup)
            .bind(dedup.to_vec())
            .fetch_optional(self.pool())
            .await
            .map_err(|e| map_err("reading a rejection's review item", e))
    }

    async fn review_audit<'e, E>(exec: E, e: &AuditEntry) -> Result<(), StoreError>
    where
        E: sqlx::Executor<'e, Database = DB>,
    {
        sqlx::query(DB::SQL.review.audit)
            .bind(e.at().0)
            .bind(e.actor())
            .bind(e.tool())
            .bind(e.outcome())
            .bind(e.reason())
            .bind(e.key().map(|k| k.as_bytes().as_slice()))
            .bind(e.fingerprint().map(|f| f.as_bytes().as_slice()))
            .bind(e.via())
            .execute(exec)
            .await
            .map(drop)
            .map_err(|e| map_err("appending a reviewer's audit entry", e))
    }

    /// One page of items.
    async fn list(&self, query: &ListQuery) -> Result<Vec<ItemRow>, StoreError> {
        let status = query.status.map(ItemStatus::as_str);
        let rows = sqlx::query(DB::SQL.review.list)
            .bind(query.before)
            .bind(query.before)
            .bind(status)
            .bind(status)
            .bind(query.kind.as_deref())
            .bind(query.kind.as_deref())
            .bind(limit_of(query))
            .fetch_all(self.pool())
            .await
            .map_err(|e| map_err("listing review items", e))?;
        rows.iter().map(sqlx_item_row).collect()
    }

    /// Closes an item inside the caller's transaction.
    async fn close_item(
        tx: &mut DB::Connection,
        status: &str,
        at: i64,
        by: &str,
        note: Option<&str>,
        id: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(DB::SQL.review.close)
            .bind(status)
            .bind(at)
            .bind(by)
            .bind(note)
            .bind(status)
            .bind(id)
            .execute(tx)
            .await
            .map(drop)
            .map_err(|e| map_err("closing a review item", e))
    }
}
}

with_pooled_bounds! {
[impl<DB> ReviewStore for PooledStore<DB>]
{
    async fn open_session(
        &self,
        digest: [u8; 32],
        session: ReviewSession,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        sqlx::query(DB::SQL.review.session_purge)
            .bind(now.0)
            .execute(self.pool())
            .await
            .map_err(|e| map_err("purging reviewer sessions", e))?;
        sqlx::query(DB::SQL.review.session_insert)
            .bind(digest.to_vec())
            .bind(session.principal)
            .bind(session.csrf)
            .bind(session.expires_at.0)
            .execute(self.pool())
            .await
            .map_err(|e| map_err("opening a reviewer session", e))?;
        Ok(())
    }

    async fn session(
        &self,
        digest: [u8; 32],
        now: UnixMillis,
    ) -> Result<Option<ReviewSession>, StoreError> {
        let row: Option<(String, String, i64)> = sqlx::query_as(DB::SQL.review.session_get)
            .bind(digest.to_vec())
            .bind(now.0)
            .fetch_optional(self.pool())
            .await
            .map_err(|e| map_err("reading a reviewer session", e))?;
        Ok(row.map(|(principal, csrf, expires_at)| ReviewSession {
            principal,
            csrf,
            expires_at: UnixMillis(expires_at),
        }))
    }

    async fn close_session(&self, digest: [u8; 32]) -> Result<(), StoreError> {
        sqlx::query(DB::SQL.review.session_delete)
            .bind(digest.to_vec())
            .execute(self.pool())
            .await
            .map_err(|e| map_err("closing a reviewer session", e))?;
        Ok(())
    }

    async fn open_item(&self, item: NewItem, limits: &QueueLimits) -> Result<Opened, StoreError> {
        let dedup = item.dedup(limits.rejection_window_ms);
        if let Some(d) = &dedup
            && let Some(id) = self.by_dedup(d).await?
        {
            return Ok(Opened::Existing(id));
        }
        if !self.room(item.queue_principal(), limits, item.at).await? {
            return Ok(Opened::Full);
        }
        let inserted = self.review_insert(insert_of(item, None, dedup)).await?;
        let Some(d) = dedup else {
            return inserted.map(Opened::Created).ok_or_else(|| {
                StoreError::new(StoreErrorKind::Database, "no id for a new review item")
            });
        };
        // A clash on `dedup` inserted nothing: the racing request's item
        // is this rejection's.
        match self.by_dedup(&d).await? {
            Some(id) if inserted == Some(id) => Ok(Opened::Created(id)),
            Some(id) => Ok(Opened::Existing(id)),
            None => Err(StoreError::new(
                StoreErrorKind::Database,
                "a rejection's review item is neither new nor found",
            )),
        }
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
        let row = insert_of(item.clone(), Some(digest), None);
        // The id this call inserted, if it did: the row read back by
        // its grant is then this call's.
        let mut inserted = None;
        for _ in 0..REQUEST_ATTEMPTS {
            let live =
                Self::review_row(self.pool(), DB::SQL.review.by_grant, |q| q.bind(digest.to_vec())).await?;
            if let Some(row) = live {
                let live = self.review_full(row).await?;
                match judge_live(&live, &policy_digest, now) {
                    Live::Answer(Requested::Pending { item, .. }) => {
                        return Ok(Requested::Pending {
                            item,
                            created: inserted == Some(item),
                        });
                    }
                    Live::Answer(r) => return Ok(r),
                    Live::Expire(id) => {
                        self.expire_one(id, now).await?;
                        continue;
                    }
                }
            }
            let denied: Option<(i64, Option<String>)> = sqlx::query_as(DB::SQL.review.denied)
                .bind(key.as_bytes().as_slice())
                .bind(fingerprint.as_bytes().as_slice())
                .bind(version.as_str())
                .bind(policy_digest.as_str())
                .fetch_optional(self.pool())
                .await
                .map_err(|e| map_err("reading a denial", e))?;
            if let Some((item, by)) = denied {
                return Ok(Requested::Denied { item, by });
            }
            if inserted.is_none() && !self.room(item.queue_principal(), limits, now).await? {
                return Ok(Requested::QueueFull);
            }
            // A clash on `open_grant` inserts nothing; either way the
            // live row is read back by its grant.
            inserted = self.review_insert(row.clone()).await?;
        }
        Err(StoreError::new(
            StoreErrorKind::Contention,
            "a request for approval kept losing races",
        ))
    }

    async fn item(&self, id: i64, now: UnixMillis) -> Result<Option<ReviewItem>, StoreError> {
        self.expire_one(id, now).await?;
        match Self::review_row(self.pool(), DB::SQL.review.by_id, |q| q.bind(id)).await? {
            Some(row) => self.review_full(row).await.map(Some),
            None => Ok(None),
        }
    }

    async fn list_items(
        &self,
        query: &ListQuery,
        now: UnixMillis,
    ) -> Result<Vec<ReviewItem>, StoreError> {
        sqlx::query(DB::SQL.review.expire_all)
            .bind(now.0)
            .execute(self.pool())
            .await
            .map_err(|e| map_err("expiring review items", e))?;
        let rows = self.list(query).await?;
        let mut items = Vec::with_capacity(rows.len());
        for row in rows {
            items.push(self.review_full(row).await?);
        }
        Ok(items)
    }

    async fn open_items(&self, now: UnixMillis) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar(DB::SQL.review.open_count)
            .bind(now.0)
            .fetch_one(self.pool())
            .await
            .map_err(|e| map_err("counting open review items", e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn vote(&self, vote: ReviewerAct<'_, Verdict>) -> Result<Voted, StoreError> {
        vote.check().map_err(invalid)?;
        let (id, reviewer, verdict) = (vote.id, vote.reviewer, vote.choice);
        let (note, now) = (vote.note, vote.now);
        let what = "recording a review vote";
        let mut tx = self.pool().begin().await.map_err(|e| map_err(what, e))?;
        let Some(row) = Self::review_row(&mut *tx, DB::SQL.review.by_id_locked, |q| q.bind(id)).await? else {
            return Ok(Voted::NotFound);
        };
        let votes = Self::review_votes(&mut *tx, id).await?;
        let item = row.item(votes)?;
        if let VotePlan::Answer(a) = plan_vote(&item, reviewer, now) {
            if a == Voted::NotOpen(ItemStatus::Expired) {
                sqlx::query(DB::SQL.review.expire_one)
                    .bind(id)
                    .bind(now.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| map_err(what, e))?;
                tx.commit().await.map_err(|e| map_err(what, e))?;
            }
            return Ok(a);
        }
        sqlx::query(DB::SQL.review.insert_vote)
            .bind(id)
            .bind(reviewer)
            .bind(verdict.as_str())
            .bind(now.0)
            .bind(note)
            .execute(&mut *tx)
            .await
            .map_err(|e| map_err(what, e))?;
        let approvals: i64 = sqlx::query_scalar(DB::SQL.review.count_approvals)
            .bind(id)
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| map_err(what, e))?;
        let status = after_vote(verdict, approvals, item.approvals_needed);
        if status != ItemStatus::Open {
            Self::close_item(&mut *tx, status.as_str(), now.0, reviewer, note, id).await?;
        }
        let entry = audit_entry(&item, reviewer, verdict.audit_outcome(), now)?;
        Self::review_audit(&mut *tx, &entry).await?;
        tx.commit().await.map_err(|e| map_err(what, e))?;
        Ok(Voted::Recorded(status))
    }

    async fn close(&self, closing: ReviewerAct<'_, Closing>) -> Result<Closed, StoreError> {
        closing.check().map_err(invalid)?;
        let (id, reviewer, note, now) = (closing.id, closing.reviewer, closing.note, closing.now);
        let what = "closing a review item";
        let mut tx = self.pool().begin().await.map_err(|e| map_err(what, e))?;
        let Some(row) = Self::review_row(&mut *tx, DB::SQL.review.by_id_locked, |q| q.bind(id)).await? else {
            return Ok(Closed::NotFound);
        };
        let item = row.item(Vec::new())?;
        if item.is_approval() {
            return Ok(Closed::IsApproval);
        }
        if item.status != ItemStatus::Open {
            return Ok(Closed::NotOpen(item.status));
        }
        let status = closing.choice.status();
        Self::close_item(&mut *tx, status.as_str(), now.0, reviewer, note, id).await?;
        let entry = audit_entry(&item, reviewer, status.as_str(), now)?;
        Self::review_audit(&mut *tx, &entry).await?;
        tx.commit().await.map_err(|e| map_err(what, e))?;
        Ok(Closed::Done)
    }
}
}
