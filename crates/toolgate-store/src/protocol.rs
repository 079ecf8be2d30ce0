//! The claim protocol (docs/design.md §8), written once for every backend.
//!
//! Two traits of primitive steps, after sqlx's `AnyConnectionBackend`:
//!
//! - [`Statements`]: the SQL statements of the protocol, run inside one
//!   transaction (insert and read back, conditional writes, the grant, the
//!   audit insert). Each backend implements them once: PostgreSQL and
//!   MySQL/MariaDB on an sqlx transaction (`pooled/claims.rs`), SQLite on
//!   the group-commit writer's connection (`sqlite/claims.rs`).
//! - [`ClaimBackend`]: how a [`Unit`] (one transaction) runs and ends, how
//!   its failures are classified ([`TxFail`]: a lost race, nothing written,
//!   or an unknown outcome), and the reads outside a transaction.
//!
//! What happens inside a transaction is [`run_unit`]; what happens between
//! transactions (retries, the read-back after a failed `COMMIT`) is
//! [`claim`], [`complete`], [`write_and_complete`], [`reconcile`] and
//! [`append_audit`]. All of it is ordinary generic code, the same on every
//! backend.

use std::future::Future;
use std::sync::Arc;

use toolgate::claim::{
    Attempt, AuditEntry, BudgetReservation, ClaimRecord, ClaimRequest, CompleteRequest, Completion,
    CorruptRecord, GrantUse, HolderToken, JsonText, Lease, OperationKey, RawClaim, ReadBack,
    ReconcileOutcome, Reconciled, Resolution, StoreError, StoreErrorKind, UnixMillis,
};
use toolgate::pipeline::AppliedCompletion;

use crate::common::{ClaimTxPoint, MAX_CLAIM_ATTEMPTS, backoff};
use crate::write::{StoreWrite, WriteCompleted};

/// One transaction's work, owned so that a backend may run it on another
/// thread (SQLite's writer).
#[derive(Debug, Clone)]
pub(crate) enum Unit {
    /// The conditional insert, the read-back and, if the row is ours and the
    /// request carries one, the grant's consumption.
    Claim {
        request: ClaimRequest,
        attempt: Attempt,
        /// The store's clock, read again at the read-back.
        clock: Clock,
    },
    /// The ownership- and lease-checked completion and its audit entry.
    Complete(CompleteRequest),
    /// An application's write, then the completion with `receipt` and its
    /// audit entry (`crate::write`).
    WriteComplete {
        write: Arc<dyn StoreWrite>,
        receipt: JsonText,
        completion: AppliedCompletion,
        now: UnixMillis,
    },
    /// Closing a stuck claim with what the downstream system reported.
    Reconcile {
        key: OperationKey,
        resolution: Resolution,
        result: JsonText,
        now: UnixMillis,
    },
    /// One audit entry.
    Audit(AuditEntry),
}

/// The store's clock (the core reads none).
pub(crate) type Clock = fn() -> UnixMillis;

/// What a unit found, once its transaction has ended as [`End`] says.
#[derive(Debug)]
pub(crate) enum Answer {
    Claim(Verdict),
    Completion(Completion),
    Written(WriteCompleted),
    Reconciled(Reconciled),
    Appended,
}

/// The claim unit's verdict on the row it read back.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one value per attempt, consumed at once; boxing buys nothing"
)]
pub(crate) enum Verdict {
    /// Our token read back (and the grant used, if any): committed.
    Ours(Lease),
    /// Someone else's row: final; rolled back.
    Theirs(RawClaim),
    /// No row (an old snapshot), or our own lease already past at the
    /// read-back: rolled back; try again, never a win.
    Retry,
    /// The request's grant no longer matched: rolled back, claim row too.
    GrantUnusable,
    /// A budget would pass its limit: rolled back, claim row too.
    OverBudget {
        budget: String,
        limit: i64,
        used: i64,
    },
    /// The row read back failed validation: rolled back.
    Corrupt(CorruptRecord),
}

/// How a unit's transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Commit,
    Rollback,
}

