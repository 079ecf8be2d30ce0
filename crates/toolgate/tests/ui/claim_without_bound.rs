// A claim request can only come from a `Bound` stage: its constructor is
// private to the crate, so a claim store cannot be reached without one.
use std::time::Duration;

use toolgate::claim::{ClaimRequest, ClaimStore, Fingerprint, HolderToken, OperationKey, ProposalRecord, UnixMillis};

async fn claim<C: ClaimStore>(store: &C, proposal: ProposalRecord) {
    let request = ClaimRequest::new(
        OperationKey::from_bytes([1; 32]),
        Fingerprint::from_bytes([2; 32]),
        proposal,
        HolderToken::from_bytes([3; 16]),
        UnixMillis(0),
        Duration::from_secs(30),
    );
    let _ = store.claim(request).await;
}

fn main() {}
