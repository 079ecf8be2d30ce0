//! Review items and approvals (docs/design.md §14, invariant 11): the
//! decisions a person can act on, and what they decided, as plain data and
//! the [`ReviewStore`] trait. The claim stores implement it on the claim
//! database, so an approval can be consumed in the claim's own transaction
//! ([`crate::claim::GrantUse`]); [`MemoryClaimStore`](crate::claim::MemoryClaimStore)
//! implements it in memory, as the reference.
//!
//! The rules every implementation keeps:
//!
//! - ids are never handed out twice, restarts included;
//! - at most one live (open or approved) approval item exists per
//!   (operation key, fingerprint, version, policy digest): a retry before
//!   approval finds the same item ([`ReviewStore::request_approval`]);
//! - an open or approved, unconsumed item whose `expires_at` has passed is
//!   `expired`, which counts as denied; stores mark it lazily, when it is
//!   read or acted on;
//! - the proposer (or the key that proposed for them) never votes on their
//!   own proposal; each reviewer votes once; the item is approved at the
//!   `approvals_needed`-th distinct approve vote and denied at the first
//!   deny;
//! - every vote and every closing appends an audit entry naming the
//!   reviewer (outcome `approved`, `denied`, `resolved` or `dismissed`);
//! - approving never runs anything: the proposer's own retry uses the
//!   approval, once.
//!
//! Time is passed in; nothing here reads a clock.

mod memory;

pub use memory::MemoryReviewStore;

use std::fmt;
use std::future::Future;

use crate::claim::{
    AuditEntry, CorruptRecord, Fingerprint, GrantUse, MAX_LABEL_BYTES, OperationKey, StoreError,
    UnixMillis,
};

/// Largest decision JSON an item keeps, in bytes. A larger decision is
/// stored as a short summary instead (its outcome, reason, tool and
/// message), so one huge recorded result cannot swell every item.
pub const MAX_DECISION_BYTES: usize = 16 * 1024;
/// Largest reviewer note, in bytes.
pub const MAX_NOTE_BYTES: usize = 2000;
/// Most items one listing returns.
pub const MAX_PAGE: u32 = 200;

/// Where an item stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ItemStatus {
    /// Waiting for a person.
    Open,
    /// An approval item with enough approve votes; its grant may be used
    /// once (`consumed_at` says whether it was).
    Approved,
    /// An approval item a reviewer denied.
    Denied,
    /// An approval item that outlived its `expires_at` unapproved or
    /// unused: counts as denied.
    Expired,
    /// A non-approval item a reviewer marked as dealt with.
    Resolved,
    /// A non-approval item a reviewer dismissed.
    Dismissed,
}

impl ItemStatus {
    /// Every status.
    pub const ALL: [Self; 6] = [
        Self::Open,
        Self::Approved,
        Self::Denied,
        Self::Expired,
        Self::Resolved,
        Self::Dismissed,
    ];

    /// The stored, snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Resolved => "resolved",
            Self::Dismissed => "dismissed",
        }
    }

    /// The status named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl fmt::Display for ItemStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reviewer's vote on an approval item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Counts towards `approvals_needed`.
    Approve,
    /// Denies the item at once.
    Deny,
}

impl Verdict {
    /// The stored name (`approve`, `deny`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Deny => "deny",
        }
    }

    /// The verdict named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "approve" => Some(Self::Approve),
            "deny" => Some(Self::Deny),
            _ => None,
        }
    }

    /// The audit outcome of such a vote.
    pub const fn audit_outcome(self) -> &'static str {
        match self {
            Self::Approve => "approved",
            Self::Deny => "denied",
        }
    }
}

/// How a reviewer closes a non-approval item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    /// Dealt with.
    Resolved,
    /// Nothing to do.
    Dismissed,
}

impl Closing {
    /// The status it leaves.
    pub const fn status(self) -> ItemStatus {
        match self {
            Self::Resolved => ItemStatus::Resolved,
            Self::Dismissed => ItemStatus::Dismissed,
        }
    }
}

