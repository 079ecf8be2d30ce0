//! The reference review store, in memory beside
//! [`MemoryClaimStore`]'s claims: the same rules as the SQL stores, one
//! critical section per operation.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::{
    Closed, Closing, ItemStatus, ListQuery, MAX_LISTED_SCOPE_BYTES, NewItem, Opened, QueueLimits,
    Requested, ReviewItem, ReviewSession, ReviewStore, ReviewerAct, Verdict, Vote, Voted,
    open_grant, reviewer_audit,
};
use crate::claim::{
    ClaimRequest, ClaimStore, GrantUse, MemoryClaimStore, StoreError, StoreErrorKind, UnixMillis,
};
use crate::idempotency::{
    Begun, Bounds, IdemBegin, IdemFinish, IdemRun, IdempotencyStore, PURGE_BATCH, Remembered, cost,
};

#[derive(Default)]
struct State {
    /// Ids start at 1 and only grow.
    last: i64,
    items: Vec<ReviewItem>,
    /// Live (open or approved) approval items by their tuple's digest.
    live: HashMap<[u8; 32], i64>,
    /// Rejection items by their [`NewItem::dedup`] digest.
    dedup: HashMap<[u8; 32], i64>,
    /// Reviewer logins by their token's digest.
    sessions: HashMap<[u8; 32], ReviewSession>,
    /// The `Idempotency-Key` memory ([`crate::idempotency`]), by
    /// (principal, key).
    idem: HashMap<(String, String), IdemRow>,
    /// Each principal's finished answers and their bytes ([`cost`]): the
    /// running totals its quota is judged on.
    idem_totals: HashMap<String, (u64, u64)>,
}

/// One `Idempotency-Key` row.
struct IdemRow {
    payload: [u8; 32],
    runner: String,
    lease_until: UnixMillis,
    /// When it finished, and its answer.
    done: Option<(UnixMillis, Remembered)>,
}

impl State {
    fn get_mut(&mut self, id: i64) -> Option<&mut ReviewItem> {
        // Ids are dense and ascending: item `id` is at `id - 1`.
        let i = usize::try_from(id.checked_sub(1)?).ok()?;
        self.items.get_mut(i)
    }

    /// Marks `id` expired if it has lapsed at `now`; returns its status.
    fn settle(&mut self, id: i64, now: UnixMillis) -> Option<ItemStatus> {
        let item = self.get_mut(id)?;
        let status = item.status_at(now);
        if status != item.status {
            item.status = status;
            if let Some(t) = tuple(item) {
                self.live.remove(&t);
            }
        }
        Some(status)
    }

    fn insert(&mut self, item: NewItem) -> i64 {
        self.last += 1;
        let id = self.last;
        let (policy_digest, approvals_needed, expires_at) = match &item.approval {
            Some(t) => (
                Some(t.policy_digest.clone()),
                t.approvers.max(1),
                Some(t.expires_at),
            ),
            None => (None, 0, None),
        };
        self.items.push(ReviewItem {
            id,
            created_at: item.at,
            kind: item.kind,
            reason: item.reason,
            tool: item.tool,
            proposer: item.proposer,
            proposer_via: item.proposer_via,
            key: item.key,
            fingerprint: item.fingerprint,
            version_seen: item.version_seen,
            policy_digest,
            scope: item.scope,
            decision: item.decision,
            status: ItemStatus::Open,
            approvals_needed,
            expires_at,
            consumed_at: None,
            consumed_by: None,
            closed_at: None,
            closed_by: None,
            note: None,
            votes: Vec::new(),
        });
        id
    }
}

fn tuple(item: &ReviewItem) -> Option<[u8; 32]> {
    Some(open_grant(
        item.key.as_ref()?,
        item.fingerprint.as_ref()?,
        item.version_seen.as_deref()?,
        item.policy_digest.as_deref()?,
        &item.proposer,
        item.proposer_via.as_deref(),
    ))
}

