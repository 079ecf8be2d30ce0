//! [`ReviewStore`] on the claim database (migrations 0003 and 0005): review
//! items, approvals and reviewer page logins are rows beside the claims, so
//! every replica sees them, they survive restarts, and a claim uses an
//! approval in its own transaction.
//!
//! This module holds what every backend shares: an item row and its
//! checks, what a vote or a request for approval does, the row a new item
//! is inserted as. The stores are `pooled/review.rs` (PostgreSQL and
//! MySQL, one implementation over the driver) and `sqlite/review.rs` (each
//! call one unit of the group-commit writer, whose units run one at a
//! time); the statements are in each backend's `sql.rs`.
//!
//! A vote or a closing is one transaction with its audit entry, under a
//! lock on the item's row (`FOR UPDATE`; on SQLite the writer's own
//! serialisation). A request for approval needs no transaction: each of
//! its statements is atomic, and the unique `open_grant` column keeps one
//! live item per tuple however many retries race; the loop reads the
//! winner's row back.

use toolgate::claim::{
    AuditEntry, CorruptRecord, Fingerprint, GrantUse, OperationKey, StoreError, StoreErrorKind,
    UnixMillis,
};
use toolgate::pipeline::{Outcome, Reason};
use toolgate::review::{
    ItemDecision, ItemStatus, ListQuery, MAX_PAGE, NewItem, Requested, ReviewItem, Verdict, Vote,
    Voted, reviewer_audit,
};

/// How many times a request for approval re-reads after losing a race.
pub(crate) const REQUEST_ATTEMPTS: u32 = 8;

/// An item row's columns, in the order every `SELECT` here names them.
pub(crate) struct ItemRow {
    pub(crate) id: i64,
    pub(crate) created_at: i64,
    pub(crate) kind: String,
    pub(crate) reason: Option<String>,
    pub(crate) tool: Option<String>,
    pub(crate) proposer: String,
    pub(crate) proposer_via: Option<String>,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) fingerprint: Option<Vec<u8>>,
    pub(crate) version_seen: Option<String>,
    pub(crate) policy_digest: Option<String>,
    pub(crate) scope: Option<String>,
    pub(crate) decision: String,
    pub(crate) status: String,
    pub(crate) approvals_needed: i64,
    pub(crate) expires_at: Option<i64>,
    pub(crate) consumed_at: Option<i64>,
    pub(crate) closed_at: Option<i64>,
    pub(crate) closed_by: Option<String>,
    pub(crate) note: Option<String>,
    pub(crate) consumed_by: Option<String>,
}

pub(crate) fn corrupt(e: CorruptRecord) -> StoreError {
    StoreError::new(StoreErrorKind::Corrupt, format!("review item: {e}"))
}

impl ItemRow {
    /// Validates a row: a kind, reason, status, key or fingerprint that
    /// does not read is a corrupt row, never shown.
    pub(crate) fn item(self, votes: Vec<Vote>) -> Result<ReviewItem, StoreError> {
        let bad = |field: &'static str, why: String| corrupt(CorruptRecord::new(field, why));
        let kind = Outcome::parse(&self.kind)
            .ok_or_else(|| bad("kind", format!("names no outcome: {:?}", self.kind)))?;
        let reason = self
            .reason
            .map(|r| {
                Reason::parse(&r).ok_or_else(|| bad("reason", format!("names no reason: {r:?}")))
            })
            .transpose()?;
        let status = ItemStatus::parse(&self.status)
            .ok_or_else(|| bad("status", format!("unknown status {:?}", self.status)))?;
        let key = self
            .key
            .map(|k| OperationKey::from_slice(&k))
            .transpose()
            .map_err(|e| bad("operation_key", e.to_string()))?;
        let fingerprint = self
            .fingerprint
            .map(|f| Fingerprint::from_slice(&f))
            .transpose()
            .map_err(|e| bad("fingerprint", e.to_string()))?;
        Ok(ReviewItem {
            id: self.id,
            created_at: UnixMillis(self.created_at),
            kind,
            reason,
            tool: self.tool,
            proposer: self.proposer,
            proposer_via: self.proposer_via,
            key,
            fingerprint,
            version_seen: self.version_seen,
            policy_digest: self.policy_digest,
            scope: self.scope,
            decision: ItemDecision::decode(&self.decision).map_err(corrupt)?,
            status,
            approvals_needed: u32::try_from(self.approvals_needed)
                .map_err(|_| bad("approvals_needed", "out of range".into()))?,
            expires_at: self.expires_at.map(UnixMillis),
            consumed_at: self.consumed_at.map(UnixMillis),
            consumed_by: self.consumed_by,
            closed_at: self.closed_at.map(UnixMillis),
            closed_by: self.closed_by,
            note: self.note,
            votes,
        })
    }
}

pub(crate) fn vote_row(
    reviewer: String,
    verdict: &str,
    at: i64,
    note: Option<String>,
) -> Result<Vote, StoreError> {
    Ok(Vote {
        reviewer,
        verdict: Verdict::parse(verdict).ok_or_else(|| {
            corrupt(CorruptRecord::new(
                "verdict",
                format!("unknown verdict {verdict:?}"),
            ))
        })?,
        at: UnixMillis(at),
        note,
    })
}

/// What a vote does to its item, decided from the item read under lock.
pub(crate) enum VotePlan {
    Answer(Voted),
    /// Insert the vote; then close with this status if the count says so.
    Insert,
}

