//! Answering from an operation someone already holds: replay, conflict, in
//! flight, a closure that wrote nothing, or needs reconciliation. The row
//! passes the tool's contract again before any of it is shown.

use serde_json::Value;

use super::codes::Reason;
use super::decision::Decision;
use super::driver::{Decided, operation};
use super::error::GateError;
use super::not_applied::NotApplied;
use super::stage::Bound;
use crate::claim::{
    ClaimRecord, ClaimStatus, CorruptRecord, JsonText, Resolution, StoreError, StoreErrorKind,
    UnixMillis,
};
use crate::contract::Policy;

/// A decision on an operation someone already holds ([`existing`]), about
/// the attempt on its row.
pub(super) fn existing_decided(
    policy: &Policy,
    bound: &Bound,
    record: ClaimRecord,
    now: UnixMillis,
) -> Result<Decided, GateError> {
    let attempt = record.attempt;
    existing(policy, bound, record, now).map(|d| Decided::about(d, attempt))
}

/// A recorded result as JSON.
pub(super) fn json_value(text: &JsonText) -> Result<Value, GateError> {
    text.value()
        .map_err(|e| CorruptRecord::new("result", e.to_string()).into())
}

/// Someone already holds the operation: replay, conflict, in flight or
/// needs reconciliation. The record passes the tool's contract again before
/// any of it is shown.
fn existing(
    policy: &Policy,
    bound: &Bound,
    record: ClaimRecord,
    now: UnixMillis,
) -> Result<Decision, GateError> {
    if record.reopenable() {
        // A store answers a claim on such a row with the next attempt
        // (the conformance suite's `not_applied_runs_again_as_the_next_attempt`),
        // and the driver's lookups skip it: one here is a store breaking
        // its contract, never an answer to give.
        return Err(GateError::Store(StoreError::new(
            StoreErrorKind::Invariant,
            "the claim store answered with an attempt reconciled as not applied \
             instead of starting the next attempt",
        )));
    }
    check_record(policy, &record)?;
    let result = record.result().map(json_value).transpose()?;
    let operation = operation(bound);
    let prior = record.proposal.clone();
    let d = if record.fingerprint != *bound.fingerprint() {
        Decision::Conflict {
            operation,
            message:
                "this operation was already proposed with different arguments; a person decides"
                    .to_owned(),
            result,
            prior,
        }
    } else if let Some(not_applied) = closed_not_applied(&record, result.as_ref()) {
        // A closure that wrote nothing replays as what it was, never as
        // `replayed` (which says the write happened).
        Decision::StateChanged {
            operation,
            reason: not_applied.reason(),
            message: "the executor's version precondition failed; nothing was written".to_owned(),
            current_version: not_applied.current_version(),
            result,
            prior: Some(prior),
        }
    } else if record.status == ClaimStatus::Completed {
        let result = result
            .ok_or_else(|| CorruptRecord::new("result", "is missing on a completed claim"))?;
        Decision::Replayed {
            operation,
            result,
            reply: bound.authorized().validated().reply().to_owned(),
            prior,
        }
    } else if record.is_stuck(now) {
        Decision::NeedsReconciliation {
            operation,
            reason: Reason::LeaseExpired,
            message: format!(
                "the claim's lease ended at {} with the outcome unknown",
                record.lease_expires_at
            ),
            prior: Some(prior),
        }
    } else {
        Decision::InFlight { operation, prior }
    };
    Ok(d)
}

/// The not-applied result a completed claim was closed with, if it wrote
/// nothing: closed by its own execution after the executor's precondition
/// failed (see the driver's `execute`), whose first answer was
/// `state_changed`. An attempt reconciled as not applied is not answered
/// from at all: the next claim runs the operation again (see `existing`).
fn closed_not_applied(record: &ClaimRecord, result: Option<&Value>) -> Option<NotApplied> {
    let completion = record.completion.as_ref()?;
    match completion.resolution {
        Resolution::ReconciledNotApplied | Resolution::ReconciledApplied => None,
        Resolution::Executed => result.and_then(NotApplied::read),
    }
}

/// docs/design.md §8: records read back pass the same contract as fresh proposals.
fn check_record(policy: &Policy, record: &ClaimRecord) -> Result<(), CorruptRecord> {
    let tool = record.proposal.tool();
    let contract = policy.tool(tool).ok_or_else(|| {
        CorruptRecord::new(
            "proposal",
            format!("the stored proposal names tool {tool:?}, not in the policy"),
        )
    })?;
    let args = record
        .proposal
        .arguments_value()
        .map_err(|e| CorruptRecord::new("arguments", e.to_string()))?;
    let Some(map) = args.as_object() else {
        return Err(CorruptRecord::new("arguments", "are not an object"));
    };
    if let Some(k) = map.keys().find(|k| !contract.properties().contains(*k)) {
        return Err(CorruptRecord::new(
            "arguments",
            format!("carry the undeclared key {k:?}"),
        ));
    }
    contract
        .schema()
        .validate(&args)
        .map_err(|v| CorruptRecord::new("arguments", v.message))
}