/// Why a unit's transaction did not answer.
#[derive(Debug)]
pub(crate) enum TxFail {
    /// A lost race (deadlock, serialisation failure, lock timeout, busy):
    /// nothing was written; run the unit again.
    LostRace,
    /// A statement or `BEGIN` failed: nothing was written.
    Failed(StoreError),
    /// `COMMIT` failed for another reason: the unit may or may not have
    /// taken effect. Read back before deciding.
    Unknown(StoreError),
}

/// The protocol's statements, inside one transaction. A method's error is
/// the driver's; the backend classifies it ([`ClaimBackend::transaction`]).
pub(crate) trait Statements {
    type Error;

    /// The conditional insert: changes nothing when the key exists. Its
    /// affected-row count is never used (the MariaDB trap, `mysql.rs`).
    async fn insert_claim(
        &mut self,
        request: &ClaimRequest,
        attempt: &Attempt,
    ) -> Result<(), Self::Error>;

    /// Replaces the row on `request.key()` with `request` as attempt
    /// `closed + 1`, only where the row is attempt `closed` reconciled as
    /// not applied; rows changed (matched, on MySQL, which is the same for
    /// this update: the attempt number changes).
    async fn reopen_claim(
        &mut self,
        request: &ClaimRequest,
        attempt: &Attempt,
        closed: u32,
    ) -> Result<u64, Self::Error>;

    /// Removes `key`'s released budget reservations, whose amounts are
    /// back on their counters, before its next attempt reserves again.
    async fn budget_forget_released(&mut self, key: &OperationKey) -> Result<(), Self::Error>;

    /// The claim row on `key`, decoded ([`crate::rows`]).
    async fn read_claim(
        &mut self,
        key: &OperationKey,
    ) -> Result<Option<Result<ClaimRecord, CorruptRecord>>, Self::Error>;

    /// Marks the grant consumed where it is still usable for `request`
    /// (approved, unconsumed, unexpired at `now`, bound to its key,
    /// fingerprint, version and policy digest); rows changed.
    async fn consume_grant(
        &mut self,
        request: &ClaimRequest,
        grant: &GrantUse,
        now: UnixMillis,
    ) -> Result<u64, Self::Error>;

    /// The completion: changes the row where key, `in_flight`, holder and a
    /// live lease at `now` all match; rows changed (matched, on MySQL,
    /// which is the same for this update).
    async fn complete(
        &mut self,
        key: &OperationKey,
        holder: &HolderToken,
        result: &JsonText,
        now: UnixMillis,
    ) -> Result<u64, Self::Error>;

    /// Closes the claim where it is in flight with its lease ended at
    /// `now`; rows changed.
    async fn reconcile(
        &mut self,
        key: &OperationKey,
        resolution: Resolution,
        result: &JsonText,
        now: UnixMillis,
    ) -> Result<u64, Self::Error>;

    /// Appends one audit entry.
    async fn append_audit(&mut self, entry: &AuditEntry) -> Result<(), Self::Error>;

    /// Runs an application's write on this transaction's connection;
    /// whether it applied.
    async fn app_write(&mut self, write: &dyn StoreWrite) -> Result<bool, Self::Error>;

    /// Adds `r.amount` to its counter (created at that amount when there
    /// is none) and records the reservation `reserved` in the ledger where
    /// the counter's new sum is within `r.limit`; whether it recorded it.
    /// When it did not, the counter holds a sum past the limit, which the
    /// caller either keeps (an approval: recorded `over_limit`) or rolls
    /// back with the transaction.
    async fn budget_reserve(
        &mut self,
        key: &OperationKey,
        r: &BudgetReservation,
    ) -> Result<bool, Self::Error>;

    /// The counter's `used`, this transaction's own add included (what a
    /// refused reservation reports, less its amount).
    async fn budget_used(&mut self, r: &BudgetReservation) -> Result<i64, Self::Error>;

    /// Records the claim's reservation in the ledger as `state`
    /// (`reserved` or `over_limit`).
    async fn budget_ledger_insert(
        &mut self,
        key: &OperationKey,
        r: &BudgetReservation,
        state: &str,
    ) -> Result<(), Self::Error>;

    /// The claim's reservations still held (`reserved` or `over_limit`).
    async fn budget_held(&mut self, key: &OperationKey) -> Result<Vec<Held>, Self::Error>;

