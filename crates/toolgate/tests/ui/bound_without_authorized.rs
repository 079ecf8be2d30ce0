// Only the pipeline binds an operation key to an authorised proposal.
use toolgate::pipeline::{Authorized, Bound};

fn bind(authorized: Authorized) -> Option<Bound> {
    Bound::new(authorized).ok()
}

fn main() {}
