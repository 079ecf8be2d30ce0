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
//!   (operation key, fingerprint, version, policy digest, proposer, `via`):
//!   the proposer's retry before approval finds the same item
//!   ([`ReviewStore::request_approval`]), and another principal sending the
//!   same proposal gets an item of its own;
//! - an approval's grant serves only its proposer: the claim consumes it
//!   only for the item's own proposer and `via`, and never for a principal
//!   who voted on it ([`crate::claim::GrantUse`]);
//! - the queue is bounded ([`QueueLimits`]): at most so many open items per
//!   principal (the key's: `via` when a key acts for users) and in total,
//!   and a rejection naming no tool of the policy opens at most one item per
//!   principal, reason and window; a listing carries each item's summary,
//!   never more than
//!   [`MAX_SUMMARY_BYTES`] of its decision;
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

mod kept;
mod memory;
mod opening;

pub use kept::{ItemDecision, Summary};
pub use memory::MemoryReviewStore;
pub use opening::{Opening, opening};

use std::fmt;
use std::future::Future;

use crate::claim::{
    AuditEntry, CorruptRecord, Fingerprint, GrantUse, MAX_LABEL_BYTES, OperationKey, StoreError,
    UnixMillis,
};
use crate::pipeline::{Outcome, Reason};

/// Largest decision JSON an item keeps, in bytes. A larger decision is
/// stored as a short summary instead (its outcome, reason, tool and
/// message), so one huge recorded result cannot swell every item.
pub const MAX_DECISION_BYTES: usize = 16 * 1024;
/// Largest reviewer note, in bytes.
pub const MAX_NOTE_BYTES: usize = 2000;
/// Most items one listing returns.
pub const MAX_PAGE: u32 = 200;
/// Largest decision JSON a listing carries per item, in bytes: the whole
/// decision when it fits, a summary otherwise ([`ItemDecision::listed`]). One item
/// ([`ReviewStore::item`]) carries the whole decision.
pub const MAX_SUMMARY_BYTES: usize = 2 * 1024;
/// Largest scope text a listing carries per item, in bytes (a scope over
/// it, written before every request's scope was bounded, is left out of
/// the listing; the item itself still has it).
pub const MAX_LISTED_SCOPE_BYTES: usize = 4 * 1024;

/// How large the review queue may grow (docs/http-api.md, "The review
/// queue"). An item that would pass a cap is not opened; the decision
/// stands and says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    /// Most open items per principal: the key's (an item's `proposer_via`
    /// when a key acting for users proposed it, else its `proposer`), so a
    /// key cannot pass the cap by naming other actors.
    pub per_principal: u64,
    /// Most open items in all.
    pub total: u64,
    /// A rejection opens at most one item per principal and reason in a
    /// window of this many milliseconds (windows start at multiples of it
    /// since the Unix epoch).
    pub rejection_window_ms: i64,
}

impl Default for QueueLimits {
    fn default() -> Self {
        Self {
            per_principal: 1_000,
            total: 10_000,
            rejection_window_ms: 60 * 60 * 1000,
        }
    }
}

/// What [`ReviewStore::open_item`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// A new item with this id.
    Created(i64),
    /// A rejection like this one (same principal, reason and window) has an
    /// item already: this one, and nothing new was opened.
    Existing(i64),
    /// A cap of [`QueueLimits`] is reached: nothing was opened.
    Full,
}

/// Where an item stands. Serde spells each status as its stored name
/// ([`ItemStatus::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::ToSchema),
    schema(as = ReviewStatus, description = "A reviewer item's state (docs/design.md §14).")
)]
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

/// A reviewer's vote on an approval item. Serde spells it as its stored
/// name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
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