    /// Marks one held reservation `released`, only if it is still held;
    /// rows changed.
    async fn budget_ledger_release(
        &mut self,
        key: &OperationKey,
        budget: &str,
    ) -> Result<u64, Self::Error>;

    /// Gives a released reservation's amount back to its counter.
    async fn budget_subtract(&mut self, held: &Held) -> Result<(), Self::Error>;

    /// A fault hook's chance to act inside the claim transaction (tests
    /// only; a no-op without the feature).
    async fn fault(&mut self, point: ClaimTxPoint) {
        let _ = point;
    }
}

/// A reservation a claim holds, as the ledger has it.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) budget: String,
    pub(crate) scope: String,
    pub(crate) window_start: i64,
    pub(crate) amount: i64,
}

/// The ledger's state for an approved reservation past its limit (the
/// migrations' CHECK lists the states; `reserved` is written by the
/// dialects' reserve SQL itself).
pub(crate) const OVER_LIMIT: &str = "over_limit";

/// Gives back every reservation `key` still holds, each exactly once: the
/// ledger row's state guards the counter's decrement, so a second release
/// (a retried unit, a second closure) changes nothing.
async fn release_budgets<S: Statements>(s: &mut S, key: &OperationKey) -> Result<(), S::Error> {
    for held in s.budget_held(key).await? {
        if s.budget_ledger_release(key, &held.budget).await? == 1 {
            s.budget_subtract(&held).await?;
        }
    }
    Ok(())
}

/// Whether a completion's result says nothing was written (the pipeline's
/// not-applied closure after a failed precondition: `"applied": false`),
/// which gives the claim's budget reservations back.
fn not_applied(result: &JsonText) -> bool {
    result
        .value()
        .is_ok_and(|v| v.get("applied").and_then(|a| a.as_bool()) == Some(false))
}

/// A backend: runs units as transactions and reads outside them.
pub(crate) trait ClaimBackend: Send {
    /// Runs `unit` in one transaction, ends it as [`run_unit`] says, and
    /// answers once that end is durable.
    fn transaction(&mut self, unit: Unit) -> impl Future<Output = Result<Answer, TxFail>> + Send;

    /// Reads one claim outside any transaction (after a failed `COMMIT`, on
    /// a connection other than the one that failed).
    fn read_claim(
        &self,
        key: &OperationKey,
    ) -> impl Future<Output = Result<Option<ClaimRecord>, StoreError>> + Send;

    /// The store's clock.
    fn clock(&self) -> Clock;

    /// Whether a fault hook asks to report a successful `COMMIT` as failed
    /// (tests only; always false without the feature).
    fn fault_after_commit(&self) -> impl Future<Output = bool> + Send {
        async { false }
    }

    /// Told how the read-back after an unknown `COMMIT` ended: `true` when
    /// it settled the attempt's outcome. For a backend's counters (the
    /// Galera failover figures); nothing by default.
    fn read_back_settled(&self, settled: bool) {
        let _ = settled;
    }
}