pub(crate) fn plan_vote(item: &ReviewItem, reviewer: &str, now: UnixMillis) -> VotePlan {
    if !item.is_approval() {
        return VotePlan::Answer(Voted::NotApproval);
    }
    let status = item.status_at(now);
    if status != ItemStatus::Open {
        return VotePlan::Answer(Voted::NotOpen(status));
    }
    if item.proposed_by(reviewer) {
        return VotePlan::Answer(Voted::SelfApproval);
    }
    if item.votes.iter().any(|v| v.reviewer == reviewer) {
        return VotePlan::Answer(Voted::AlreadyVoted);
    }
    VotePlan::Insert
}

/// The status a recorded vote leaves.
pub(crate) fn after_vote(verdict: Verdict, approvals: i64, needed: u32) -> ItemStatus {
    match verdict {
        Verdict::Deny => ItemStatus::Denied,
        Verdict::Approve if approvals >= i64::from(needed) => ItemStatus::Approved,
        Verdict::Approve => ItemStatus::Open,
    }
}

pub(crate) fn invalid(e: CorruptRecord) -> StoreError {
    StoreError::new(StoreErrorKind::Invariant, e.to_string())
}

pub(crate) fn audit_entry(
    item: &ReviewItem,
    reviewer: &str,
    outcome: &str,
    now: UnixMillis,
) -> Result<AuditEntry, StoreError> {
    reviewer_audit(item, reviewer, outcome, now).map_err(invalid)
}

/// The terms of an approval request, checked.
pub(crate) struct Ask<'a> {
    pub(crate) digest: [u8; 32],
    pub(crate) key: &'a OperationKey,
    pub(crate) fingerprint: &'a Fingerprint,
    pub(crate) version: &'a str,
    pub(crate) policy_digest: &'a str,
}

pub(crate) fn ask(item: &NewItem) -> Result<Ask<'_>, StoreError> {
    let missing = || {
        StoreError::new(
            StoreErrorKind::Invariant,
            "a request for approval needs a key, fingerprint, version and terms",
        )
    };
    let (key, fingerprint, version, terms) = item.approval_tuple().ok_or_else(missing)?;
    Ok(Ask {
        digest: item.grant_digest().ok_or_else(missing)?,
        key,
        fingerprint,
        version,
        policy_digest: &terms.policy_digest,
    })
}

/// What the live item found for a tuple means.
pub(crate) enum Live {
    Answer(Requested),
    /// Lapsed: mark it expired, then look again.
    Expire(i64),
}

pub(crate) fn judge_live(item: &ReviewItem, policy_digest: &str, now: UnixMillis) -> Live {
    match item.status_at(now) {
        ItemStatus::Approved if item.consumed_at.is_none() => {
            Live::Answer(Requested::Granted(GrantUse {
                item: item.id,
                policy_digest: policy_digest.to_owned(),
            }))
        }
        ItemStatus::Expired => Live::Expire(item.id),
        // Open; or approved and used (its claim exists, so nothing asks
        // again in practice).
        _ => Live::Answer(Requested::Pending {
            item: item.id,
            created: false,
        }),
    }
}

pub(crate) fn limit_of(query: &ListQuery) -> i64 {
    i64::from(query.limit.clamp(1, MAX_PAGE))
}

/// The new item's columns, bound in INSERT order (all but the status).
#[derive(Clone)]
pub(crate) struct Insert {
    pub(crate) created_at: i64,
    pub(crate) kind: String,
    pub(crate) reason: Option<String>,
    pub(crate) tool: Option<String>,
    pub(crate) proposer: String,
    pub(crate) proposer_via: Option<String>,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) fingerprint: Option<Vec<u8>>,
    pub(crate) version_seen: Option<String>,
    pub(crate) policy_digest: Option<String>,
    pub(crate) scope: Option<String>,
    pub(crate) decision: String,
    pub(crate) approvals_needed: i32,
    pub(crate) expires_at: Option<i64>,
    pub(crate) open_grant: Option<Vec<u8>>,
    pub(crate) queue_principal: String,
    pub(crate) dedup: Option<Vec<u8>>,
    pub(crate) summary: String,
}

/// The row for `item`: an approval item with its `grant` digest, or
/// another item with its rejection `dedup` digest.
pub(crate) fn insert_of(item: NewItem, grant: Option<[u8; 32]>, dedup: Option<[u8; 32]>) -> Insert {
    let (policy_digest, approvals_needed, expires_at) = match &item.approval {
        Some(t) if grant.is_some() => (
            Some(t.policy_digest.clone()),
            i32::try_from(t.approvers.max(1)).unwrap_or(i32::MAX),
            Some(t.expires_at.0),
        ),
        _ => (None, 0, None),
    };
    let queue_principal = item.queue_principal().to_owned();
    let summary = item.summary();
    Insert {
        created_at: item.at.0,
        kind: item.kind.as_str().to_owned(),
        reason: item.reason.map(|r| r.as_str().to_owned()),
        tool: item.tool,
        proposer: item.proposer,
        proposer_via: item.proposer_via,
        key: item.key.map(|k| k.as_bytes().to_vec()),
        fingerprint: item.fingerprint.map(|f| f.as_bytes().to_vec()),
        version_seen: item.version_seen,
        policy_digest,
        scope: item.scope,
        decision: item.decision.to_text(),
        approvals_needed,
        expires_at,
        open_grant: grant.map(|g| g.to_vec()),
        queue_principal,
        dedup: dedup.map(|d| d.to_vec()),
        summary,
    }
}
