//! What the core's pipeline tests share: a `block_on` for futures that
//! never pend, and the one-tool refund policy.

#![allow(dead_code, reason = "each test target uses part of the support module")]

pub mod json;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

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