/// The body of every transaction: the statements of `unit` and how the
/// transaction must end. Identical on every backend.
pub(crate) async fn run_unit<S: Statements>(
    s: &mut S,
    unit: &Unit,
) -> Result<(Answer, End), S::Error> {
    match unit {
        Unit::Claim {
            request,
            attempt,
            clock,
        } => {
            let (verdict, end) = claim_unit(s, request, attempt, *clock).await?;
            Ok((Answer::Claim(verdict), end))
        }
        Unit::Complete(CompleteRequest {
            key,
            holder,
            result,
            now,
            audit,
        }) => {
            if s.complete(key, holder, result, *now).await? == 1 {
                // The entry is there exactly when the completion is.
                s.append_audit(audit).await?;
                if not_applied(result) {
                    release_budgets(s, key).await?;
                }
                return Ok((Answer::Completion(Completion::Recorded), End::Commit));
            }
            // Nothing changed. A retry after a lost answer finds its own
            // completion, with its own result: recorded, and nothing written.
            let answer = match s.read_claim(key).await? {
                Some(Ok(row)) if row.completed_by(holder, result) => Completion::Recorded,
                _ => Completion::Reconcile,
            };
            Ok((Answer::Completion(answer), End::Rollback))
        }
        Unit::WriteComplete {
            write,
            receipt,
            completion,
            now,
        } => {
            // docs/design.md §1's order: the write with its precondition,
            // then the completion; either failing undoes both.
            if !s.app_write(write.as_ref()).await? {
                let failed = WriteCompleted::PreconditionFailed;
                return Ok((Answer::Written(failed), End::Rollback));
            }
            let (key, holder) = (completion.key(), completion.holder());
            if s.complete(key, holder, receipt, *now).await? != 1 {
                return Ok((Answer::Written(WriteCompleted::LeaseLost), End::Rollback));
            }
            s.append_audit(completion.audit()).await?;
            Ok((Answer::Written(WriteCompleted::Recorded), End::Commit))
        }
        Unit::Reconcile {
            key,
            resolution,
            result,
            now,
        } => {
            if s.reconcile(key, *resolution, result, *now).await? == 1 {
                if *resolution == Resolution::ReconciledNotApplied {
                    release_budgets(s, key).await?;
                }
                return Ok((Answer::Reconciled(Reconciled::Recorded), End::Commit));
            }
            // Not stuck: `reconcile` reads the row for the answer.
            Ok((
                Answer::Reconciled(Reconciled::NotStuck(None)),
                End::Rollback,
            ))
        }
        Unit::Audit(entry) => {
            s.append_audit(entry).await?;
            Ok((Answer::Appended, End::Commit))
        }
    }
}

/// The claim transaction: insert, read back, judge, use the grant.
async fn claim_unit<S: Statements>(
    s: &mut S,
    request: &ClaimRequest,
    attempt: &Attempt,
    clock: Clock,
) -> Result<(Verdict, End), S::Error> {
    // INVARIANT: no read before this insert (docs/design.md §8): under
    // REPEATABLE READ a read would fix the snapshot before the winner
    // commits, and the read-back would then find no row.
    s.insert_claim(request, attempt).await?;
    s.fault(ClaimTxPoint::AfterInsert).await;
    let row = match s.read_claim(request.key()).await? {
        // The insert changed nothing and the winner's row is not visible
        // to us (an old snapshot). Never a win.
        None => return Ok((Verdict::Retry, End::Rollback)),
        Some(Err(problem)) => return Ok((Verdict::Corrupt(problem), End::Rollback)),
        Some(Ok(row)) => row,
    };
    let read_at = attempt.now.max(clock());
    let mut judged = request.judge(row, read_at);
    if let ReadBack::Reopen { attempt: closed } = judged {
        // The closed attempt was fenced and reconciled as not applied: this
        // request becomes the next attempt, where the row is still that
        // closed attempt (a concurrent next attempt changed it otherwise,
        // and this one retries and reads that one's row). Won, as any
        // claim, only by our token read back and the commit.
        if s.reopen_claim(request, attempt, closed).await? != 1 {
            return Ok((Verdict::Retry, End::Rollback));
        }
        s.budget_forget_released(request.key()).await?;
        judged = match s.read_claim(request.key()).await? {
            None => return Ok((Verdict::Retry, End::Rollback)),
            Some(Err(problem)) => return Ok((Verdict::Corrupt(problem), End::Rollback)),
            Some(Ok(row)) => request.judge(row, read_at),
        };
    }
    let lease = match judged {
        ReadBack::Theirs(raw) => return Ok((Verdict::Theirs(raw), End::Rollback)),
        ReadBack::Lapsed | ReadBack::Reopen { .. } => return Ok((Verdict::Retry, End::Rollback)),
        ReadBack::Ours(lease) => lease,
    };
    if let Some(grant) = request.grant() {
        // The approval is used up in the claim's own transaction: both or
        // neither (docs/design.md §14).
        if s.consume_grant(request, grant, attempt.now).await? != 1 {
            return Ok((Verdict::GrantUnusable, End::Rollback));
        }
    }
    // Budgets: reserved only by the attempt whose row this is (a replay or
    // a conflict never gets here). Each add is judged on the sum it wrote,
    // on a counter row this transaction now holds locked, so concurrent
    // claims are judged one after another; no earlier read decides it
    // (docs/design.md §15).
    for r in request.budgets() {
        if s.budget_reserve(request.key(), r).await? {
            continue;
        }
        if request.grant().is_none() {
            // The rollback takes this add back off the counter.
            let used = s.budget_used(r).await? - r.amount;
            return Ok((
                Verdict::OverBudget {
                    budget: r.budget.clone(),
                    limit: r.limit,
                    used,
                },
                End::Rollback,
            ));
        }
        // A person approved this proposal over the budget: the add stands,
        // beyond the limit, and is recorded as such.
        s.budget_ledger_insert(request.key(), r, OVER_LIMIT).await?;
    }
    s.fault(ClaimTxPoint::BeforeCommit).await;
    Ok((Verdict::Ours(lease), End::Commit))
}

