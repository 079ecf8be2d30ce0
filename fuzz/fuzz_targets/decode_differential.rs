//! The fast path (`decode_tape`'s parser) against the reference decoder
//! (`decode_strict`) on arbitrary bytes: the same accept or reject, the same
//! value, the same rejection. The check is the library's own
//! `toolgate::decode::differential`, which `tests/differential.rs` also runs
//! over the JSONTestSuite corpus and generated inputs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::decode::{Limits, differential};

fuzz_target!(|data: &[u8]| {
    // The first byte picks a nesting limit so the limit logic is fuzzed too.
    let (nesting, input) = match data.split_first() {
        Some((n, rest)) => (usize::from(*n % 70), rest),
        None => (64, data),
    };
    let limits = Limits::provider_body()
        .with_max_nesting(nesting)
        .expect("below the ceiling");
    if let Err(mismatch) = differential(input, &limits) {
        panic!("{mismatch}");
    }
});
