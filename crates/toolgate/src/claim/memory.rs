//! The reference claim store: a map behind a std mutex.
//!
//! A std `Mutex` rather than an async one: the critical sections are short
//! and never held across an `.await`, and the core links no runtime. Every
//! operation is one critical section, so the insert-or-read of a claim is
//! atomic and there is no commit to fail.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, MutexGuard};

use super::{
    AuditEntry, ClaimRecord, ClaimRequest, ClaimStatus, ClaimStore, CompleteRequest, Completion,
    CompletionRecord, OperationKey, RawClaim, ReadBack, ReconcileOutcome, ReconcileRequest,
    Reconciled, Resolution, StoreError, StoreErrorKind, StuckEntry, UnixMillis,
};

#[derive(Default)]
struct State {
    claims: HashMap<OperationKey, ClaimRecord>,
    audit: Vec<AuditEntry>,
    /// Budget counters: (budget, scope digest, window start) → used.
    budget_used: HashMap<Counter, i64>,
    /// The ledger: (operation key, budget) → (counter, amount, still held).
    budget_ledger: HashMap<(OperationKey, String), (Counter, i64, bool)>,
}

/// A budget counter's key: (budget, scope digest, window start).
type Counter = (String, String, i64);

impl State {
    /// Gives back every reservation `key` still holds, once.
    fn release_budgets(&mut self, key: &OperationKey) {
        for ((k, _), (counter, amount, held)) in &mut self.budget_ledger {
            if k == key && *held {
                *held = false;
                if let Some(used) = self.budget_used.get_mut(counter) {
                    *used -= *amount;
                }
            }
        }
    }
}

/// An in-process [`ClaimStore`]. Nothing survives the process: use it for
/// tests and single-process demos, and a `toolgate-store` backend otherwise.
#[derive(Default)]
pub struct MemoryClaimStore {
    state: Mutex<State>,
    /// Review items and approvals (docs/design.md §14), beside the claims
    /// so that a claim can use an approval in its critical section.
    pub(crate) reviews: crate::review::MemoryReviewStore,
}

impl MemoryClaimStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every audit entry, oldest first: the whole log, entries without an
    /// operation key (rejections, refused requests) included, which
    /// [`ClaimStore::audit_trail`] cannot reach.
    pub fn audit_log(&self) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(self.lock()?.audit.clone())
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>, StoreError> {
        // A poisoned lock means a panic mid-update elsewhere; refuse to
        // answer rather than guess at the state.
        self.state
            .lock()
            .map_err(|_| StoreError::new(StoreErrorKind::Invariant, "store lock poisoned"))
    }

    fn claim_now(&self, request: ClaimRequest) -> Result<RawClaim, StoreError> {
        let mut state = self.lock()?;
        // Budgets, checked before anything is written, as the SQL stores'
        // rollback leaves nothing behind: only the inserting attempt
        // reserves, and without an approval never past a limit.
        // A row reconciled as not applied is replaced by this request as
        // the operation's next attempt, as if there were none.
        let closed = state
            .claims
            .get(request.key())
            .filter(|r| r.reopenable())
            .map(|r| r.attempt);
        let fresh = closed.is_some() || !state.claims.contains_key(request.key());
        if fresh && request.grant().is_none() {
            for r in request.budgets() {
                let used = state
                    .budget_used
                    .get(&(r.budget.clone(), r.scope.clone(), r.window_start.0))
                    .copied()
                    .unwrap_or(0);
                if used + r.amount > r.limit {
                    return Ok(RawClaim::OverBudget {
                        budget: r.budget.clone(),
                        limit: r.limit,
                        used,
                    });
                }
            }
        }
        // An approval is used only by the attempt that inserts the claim,
        // in the same critical section; if it no longer holds, nothing is
        // written (the SQL stores' conditional UPDATE, docs/design.md §14).
        if let Some(grant) = request.grant()
            && fresh
            && !self.reviews.consume(grant, &request)?
        {
            return Ok(RawClaim::GrantUnusable);
        }
        if fresh {
            state.claims.insert(
                *request.key(),
                ClaimRecord {
                    key: *request.key(),
                    fingerprint: *request.fingerprint(),
                    proposal: request.proposal().clone(),
                    status: ClaimStatus::InFlight,
                    holder: *request.holder(),
                    lease_expires_at: request.lease_expires_at(),
                    claimed_at: request.now(),
                    attempt: closed.map_or(1, |a| a.saturating_add(1)),
                    executor: request.executor(),
                    completion: None,
                },
            );
        }
        let Some(row) = state.claims.get(request.key()).cloned() else {
            return Err(StoreError::new(
                StoreErrorKind::Invariant,
                "a claim row vanished inside its critical section",
            ));
        };
        if fresh {
            for r in request.budgets() {
                let counter = (r.budget.clone(), r.scope.clone(), r.window_start.0);
                *state.budget_used.entry(counter.clone()).or_insert(0) += r.amount;
                state.budget_ledger.insert(
                    (*request.key(), r.budget.clone()),
                    (counter, r.amount, true),
                );
            }
        }
        // Same rule as the SQL backends: the attempt wins because its token
        // is in the row, not because an insert "happened".
        Ok(match request.judge(row, request.now()) {
            ReadBack::Ours(lease) => RawClaim::Acquired(lease),
            ReadBack::Theirs(other) => other,
            // The lease is counted from the request's own time and is at
            // least a millisecond long: it cannot have ended at that time.
            ReadBack::Lapsed => {
                return Err(StoreError::new(
                    StoreErrorKind::Invariant,
                    "a fresh claim's lease ended at its own claim time",
                ));
            }
            // A closed attempt was replaced above, in this critical section.
            ReadBack::Reopen { .. } => {
                return Err(StoreError::new(
                    StoreErrorKind::Invariant,
                    "a closed attempt was still on the row after its replacement",
                ));
            }
        })
    }

    fn complete_now(&self, done: CompleteRequest) -> Result<Completion, StoreError> {
        let mut guard = self.lock()?;
        let state = &mut *guard;
        match state.claims.get_mut(&done.key) {
            Some(row)
                if row.status == ClaimStatus::InFlight
                    && row.holder == done.holder
                    && row.lease_expires_at > done.now =>
            {
                row.status = ClaimStatus::Completed;
                row.completion = Some(CompletionRecord {
                    completed_at: done.now,
                    resolution: Resolution::Executed,
                    result: done.result.clone(),
                });
                state.audit.push(done.audit);
                // A not-applied closure (a failed precondition) gives the
                // claim's budget reservations back.
                if done.result.is_not_applied() {
                    state.release_budgets(&done.key);
                }
                Ok(Completion::Recorded)
            }
            Some(row) if row.completed_by(&done.holder, &done.result) => Ok(Completion::Recorded),
            _ => Ok(Completion::Reconcile),
        }
    }

    fn reconcile_now(
        &self,
        key: &OperationKey,
        outcome: &ReconcileOutcome,
        now: UnixMillis,
    ) -> Result<Reconciled, StoreError> {
        let mut guard = self.lock()?;
        let state = &mut *guard;
        if matches!(outcome, ReconcileOutcome::NotApplied { .. })
            && state.claims.get(key).is_some_and(|r| r.is_stuck(now))
        {
            state.release_budgets(key);
        }
        match state.claims.get_mut(key) {
            Some(row) if row.is_stuck(now) => {
                let (resolution, result) = match outcome {
                    ReconcileOutcome::Applied { receipt } => {
                        (Resolution::ReconciledApplied, receipt.clone())
                    }
                    ReconcileOutcome::NotApplied { detail } => {
                        (Resolution::ReconciledNotApplied, detail.clone())
                    }
                };
                row.status = ClaimStatus::Completed;
                row.completion = Some(CompletionRecord {
                    completed_at: now,
                    resolution,
                    result,
                });
                Ok(Reconciled::Recorded)
            }
            other => Ok(Reconciled::NotStuck(other.map(|r| r.clone()))),
        }
    }

    fn stuck_now(&self, now: UnixMillis, limit: u32) -> Result<Vec<StuckEntry>, StoreError> {
        let state = self.lock()?;
        let mut stuck: Vec<&ClaimRecord> =
            state.claims.values().filter(|r| r.is_stuck(now)).collect();
        stuck.sort_by_key(|r| (r.lease_expires_at, r.key));
        Ok(stuck
            .into_iter()
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .map(|r| Ok(r.clone()))
            .collect())
    }
}