/// What one attempt of the claim decided: an answer, a retry, or an error.
#[expect(
    clippy::large_enum_variant,
    reason = "one value per attempt, consumed at once; boxing buys nothing"
)]
enum AttemptOutcome {
    Done(RawClaim),
    Retry,
    Fail(StoreError),
}

/// Claims `request.key()`: attempts until an answer, each with its own
/// time and lease, retrying lost races and read-backs that found no row.
pub(crate) async fn claim<B: ClaimBackend>(
    backend: &mut B,
    request: ClaimRequest,
) -> Result<RawClaim, StoreError> {
    for n in 1..=MAX_CLAIM_ATTEMPTS {
        let clock = backend.clock();
        let attempt = request.attempt(clock());
        let unit = Unit::Claim {
            request: request.clone(),
            attempt,
            clock,
        };
        let outcome = match backend.transaction(unit).await {
            Ok(Answer::Claim(verdict)) => match verdict {
                Verdict::Ours(lease) => {
                    if backend.fault_after_commit().await {
                        let lost = "injected: commit acknowledgement lost";
                        let at = read_time(backend, &attempt);
                        after_failed_commit(backend, &request, at, lost).await
                    } else {
                        // Our token read back AND the commit succeeded.
                        AttemptOutcome::Done(RawClaim::Acquired(lease))
                    }
                }
                Verdict::Theirs(raw) => AttemptOutcome::Done(raw),
                Verdict::Retry => AttemptOutcome::Retry,
                Verdict::GrantUnusable => AttemptOutcome::Done(RawClaim::GrantUnusable),
                Verdict::OverBudget {
                    budget,
                    limit,
                    used,
                } => AttemptOutcome::Done(RawClaim::OverBudget {
                    budget,
                    limit,
                    used,
                }),
                Verdict::Corrupt(problem) => AttemptOutcome::Fail(StoreError::corrupt(&problem)),
            },
            Ok(other) => AttemptOutcome::Fail(mismatched(&other)),
            Err(TxFail::LostRace) => AttemptOutcome::Retry,
            Err(TxFail::Failed(e)) => AttemptOutcome::Fail(e),
            Err(TxFail::Unknown(e)) => {
                let at = read_time(backend, &attempt);
                after_failed_commit(backend, &request, at, e).await
            }
        };
        match outcome {
            AttemptOutcome::Done(raw) => return Ok(raw),
            AttemptOutcome::Fail(e) => return Err(e),
            AttemptOutcome::Retry => backoff(n).await,
        }
    }
    Err(StoreError::new(
        StoreErrorKind::Contention,
        format!("claim still contended after {MAX_CLAIM_ATTEMPTS} attempts"),
    ))
}

/// The store's time now, never before the attempt's.
fn read_time<B: ClaimBackend>(backend: &B, attempt: &Attempt) -> UnixMillis {
    attempt.now.max((backend.clock())())
}