/// What an approval is bound to beyond the item's key, fingerprint and
/// version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalTerms {
    /// The tool contract's digest ([`crate::contract::ToolContract::digest`]).
    pub policy_digest: String,
    /// Distinct approvers needed (at least 1).
    pub approvers: u32,
    /// When the request, and an approval given to it, stop counting.
    pub expires_at: UnixMillis,
}

/// A decision to put in front of a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewItem {
    /// When the decision was made.
    pub at: UnixMillis,
    /// The decision's outcome code (`conflict`, `pending_approval`, …).
    pub kind: String,
    /// Its reason code, if any.
    pub reason: Option<String>,
    /// The tool, if the decision named one.
    pub tool: Option<String>,
    /// The principal the proposal was made as.
    pub proposer: String,
    /// The key that named the proposer (actor delegation), if any.
    pub proposer_via: Option<String>,
    /// The operation key, if one was derived.
    pub key: Option<OperationKey>,
    /// The proposal's fingerprint, if one was derived.
    pub fingerprint: Option<Fingerprint>,
    /// The version the model saw, if the proposal was an action.
    pub version_seen: Option<String>,
    /// The canonical scope, as JSON text.
    pub scope: Option<String>,
    /// The decision as the reviewer sees it, JSON text (capped with
    /// [`bounded_decision`]).
    pub decision: String,
    /// Set for approval items only.
    pub approval: Option<ApprovalTerms>,
}

impl NewItem {
    /// The tuple an approval item is bound to, if this is one and it
    /// carries all of it.
    pub fn approval_tuple(&self) -> Option<(&OperationKey, &Fingerprint, &str, &ApprovalTerms)> {
        Some((
            self.key.as_ref()?,
            self.fingerprint.as_ref()?,
            self.version_seen.as_deref()?,
            self.approval.as_ref()?,
        ))
    }
}

/// A digest of an approval tuple: the live-approval uniqueness column.
pub fn open_grant(
    key: &OperationKey,
    fingerprint: &Fingerprint,
    version: &str,
    policy_digest: &str,
) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(key.as_bytes());
    h.update(fingerprint.as_bytes());
    // Lengths first, so no two tuples share an encoding.
    h.update((version.len() as u64).to_be_bytes());
    h.update(version.as_bytes());
    h.update((policy_digest.len() as u64).to_be_bytes());
    h.update(policy_digest.as_bytes());
    h.finalize().into()
}

/// One reviewer's vote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vote {
    /// Who voted.
    pub reviewer: String,
    /// How.
    pub verdict: Verdict,
    /// When.
    pub at: UnixMillis,
    /// Their note, if any.
    pub note: Option<String>,
}

/// A stored item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewItem {
    /// Never reused.
    pub id: i64,
    /// When it was opened.
    pub created_at: UnixMillis,
    /// The decision's outcome code.
    pub kind: String,
    /// Its reason code.
    pub reason: Option<String>,
    /// The tool.
    pub tool: Option<String>,
    /// The principal the proposal was made as.
    pub proposer: String,
    /// The key that named the proposer, if delegated.
    pub proposer_via: Option<String>,
    /// The operation key.
    pub key: Option<OperationKey>,
    /// The fingerprint.
    pub fingerprint: Option<Fingerprint>,
    /// The version the model saw.
    pub version_seen: Option<String>,
    /// The tool contract's digest, for approval items.
    pub policy_digest: Option<String>,
    /// The canonical scope, JSON text.
    pub scope: Option<String>,
    /// The decision, JSON text.
    pub decision: String,
    /// Where it stands (expiry already applied at the time it was read).
    pub status: ItemStatus,
    /// Distinct approvers needed (0 for a non-approval item).
    pub approvals_needed: u32,
    /// When an approval item expires.
    pub expires_at: Option<UnixMillis>,
    /// When its approval was used by a claim.
    pub consumed_at: Option<UnixMillis>,
    /// When it was closed (approved, denied, resolved, dismissed).
    pub closed_at: Option<UnixMillis>,
    /// Who closed it.
    pub closed_by: Option<String>,
    /// The closing note.
    pub note: Option<String>,
    /// Votes, oldest first.
    pub votes: Vec<Vote>,
}