/// Whether the approval tuple of `a` (key, fingerprint, version, policy
/// digest) is `b`'s, whoever proposed either: a denial holds for the
/// proposal, not for one proposer.
fn same_proposal(a: &ReviewItem, b: &NewItem) -> bool {
    let Some((key, fingerprint, version, terms)) = b.approval_tuple() else {
        return false;
    };
    a.key.as_ref() == Some(key)
        && a.fingerprint.as_ref() == Some(fingerprint)
        && a.version_seen.as_deref() == Some(version)
        && a.policy_digest.as_deref() == Some(terms.policy_digest.as_str())
}

impl State {
    /// Whether opening one more item for `principal` stays within `limits`.
    fn room(&self, principal: &str, limits: &QueueLimits, now: UnixMillis) -> bool {
        let open = self
            .items
            .iter()
            .filter(|i| i.status_at(now) == ItemStatus::Open);
        let (mut total, mut theirs) = (0u64, 0u64);
        for i in open {
            total += 1;
            if i.proposer_via.as_deref().unwrap_or(&i.proposer) == principal {
                theirs += 1;
            }
        }
        total < limits.total && theirs < limits.per_principal
    }
}

/// Review items in memory; part of [`MemoryClaimStore`].
#[derive(Default)]
pub struct MemoryReviewStore {
    state: Mutex<State>,
}

