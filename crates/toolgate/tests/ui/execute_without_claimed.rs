// An executor takes a permit, and a permit is only borrowed from a won
// claim. A `Bound` proposal has no permit, and a `Claimed` cannot be made
// outside the pipeline (only a claim store's `Acquired` answer becomes one).
use toolgate::claim::Lease;
use toolgate::pipeline::{Bound, Claimed, Executor};

async fn run<E: Executor>(executor: &E, bound: &Bound) {
    let _ = executor.execute(bound.permit()).await;
}

fn forge(bound: Bound, lease: Lease) -> Claimed {
    Claimed::new(bound, lease)
}

fn main() {}
