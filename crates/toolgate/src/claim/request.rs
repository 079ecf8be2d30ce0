//! The claim request and what a claim attempt can come back with.

use std::time::Duration;

use super::audit::AuditEntry;
use super::ids::{Fingerprint, HolderToken, OperationKey};
use super::record::{ClaimRecord, ClaimStatus, ExecutorKind, JsonText, ProposalRecord, UnixMillis};

/// One attempt to claim an operation.
///
/// # Who can build one
///
/// Only code inside this crate: `ClaimRequest::new` is `pub(crate)`. The
/// pipeline builds it from the value that proves the proposal was decoded,
/// validated and authorised (docs/design.md invariant 3: nothing touches the claim
/// store before authorisation), so an application cannot reach a claim
/// store with a request that skipped a stage. Stores in other crates only
/// read it through the accessors.
///
/// The `testkit` feature adds `ClaimRequest::for_testing` for the
/// conformance suite. It must only ever be enabled from `[dev-dependencies]`.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    key: OperationKey,
    fingerprint: Fingerprint,
    proposal: ProposalRecord,
    holder: HolderToken,
    now: UnixMillis,
    lease_ms: i64,
    executor: ExecutorKind,
    via: Option<String>,
    grant: Option<GrantUse>,
    budgets: Vec<BudgetReservation>,
}

/// One budget's reservation for a claim (docs/design.md §15): the store
/// adds `amount` to the counter on (`budget`, `scope`, `window_start`) in
/// the claim's own transaction, only if the sum stays at or under `limit`
/// (or beyond it, with an approval), and records it in the ledger under the
/// operation key so that a not-applied end gives it back exactly once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetReservation {
    /// The budget's name (distinct in the policy).
    pub budget: String,
    /// SHA-256 (hex) of the budget's `per` values for this proposal.
    pub scope: String,
    /// The start of the UTC window holding the attempt's time.
    pub window_start: UnixMillis,
    /// The amount from the validated arguments.
    pub amount: i64,
    /// The budget's limit.
    pub limit: i64,
}

/// One attempt at a claim: its own time and the lease it asks for, counted
/// from that time. A store that retries a claim (after a lost race) makes a
/// new attempt each time ([`ClaimRequest::attempt`]), so a claim is never
/// won with a lease computed for an earlier attempt and already past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// The attempt's time: the claim time if it wins.
    pub now: UnixMillis,
    /// When the lease ends if this attempt wins.
    pub lease_expires_at: UnixMillis,
}

/// An approval to use up with this claim (docs/design.md §14): the review
/// item that approved exactly this proposal. The store consumes it in the
/// claim's own transaction, and only if the item is still approved,
/// unconsumed, unexpired and bound to this request's operation key,
/// fingerprint, version and `policy_digest`, and to its proposer: the
/// item's proposer and `via` are the request's
/// ([`ProposalRecord::proposer`], [`ClaimRequest::via`]), and neither of
/// them voted on the item. Otherwise nothing is written and the answer is
/// [`RawClaim::GrantUnusable`]. A grant serves only the principal who
/// proposed it: another agent sending the same proposal, or a reviewer who
/// approved it, can never use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantUse {
    /// The approved review item's id.
    pub item: i64,
    /// The digest of the tool's policy the approval was given under.
    pub policy_digest: String,
}