impl MemoryReviewStore {
    fn lock(&self) -> Result<MutexGuard<'_, State>, StoreError> {
        self.state
            .lock()
            .map_err(|_| StoreError::new(StoreErrorKind::Invariant, "review lock poisoned"))
    }

    /// Uses the grant, if item `grant.item` is approved, unused, unexpired,
    /// bound to exactly this request's tuple, proposed by this request's
    /// proposer and `via`, and voted on by neither of them: the same rule
    /// as the SQL stores' `UPDATE … WHERE`. Called by the claim inside its
    /// critical section.
    pub(crate) fn consume(
        &self,
        grant: &GrantUse,
        request: &ClaimRequest,
    ) -> Result<bool, StoreError> {
        let now = request.now();
        let proposer = request.proposal().proposer();
        let via = request.via();
        let mut state = self.lock()?;
        let Some(item) = state.get_mut(grant.item) else {
            return Ok(false);
        };
        let voted = item
            .votes
            .iter()
            .any(|v| v.reviewer == proposer || Some(v.reviewer.as_str()) == via);
        let usable = item.status == ItemStatus::Approved
            && item.consumed_at.is_none()
            && item.expires_at.is_some_and(|e| e > now)
            && item.key.as_ref() == Some(request.key())
            && item.fingerprint.as_ref() == Some(request.fingerprint())
            && item.version_seen.as_deref() == Some(request.proposal().version_seen())
            && item.policy_digest.as_deref() == Some(grant.policy_digest.as_str())
            && item.proposer == proposer
            && item.proposer_via.as_deref() == via
            && !voted;
        if usable {
            item.consumed_at = Some(now);
            item.consumed_by = Some(proposer.to_owned());
        }
        Ok(usable)
    }

    fn request_now(
        &self,
        item: NewItem,
        now: UnixMillis,
        limits: &QueueLimits,
    ) -> Result<Requested, StoreError> {
        let (Some(digest), Some((_, _, _, terms))) = (item.grant_digest(), item.approval_tuple())
        else {
            return Err(StoreError::new(
                StoreErrorKind::Invariant,
                "a request for approval needs a key, fingerprint, version and terms",
            ));
        };
        let mut state = self.lock()?;
        if let Some(&id) = state.live.get(&digest) {
            match state.settle(id, now) {
                Some(ItemStatus::Open) => {
                    return Ok(Requested::Pending {
                        item: id,
                        created: false,
                    });
                }
                Some(ItemStatus::Approved) => {
                    let live = state.get_mut(id).filter(|i| i.consumed_at.is_none());
                    if let Some(i) = live {
                        return Ok(Requested::Granted(GrantUse {
                            item: i.id,
                            policy_digest: terms.policy_digest.clone(),
                        }));
                    }
                    // Used: its claim exists, so nothing asks again; a new
                    // request would have to be a new item.
                    return Ok(Requested::Pending {
                        item: id,
                        created: false,
                    });
                }
                _ => {}
            }
        }
        // The newest denial of this proposal is final for it, whoever
        // proposed it.
        let denied = state
            .items
            .iter()
            .rev()
            .find(|i| i.status == ItemStatus::Denied && same_proposal(i, &item));
        if let Some(d) = denied {
            return Ok(Requested::Denied {
                item: d.id,
                by: d.closed_by.clone(),
            });
        }
        if !state.room(item.queue_principal(), limits, now) {
            return Ok(Requested::QueueFull);
        }
        let id = state.insert(item);
        state.live.insert(digest, id);
        Ok(Requested::Pending {
            item: id,
            created: true,
        })
    }

    fn vote_now(
        &self,
        vote: ReviewerAct<'_, Verdict>,
    ) -> Result<(Voted, Option<ReviewItem>), StoreError> {
        vote.check().map_err(invalid)?;
        let ReviewerAct {
            id,
            reviewer,
            choice: verdict,
            note,
            now,
        } = vote;
        let mut state = self.lock()?;
        let Some(status) = state.settle(id, now) else {
            return Ok((Voted::NotFound, None));
        };
        let Some(item) = state.get_mut(id) else {
            return Ok((Voted::NotFound, None));
        };
        if !item.is_approval() {
            return Ok((Voted::NotApproval, None));
        }
        if status != ItemStatus::Open {
            return Ok((Voted::NotOpen(status), None));
        }
        if item.proposed_by(reviewer) {
            return Ok((Voted::SelfApproval, None));
        }
        if item.votes.iter().any(|v| v.reviewer == reviewer) {
            return Ok((Voted::AlreadyVoted, None));
        }
        item.votes.push(Vote {
            reviewer: reviewer.to_owned(),
            verdict,
            at: now,
            note: note.map(str::to_owned),
        });
        let closes = match verdict {
            Verdict::Deny => Some(ItemStatus::Denied),
            Verdict::Approve if item.approvals() >= item.approvals_needed => {
                Some(ItemStatus::Approved)
            }
            Verdict::Approve => None,
        };
        if let Some(s) = closes {
            item.status = s;
            item.closed_at = Some(now);
            item.closed_by = Some(reviewer.to_owned());
            item.note = note.map(str::to_owned);
        }
        let snapshot = item.clone();
        if closes == Some(ItemStatus::Denied)
            && let Some(t) = tuple(&snapshot)
        {
            state.live.remove(&t);
        }
        Ok((Voted::Recorded(snapshot.status), Some(snapshot)))
    }

    fn close_now(
        &self,
        closing: ReviewerAct<'_, Closing>,
    ) -> Result<(Closed, Option<ReviewItem>), StoreError> {
        closing.check().map_err(invalid)?;
        let mut state = self.lock()?;
        let Some(status) = state.settle(closing.id, closing.now) else {
            return Ok((Closed::NotFound, None));
        };
        let Some(item) = state.get_mut(closing.id) else {
            return Ok((Closed::NotFound, None));
        };
        if item.is_approval() {
            return Ok((Closed::IsApproval, None));
        }
        if status != ItemStatus::Open {
            return Ok((Closed::NotOpen(status), None));
        }
        item.status = closing.choice.status();
        item.closed_at = Some(closing.now);
        item.closed_by = Some(closing.reviewer.to_owned());
        item.note = closing.note.map(str::to_owned);
        Ok((Closed::Done, Some(item.clone())))
    }
}

fn invalid(e: crate::claim::CorruptRecord) -> StoreError {
    StoreError::new(StoreErrorKind::Invariant, e.to_string())
}

impl ReviewStore for MemoryClaimStore {
    async fn open_session(
        &self,
        digest: [u8; 32],
        session: ReviewSession,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        let mut state = self.reviews.lock()?;
        state.sessions.retain(|_, s| s.expires_at > now);
        state.sessions.insert(digest, session);
        Ok(())
    }