/// A `COMMIT` failed for a reason other than contention: the outcome is
/// unknown. Read the row back on another connection with the same holder
/// token before deciding.
async fn after_failed_commit<B: ClaimBackend>(
    backend: &mut B,
    request: &ClaimRequest,
    now: UnixMillis,
    commit_error: impl std::fmt::Display,
) -> AttemptOutcome {
    let read = backend.read_claim(request.key()).await;
    backend.read_back_settled(read.is_ok());
    match read {
        // The commit did not take effect and nobody else's did.
        Ok(None) => AttemptOutcome::Retry,
        Ok(Some(row)) => match request.judge(row, now) {
            ReadBack::Ours(lease) => AttemptOutcome::Done(RawClaim::Acquired(lease)),
            ReadBack::Theirs(raw) => AttemptOutcome::Done(raw),
            // Still the closed attempt: our next attempt did not commit.
            ReadBack::Reopen { .. } => AttemptOutcome::Retry,
            // Ours, committed, but its lease is over by now: the write may
            // not start, and the claim is reconciled like any stuck one.
            ReadBack::Lapsed => AttemptOutcome::Fail(StoreError::new(
                StoreErrorKind::OutcomeUnknown,
                format!(
                    "COMMIT failed ({commit_error}); the claim was ours but its lease has ended"
                ),
            )),
        },
        Err(e) => AttemptOutcome::Fail(StoreError::new(
            StoreErrorKind::OutcomeUnknown,
            format!("COMMIT failed ({commit_error}) and the claim could not be read back ({e})"),
        )),
    }
}

/// Completes the claim on `key` with `audit` in the same transaction.
/// Lost races are retried, and so is an unknown outcome: the completion is
/// idempotent for the same holder and result, so running it again answers
/// `Recorded` if the first one took effect, and writes nothing twice.
///
/// The lease is checked at the store's clock, never earlier than the
/// caller's `now`: a caller passing the time its decision started cannot
/// complete a claim whose lease has ended since (invariant 8).
pub(crate) async fn complete<B: ClaimBackend>(
    backend: &mut B,
    mut done: CompleteRequest,
) -> Result<Completion, StoreError> {
    done.now = done.now.max((backend.clock())());
    let unit = Unit::Complete(done);
    let mut unknown = None;
    for n in 1..=MAX_CLAIM_ATTEMPTS {
        match backend.transaction(unit.clone()).await {
            Ok(Answer::Completion(c)) => return Ok(c),
            Ok(other) => return Err(mismatched(&other)),
            Err(TxFail::LostRace) => backoff(n).await,
            Err(TxFail::Unknown(e)) => {
                unknown = Some(e);
                backoff(n).await;
            }
            Err(TxFail::Failed(e)) => {
                return Err(match unknown {
                    // An earlier attempt may have taken effect.
                    Some(first) => StoreError::new(
                        StoreErrorKind::OutcomeUnknown,
                        format!("completing the claim: {first}; trying again: {e}"),
                    ),
                    None => e,
                });
            }
        }
    }
    Err(StoreError::new(
        StoreErrorKind::Contention,
        format!("completion still contended after {MAX_CLAIM_ATTEMPTS} attempts"),
    ))
}

/// Runs `write` and the completion with `receipt` in one transaction
/// (`crate::write`). Lost races run again: nothing was committed. An
/// unknown `COMMIT` is never run again; the claim read back on another
/// connection says whether it took effect.
pub(crate) async fn write_and_complete<B: ClaimBackend>(
    backend: &mut B,
    write: Arc<dyn StoreWrite>,
    receipt: &JsonText,
    completion: &AppliedCompletion,
) -> Result<WriteCompleted, StoreError> {
    let now = completion.now().max((backend.clock())());
    let unit = Unit::WriteComplete {
        write,
        receipt: receipt.clone(),
        completion: completion.clone(),
        now,
    };
    for n in 1..=MAX_CLAIM_ATTEMPTS {
        match backend.transaction(unit.clone()).await {
            Ok(Answer::Written(WriteCompleted::Recorded)) if backend.fault_after_commit().await => {
                let lost = "injected: commit acknowledgement lost";
                return read_back_write(backend, receipt, completion, lost).await;
            }
            Ok(Answer::Written(w)) => return Ok(w),
            Ok(other) => return Err(mismatched(&other)),
            Err(TxFail::LostRace) => backoff(n).await,
            Err(TxFail::Failed(e)) => return Err(e),
            Err(TxFail::Unknown(e)) => {
                return read_back_write(backend, receipt, completion, e).await;
            }
        }
    }
    Err(StoreError::new(
        StoreErrorKind::Contention,
        format!("the write and its completion still contended after {MAX_CLAIM_ATTEMPTS} attempts"),
    ))
}