impl ReviewItem {
    /// Whether this is an approval item.
    pub fn is_approval(&self) -> bool {
        self.approvals_needed > 0
    }

    /// The status at `now`: an open or approved, unused approval item past
    /// its expiry is `expired`.
    pub fn status_at(&self, now: UnixMillis) -> ItemStatus {
        let lapsed = self.expires_at.is_some_and(|e| e <= now) && self.consumed_at.is_none();
        match self.status {
            ItemStatus::Open | ItemStatus::Approved if lapsed => ItemStatus::Expired,
            s => s,
        }
    }

    /// Approve votes so far.
    pub fn approvals(&self) -> u32 {
        let n = self
            .votes
            .iter()
            .filter(|v| v.verdict == Verdict::Approve)
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Whether `reviewer` proposed this (as the actor or the key acting
    /// for them): they may not vote on it.
    pub fn proposed_by(&self, reviewer: &str) -> bool {
        self.proposer == reviewer || self.proposer_via.as_deref() == Some(reviewer)
    }
}

/// What [`ReviewStore::request_approval`] found or opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requested {
    /// An approved, unused, unexpired item: claim with this grant.
    Granted(GrantUse),
    /// The live item waiting for reviewers; `created` if this call opened it.
    Pending {
        /// The item.
        item: i64,
        /// Whether this call opened it.
        created: bool,
    },
    /// A reviewer denied exactly this proposal under this policy.
    Denied {
        /// The denied item.
        item: i64,
        /// Who denied it.
        by: Option<String>,
    },
}

/// Which items a listing returns: newest first, ids below `before`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// Only ids below this (the previous page's last id).
    pub before: Option<i64>,
    /// At most this many (1 to [`MAX_PAGE`]).
    pub limit: u32,
    /// Only this status (expiry applied first).
    pub status: Option<ItemStatus>,
    /// Only this kind (outcome code).
    pub kind: Option<String>,
}

/// The answer to a vote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Voted {
    /// Recorded; the item now has this status (`open` while more approvers
    /// are needed, `approved` at the last one, `denied` on a deny).
    Recorded(ItemStatus),
    /// No item has this id.
    NotFound,
    /// Not an approval item: resolve or dismiss it instead.
    NotApproval,
    /// The item is no longer open (the status, expiry applied).
    NotOpen(ItemStatus),
    /// The reviewer proposed it (four-eyes, invariant 11).
    SelfApproval,
    /// The reviewer has voted on it already.
    AlreadyVoted,
}

/// The answer to a resolve or dismiss.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Closed {
    /// Closed.
    Done,
    /// No item has this id.
    NotFound,
    /// An approval item: approve or deny it instead.
    IsApproval,
    /// The item is no longer open.
    NotOpen(ItemStatus),
}

/// The audit entry a reviewer's action appends.
pub fn reviewer_audit(
    item: &ReviewItem,
    reviewer: &str,
    outcome: &str,
    now: UnixMillis,
) -> Result<AuditEntry, CorruptRecord> {
    AuditEntry::new(
        now,
        reviewer.to_owned(),
        item.tool.clone(),
        outcome.to_owned(),
        None,
        item.key,
        item.fingerprint,
    )
}