    async fn session(
        &self,
        digest: [u8; 32],
        now: UnixMillis,
    ) -> Result<Option<ReviewSession>, StoreError> {
        let state = self.reviews.lock()?;
        Ok(state
            .sessions
            .get(&digest)
            .filter(|s| s.expires_at > now)
            .cloned())
    }

    async fn close_session(&self, digest: [u8; 32]) -> Result<(), StoreError> {
        self.reviews.lock()?.sessions.remove(&digest);
        Ok(())
    }

    async fn open_item(&self, item: NewItem, limits: &QueueLimits) -> Result<Opened, StoreError> {
        let mut item = item;
        // Only request_approval opens approval items.
        item.approval = None;
        let dedup = item.dedup(limits.rejection_window_ms);
        let mut state = self.reviews.lock()?;
        if let Some(id) = dedup.and_then(|d| state.dedup.get(&d).copied()) {
            return Ok(Opened::Existing(id));
        }
        if !state.room(item.queue_principal(), limits, item.at) {
            return Ok(Opened::Full);
        }
        let id = state.insert(item);
        if let Some(d) = dedup {
            state.dedup.insert(d, id);
        }
        Ok(Opened::Created(id))
    }

    async fn request_approval(
        &self,
        item: NewItem,
        now: UnixMillis,
        limits: &QueueLimits,
    ) -> Result<Requested, StoreError> {
        self.reviews.request_now(item, now, limits)
    }

    async fn item(&self, id: i64, now: UnixMillis) -> Result<Option<ReviewItem>, StoreError> {
        let mut state = self.reviews.lock()?;
        state.settle(id, now);
        Ok(state.get_mut(id).map(|i| i.clone()))
    }

    async fn list_items(
        &self,
        query: &ListQuery,
        now: UnixMillis,
    ) -> Result<Vec<ReviewItem>, StoreError> {
        let mut state = self.reviews.lock()?;
        let ids: Vec<i64> = state.items.iter().map(|i| i.id).collect();
        for id in ids {
            state.settle(id, now);
        }
        let limit = usize::try_from(query.limit.clamp(1, super::MAX_PAGE)).unwrap_or(1);
        Ok(state
            .items
            .iter()
            .rev()
            .filter(|i| query.before.is_none_or(|b| i.id < b))
            .filter(|i| query.status.is_none_or(|s| i.status == s))
            .filter(|i| query.kind.as_ref().is_none_or(|k| i.kind.as_str() == k))
            .take(limit)
            .map(|i| ReviewItem {
                decision: i.decision.listed(),
                scope: i
                    .scope
                    .clone()
                    .filter(|s| s.len() <= MAX_LISTED_SCOPE_BYTES),
                ..i.clone()
            })
            .collect())
    }

    async fn open_items(&self, now: UnixMillis) -> Result<u64, StoreError> {
        let state = self.reviews.lock()?;
        let n = state
            .items
            .iter()
            .filter(|i| i.status_at(now) == ItemStatus::Open)
            .count();
        Ok(u64::try_from(n).unwrap_or(u64::MAX))
    }

    async fn vote(&self, vote: ReviewerAct<'_, Verdict>) -> Result<Voted, StoreError> {
        let (voted, item) = self.reviews.vote_now(vote)?;
        if let Some(item) = item {
            // One lock per map here, so the entry follows the vote; the SQL
            // stores write both in one transaction.
            let outcome = vote.choice.audit_outcome();
            let entry = reviewer_audit(&item, vote.reviewer, outcome, vote.now).map_err(invalid)?;
            self.append_audit(&entry).await?;
        }
        Ok(voted)
    }

    async fn close(&self, closing: ReviewerAct<'_, Closing>) -> Result<Closed, StoreError> {
        let (closed, item) = self.reviews.close_now(closing)?;
        if let Some(item) = item {
            let (reviewer, outcome) = (closing.reviewer, closing.choice.status().as_str());
            let entry = reviewer_audit(&item, reviewer, outcome, closing.now).map_err(invalid)?;
            self.append_audit(&entry).await?;
        }
        Ok(closed)
    }
}