/// The `COMMIT` of a write and its completion failed with an unknown
/// outcome: the claim, read back on another connection, says whether both
/// took effect (they commit together).
async fn read_back_write<B: ClaimBackend>(
    backend: &mut B,
    receipt: &JsonText,
    completion: &AppliedCompletion,
    commit_error: impl std::fmt::Display,
) -> Result<WriteCompleted, StoreError> {
    let read = backend.read_claim(completion.key()).await;
    backend.read_back_settled(read.is_ok());
    match read {
        Ok(Some(row)) if row.completed_by(completion.holder(), receipt) => {
            Ok(WriteCompleted::Recorded)
        }
        // Not completed by us as far as this read shows; the COMMIT may
        // still land. Reconciliation asks the application's rows, never
        // this guess.
        Ok(_) => Err(StoreError::new(
            StoreErrorKind::OutcomeUnknown,
            format!("COMMIT of the write and its completion failed ({commit_error})"),
        )),
        Err(read) => Err(StoreError::new(
            StoreErrorKind::OutcomeUnknown,
            format!(
                "COMMIT of the write and its completion failed ({commit_error}) and the claim \
                 could not be read back ({read})"
            ),
        )),
    }
}

/// Closes a stuck claim with what the downstream system reported.
pub(crate) async fn reconcile<B: ClaimBackend>(
    backend: &mut B,
    key: &OperationKey,
    outcome: &ReconcileOutcome,
    now: UnixMillis,
) -> Result<Reconciled, StoreError> {
    let (resolution, result) = match outcome {
        ReconcileOutcome::Applied { receipt } => (Resolution::ReconciledApplied, receipt),
        ReconcileOutcome::NotApplied { detail } => (Resolution::ReconciledNotApplied, detail),
    };
    let unit = Unit::Reconcile {
        key: *key,
        resolution,
        result: result.clone(),
        now,
    };
    let answer = retry_lost_races(backend, unit, "recording a reconciliation").await?;
    match answer {
        // Not stuck: the row as it is now, or a corrupt one as an error.
        Answer::Reconciled(Reconciled::NotStuck(_)) => {
            Ok(Reconciled::NotStuck(backend.read_claim(key).await?))
        }
        Answer::Reconciled(r) => Ok(r),
        other => Err(mismatched(&other)),
    }
}

/// Appends one audit entry.
pub(crate) async fn append_audit<B: ClaimBackend>(
    backend: &mut B,
    entry: &AuditEntry,
) -> Result<(), StoreError> {
    match retry_lost_races(
        backend,
        Unit::Audit(entry.clone()),
        "appending to the audit log",
    )
    .await?
    {
        Answer::Appended => Ok(()),
        other => Err(mismatched(&other)),
    }
}

/// Runs a unit that must not run twice once it may have taken effect:
/// lost races are retried, an unknown outcome is an error.
async fn retry_lost_races<B: ClaimBackend>(
    backend: &mut B,
    unit: Unit,
    what: &str,
) -> Result<Answer, StoreError> {
    for n in 1..=MAX_CLAIM_ATTEMPTS {
        match backend.transaction(unit.clone()).await {
            Ok(answer) => return Ok(answer),
            Err(TxFail::LostRace) => backoff(n).await,
            Err(TxFail::Failed(e)) => return Err(e),
            Err(TxFail::Unknown(e)) => {
                return Err(StoreError::with_source(
                    StoreErrorKind::OutcomeUnknown,
                    format!("{what}: {e}"),
                    e,
                ));
            }
        }
    }
    Err(StoreError::new(
        StoreErrorKind::Contention,
        format!("{what}: still contended after {MAX_CLAIM_ATTEMPTS} attempts"),
    ))
}

/// A unit answered with another unit's kind of answer: a bug.
fn mismatched(answer: &Answer) -> StoreError {
    StoreError::new(
        StoreErrorKind::Invariant,
        format!("a unit answered out of kind: {answer:?}"),
    )
}

/// What a unit does, for error messages.
pub(crate) fn unit_what(unit: &Unit) -> &'static str {
    match unit {
        Unit::Claim { .. } => "claiming",
        Unit::Complete { .. } => "completing the claim",
        Unit::WriteComplete { .. } => "writing and completing the claim",
        Unit::Reconcile { .. } => "recording a reconciliation",
        Unit::Audit(_) => "appending to the audit log",
    }
}