/// A reviewer's act on item `id` at `now`, with an optional note: a vote
/// ([`ReviewStore::vote`], `choice` a [`Verdict`]) or the closing of a
/// non-approval item ([`ReviewStore::close`], `choice` a [`Closing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReviewerAct<'a, T> {
    /// The item.
    pub id: i64,
    /// Who acts.
    pub reviewer: &'a str,
    /// The vote or the closing.
    pub choice: T,
    /// The reviewer's note.
    pub note: Option<&'a str>,
    /// When.
    pub now: UnixMillis,
}

impl<'a, T> ReviewerAct<'a, T> {
    /// `reviewer`'s `choice` on item `id` at `now`, without a note.
    pub fn new(id: i64, reviewer: &'a str, choice: T, now: UnixMillis) -> Self {
        Self {
            id,
            reviewer,
            choice,
            note: None,
            now,
        }
    }

    /// The reviewer and note within their bounds ([`check_reviewer`]).
    pub fn check(&self) -> Result<(), CorruptRecord> {
        check_reviewer(self.reviewer, self.note)
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
#[derive(Debug, Clone, PartialEq)]
pub struct NewItem {
    /// When the decision was made.
    pub at: UnixMillis,
    /// The decision's outcome (`conflict`, `pending_approval`, …); stored
    /// as its code.
    pub kind: Outcome,
    /// Its reason, if any; stored as its code.
    pub reason: Option<Reason>,
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
    /// The decision as the reviewer sees it (kept whole when its text fits
    /// [`MAX_DECISION_BYTES`], else as its summary).
    pub decision: ItemDecision,
    /// Set for approval items only.
    pub approval: Option<ApprovalTerms>,
    /// A rejection of a proposal that names no tool of the policy (an
    /// unknown tool, or none): at most one such item per principal, reason
    /// and window ([`NewItem::dedup`], [`Opening::OncePerWindow`]).
    pub once_per_window: bool,
}

impl NewItem {
    /// The principal the queue's caps count the item against: the key
    /// that proposed it (`proposer_via` when a key acted for a user).
    pub fn queue_principal(&self) -> &str {
        self.proposer_via.as_deref().unwrap_or(&self.proposer)
    }

    /// For an item opened [`NewItem::once_per_window`], the digest that
    /// keeps it to one item per principal ([`NewItem::queue_principal`]),
    /// kind, reason and window of `window_ms`; `None` for every other item
    /// (each names a proposal of a caller who may make it, or an operation
    /// a person must look at).
    pub fn dedup(&self, window_ms: i64) -> Option<[u8; 32]> {
        use sha2::{Digest, Sha256};
        if !self.once_per_window {
            return None;
        }
        let window = self.at.0.div_euclid(window_ms.max(1));
        let mut h = Sha256::new();
        for part in [
            self.queue_principal(),
            self.kind.as_str(),
            self.reason.map_or("", Reason::as_str),
        ] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        h.update(window.to_be_bytes());
        Some(h.finalize().into())
    }

    /// The listing's text of [`NewItem::decision`]
    /// ([`ItemDecision::listed`]).
    pub fn summary(&self) -> String {
        self.decision.listed().to_text()
    }

    /// The digest of the approval tuple and its proposer ([`open_grant`]),
    /// if this is an approval item.
    pub fn grant_digest(&self) -> Option<[u8; 32]> {
        let (key, fingerprint, version, terms) = self.approval_tuple()?;
        Some(open_grant(
            key,
            fingerprint,
            version,
            &terms.policy_digest,
            &self.proposer,
            self.proposer_via.as_deref(),
        ))
    }

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

/// A digest of an approval tuple and its proposer: the live-approval
/// uniqueness column. The proposer (and the key that named them) is part
/// of it, so the same proposal by another principal is another item,
/// which that principal's own reviewers decide.
pub fn open_grant(
    key: &OperationKey,
    fingerprint: &Fingerprint,
    version: &str,
    policy_digest: &str,
    proposer: &str,
    proposer_via: Option<&str>,
) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(key.as_bytes());
    h.update(fingerprint.as_bytes());
    // Lengths first, so no two tuples share an encoding.
    for part in [version, policy_digest, proposer] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    match proposer_via {
        None => h.update([0u8]),
        Some(via) => {
            h.update([1u8]);
            h.update((via.len() as u64).to_be_bytes());
            h.update(via.as_bytes());
        }
    }
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
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewItem {
    /// Never reused.
    pub id: i64,
    /// When it was opened.
    pub created_at: UnixMillis,
    /// The decision's outcome (a row whose code names none is corrupt).
    pub kind: Outcome,
    /// Its reason (a row whose code names none is corrupt).
    pub reason: Option<Reason>,
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
    /// The decision (in a listing, [`ItemDecision::listed`]).
    pub decision: ItemDecision,
    /// Where it stands (expiry already applied at the time it was read).
    pub status: ItemStatus,
    /// Distinct approvers needed (0 for a non-approval item).
    pub approvals_needed: u32,
    /// When an approval item expires.
    pub expires_at: Option<UnixMillis>,
    /// When its approval was used by a claim.
    pub consumed_at: Option<UnixMillis>,
    /// The principal whose claim used the approval (always the item's
    /// proposer: a grant serves no one else).
    pub consumed_by: Option<String>,
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
    /// No live item for this proposal, and a cap of [`QueueLimits`] is
    /// reached: nothing was opened.
    QueueFull,
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
    /// (conflict, state changed, rejected, needs reconciliation), within
    /// `limits`: a rejection with an item for its principal, reason and
    /// window ([`NewItem::dedup`]) opens nothing and answers that item; an
    /// item past a cap opens nothing ([`Opened::Full`]).
    fn open_item(
        &self,
        item: NewItem,
        limits: &QueueLimits,
    ) -> impl Future<Output = Result<Opened, StoreError>> + Send;

    /// For a proposal that needs approval (`item.approval` and its key,
    /// fingerprint and version set): the proposer's approved, unused grant
    /// if there is one; else the proposer's open item for the same tuple;
    /// else the denial of the tuple (whoever proposed it); and otherwise a
    /// new item, opened now (an expired one is marked so and replaced),
    /// unless a cap of `limits` is reached ([`Requested::QueueFull`]).
    fn request_approval(
        &self,
        item: NewItem,
        now: UnixMillis,
        limits: &QueueLimits,
    ) -> impl Future<Output = Result<Requested, StoreError>> + Send;

    /// One item, expiry applied at `now`.
    fn item(
        &self,
        id: i64,
        now: UnixMillis,
    ) -> impl Future<Output = Result<Option<ReviewItem>, StoreError>> + Send;

    /// A page of items, newest first, expiry applied at `now`. Each
    /// item's `decision` is its summary ([`ItemDecision::listed`]: at most
    /// [`MAX_SUMMARY_BYTES`]), its `scope` left out when over
    /// [`MAX_LISTED_SCOPE_BYTES`]: a page never holds whole texts.
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
        vote: ReviewerAct<'_, Verdict>,
    ) -> impl Future<Output = Result<Voted, StoreError>> + Send;

    /// Resolves or dismisses a non-approval item, with its audit entry, in
    /// one transaction.
    fn close(
        &self,
        closing: ReviewerAct<'_, Closing>,
    ) -> impl Future<Output = Result<Closed, StoreError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::{ItemStatus, Verdict};

    #[test]
    fn serde_spells_every_verdict_as_its_stored_name() {
        let all = [Verdict::Approve, Verdict::Deny];
        crate::assert_serde_spells_codes(all, Verdict::as_str);
        assert!(
            all.into_iter()
                .all(|v| Verdict::parse(v.as_str()) == Some(v))
        );
    }

    #[test]
    fn serde_spells_every_item_status_as_its_stored_name() {
        crate::assert_serde_spells_codes(ItemStatus::ALL, ItemStatus::as_str);
    }
}