impl IdempotencyStore for MemoryClaimStore {
    async fn idem_begin(&self, begin: IdemBegin<'_>) -> Result<Begun, StoreError> {
        let mut state = self.reviews.lock()?;
        let id = (begin.principal.to_owned(), begin.key.to_owned());
        if let Some(row) = state.idem.get_mut(&id) {
            if row.payload != begin.payload {
                return Ok(Begun::Mismatch);
            }
            match &row.done {
                Some((_, answer)) => return Ok(Begun::Replay(answer.clone())),
                None if row.lease_until > begin.now => return Ok(Begun::InFlight),
                None => {}
            }
        }
        state.idem.insert(
            id,
            IdemRow {
                payload: begin.payload,
                runner: begin.runner.to_owned(),
                lease_until: begin.lease_until,
                done: None,
            },
        );
        Ok(Begun::Fresh)
    }

    async fn idem_finish(&self, finish: IdemFinish<'_>) -> Result<(), StoreError> {
        let mut state = self.reviews.lock()?;
        let c = finish.cost();
        let (principal, bounds) = (finish.principal, finish.bounds);
        let Some(row) = state
            .idem
            .get_mut(&(principal.to_owned(), finish.key.to_owned()))
        else {
            return Ok(());
        };
        if row.done.is_some() || row.runner != finish.runner {
            return Ok(());
        }
        row.done = Some((finish.now, finish.answer));
        let totals = state.idem_totals.entry(principal.to_owned()).or_default();
        totals.0 += 1;
        totals.1 += c;
        let (mut count, mut bytes) = *totals;
        if count <= bounds.capacity && bytes <= bounds.max_bytes {
            return Ok(());
        }
        // This principal's finished answers, oldest first; never another's.
        let mut theirs: Vec<(String, i64, u64)> = state
            .idem
            .iter()
            .filter(|(id, _)| id.0 == principal)
            .filter_map(|(id, r)| {
                let (at, answer) = r.done.as_ref()?;
                Some((id.1.clone(), at.0, cost(&id.0, &id.1, answer.body.len())))
            })
            .collect();
        theirs.sort_by_key(|d| d.1);
        for (k, _, c) in theirs.into_iter().take(PURGE_BATCH as usize) {
            if count <= bounds.capacity && bytes <= bounds.max_bytes {
                break;
            }
            state.idem.remove(&(principal.to_owned(), k));
            count -= 1;
            bytes -= c;
        }
        state
            .idem_totals
            .insert(principal.to_owned(), (count, bytes));
        Ok(())
    }

    async fn idem_forget(&self, run: IdemRun<'_>) -> Result<(), StoreError> {
        let mut state = self.reviews.lock()?;
        let id = (run.principal.to_owned(), run.key.to_owned());
        if state
            .idem
            .get(&id)
            .is_some_and(|r| r.done.is_none() && r.runner == run.runner)
        {
            state.idem.remove(&id);
        }
        Ok(())
    }

    async fn idem_purge(&self, now: UnixMillis, bounds: Bounds) -> Result<(), StoreError> {
        let mut state = self.reviews.lock()?;
        let oldest = now.0.saturating_sub(bounds.retention_ms);
        let gone: Vec<((String, String), Option<u64>)> = state
            .idem
            .iter()
            .filter_map(|(id, r)| match &r.done {
                Some((at, answer)) if at.0 <= oldest => {
                    Some((id.clone(), Some(cost(&id.0, &id.1, answer.body.len()))))
                }
                None if r.lease_until <= now => Some((id.clone(), None)),
                _ => None,
            })
            .take(PURGE_BATCH as usize)
            .collect();
        for (id, done) in gone {
            state.idem.remove(&id);
            if let Some(c) = done
                && let Some(t) = state.idem_totals.get_mut(&id.0)
            {
                t.0 = t.0.saturating_sub(1);
                t.1 = t.1.saturating_sub(c);
            }
        }
        Ok(())
    }
}