impl ClaimStore for MemoryClaimStore {
    fn claim(
        &self,
        request: ClaimRequest,
    ) -> impl Future<Output = Result<RawClaim, StoreError>> + Send {
        std::future::ready(self.claim_now(request))
    }

    fn complete(
        &self,
        request: CompleteRequest,
    ) -> impl Future<Output = Result<Completion, StoreError>> + Send {
        std::future::ready(self.complete_now(request))
    }

    fn budget_reserved(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, i64)>, StoreError>> + Send {
        std::future::ready(self.lock().map(|state| {
            let mut sums = std::collections::BTreeMap::<String, i64>::new();
            for ((_, budget), (_, amount, held)) in &state.budget_ledger {
                if *held {
                    *sums.entry(budget.clone()).or_default() += amount;
                }
            }
            sums.into_iter().collect()
        }))
    }

    fn fetch(
        &self,
        key: &OperationKey,
    ) -> impl Future<Output = Result<Option<ClaimRecord>, StoreError>> + Send {
        std::future::ready(self.lock().map(|s| s.claims.get(key).cloned()))
    }

    fn list_stuck(
        &self,
        now: UnixMillis,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<StuckEntry>, StoreError>> + Send {
        std::future::ready(self.stuck_now(now, limit))
    }

    fn record_reconciliation(
        &self,
        request: ReconcileRequest<'_>,
    ) -> impl Future<Output = Result<Reconciled, StoreError>> + Send {
        std::future::ready(self.reconcile_now(request.key, request.outcome, request.now))
    }

    fn append_audit(
        &self,
        entry: &AuditEntry,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        std::future::ready(self.lock().map(|mut s| s.audit.push(entry.clone())))
    }

    fn audit_trail(
        &self,
        key: &OperationKey,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<AuditEntry>, StoreError>> + Send {
        std::future::ready(self.lock().map(|s| {
            s.audit
                .iter()
                .filter(|e| e.key() == Some(key))
                .take(usize::try_from(limit).unwrap_or(usize::MAX))
                .cloned()
                .collect()
        }))
    }
}
