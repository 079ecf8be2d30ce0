//! Side-by-side timing: alternate the contenders in short batches and
//! compare medians, so a noisy neighbour hurts both sides alike.

use std::time::{Duration, Instant};

/// Median seconds per call for each contender.
pub fn compare<const N: usize>(budget: Duration, mut fns: [&mut dyn FnMut(); N]) -> [f64; N] {
    // Calibrate: size a batch to about 10 ms of the slowest contender.
    let mut batch = 1u64;
    loop {
        let slowest = fns
            .iter_mut()
            .map(|f| time_batch(*f, batch))
            .fold(Duration::ZERO, Duration::max);
        if slowest >= Duration::from_millis(10) || batch >= 1 << 30 {
            break;
        }
        batch *= 2;
    }
    let rounds = {
        let per_round = fns
            .iter_mut()
            .map(|f| time_batch(*f, batch))
            .sum::<Duration>();
        (budget.as_secs_f64() / per_round.as_secs_f64().max(1e-9)).clamp(5.0, 200.0) as usize
    };
    let mut samples: [Vec<f64>; N] = std::array::from_fn(|_| Vec::with_capacity(rounds));
    for _ in 0..rounds {
        for (f, s) in fns.iter_mut().zip(samples.iter_mut()) {
            s.push(time_batch(*f, batch).as_secs_f64() / batch as f64);
        }
    }
    samples.map(|mut s| {
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    })
}

fn time_batch(f: &mut dyn FnMut(), batch: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..batch {
        f();
    }
    start.elapsed()
}