impl ClaimRequest {
    /// Builds a request. `holder` must be fresh and unpredictable for this
    /// attempt (see [`HolderToken`]); `lease` is how long the winner may run
    /// before the claim counts as stuck. A lease shorter than a millisecond
    /// is raised to one, so a won claim is never expired at birth.
    pub(crate) fn new(
        key: OperationKey,
        fingerprint: Fingerprint,
        proposal: ProposalRecord,
        holder: HolderToken,
        now: UnixMillis,
        lease: Duration,
    ) -> Self {
        let ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX).max(1);
        Self {
            key,
            fingerprint,
            proposal,
            holder,
            now,
            lease_ms: ms,
            executor: ExecutorKind::InProcess,
            via: None,
            grant: None,
            budgets: Vec::new(),
        }
    }

    /// The request made for the principal `via` acted for (actor
    /// delegation): the key that named the proposer.
    pub(crate) fn with_via(mut self, via: Option<String>) -> Self {
        self.via = via;
        self
    }

    /// Test-only: the request with `via` (`testkit` feature).
    #[cfg(any(test, feature = "testkit"))]
    #[must_use]
    pub fn via_for_testing(self, via: Option<String>) -> Self {
        self.with_via(via)
    }

    /// The key that named the proposer, when a key acting for users made
    /// the request; `None` when the proposer authenticated itself. A grant
    /// is usable only by a request with the item's own proposer and `via`.
    pub fn via(&self) -> Option<&str> {
        self.via.as_deref()
    }

    /// The request with an approval to consume in the claim's transaction
    /// (docs/design.md §14).
    #[must_use]
    pub fn with_grant(mut self, grant: GrantUse) -> Self {
        self.grant = Some(grant);
        self
    }

    /// The request with budget reservations to make in the claim's
    /// transaction (docs/design.md §15).
    #[must_use]
    pub fn with_budgets(mut self, budgets: Vec<BudgetReservation>) -> Self {
        self.budgets = budgets;
        self
    }

    /// The budget reservations this claim makes if it wins.
    pub fn budgets(&self) -> &[BudgetReservation] {
        &self.budgets
    }

    /// The approval this claim must use up, if the tool needs one.
    pub fn grant(&self) -> Option<&GrantUse> {
        self.grant.as_ref()
    }

    /// The request with `executor` recorded as the owner of the write
    /// (the default is [`ExecutorKind::InProcess`]).
    #[must_use]
    pub fn with_executor(mut self, executor: ExecutorKind) -> Self {
        self.executor = executor;
        self
    }

    /// Who performs the write if the claim is won; stored with the claim.
    pub fn executor(&self) -> ExecutorKind {
        self.executor
    }

    /// Test-only constructor for the conformance suite (`testkit` feature).
    #[cfg(any(test, feature = "testkit"))]
    pub fn for_testing(
        key: OperationKey,
        fingerprint: Fingerprint,
        proposal: ProposalRecord,
        holder: HolderToken,
        now: UnixMillis,
        lease: Duration,
    ) -> Self {
        Self::new(key, fingerprint, proposal, holder, now, lease)
    }

    /// The operation being claimed.
    pub fn key(&self) -> &OperationKey {
        &self.key
    }

    /// The proposal's fingerprint.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// The proposal record to write if the claim is won.
    pub fn proposal(&self) -> &ProposalRecord {
        &self.proposal
    }

    /// This attempt's holder token.
    pub fn holder(&self) -> &HolderToken {
        &self.holder
    }

    /// The time of the attempt; also the claim time if it is won.
    pub fn now(&self) -> UnixMillis {
        self.now
    }

    /// When the lease ends if an attempt at the request's own time wins
    /// (a later attempt counts its lease from its own time:
    /// [`ClaimRequest::attempt`]).
    pub fn lease_expires_at(&self) -> UnixMillis {
        self.attempt(self.now).lease_expires_at
    }

    /// An attempt at `clock`, the store's reading of the time (the core
    /// reads no clock): at the request's time or later, never earlier, with
    /// the lease counted from the attempt's own time.
    pub fn attempt(&self, clock: UnixMillis) -> Attempt {
        let now = self.now.max(clock);
        Attempt {
            now,
            lease_expires_at: now.plus_millis(self.lease_ms),
        }
    }

    /// Judges the row read back inside the claim transaction at `now`
    /// (the store's reading of the time at the read-back).
    ///
    /// [`ReadBack::Ours`] is *not* a won claim yet: the backend must commit
    /// first and turn it into [`RawClaim::Acquired`] only if the commit
    /// succeeds (docs/design.md §8). Our own row whose lease has already
    /// ended at `now` is [`ReadBack::Lapsed`]: the attempt must roll back
    /// and try again, never hand out a lease that is already past. Every
    /// other row is someone else's claim and is final whatever happens to
    /// the transaction, which wrote nothing.
    pub fn judge(&self, row: ClaimRecord, now: UnixMillis) -> ReadBack {
        if row.reopenable() {
            // The attempt on the row was fenced and reconciled as not
            // applied: the operation runs again as the next attempt, for
            // this proposal whatever its arguments (nothing was written
            // for the earlier ones).
            return ReadBack::Reopen {
                attempt: row.attempt,
            };
        }
        let ours = row.holder == self.holder
            && row.fingerprint == self.fingerprint
            && row.status == ClaimStatus::InFlight;
        if ours && row.lease_expires_at <= now {
            return ReadBack::Lapsed;
        }
        if ours {
            return ReadBack::Ours(Lease {
                key: row.key,
                holder: row.holder,
                expires_at: row.lease_expires_at,
                attempt: row.attempt,
            });
        }
        ReadBack::Theirs(if row.fingerprint != self.fingerprint {
            RawClaim::Mismatch(row)
        } else if row.status == ClaimStatus::Completed {
            RawClaim::Completed(row)
        } else if row.lease_expires_at <= now {
            RawClaim::Expired(row)
        } else {
            RawClaim::InFlight(row)
        })
    }
}

/// A won claim: this holder may run the executor until `expires_at`, then
/// complete with the same holder token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The operation.
    pub key: OperationKey,
    /// The winning attempt's token.
    pub holder: HolderToken,
    /// When the lease ends: the last moment the write may be applied.
    pub expires_at: UnixMillis,
    /// Which attempt of the operation this is, from 1.
    pub attempt: u32,
}

impl Lease {
    /// The idempotency key the write is sent downstream with
    /// ([`OperationKey::attempt_key`]).
    pub fn idempotency_key(&self) -> String {
        self.key.attempt_key(self.attempt)
    }
}

