//! What the core's pipeline tests share: a `block_on` for futures that
//! never pend, and the one-tool refund policy.

#![allow(dead_code, reason = "each test target uses part of the support module")]

pub mod json;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use toolgate::claim::{Fingerprint, OperationKey, UnixMillis};
use toolgate::review::{ApprovalTerms, NewItem, ReviewStore, ReviewerAct, Verdict, Voted};

/// `refund_order`, keyed by a typed order id and the version the model saw.
pub const REFUND_POLICY: &str = include_str!("../../../../fixtures/policies/refund_order.toml");

/// Drives `f` to its end in one poll. The parts these tests plug into the
/// pipeline answer at once, so the core needs no runtime even in its
/// tests; a future that pends is a bug in the test.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a test future pended"),
    }
}

/// A request for approval of the proposal `key`/`fingerprint` of `tool`,
/// made at `at` by `agent-1` against version 7, under `terms`; tests vary
/// the other fields with struct update syntax.
pub fn approval_request(
    tool: &str,
    key: OperationKey,
    fingerprint: Fingerprint,
    at: UnixMillis,
    terms: ApprovalTerms,
) -> NewItem {
    NewItem {
        at,
        kind: toolgate::pipeline::Outcome::PendingApproval,
        reason: None,
        tool: Some(tool.into()),
        proposer: "agent-1".into(),
        proposer_via: None,
        key: Some(key),
        fingerprint: Some(fingerprint),
        version_seen: Some("7".into()),
        scope: None,
        decision: pending(tool, key, fingerprint),
        approval: Some(terms),
        once_per_window: false,
    }
}

/// The `pending_approval` decision an approval item keeps.
pub fn pending(
    tool: &str,
    key: OperationKey,
    fingerprint: Fingerprint,
) -> toolgate::review::ItemDecision {
    let decision = toolgate::pipeline::Decision::PendingApproval {
        operation: toolgate::pipeline::Operation {
            tool: tool.into(),
            key,
            fingerprint,
            version_seen: toolgate::pipeline::StateVersion::from(7),
        },
        reason: toolgate::pipeline::Reason::ApprovalRequired,
        message: "this tool needs a person's approval".into(),
        budget: None,
    };
    toolgate::review::ItemDecision::of(&decision, None)
}

/// `reviewer`'s approval of `item` at `at`, on a store that answers at once.
pub fn approve<S: ReviewStore>(store: &S, item: i64, reviewer: &str, at: UnixMillis) -> Voted {
    block_on(store.vote(ReviewerAct::new(item, reviewer, Verdict::Approve, at))).unwrap()
}