/// Checks a reviewer id and note before anything is stored.
pub fn check_reviewer(reviewer: &str, note: Option<&str>) -> Result<(), CorruptRecord> {
    if reviewer.is_empty() || reviewer.len() > MAX_LABEL_BYTES.min(255) {
        return Err(CorruptRecord::new("reviewer", "must be 1 to 255 bytes"));
    }
    if note.is_some_and(|n| n.len() > MAX_NOTE_BYTES) {
        return Err(CorruptRecord::new(
            "note",
            format!("must be at most {MAX_NOTE_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// `decision` if it fits [`MAX_DECISION_BYTES`], or else a summary of it
/// (`{"outcome","reason","tool","message","truncated":true}`).
pub fn bounded_decision(decision: &serde_json::Value) -> String {
    let text = decision.to_string();
    if text.len() <= MAX_DECISION_BYTES {
        return text;
    }
    let pick = |k: &str| decision.get(k).cloned().unwrap_or(serde_json::Value::Null);
    let mut message = pick("message");
    if let Some(m) = message.as_str()
        && m.len() > 1024
    {
        let mut end = 1024;
        while !m.is_char_boundary(end) {
            end -= 1;
        }
        message = serde_json::Value::String(m[..end].to_owned());
    }
    serde_json::json!({
        "outcome": pick("outcome"),
        "reason": pick("reason"),
        "tool": pick("tool"),
        "operation_key": pick("operation_key"),
        "message": message,
        "truncated": true,
    })
    .to_string()
}

/// A reviewer page login (docs/http-api.md): stored under the SHA-256 of
/// its token ([`session_digest`]), never the token itself, so a copy of the
/// database signs nobody in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewSession {
    /// The reviewer's principal.
    pub principal: String,
    /// The session's CSRF token, echoed by every form.
    pub csrf: String,
    /// When it stops counting.
    pub expires_at: UnixMillis,
}

/// What a session is stored under: the SHA-256 of its token.
pub fn session_digest(token: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(token.as_bytes()).into()
}

/// Where review items live. Implemented by the claim stores, so that an
/// approval is consumed in the claim's own transaction.
pub trait ReviewStore: Send + Sync {
    /// Stores a reviewer login under `digest` ([`session_digest`] of its
    /// token), first removing every session expired at `now`.
    fn open_session(
        &self,
        digest: [u8; 32],
        session: ReviewSession,
        now: UnixMillis,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The session stored under `digest`, if it has not expired at `now`.
    fn session(
        &self,
        digest: [u8; 32],
        now: UnixMillis,
    ) -> impl Future<Output = Result<Option<ReviewSession>, StoreError>> + Send;

    /// Ends the session stored under `digest`, if any.
    fn close_session(
        &self,
        digest: [u8; 32],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Opens an item for a decision that is not a request for approval
    /// (conflict, state changed, rejected, needs reconciliation). Returns
    /// its id.
    fn open_item(&self, item: NewItem) -> impl Future<Output = Result<i64, StoreError>> + Send;

    /// For a proposal that needs approval (`item.approval` and its key,
    /// fingerprint and version set): the approved, unused grant if there
    /// is one; else the open item for the same tuple; else the denial; and
    /// otherwise a new item, opened now (an expired one is marked so and
    /// replaced).
    fn request_approval(
        &self,
        item: NewItem,
        now: UnixMillis,
    ) -> impl Future<Output = Result<Requested, StoreError>> + Send;

    /// One item, expiry applied at `now`.
    fn item(
        &self,
        id: i64,
        now: UnixMillis,
    ) -> impl Future<Output = Result<Option<ReviewItem>, StoreError>> + Send;

    /// A page of items, newest first, expiry applied at `now`.
    fn list_items(
        &self,
        query: &ListQuery,
        now: UnixMillis,
    ) -> impl Future<Output = Result<Vec<ReviewItem>, StoreError>> + Send;

    /// Items still open at `now`.
    fn open_items(&self, now: UnixMillis) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// A reviewer's vote on an approval item, with its audit entry, in one
    /// transaction.
    fn vote(
        &self,
        id: i64,
        reviewer: &str,
        verdict: Verdict,
        note: Option<&str>,
        now: UnixMillis,
    ) -> impl Future<Output = Result<Voted, StoreError>> + Send;

    /// Resolves or dismisses a non-approval item, with its audit entry, in
    /// one transaction.
    fn close(
        &self,
        id: i64,
        reviewer: &str,
        closing: Closing,
        note: Option<&str>,
        now: UnixMillis,
    ) -> impl Future<Output = Result<Closed, StoreError>> + Send;
}