/// The row read back in the claim transaction, judged by
/// [`ClaimRequest::judge`].
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one value per claim attempt, consumed at once; boxing buys nothing"
)]
pub enum ReadBack {
    /// The row carries this attempt's token: won if, and only if, the
    /// transaction commits.
    Ours(Lease),
    /// Another attempt holds the operation.
    Theirs(RawClaim),
    /// The row is this attempt's, but its lease has already ended (the
    /// attempt took longer than its lease): roll back and try again.
    Lapsed,
    /// The row's attempt was reconciled as not applied: the store replaces
    /// it with this request as attempt `attempt + 1`, only where the row is
    /// still that closed attempt, and reads back again (the new row is won
    /// only by its holder token read back, as any claim).
    Reopen {
        /// The closed attempt's number.
        attempt: u32,
    },
}

/// What a claim attempt found. Plain data: the pipeline turns `Acquired`
/// into its own won-claim stage, so no backend can forge one.
#[derive(Debug)]
#[must_use]
pub enum RawClaim {
    /// This attempt inserted the row, read its own token back and committed.
    Acquired(Lease),
    /// Same fingerprint, another holder, lease still live: `in_flight`.
    InFlight(ClaimRecord),
    /// Same fingerprint, completed: `replayed` with the recorded result.
    Completed(ClaimRecord),
    /// Different fingerprint: `conflict`, carrying the prior proposal and,
    /// if completed, its result. Takes precedence over an expired lease:
    /// this proposal is not the one that is stuck.
    Mismatch(ClaimRecord),
    /// Same fingerprint, still in flight, lease ended: the outcome of the
    /// first attempt is unknown. `needs_reconciliation` — never re-acquired,
    /// never executed again (docs/design.md invariant 8).
    Expired(ClaimRecord),
    /// The request carried a [`GrantUse`] that no longer matched: the
    /// approval was used, expired, denied or given for another digest.
    /// Nothing was written; the proposal needs approval again.
    GrantUnusable,
    /// A budget's counter would pass its limit and the request carried no
    /// approval: nothing was written (the claim row rolled back too).
    OverBudget {
        /// The budget.
        budget: String,
        /// Its limit.
        limit: i64,
        /// The amount already reserved in the window, without this one.
        used: i64,
    },
}

/// A completion of a held claim ([`ClaimStore::complete`](super::ClaimStore::complete)):
/// `holder`'s `result` for the claim on `key` at `now`, with `audit`
/// appended in the same transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompleteRequest {
    /// The claim to complete.
    pub key: OperationKey,
    /// The holder that won it.
    pub holder: HolderToken,
    /// The result to record.
    pub result: JsonText,
    /// The caller's time; the lease must still be live then.
    pub now: UnixMillis,
    /// The entry written with the completion, or not at all.
    pub audit: AuditEntry,
}

/// The result of an ownership-checked completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Completion {
    /// The result is recorded: this call changed the row, or an earlier
    /// call by the same holder with the same result bytes did (a retry after
    /// a lost answer), and this one wrote nothing.
    Recorded,
    /// No row matched key, `in_flight`, holder and a live lease, and the
    /// claim was not already completed by this holder with this result:
    /// this holder no longer owns the claim (its lease ended, it was
    /// reconciled, the token is stale or wrong, or another result was
    /// recorded). Nothing was written. The caller must reconcile, not retry.
    Reconcile,
}

/// A stuck claim's reconciliation
/// ([`ClaimStore::record_reconciliation`](super::ClaimStore::record_reconciliation)):
/// what the downstream system reported for the claim on `key`, at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileRequest<'a> {
    /// The stuck claim.
    pub key: &'a OperationKey,
    /// What the downstream system reported.
    pub outcome: &'a ReconcileOutcome,
    /// The operator's time: the lease must have ended by then.
    pub now: UnixMillis,
}

/// What the downstream system said about an expired claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReconcileOutcome {
    /// The write happened; the receipt becomes the recorded result.
    Applied {
        /// The downstream system's receipt.
        receipt: super::record::JsonText,
    },
    /// The write did not happen, and the downstream system fenced the
    /// attempt's idempotency key so that it never will. The attempt is
    /// closed with this detail as its result; the operation may run again
    /// only as a new attempt (`ClaimRecord::attempt` + 1).
    NotApplied {
        /// What the downstream system reported.
        detail: super::record::JsonText,
    },
}

/// The result of recording a reconciliation.
#[derive(Debug)]
#[must_use]
#[expect(
    clippy::large_enum_variant,
    reason = "one value per reconciliation, consumed at once; boxing buys nothing"
)]
pub enum Reconciled {
    /// Exactly one stuck row was closed with the outcome.
    Recorded,
    /// The claim was not stuck at `now` (still leased, already completed)
    /// or does not exist; nothing was written. Carries the row if any.
    NotStuck(Option<ClaimRecord>),
}
